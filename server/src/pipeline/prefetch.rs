//! Prefetch by the plan: the compressed bytes of the tiles a stream's planned samples read,
//! fetched into the compressed tier before the look-ahead reaches them, so a cold sample
//! on a store with latency decodes instead of waiting for a GET (a locality-ordered epoch's
//! next group, a random order's next samples).
//!
//! The prefetcher runs beside the planner (`plan_ahead`), which hands it each planned
//! sample's tiles in stream order, and dies with it. It fetches at most [`IN_FLIGHT`] tiles
//! at a time and stops fetching while the bytes it fetched for samples not yet consumed
//! reach the source's per-stream budget ([`TileSource::prefetch_budget`]), so what it
//! fetches is still in the tier when the read comes. The tier itself makes a prefetch and
//! a load of one tile one GET. Never decodes, never changes what a stream delivers, and
//! never fails or blocks it: a tile it cannot fetch is left to the read, and a sample the
//! queue has no room for is left unprefetched.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::{mpsc, watch};

use crate::tiles::{PlannedBlocks, TileSource};

/// Tiles one stream's prefetcher fetches at once.
pub const IN_FLIGHT: usize = 16;
/// Planned samples waiting for the prefetcher, at most (the planner drops the rest).
pub const QUEUED_SAMPLES: usize = 1024;

/// The planner's side: where planned samples go.
pub type Planned = mpsc::Sender<(u64, Vec<PlannedBlocks>)>;

/// Aborts the prefetcher when its planner ends.
#[derive(Debug)]
pub struct Running(tokio::task::JoinHandle<()>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts prefetching into `cache` the samples sent to the returned sender (position in
/// the stream, tiles), within `budget` bytes ahead of `consumed` (the samples delivered).
pub fn start(cache: Arc<dyn TileSource>, budget: u64, consumed: watch::Receiver<u64>) -> (Planned, Running) {
    let (tx, rx) = mpsc::channel(QUEUED_SAMPLES);
    let task = tokio::spawn(run(cache, budget, rx, consumed));
    (tx, Running(task))
}

async fn run(
    cache: Arc<dyn TileSource>,
    budget: u64,
    mut planned: mpsc::Receiver<(u64, Vec<PlannedBlocks>)>,
    mut consumed: watch::Receiver<u64>,
) {
    // Bytes fetched per position not yet consumed, and the tiles still to fetch.
    let mut ahead: BTreeMap<u64, u64> = BTreeMap::new();
    let mut held = 0u64;
    let mut waiting: std::collections::VecDeque<(u64, Arc<PlannedBlocks>, usize)> = Default::default();
    let mut fetching = FuturesUnordered::new();
    let mut open = true;
    loop {
        let now = *consumed.borrow_and_update();
        while let Some(entry) = ahead.first_entry() {
            if *entry.key() >= now {
                break;
            }
            held -= entry.remove();
        }
        while waiting.front().is_some_and(|(p, _, _)| *p < now) {
            waiting.pop_front();
        }
        while fetching.len() < IN_FLIGHT && held < budget {
            let Some((position, blocks, k)) = waiting.pop_front() else {
                break;
            };
            let (block, rows) = (blocks.blocks[k], blocks.top_rows.get(k).copied().unwrap_or(0));
            if k + 1 < blocks.blocks.len() {
                waiting.push_front((position, blocks.clone(), k + 1));
            }
            let cache = cache.clone();
            fetching.push(async move {
                let got = cache.prefetch(&blocks.object, blocks.level, block, rows).await;
                (position, got)
            });
        }
        if !open && waiting.is_empty() && fetching.is_empty() {
            return;
        }
        tokio::select! {
            Some((position, got)) = fetching.next(), if !fetching.is_empty() => {
                if let Some(bytes) = got && position >= *consumed.borrow() {
                    *ahead.entry(position).or_default() += bytes as u64;
                    held += bytes as u64;
                }
            }
            next = planned.recv(), if open && waiting.len() < IN_FLIGHT => match next {
                Some((position, tiles)) => {
                    waiting.extend(
                        tiles
                            .into_iter()
                            .filter(|b| b.sure && !b.blocks.is_empty())
                            .map(|b| (position, Arc::new(b), 0)),
                    );
                }
                None => open = false,
            },
            changed = consumed.changed() => {
                if changed.is_err() {
                    // The stream ended.
                    return;
                }
            }
        }
    }
}
