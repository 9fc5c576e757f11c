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
//! to their owners ([`PlanRelay`]). Never changes what a stream delivers, only what stays
//! cached.

use std::sync::Arc;

use tokio::sync::watch;

use super::StreamJob;
use super::map_sample::{first_draw, wanted_layers};
use crate::error::{Error, Result};
use crate::memory::Reservation;
use crate::tiles::board::{BYTES_PER_ENTRY, MAX_PLAN_ENTRIES, PlanBoard, PlanRelay, StreamPlan, tile_id};
use crate::tiles::{TileKey, region};

/// Samples the plan reaches ahead of the consumer at most. Planning a sample costs CPU
/// outside the stream's share of the CPU pool (tens to hundreds of µs in map space), so the
/// planner stays this close: a burst of at most this many plans when a stream starts, then
/// one plan per sample consumed.
pub const HORIZON: u64 = 512;

/// The consumer's side: moves the cursor as samples are consumed.
#[derive(Debug)]
pub struct Cursor {
    plan: Arc<StreamPlan>,
    relay: Option<Arc<dyn PlanRelay>>,
    moved: watch::Sender<u64>,
    /// The plan's memory, held as long as its uses can be on the board.
    _memory: Option<Reservation>,
}

impl Cursor {
    /// Every sample before `consumed` (in stream order) was delivered.
    pub fn advance(&self, consumed: u64) {
        self.plan.advance(consumed);
        if let Some(r) = &self.relay {
            r.advance(consumed);
        }
        self.moved.send_replace(consumed);
    }

    /// The sample at `position` is loaded: it reads no more tiles, though it waits for
    /// the samples before it to be delivered (a deep look-ahead would otherwise keep its
    /// tiles as if still needed, crowding out those the next loads need).
    pub fn loaded(&self, position: u64) {
        self.plan.retire(position);
    }
}

/// Starts planning `order` (the stream's sample indices in delivery order) for `job` on
/// `board` (and `relay`, for tiles other replicas own), within `reservation`. Returns the
/// consumer's cursor; the planner stops when the cursor is dropped, the returned handle
/// is aborted or the order ends.
pub fn start(
    job: StreamJob,
    board: &Arc<PlanBoard>,
    relay: Option<Box<dyn PlanRelay>>,
    order: impl Iterator<Item = u64> + Send + 'static,
    reservation: Option<Reservation>,
) -> (Arc<Cursor>, tokio::task::JoinHandle<()>) {
    let plan = Arc::new(board.open());
    let relay: Option<Arc<dyn PlanRelay>> = relay.map(Arc::from);
    let (moved, watched) = watch::channel(0u64);
    let (planner, relayed) = (plan.clone(), relay.clone());
    let task = tokio::spawn(async move {
        plan_order(&job, &planner, relayed.as_deref(), order, watched).await;
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
    plan: &StreamPlan,
    relay: Option<&dyn PlanRelay>,
    order: impl Iterator<Item = u64>,
    mut cursor: watch::Receiver<u64>,
) {
    for (position, i) in order.enumerate() {
        let position = position as u64;
        // Wait for room (within the horizon and the plan's entries) and for a cache that
        // wants plans (nearly full; checked again as the cursor moves).
        let Ok(now) = cursor
            .wait_for(|&c| {
                position < c || (position < c + HORIZON && plan.published() < MAX_PLAN_ENTRIES && plan.wanted())
            })
            .await
            .map(|c| *c)
        else {
            return;
        };
        if position < now {
            // Consumed before it was planned: nothing to publish.
            continue;
        }
        if let Ok(keys) = planned_tiles(job, i).await {
            plan.publish(position, keys.iter().map(tile_id));
            if let Some(r) = relay {
                r.publish(position, &keys);
            }
        }
        // One plan at a time: other streams' tasks run between them.
        tokio::task::yield_now().await;
    }
}

/// The tiles sample `i` of `job` reads (its part's, in a mixture).
async fn planned_tiles(job: &StreamJob, i: u64) -> Result<Vec<TileKey>> {
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
    let of = |object: &crate::tiles::TileObject, bands: &[usize]| -> Result<Vec<TileKey>> {
        let (_, _, blocks) =
            region::region_blocks(object, window, bands).map_err(|e| Error::tiff(object.url.as_ref(), e))?;
        Ok(blocks
            .into_iter()
            .map(|b| object.key(window.level as usize, b))
            .collect())
    };
    let mut keys = of(object, &job.bands)?;
    if let (Some(label), true) = (&scene.label, job.labels) {
        keys.extend(of(label, &[0])?);
    }
    Ok(keys)
}
