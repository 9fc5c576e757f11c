//! The ordered look-ahead of one stream, sized from the stalls it causes instead of a flag.
//!
//! To keep a consumer that spends `t` seconds of its own between two pulls busy when a load
//! takes `L` seconds, `L / t` loads must be in flight (Little's law). [`Lookahead`] applies it
//! only where it is evidence: when the consumer finds the oldest load not finished (a
//! stall), the depth grows to `2 × L / t`, with `L` the time that load waited for data
//! (its whole time when it cannot say; CPU work is not latency to hide: deeper look-ahead
//! on a saturated CPU only queues work and pushes finished samples out of the caches) and `t` the
//! consumer's moving-average time outside `next` (its work, or waiting for room in the
//! stream's queue; never the stall itself). A stretch of `depth` pulls without a stall
//! shrinks it by an eighth, down to the floor. Loads that finish early (tiles another
//! stream already cached) cause no stall and so never pull the depth down, which is what
//! defeated an estimate from the shortest or the average load time; a slow consumer never
//! stalls, so it keeps the floor. Results come out in order, so depth never changes what
//! a client receives. Memory stays within the stream's ceiling and the daemon's budget.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};

use crate::memory::{MemoryBudget, Reservation};
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;

/// Depth = this many times the Little's-law estimate, for bursts and variance.
const HEADROOM: f64 = 2.0;
/// Weight of the newest observation in the consumer's moving average.
const ALPHA: f64 = 0.1;

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
    _budget: Option<Reservation>,
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
    }
}

/// An ordered look-ahead over `loads`, yielding their outputs in order. Each load runs as
/// its own task, so its time is measured when it finishes, not when the stream gets to it.
pub struct Lookahead<I, T> {
    loads: I,
    pending: FuturesOrdered<Load<T>>,
    depth: Depth,
    target: usize,
    /// The consumer's own time between two pulls (moving average, seconds).
    own: Option<f64>,
    /// When the last `next` returned.
    last_pull: Option<Instant>,
    /// Pulls since the last stall (or the last shrink).
    calm: usize,
    /// Pulls that found the oldest load unfinished.
    stalls: u64,
    /// How long the load of the latest stall took (seconds).
    stall_latency: f64,
    deepest: usize,
    /// The daemon's memory budget, one sample's size in bytes, and the loads the stream
    /// reserved up front: loads beyond those take their memory from the budget.
    budget: Option<(MemoryBudget, u64, usize)>,
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
            own: None,
            last_pull: None,
            calm: 0,
            stalls: 0,
            stall_latency: 0.0,
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

    /// Pulls so far that found the oldest load unfinished.
    pub fn stalls(&self) -> u64 {
        self.stalls
    }

    /// The next output in order (Err: the load panicked); None when all have been yielded.
    pub async fn next(&mut self) -> Option<Result<T, JoinError>> {
        if let Some(last) = self.last_pull {
            let x = last.elapsed().as_secs_f64();
            self.own = Some(match self.own {
                None => x,
                Some(a) => a + ALPHA * (x - a),
            });
        }
        self.fill();
        // Polled once first: an unfinished head is a stall, the controller's only signal.
        let (out, stalled) = match self.pending.next().now_or_never() {
            Some(out) => (out, false),
            None => (self.pending.next().await, true),
        };
        let out = match out? {
            Ok((out, took)) => {
                self.observe(stalled, out.waited().unwrap_or(took).as_secs_f64());
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
            let task = tokio::spawn(async move {
                let start = Instant::now();
                let out = load.await;
                (out, start.elapsed())
            });
            self.pending.push_back(Load { task, _budget: permit });
        }
    }

    /// One pull's evidence: after a stall on a load that took `latency` seconds, the depth
    /// grows to what Little's law says it needs (again on the following pulls, as the
    /// consumer's interval becomes known); `target` calm pulls shrink it by an eighth.
    fn observe(&mut self, stalled: bool, latency: f64) {
        let Depth::Adaptive { min, max } = self.depth else {
            return;
        };
        let (min, max) = (min.max(1), max.max(min).max(1));
        if stalled {
            self.stalls += 1;
            self.calm = 0;
            self.stall_latency = latency;
        } else {
            self.calm += 1;
        }
        if self.stalls > 0 && self.calm < self.target {
            if let Some(own) = self.own {
                let want = (HEADROOM * self.stall_latency / own.max(1e-6)).ceil() as usize;
                self.target = self.target.max(want.min(max));
            }
        } else if self.calm >= self.target {
            self.calm = 0;
            self.target -= (self.target / 8).max(1);
        }
        self.target = self.target.clamp(min, max);
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
        assert!(la.stalls() > 0);
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
