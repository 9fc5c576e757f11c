//! The plan board: which tiles every open stream will read next, and how soon.
//!
//! A stream's epoch is a pure function of its seed, so its future reads are known. Each
//! stream publishes, in its own order, the tiles of the samples ahead of the one it is
//! consuming ([`StreamPlan::publish`]) and moves its cursor as it consumes
//! ([`StreamPlan::advance`]). The tile cache asks the board how far away each resident
//! tile's next planned use is ([`PlanBoard::distances`]): the nearest over all streams, in
//! samples of the stream that needs it; None when no plan needs it again. That is the
//! clairvoyant (Belady) eviction order. Beyond the samples it plans one by one, a stream
//! also publishes a sparse sample of its order further ahead ([`StreamPlan::publish_far`]):
//! enough to tell that a tile read now is read again a few groups of a local order later.
//!
//! Tiles are named by a 64-bit digest of their key ([`tile_id`]), not the key itself, so a
//! published use costs 8 bytes plus its share of two queues. A collision (about 2^-64 per
//! pair) only misorders one eviction. Each stream's plan is bounded in entries
//! ([`MAX_PLAN_ENTRIES`]); the stream admits that memory against the daemon's budget before
//! it publishes anything. The board never loads, decodes or evicts anything itself.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::TileKey;

/// Tile uses one stream may have published and not yet consumed.
pub const MAX_PLAN_ENTRIES: usize = 1 << 18;
/// Bytes one published use costs (its id in the stream's queue and in its tile's list, and
/// the maps' overhead), for admitting a plan against the memory budget.
pub const BYTES_PER_ENTRY: u64 = 64;

/// A tile's name on the board: its key's stable digest ([`TileKey::digest`]), the same in
/// every replica, so plans relayed between replicas name the same tiles.
pub fn tile_id(key: &TileKey) -> u64 {
    key.digest()
}

/// Where one stream also sends its plan for tiles other replicas own (in a fleet, their
/// owners, whose caches then evict by every plan in the fleet), beside this replica's
/// board. Advisory: it must never block or fail the stream; updates it cannot deliver are
/// dropped (an owner then misorders a few evictions, nothing else).
pub trait PlanRelay: Send + Sync + std::fmt::Debug {
    /// The sample at `position` (ascending from one call to the next) reads `keys`.
    fn publish(&self, position: u64, keys: &[TileKey]);
    /// The stream consumed every sample before `cursor`.
    fn advance(&self, cursor: u64);
}

/// One stream's published future: its uses in order and, per tile, their positions.
#[derive(Debug, Default)]
struct Uses {
    /// Samples consumed: uses before this position are past.
    cursor: u64,
    /// Every published use, in the stream's order: (position, tile, still to come). A
    /// sample loaded ahead of the cursor retires its uses before the cursor reaches it.
    queue: VecDeque<(u64, u64, bool)>,
    /// Each tile's positions still to come, ascending.
    of_tile: HashMap<u64, VecDeque<u64>>,
    /// Uses still to come.
    alive: usize,
}

impl Uses {
    /// The sample at `position` reads `tiles` (a tile read twice by one sample, e.g. by two
    /// layers, counts once).
    fn publish(&mut self, position: u64, tiles: impl Iterator<Item = u64>) {
        for id in tiles {
            let list = self.of_tile.entry(id).or_default();
            if list.back() != Some(&position) {
                list.push_back(position);
                self.queue.push_back((position, id, true));
                self.alive += 1;
            }
        }
    }

    /// Removes `position` from `id`'s list.
    fn forget(&mut self, id: u64, position: u64) {
        if let Some(list) = self.of_tile.get_mut(&id) {
            if let Some(k) = list.iter().position(|&p| p == position) {
                list.remove(k);
                self.alive -= 1;
            }
            if list.is_empty() {
                self.of_tile.remove(&id);
            }
        }
    }

    fn advance(&mut self, cursor: u64) {
        self.cursor = self.cursor.max(cursor);
        while let Some(&(pos, id, alive)) = self.queue.front() {
            if pos >= self.cursor {
                break;
            }
            self.queue.pop_front();
            if alive {
                self.forget(id, pos);
            }
        }
    }

    /// The sample at `position` has read its tiles: its uses are past.
    fn retire(&mut self, position: u64) {
        let start = self.queue.partition_point(|&(p, _, _)| p < position);
        for k in start..self.queue.len() {
            let (p, id, alive) = self.queue[k];
            if p != position {
                break;
            }
            if alive {
                self.queue[k].2 = false;
                self.forget(id, p);
            }
        }
    }

    /// Samples from the cursor to `id`'s next use (None: not planned).
    fn distance(&self, id: u64) -> Option<u64> {
        let next = *self.of_tile.get(&id)?.front()?;
        Some(next.saturating_sub(self.cursor))
    }
}

/// One stream's plans: `near`, every sample up to the planner's horizon; `far`, a sparse
/// sample of the order beyond it ([`StreamPlan::publish_far`]), so a tile the stream reads
/// again a few groups later is known to be needed before the near plan reaches it.
#[derive(Debug, Default)]
struct Plans {
    near: Uses,
    far: Uses,
}

impl Plans {
    fn distance(&self, id: u64) -> Option<u64> {
        match (self.near.distance(id), self.far.distance(id)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn alive(&self) -> usize {
        self.near.alive + self.far.alive
    }

    fn queued(&self) -> usize {
        self.near.queue.len() + self.far.queue.len()
    }
}

/// What every open stream will read next. One per daemon, shared by every stream and job.
#[derive(Debug, Default)]
pub struct PlanBoard {
    streams: Mutex<HashMap<u64, Plans>>,
    next_stream: AtomicU64,
    /// Uses published and not yet consumed, over all streams (a gauge for the metrics).
    entries: AtomicU64,
    /// The cache is nearly full: its evictions will ask. Until then no stream plans (a
    /// cache that holds everything needs no plan, and planning costs CPU).
    pressure: AtomicBool,
}

impl PlanBoard {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A new stream's plan; its uses leave the board when it is dropped.
    pub fn open(self: &Arc<Self>) -> StreamPlan {
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut s) = self.streams.lock() {
            s.insert(id, Plans::default());
        }
        StreamPlan {
            board: self.clone(),
            id,
            published: AtomicUsize::new(0),
        }
    }

    /// For each tile in `ids`, samples until its nearest planned use over all streams
    /// (None: no open stream plans to read it again).
    pub fn distances(&self, ids: impl Iterator<Item = u64>) -> Vec<Option<u64>> {
        let Ok(streams) = self.streams.lock() else {
            return ids.map(|_| None).collect();
        };
        ids.map(|id| streams.values().filter_map(|u| u.distance(id)).min())
            .collect()
    }

    /// Uses published and not yet consumed, over all streams.
    pub fn entries(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// The cache says whether it is nearly full (the cache's business, not the streams').
    pub fn set_pressure(&self, full: bool) {
        self.pressure.store(full, Ordering::Relaxed);
    }

    /// Whether plans are worth making: the cache is nearly full.
    pub fn under_pressure(&self) -> bool {
        self.pressure.load(Ordering::Relaxed)
    }
}

/// One stream's handle on the board.
#[derive(Debug)]
pub struct StreamPlan {
    board: Arc<PlanBoard>,
    id: u64,
    /// Entries this stream holds on the board (published, not yet consumed).
    published: AtomicUsize,
}

impl StreamPlan {
    /// Publishes that the sample at `position` (in this stream's order, ascending from one
    /// call to the next) reads `tiles`.
    pub fn publish(&self, position: u64, tiles: impl Iterator<Item = u64>) {
        self.update(|plans| plans.near.publish(position, tiles));
    }

    /// Publishes the far plan's sample at `position` (ascending from one call to the next,
    /// beyond the near plan): a sparse sample of the stream's order, every few samples.
    /// Its uses count like near ones until the cursor passes them.
    pub fn publish_far(&self, position: u64, tiles: impl Iterator<Item = u64>) {
        self.update(|plans| plans.far.publish(position, tiles));
    }

    /// The stream consumed every sample before `cursor`: their uses are past.
    pub fn advance(&self, cursor: u64) {
        self.update(|plans| {
            plans.near.advance(cursor);
            plans.far.advance(cursor);
        });
    }

    /// The sample at `position` has read every tile it needed (loaded ahead of the cursor,
    /// it waits to be delivered in order): its uses are past.
    pub fn retire(&self, position: u64) {
        self.update(|plans| {
            plans.near.retire(position);
            plans.far.retire(position);
        });
    }

    /// Applies `change` to this stream's uses and counts what it added or removed.
    fn update(&self, change: impl FnOnce(&mut Plans)) {
        let Ok(mut s) = self.board.streams.lock() else { return };
        let Some(plans) = s.get_mut(&self.id) else { return };
        let before = plans.alive();
        change(plans);
        self.published.store(plans.queued(), Ordering::Relaxed);
        let (after, entries) = (plans.alive(), &self.board.entries);
        match after.checked_sub(before) {
            Some(added) => entries.fetch_add(added as u64, Ordering::Relaxed),
            None => entries.fetch_sub((before - after) as u64, Ordering::Relaxed),
        };
    }

    /// Uses this stream holds on the board (published, the cursor not past them yet).
    pub fn published(&self) -> usize {
        self.published.load(Ordering::Relaxed)
    }

    /// Whether the cache wants plans now ([`PlanBoard::under_pressure`]).
    pub fn wanted(&self) -> bool {
        self.board.under_pressure()
    }
}

impl Drop for StreamPlan {
    fn drop(&mut self) {
        if let Ok(mut s) = self.board.streams.lock()
            && let Some(plans) = s.remove(&self.id)
        {
            self.board.entries.fetch_sub(plans.alive() as u64, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_is_the_nearest_use_over_streams_and_past_uses_leave() {
        let board = PlanBoard::new();
        let a = board.open();
        let b = board.open();
        a.publish(0, [1, 2].into_iter());
        a.publish(1, [2].into_iter());
        a.publish(5, [3, 1].into_iter());
        b.publish(0, [4].into_iter());
        b.publish(2, [3].into_iter());
        assert_eq!(board.entries(), 7);
        assert_eq!(
            board.distances([1, 2, 3, 4, 9].into_iter()),
            vec![Some(0), Some(0), Some(2), Some(0), None]
        );
        a.advance(1);
        b.advance(1);
        // Tile 1's next use in `a` is now sample 5; tile 4 was only needed by `b`'s sample 0.
        assert_eq!(
            board.distances([1, 2, 3, 4].into_iter()),
            vec![Some(4), Some(0), Some(1), None]
        );
        assert_eq!(a.published(), 3);
        drop(b);
        assert_eq!(board.distances([3].into_iter()), vec![Some(4)]);
        assert_eq!(board.entries(), 3);
        drop(a);
        assert_eq!(board.entries(), 0);
        assert_eq!(board.distances([1, 2, 3].into_iter()), vec![None, None, None]);
    }

    #[test]
    fn a_sample_loaded_ahead_retires_its_uses_before_the_cursor_passes() {
        let board = PlanBoard::new();
        let a = board.open();
        a.publish(0, [1, 2].into_iter());
        a.publish(1, [2, 3].into_iter());
        a.publish(2, [3, 2].into_iter());
        a.retire(1);
        assert_eq!(board.distances([1, 2, 3].into_iter()), vec![Some(0), Some(0), Some(2)]);
        assert_eq!(board.entries(), 4);
        a.retire(0);
        assert_eq!(board.distances([1, 2, 3].into_iter()), vec![None, Some(2), Some(2)]);
        // Retired twice, or passed by the cursor after retiring: counted once.
        a.retire(0);
        a.advance(2);
        assert_eq!(board.entries(), 2);
        assert_eq!(board.distances([2, 3].into_iter()), vec![Some(0), Some(0)]);
        a.advance(3);
        assert_eq!((board.entries(), a.published()), (0, 0));
    }

    #[test]
    fn the_far_plan_tells_uses_beyond_the_near_one_and_leaves_with_the_cursor() {
        let board = PlanBoard::new();
        let a = board.open();
        a.publish(0, [1].into_iter());
        a.publish(1, [2].into_iter());
        // Sparse samples far ahead: tile 1 again at 600, tile 9 only there.
        a.publish_far(512, [3].into_iter());
        a.publish_far(600, [1, 9].into_iter());
        assert_eq!(
            board.distances([1, 2, 3, 9, 4].into_iter()),
            vec![Some(0), Some(1), Some(512), Some(600), None]
        );
        assert_eq!((board.entries(), a.published()), (5, 5));
        // The near plan reaches 512 and publishes it too: the nearest use counts.
        a.publish(512, [3].into_iter());
        a.advance(2);
        assert_eq!(board.distances([1, 3].into_iter()), vec![Some(598), Some(510)]);
        // A far sample loaded ahead of the cursor retires with the near one.
        a.retire(512);
        assert_eq!(board.distances([3].into_iter()), vec![None]);
        a.advance(601);
        assert_eq!(board.distances([1, 9].into_iter()), vec![None, None]);
        assert_eq!((board.entries(), a.published()), (0, 0));
        // Dropping a plan with uses on the board takes them off.
        a.publish_far(700, [5, 6].into_iter());
        drop(a);
        assert_eq!(board.entries(), 0);
        // Retired uses still queued are not counted again when the plan goes.
        let b = board.open();
        b.publish(0, [1, 2].into_iter());
        b.retire(0);
        assert_eq!(board.entries(), 0);
        drop(b);
        assert_eq!(board.entries(), 0);
    }

    #[test]
    fn a_tile_read_twice_by_one_sample_is_one_use() {
        let board = PlanBoard::new();
        let a = board.open();
        a.publish(3, [7, 7, 8].into_iter());
        assert_eq!(a.published(), 2);
        a.advance(4);
        assert_eq!(a.published(), 0);
        assert_eq!(board.entries(), 0);
    }

    #[test]
    fn ids_are_stable_and_tell_keys_apart() {
        let url: Arc<str> = Arc::from("s3://b/x.tif");
        let v1: Arc<str> = Arc::from("etag-1");
        let v2: Arc<str> = Arc::from("etag-2");
        let k = TileKey::new(&url, &v1, 0, 5);
        assert_eq!(tile_id(&k), tile_id(&k.clone()));
        // The fleet's byte layout: URL, 0, version, 0, level and block (u32, little-endian).
        assert_eq!(
            tile_id(&k),
            crate::rng::digest(b"s3://b/x.tif\0etag-1\0\0\0\0\0\x05\0\0\0")
        );
        assert_ne!(tile_id(&k), tile_id(&TileKey::new(&url, &v2, 0, 5)));
        assert_ne!(tile_id(&k), tile_id(&TileKey::new(&url, &v1, 1, 5)));
        assert_ne!(tile_id(&k), tile_id(&TileKey::new(&url, &v1, 0, 6)));
    }
}
