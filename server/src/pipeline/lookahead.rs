//! The ordered look-ahead of one stream, sized by Little's law instead of a flag.
//!
//! To keep a stream delivering `R` samples per second when a load waits `L` seconds for its
//! data, `L × R` loads must be in flight. [`Lookahead`] keeps `2 × L × R`, between a floor
//! and a memory-bound ceiling, with
//! - `R` the moving-average rate at which the consumer pulls (its work, its waits for room
//!   in the stream's queue and its stalls alike), and
//! - `L` the lower quartile of the recent loads' *waits for data* (store round trips,
//!   another load's decode of a shared tile), counting only loads that waited at all.
//!
//! Both choices are measured failures of the alternatives. A load's whole time includes
//! CPU work and, on a saturated CPU, queueing that grows with depth: sized on it, the depth
//! ran away to the ceiling and a deep queue of finished samples cost CPU (caches, page
//! faults) for no throughput. The shortest load time was fooled by loads whose tiles were
//! cached (a few microseconds), which left cold loads without look-ahead. Loads that
//! waited for nothing say nothing about latency, so they are left out; a lower quartile
//! rather than the minimum resists loads that joined a tile fetch already under way.
//! Results come out in order, so depth never changes what a client receives. Memory stays
//! within the stream's ceiling and the daemon's budget.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesOrdered;

use crate::memory::{MemoryBudget, Reservation};
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;

/// Depth = this many times the Little's-law estimate, for bursts and variance.
const HEADROOM: f64 = 2.0;
/// Weight of the newest observation in the consumer's moving average.
const ALPHA: f64 = 0.1;
/// Waits remembered for the latency estimate.
const LATENCY_WINDOW: usize = 64;
/// A load that waited less than this for its data waited for nothing (a cache hit).
const WAITED_AT_ALL: f64 = 1e-3;

/// What a load says about its own latency: the part spent waiting for data (store round
/// trips, another load's decode of a shared tile), which a deeper look-ahead hides, as
/// opposed to CPU work, which it only queues. `None`: unknown, the whole load counts.
pub trait Waited {
    fn waited(&self) -> Option<Duration> {
        None
    }
}

impl Waited for u64 {}

/// How deep to look ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Exactly this many loads in flight (a client's explicit `prefetch`).
    Fixed(usize),
    /// From measured latency and consumption, within `min..=max`.
    Adaptive { min: usize, max: usize },
}

/// A spawned load, aborted when dropped (the stream went away), holding its share of the
/// budget until its output is taken.
struct Load<T> {
    task: JoinHandle<(T, Duration)>,
    budget: Option<Reservation>,
}

impl<T> Future for Load<T> {
    type Output = Result<(T, Duration), JoinError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.task).poll(cx)
    }
}

impl<T> Drop for Load<T> {
    fn drop(&mut self) {
        self.task.abort();
        // Dropped unfinished (the stream went away): CPU work of the load may still be
        // running, so its memory stays reserved by the stream's tenant until that ends.
        if !self.task.is_finished()
            && let (Some(budget), Some(tenant)) = (self.budget.take(), cogfeed_cpu::current())
        {
            tenant.hold(Box::new(budget));
        }
    }
}

/// An ordered look-ahead over `loads`, yielding their outputs in order. Each load runs as
/// its own task, so its time is measured when it finishes, not when the stream gets to it.
pub struct Lookahead<I, T> {
    loads: I,
    pending: FuturesOrdered<Load<T>>,
    depth: Depth,
    target: usize,
    /// Recent loads' waits for data (seconds), of loads that waited at all.
    waits: VecDeque<f64>,
    /// The consumer's time between two pulls (moving average, seconds).
    interval: Option<f64>,
    /// When the last `next` returned.
    last_pull: Option<Instant>,
    deepest: usize,
    /// The daemon's memory budget, one sample's size in bytes, and the loads the stream
    /// reserved up front: loads beyond those take their memory from the budget.
    budget: Option<(MemoryBudget, u64, usize)>,
}

impl<I, T> Drop for Lookahead<I, T> {
    fn drop(&mut self) {
        tracing::debug!(deepest = self.deepest, last = self.target, "look-ahead ended");
    }
}

impl<I, F, T> Lookahead<I, T>
where
    I: Iterator<Item = F>,
    F: Future<Output = T> + Send + 'static,
    T: Waited + Send + 'static,
{
    pub fn new(loads: I, depth: Depth) -> Self {
        let target = match depth {
            Depth::Fixed(n) => n.max(1),
            Depth::Adaptive { min, .. } => min.max(1),
        };
        Self {
            loads,
            pending: FuturesOrdered::new(),
            depth,
            target,
            waits: VecDeque::with_capacity(LATENCY_WINDOW),
            interval: None,
            last_pull: None,
            deepest: target,
            budget: None,
        }
    }

    /// Loads beyond the first `reserved` (memory the stream reserved when it opened) take
    /// `sample_bytes` each from `budget` while they are in flight; none are started when it
    /// is spent. This holds for a fixed depth too: a client's `prefetch` is a wish, not a
    /// reservation.
    pub fn with_budget(mut self, budget: MemoryBudget, sample_bytes: u64, reserved: usize) -> Self {
        self.budget = Some((budget, sample_bytes.max(1), reserved.max(1)));
        self
    }

    /// Loads in flight wanted now.
    pub fn target(&self) -> usize {
        self.target
    }

    /// The largest depth chosen so far.
    pub fn deepest(&self) -> usize {
        self.deepest
    }

    /// The next output in order (Err: the load panicked); None when all have been yielded.
    pub async fn next(&mut self) -> Option<Result<T, JoinError>> {
        if let Some(last) = self.last_pull {
            let x = last.elapsed().as_secs_f64();
            self.interval = Some(match self.interval {
                None => x,
                Some(a) => a + ALPHA * (x - a),
            });
        }
        self.retarget();
        self.fill();
        let out = match self.pending.next().await? {
            Ok((out, took)) => {
                let waited = out.waited().unwrap_or(took).as_secs_f64();
                if waited >= WAITED_AT_ALL {
                    if self.waits.len() == LATENCY_WINDOW {
                        self.waits.pop_front();
                    }
                    self.waits.push_back(waited);
                }
                Ok(out)
            }
            Err(e) => Err(e),
        };
        self.last_pull = Some(Instant::now());
        Some(out)
    }

    /// Starts loads until `target` are in flight (or the budget or the loads run out).
    fn fill(&mut self) {
        while self.pending.len() < self.target {
            let permit = match &self.budget {
                Some((b, bytes, reserved)) if self.pending.len() >= *reserved => match b.try_reserve(*bytes) {
                    Some(p) => Some(p),
                    None => break,
                },
                _ => None,
            };
            let Some(load) = self.loads.next() else { break };
            let timed = async move {
                let start = Instant::now();
                let out = load.await;
                (out, start.elapsed())
            };
            // The load's CPU work counts to the stream's tenant.
            let task = match cogfeed_cpu::current() {
                Some(tenant) => tokio::spawn(cogfeed_cpu::scope(tenant, timed)),
                None => tokio::spawn(timed),
            };
            self.pending.push_back(Load { task, budget: permit });
        }
    }

    /// Depth = 2 × (lower quartile of recent waits) × (pull rate), within the bounds; kept
    /// as it is while no load has waited for data or the rate is unknown.
    fn retarget(&mut self) {
        let Depth::Adaptive { min, max } = self.depth else {
            return;
        };
        let (Some(interval), false) = (self.interval, self.waits.is_empty()) else {
            return;
        };
        let mut w: Vec<f64> = self.waits.iter().copied().collect();
        w.sort_by(f64::total_cmp);
        let latency = w[w.len() / 4];
        let want = HEADROOM * latency / interval.max(1e-6);
        self.target = (want.ceil() as usize).clamp(min.max(1), max.max(min).max(1));
        self.deepest = self.deepest.max(self.target);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads(n: u64, latency: Duration) -> impl Iterator<Item = Pin<Box<dyn Future<Output = u64> + Send>>> {
        (0..n).map(move |i| -> Pin<Box<dyn Future<Output = u64> + Send>> {
            Box::pin(async move {
                tokio::time::sleep(latency).await;
                i
            })
        })
    }

    #[tokio::test(start_paused = true)]
    async fn depth_follows_latency_over_consumption_and_order_is_kept() {
        // 100 ms per load, a consumer taking 1 ms per sample: ~150 in flight.
        let mut la = Lookahead::new(
            loads(2000, Duration::from_millis(100)),
            Depth::Adaptive { min: 8, max: 512 },
        );
        let mut seen = Vec::new();
        let start = tokio::time::Instant::now();
        while let Some(i) = la.next().await {
            seen.push(i.unwrap());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(seen, (0..2000).collect::<Vec<_>>());
        assert!((150..=400).contains(&la.deepest()), "depth {}", la.deepest());
        // Nearly consumer-bound: 2000 samples at 1 ms each plus a few round trips.
        let took = start.elapsed();
        assert!(took < Duration::from_millis(2000 + 1500), "{took:?}");
    }

    /// Every tenth load goes to the store (100 ms); the others find their tiles cached
    /// and finish at once, which used to make latency estimates tiny.
    fn mostly_cached(n: u64) -> impl Iterator<Item = Pin<Box<dyn Future<Output = u64> + Send>>> {
        (0..n).map(move |i| -> Pin<Box<dyn Future<Output = u64> + Send>> {
            Box::pin(async move {
                if i % 10 == 0 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                i
            })
        })
    }

    async fn drain(
        mut la: Lookahead<impl Iterator<Item = Pin<Box<dyn Future<Output = u64> + Send>>>, u64>,
    ) -> (Duration, usize) {
        let start = tokio::time::Instant::now();
        let mut expect = 0;
        while let Some(i) = la.next().await {
            assert_eq!(i.unwrap(), expect, "order kept");
            expect += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        (start.elapsed(), la.deepest())
    }

    #[tokio::test(start_paused = true)]
    async fn cached_loads_do_not_fool_it() {
        let (auto, deepest) = drain(Lookahead::new(
            mostly_cached(3000),
            Depth::Adaptive { min: 8, max: 512 },
        ))
        .await;
        let (fixed, _) = drain(Lookahead::new(mostly_cached(3000), Depth::Fixed(256))).await;
        eprintln!("mostly cached: automatic {auto:?} (deepest {deepest}), fixed 256 {fixed:?}");
        // As fast as the best fixed depth, within 5 %.
        assert!(
            auto.as_secs_f64() <= fixed.as_secs_f64() / 0.95,
            "automatic {auto:?} vs fixed 256 {fixed:?} (deepest {deepest})"
        );
        assert!(deepest >= 100, "deepest {deepest}");
    }

    /// A load that says it waited for no data (all CPU).
    struct Busy(u64);
    impl Waited for Busy {
        fn waited(&self) -> Option<Duration> {
            Some(Duration::ZERO)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn cpu_bound_loads_keep_the_floor() {
        let loads = (0..500u64).map(|i| async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Busy(i)
        });
        let mut la = Lookahead::new(loads, Depth::Adaptive { min: 8, max: 512 });
        let mut n = 0;
        while let Some(b) = la.next().await {
            assert_eq!(b.unwrap().0, n);
            n += 1;
        }
        assert_eq!(la.deepest(), 8, "no data waited for: no deeper than the floor");
    }

    #[tokio::test(start_paused = true)]
    async fn the_shared_budget_caps_depth_beyond_the_floor() {
        // A budget of 10 samples of 1 MiB beyond the floor of 8; look-ahead leaves its last
        // quarter (2.5 MiB) to admissions, so it takes 7.
        let budget = MemoryBudget::new(10 << 20);
        let mut la = Lookahead::new(
            loads(500, Duration::from_millis(100)),
            Depth::Adaptive { min: 8, max: 512 },
        )
        .with_budget(budget.clone(), 1 << 20, 8);
        let mut most_in_use = 0;
        while let Some(i) = la.next().await {
            i.unwrap();
            most_in_use = most_in_use.max((10 << 20) - budget.available_bytes());
            assert!(la.pending.len() <= 15, "{} in flight", la.pending.len());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(most_in_use, 7 << 20);
        drop(la);
        assert_eq!(budget.available_bytes(), 10 << 20, "budget returned");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_consumer_keeps_the_floor_and_fixed_is_fixed() {
        let mut la = Lookahead::new(
            loads(50, Duration::from_millis(10)),
            Depth::Adaptive { min: 4, max: 512 },
        );
        while la.next().await.is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(la.target(), 4);
        let mut fixed = Lookahead::new(loads(50, Duration::from_millis(100)), Depth::Fixed(3));
        while fixed.next().await.is_some() {}
        assert_eq!(fixed.target(), 3);
    }
}
