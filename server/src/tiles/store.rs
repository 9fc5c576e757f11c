//! The decoded-tile store: tiles by key within a byte budget, loaded once however many
//! ask, and evicted by the plan.
//!
//! Eviction (`[cache] eviction`):
//! - `plan` (default): clairvoyant. A tile no open stream plans to read again goes first
//!   (least recently used first among them); then the tile whose next planned use is
//!   furthest away ([`PlanBoard::distances`]), Belady's rule, which no policy that does not
//!   know the future can beat on decodes.
//! - `lru`: least recently used first, the plan ignored (the baseline it is measured against).
//!
//! moka, which keeps the other caches, cannot be told which entry to drop, hence this store.
//! Over budget it evicts down to [`LOW_WATER`] of the budget in one pass (one scan and one
//! look at the board per pass, not per tile), so eviction costs O(entries / pass), not
//! O(entries) per miss. Loading is single-flight: concurrent asks for one missing tile share
//! one load (a shared future); when every asker goes away the load is dropped and nothing
//! waits for it. A failed load is shared by its askers and not cached. Never fetches or
//! decodes itself: the caller's load future does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared, WeakShared};

use super::board::{PlanBoard, tile_id};
use super::{Tile, TileKey};
use cogfeed_tiff::TiffError;

pub use crate::config::Eviction;

/// An eviction pass brings the store down to this share of its budget.
pub const LOW_WATER: f64 = 0.97;

type LoadFuture = BoxFuture<'static, Result<Tile, Arc<TiffError>>>;
type Load = Shared<LoadFuture>;

#[derive(Debug)]
struct Resident {
    tile: Tile,
    kib: u64,
    /// Store clock at the last use (larger: more recent).
    used: u64,
    id: u64,
}

#[derive(Default)]
struct State {
    resident: HashMap<TileKey, Resident>,
    loading: HashMap<TileKey, WeakShared<LoadFuture>>,
    kib: u64,
    clock: u64,
}

/// What [`TileStore::get_or_load`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Got {
    /// The tile was resident.
    Hit,
    /// This call started the load.
    Loaded,
    /// Another call's load was under way; this one waited for it.
    Joined,
}

/// Decoded tiles within `capacity_kib`, evicted by `eviction`.
pub struct TileStore {
    state: Mutex<State>,
    capacity_kib: u64,
    /// An eviction pass stops at this many KiB.
    low_water_kib: u64,
    eviction: Eviction,
    board: Arc<PlanBoard>,
    /// Called with the number of tiles each eviction pass dropped, and how many of them a
    /// plan still needed.
    on_evict: Option<Box<dyn Fn(u64, u64) + Send + Sync>>,
}

impl std::fmt::Debug for TileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TileStore")
            .field("capacity_kib", &self.capacity_kib)
            .field("eviction", &self.eviction)
            .finish()
    }
}

impl TileStore {
    /// A store of about `capacity_bytes` of decoded tiles evicting by `eviction`, asking
    /// `board` for the plan.
    pub fn new(capacity_bytes: u64, eviction: Eviction, board: Arc<PlanBoard>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            capacity_kib: capacity_bytes / 1024,
            low_water_kib: (capacity_bytes as f64 / 1024.0 * LOW_WATER) as u64,
            eviction,
            board,
            on_evict: None,
        }
    }

    /// This store ending each eviction pass at `share` of its budget (tests: 1.0, one
    /// tile at a time).
    pub fn low_water(mut self, share: f64) -> Self {
        self.low_water_kib = (self.capacity_kib as f64 * share.clamp(0.0, 1.0)) as u64;
        self
    }

    /// This store reporting each pass's evictions (all, still planned) to `f`.
    pub fn on_evict(mut self, f: impl Fn(u64, u64) + Send + Sync + 'static) -> Self {
        self.on_evict = Some(Box::new(f));
        self
    }

    /// How this store evicts.
    pub fn eviction(&self) -> Eviction {
        self.eviction
    }

    /// The board this store evicts by.
    pub fn board(&self) -> &Arc<PlanBoard> {
        &self.board
    }

    /// KiB of tiles held.
    pub fn kib(&self) -> u64 {
        self.state.lock().map(|s| s.kib).unwrap_or(0)
    }

    /// Tiles held.
    pub fn len(&self) -> usize {
        self.state.lock().map(|s| s.resident.len()).unwrap_or(0)
    }

    /// True when no tile is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` is held or being loaded (not a use: its recency does not change).
    pub fn holds_or_loads(&self, key: &TileKey) -> bool {
        self.state
            .lock()
            .is_ok_and(|s| s.resident.contains_key(key) || s.loading.get(key).is_some_and(|l| l.upgrade().is_some()))
    }

    /// The tile under `key` if held (a use: it becomes the most recent).
    pub fn get(&self, key: &TileKey) -> Option<Tile> {
        let mut s = self.state.lock().ok()?;
        s.clock += 1;
        let now = s.clock;
        let r = s.resident.get_mut(key)?;
        r.used = now;
        Some(r.tile.clone())
    }

    /// The tile under `key`: held, or loaded by `load` (once, however many ask at the same
    /// time), then held.
    pub async fn get_or_load<F>(&self, key: TileKey, load: F) -> (Result<Tile, Arc<TiffError>>, Got)
    where
        F: std::future::Future<Output = Result<Tile, TiffError>> + Send + 'static,
    {
        let (shared, got) = {
            let Ok(mut s) = self.state.lock() else {
                return (
                    Err(Arc::new(TiffError::Internal("tile store poisoned".into()))),
                    Got::Loaded,
                );
            };
            s.clock += 1;
            let now = s.clock;
            if let Some(r) = s.resident.get_mut(&key) {
                r.used = now;
                return (Ok(r.tile.clone()), Got::Hit);
            }
            match s.loading.get(&key).and_then(WeakShared::upgrade) {
                Some(l) => (l, Got::Joined),
                None => {
                    let l: Load = async move { load.await.map_err(Arc::new) }.boxed().shared();
                    if let Some(weak) = l.downgrade() {
                        s.loading.insert(key.clone(), weak);
                    }
                    (l, Got::Loaded)
                }
            }
        };
        let result = shared.clone().await;
        // Whoever sees the load finish first files its outcome: the tile is held, and the
        // loading entry goes either way (a failure is retried by the next ask).
        if let Ok(mut s) = self.state.lock() {
            let mine = s
                .loading
                .get(&key)
                .and_then(WeakShared::upgrade)
                .is_some_and(|l| l.ptr_eq(&shared));
            if mine {
                s.loading.remove(&key);
                if let Ok(tile) = &result
                    && !s.resident.contains_key(&key)
                {
                    let kib = (tile.len() as u64 / 1024).max(1);
                    let id = tile_id(&key);
                    s.clock += 1;
                    let used = s.clock;
                    s.kib += kib;
                    s.resident.insert(
                        key.clone(),
                        Resident {
                            tile: tile.clone(),
                            kib,
                            used,
                            id,
                        },
                    );
                    // Plans pay once the cache is nearly full (it starts evicting soon).
                    self.board.set_pressure(s.kib >= self.capacity_kib / 10 * 9);
                    if s.kib > self.capacity_kib {
                        let (n, planned) = self.evict(&mut s, &key);
                        if let Some(f) = &self.on_evict {
                            f(n, planned);
                        }
                    }
                }
            }
        }
        (result, got)
    }

    /// Drops tiles until the store holds at most [`LOW_WATER`] of its budget, never `keep`
    /// (the tile just loaded, about to be used); returns how many went, and how many of
    /// those a plan still needed.
    fn evict(&self, s: &mut State, keep: &TileKey) -> (u64, u64) {
        let target = self.low_water_kib;
        let order: Vec<(&TileKey, u64, u64, u64)> = s
            .resident
            .iter()
            .filter(|(k, _)| *k != keep)
            .map(|(k, r)| (k, r.id, r.used, r.kib))
            .collect();
        let distance = match self.eviction {
            Eviction::Plan => self.board.distances(order.iter().map(|o| o.1)),
            Eviction::Lru => vec![None; order.len()],
        };
        // Ranked by what goes first: unplanned (least recently used first), then planned
        // furthest first.
        let mut ranked: Vec<(u64, u64, usize)> = distance
            .iter()
            .enumerate()
            .map(|(i, d)| match d {
                None => (u64::MAX, u64::MAX - order[i].2, i),
                Some(d) => (*d, u64::MAX - order[i].2, i),
            })
            .collect();
        ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
        let mut victims = Vec::new();
        let mut planned = 0;
        let mut kib = s.kib;
        for &(_, _, i) in &ranked {
            if kib <= target {
                break;
            }
            kib -= order[i].3;
            victims.push(order[i].0.clone());
            planned += u64::from(distance[i].is_some());
        }
        drop(order);
        for k in &victims {
            if let Some(r) = s.resident.remove(k) {
                s.kib -= r.kib;
            }
        }
        (victims.len() as u64, planned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(block: usize) -> TileKey {
        let url: Arc<str> = Arc::from("file:///t.tif");
        let v: Arc<str> = Arc::from("v1");
        TileKey::new(&url, &v, 0, block)
    }

    /// A tile of `kib` KiB.
    fn tile(kib: usize) -> Tile {
        Arc::new(vec![0u8; kib * 1024])
    }

    async fn load(store: &TileStore, block: usize) -> Got {
        store.get_or_load(key(block), async move { Ok(tile(100)) }).await.1
    }

    fn held(store: &TileStore) -> Vec<usize> {
        let s = store.state.lock().unwrap();
        let mut v: Vec<usize> = s.resident.keys().map(|k| k.block as usize).collect();
        v.sort_unstable();
        v
    }

    #[tokio::test]
    async fn eviction_follows_a_scripted_plan() {
        // Room for 3 tiles of 100 KiB.
        let board = PlanBoard::new();
        let store = TileStore::new(300 * 1024, Eviction::Plan, board.clone()).low_water(1.0);
        let plan = board.open();
        let plan_of = |block: usize| tile_id(&key(block));
        // The script: samples 0..6 read tiles 1 2 3 | 4 | 1 | 2 | 3 | 1.
        let script: [&[usize]; 6] = [&[1, 2, 3], &[4], &[1], &[2], &[3], &[1]];
        for (pos, tiles) in script.iter().enumerate() {
            plan.publish(pos as u64, tiles.iter().map(|&b| plan_of(b)));
        }
        for b in [1, 2, 3] {
            assert_eq!(load(&store, b).await, Got::Loaded);
        }
        plan.advance(1);
        // Tile 4 comes in: 1 (next at 2), 2 (at 3), 3 (at 4): Belady drops 3, the furthest
        // (LRU would drop 1, the least recent).
        assert_eq!(load(&store, 4).await, Got::Loaded);
        assert_eq!(held(&store), vec![1, 2, 4]);
        plan.advance(2);
        assert_eq!(load(&store, 1).await, Got::Hit);
        plan.advance(3);
        assert_eq!(load(&store, 2).await, Got::Hit);
        plan.advance(4);
        // Tile 3 again: 2 and 4 are needed by no plan any more; 4, the less recent, goes.
        assert_eq!(load(&store, 3).await, Got::Loaded);
        assert_eq!(held(&store), vec![1, 2, 3]);
        plan.advance(5);
        assert_eq!(load(&store, 1).await, Got::Hit);
    }

    #[tokio::test]
    async fn lru_ignores_the_plan_and_drops_the_least_recent() {
        let board = PlanBoard::new();
        let store = TileStore::new(300 * 1024, Eviction::Lru, board.clone()).low_water(1.0);
        let plan = board.open();
        plan.publish(0, [tile_id(&key(1))].into_iter());
        for b in [1, 2, 3] {
            load(&store, b).await;
        }
        assert_eq!(load(&store, 2).await, Got::Hit);
        load(&store, 4).await;
        // 1 is the least recent, planned or not.
        assert_eq!(held(&store), vec![2, 3, 4]);
    }

    #[tokio::test]
    async fn without_plans_the_least_recent_goes_first() {
        let store = TileStore::new(300 * 1024, Eviction::Plan, PlanBoard::new()).low_water(1.0);
        for b in [1, 2, 3] {
            load(&store, b).await;
        }
        assert_eq!(load(&store, 1).await, Got::Hit);
        load(&store, 4).await;
        assert_eq!(held(&store), vec![1, 3, 4]);
        assert_eq!(store.kib(), 300);
    }

    #[tokio::test]
    async fn one_load_for_concurrent_asks_and_failures_are_not_kept() {
        let store = Arc::new(TileStore::new(1 << 20, Eviction::Plan, PlanBoard::new()));
        let loads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ask = |fail: bool| {
            let (store, loads) = (store.clone(), loads.clone());
            async move {
                store
                    .get_or_load(key(9), async move {
                        loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        if fail {
                            Err(TiffError::Internal("boom".into()))
                        } else {
                            Ok(tile(1))
                        }
                    })
                    .await
            }
        };
        let (a, b) = tokio::join!(ask(true), ask(false));
        // The second ask joined the first's (failing) load.
        assert!(a.0.is_err() && b.0.is_err());
        assert_eq!(b.1, Got::Joined);
        assert_eq!(loads.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(store.is_empty());
        // The failure was not kept: the next ask loads again.
        let c = ask(false).await;
        assert_eq!(c.1, Got::Loaded);
        assert!(c.0.is_ok());
        assert_eq!(store.len(), 1);
    }

    #[tokio::test]
    async fn a_tile_being_loaded_counts_as_held_for_a_prefetch() {
        let store = Arc::new(TileStore::new(1 << 20, Eviction::Plan, PlanBoard::new()));
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let loading = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .get_or_load(key(4), async move {
                        let _ = wait.await;
                        Ok(tile(1))
                    })
                    .await
                    .1
            }
        });
        while !store.holds_or_loads(&key(4)) {
            tokio::task::yield_now().await;
        }
        assert!(store.is_empty() && !store.holds_or_loads(&key(5)));
        go.send(()).unwrap();
        assert_eq!(loading.await.unwrap(), Got::Loaded);
        assert!(store.holds_or_loads(&key(4)) && store.len() == 1);
    }

    #[tokio::test]
    async fn a_load_every_asker_dropped_is_dropped_too() {
        let store = Arc::new(TileStore::new(1 << 20, Eviction::Plan, PlanBoard::new()));
        let pending = store.get_or_load(key(5), async {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            Ok(tile(1))
        });
        // Polled once, then abandoned.
        let _ = tokio::time::timeout(std::time::Duration::from_millis(5), pending).await;
        let (got, how) = store.get_or_load(key(5), async { Ok(tile(1)) }).await;
        assert!(got.is_ok());
        assert_eq!(how, Got::Loaded);
    }
}
