//! A stream's plan on the board: the tiles of the samples ahead of the one it consumes,
//! published in the stream's order so the tile cache can evict by the plan (Belady).
//!
//! The planner runs beside the stream as its own task and dies with it. It walks the
//! stream's samples in delivery order, asks what each reads (headers only: no tile is
//! fetched or decoded for the plan) and publishes it, staying at most [`HORIZON`] samples
//! and [`MAX_PLAN_ENTRIES`] uses ahead of the consumer. A map-space sample publishes its
//! first draw inside the split; a draw its valid fraction rejects is redrawn by the load,
//! unplanned. Nothing is planned while the tile cache is not nearly full: a cache that holds
//! everything needs no plan. The plan's memory is admitted against the daemon's budget like look-ahead
//! (taken if free, never waited for): without room the stream runs unplanned and its tiles
//! are evicted by recency. In a fleet the plan for tiles other replicas own is also relayed
//! to their owners ([`PlanRelay`]). When the tile source prefetches and the stream's tiles
//! live in a remote store, every planned sample also goes to the stream's prefetcher
//! (`prefetch`), and the planner then runs from the start, whether the cache is full or
//! not (a cold cache is when prefetching pays). Never changes what a stream delivers, only
//! what stays cached and when tiles are fetched.

use std::sync::Arc;

use tokio::sync::watch;

use super::StreamJob;
use super::map_sample::{first_draw, wanted_layers};
use super::prefetch;
use crate::error::{Error, Result};
use crate::memory::Reservation;
use crate::tiles::board::{BYTES_PER_ENTRY, MAX_PLAN_ENTRIES, PlanBoard, PlanRelay, StreamPlan, tile_id};
use crate::tiles::{PlannedBlocks, TileKey, TileSource, region};

/// Samples the plan reaches ahead of the consumer at most. Planning a sample costs CPU
/// outside the stream's share of the CPU pool (tens to hundreds of µs in map space), so the
/// planner stays this close: a burst of at most this many plans when a stream starts, then
/// one plan per sample consumed.
pub const HORIZON: u64 = 512;

/// The far plan: beyond [`HORIZON`], one sample in this many is planned ...
pub const FAR_STRIDE: u64 = 32;
/// ... up to this many samples ahead of the consumer. A local order's group lasts hundreds
/// to thousands of samples: the far plan sees the next few groups, so a tile this group
/// shares with one of them (a coarser band's tile, a neighbour's spill) is kept for it.
/// Costs one sample's plan per [`FAR_STRIDE`] consumed, and its uses on the board.
pub const FAR_HORIZON: u64 = 8 * HORIZON;

/// The consumer's side: moves the cursor as samples are consumed.
#[derive(Debug)]
pub struct Cursor {
    plan: Option<Arc<StreamPlan>>,
    relay: Option<Arc<dyn PlanRelay>>,
    moved: watch::Sender<u64>,
    /// The plan's memory, held as long as its uses can be on the board.
    _memory: Option<Reservation>,
}

impl Cursor {
    /// Every sample before `consumed` (in stream order) was delivered.
    pub fn advance(&self, consumed: u64) {
        if let Some(p) = &self.plan {
            p.advance(consumed);
        }
        if let Some(r) = &self.relay {
            r.advance(consumed);
        }
        self.moved.send_replace(consumed);
    }

    /// The sample at `position` is loaded: it reads no more tiles, though it waits for
    /// the samples before it to be delivered (a deep look-ahead would otherwise keep its
    /// tiles as if still needed, crowding out those the next loads need).
    pub fn loaded(&self, position: u64) {
        if let Some(p) = &self.plan {
            p.retire(position);
        }
    }
}

/// Starts planning `order` (the stream's sample indices in delivery order) for `job`: on
/// `board` (and `relay`, for tiles other replicas own) when the cache evicts by the plan,
/// and into a prefetcher when `prefetch` gives the tile source and its budget; within
/// `reservation`. Returns the consumer's cursor; the planner stops when the cursor is
/// dropped, the returned handle is aborted or the order ends.
pub fn start(
    job: StreamJob,
    board: Option<&Arc<PlanBoard>>,
    relay: Option<Box<dyn PlanRelay>>,
    order: impl Iterator<Item = u64> + Clone + Send + 'static,
    reservation: Option<Reservation>,
    prefetch: Option<(Arc<dyn TileSource>, u64)>,
) -> (Arc<Cursor>, tokio::task::JoinHandle<()>) {
    let plan = board.map(|b| Arc::new(b.open()));
    let relay: Option<Arc<dyn PlanRelay>> = relay.filter(|_| plan.is_some()).map(Arc::from);
    let (moved, watched) = watch::channel(0u64);
    let (planner, relayed) = (plan.clone(), relay.clone());
    let prefetcher = prefetch.map(|(cache, budget)| prefetch::start(cache, budget, watched.clone()));
    let task = tokio::spawn(async move {
        plan_order(&job, planner.as_deref(), relayed.as_deref(), order, watched, prefetcher).await;
    });
    let cursor = Cursor {
        plan,
        relay,
        moved,
        _memory: reservation,
    };
    (Arc::new(cursor), task)
}

/// Bytes a stream's plan may hold, admitted against the memory budget.
pub fn plan_bytes() -> u64 {
    MAX_PLAN_ENTRIES as u64 * BYTES_PER_ENTRY
}

async fn plan_order(
    job: &StreamJob,
    plan: Option<&StreamPlan>,
    relay: Option<&dyn PlanRelay>,
    order: impl Iterator<Item = u64> + Clone,
    mut cursor: watch::Receiver<u64>,
    mut prefetcher: Option<(prefetch::Planned, prefetch::Running)>,
) {
    let mut first = true;
    // The far plan's samples: every FAR_STRIDE-th position from HORIZON on.
    let mut far = order
        .clone()
        .enumerate()
        .skip(HORIZON as usize)
        .step_by(FAR_STRIDE as usize)
        .peekable();
    for (position, i) in order.enumerate() {
        let position = position as u64;
        // Wait for room (within the horizon and the plan's entries) and for a cache that
        // wants plans (nearly full; checked again as the cursor moves) or a prefetcher.
        // A prefetching stream publishes from the start: once the cache wants plans, the
        // uses between the cursor and the planner are on the board already.
        let prefetching = prefetcher.is_some();
        let publishing = |plan: Option<&StreamPlan>| plan.is_some_and(|p| prefetching || p.wanted());
        let room = |plan: Option<&StreamPlan>| plan.is_none_or(|p| p.published() < MAX_PLAN_ENTRIES);
        let Ok(now) = cursor
            .wait_for(|&c| position < c || (position < c + HORIZON && room(plan) && (prefetching || publishing(plan))))
            .await
            .map(|c| *c)
        else {
            return;
        };
        if position < now {
            // Consumed before it was planned: nothing to publish.
            continue;
        }
        if let Ok(planned) = planned_tiles(job, i).await {
            if let Some(plan) = plan.filter(|_| publishing(plan)) {
                let keys: Vec<TileKey> = planned.iter().flat_map(PlannedBlocks::keys).collect();
                plan.publish(position, keys.iter().map(tile_id));
                if let Some(r) = relay {
                    r.publish(position, &keys);
                }
                plan_far(job, plan, &mut far, position, now).await;
            }
            if std::mem::take(&mut first) && !planned.iter().any(|b| b.object.is_remote()) {
                // Tiles in local files: a read costs no round trip, nothing to prefetch.
                prefetcher = None;
            }
            if let Some((queue, _)) = &prefetcher {
                // A full queue leaves the sample to its read.
                let _ = queue.try_send((position, planned));
            }
        }
        // One plan at a time: other streams' tasks run between them.
        tokio::task::yield_now().await;
    }
    // The order ended: let the prefetcher finish what is queued.
    if let Some((queue, running)) = prefetcher {
        drop(queue);
        let _ = cursor.wait_for(|_| false).await;
        drop(running);
    }
}

/// Publishes the far plan's samples beyond `position` (the near plan's last) up to
/// [`FAR_HORIZON`] past the consumer at `now`, while the plan has room. Not relayed to a
/// fleet's owners, and never prefetched: it only orders evictions.
async fn plan_far(
    job: &StreamJob,
    plan: &StreamPlan,
    far: &mut std::iter::Peekable<impl Iterator<Item = (usize, u64)>>,
    position: u64,
    now: u64,
) {
    while let Some(&(at, i)) = far.peek() {
        let at = at as u64;
        if at > now + FAR_HORIZON || plan.published() >= MAX_PLAN_ENTRIES {
            return;
        }
        far.next();
        if at <= position {
            // The near plan has it (or it is past).
            continue;
        }
        if let Ok(planned) = planned_tiles(job, i).await {
            plan.publish_far(at, planned.iter().flat_map(PlannedBlocks::keys).map(|k| tile_id(&k)));
        }
        tokio::task::yield_now().await;
    }
}

/// The tiles sample `i` of `job` reads (its part's, in a mixture).
async fn planned_tiles(job: &StreamJob, i: u64) -> Result<Vec<PlannedBlocks>> {
    if let Some(m) = &job.mixture {
        let (part, n) = m.locate(i);
        return Box::pin(planned_tiles(part, n)).await;
    }
    let ds = &job.dataset;
    if let Some(map) = &ds.map {
        let Some(window) = first_draw(job, map, i) else {
            return Ok(Vec::new());
        };
        return map.planned_tiles(&window, &wanted_layers(job, map)).await;
    }
    let window = job.plan.window(i);
    let scene = &ds.scenes[window.scene as usize];
    let object = scene.tiles()?;
    let of = |object: &crate::tiles::TileObject, bands: &[usize]| -> Result<PlannedBlocks> {
        let read = region::region_blocks(object, window, bands).map_err(|e| Error::tiff(object.url.as_ref(), e))?;
        Ok(PlannedBlocks {
            object: object.clone(),
            level: window.level as usize,
            blocks: read.blocks,
            top_rows: read.top_rows,
            sure: true,
        })
    };
    let mut planned = vec![of(object, &job.bands)?];
    if let (Some(label), true) = (&scene.label, job.labels) {
        planned.push(of(label, &[0])?);
    }
    Ok(planned)
}
