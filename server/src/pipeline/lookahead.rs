//! The ordered look-ahead of one stream, sized by Little's law instead of a flag.
//!
//! To keep a consumer that takes one sample every `t` seconds busy when loading one sample
//! takes `L` seconds, `L / t` loads must be in flight. [`Lookahead`] measures both (`L`: the
//! shortest of the recent load times, i.e. without queueing; `t`: a moving average of the
//! consumer's time between two pulls, its own work plus any wait for room in the stream's
//! queue) and keeps `2 × L / t` loads in flight, between a floor and a memory-bound ceiling. On a
//! remote store with 160 ms round trips that is hundreds of samples; on a warm cache a few
//! dozen; behind a slow client, the floor. Results come out in order, so depth never
//! changes what a client receives.

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
/// Load times remembered for the latency estimate.
const LATENCY_WINDOW: usize = 64;

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
    /// Recent load times; their minimum is the latency without queueing (a saturated CPU
    /// or store makes loads slower, and deeper look-ahead would only make them slower still).
    latencies: VecDeque<f64>,
    interval: Option<f64>,
    last_pull: Option<Instant>,
    deepest: usize,
    /// The daemon's memory budget, one sample's size in bytes, and the loads the stream
    /// reserved up front: loads beyond those take their memory from the budget.
    budget: Option<(MemoryBudget, u64, usize)>,
}

impl<I, F, T> Lookahead<I, T>
where
    I: Iterator<Item = F>,
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
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
            latencies: VecDeque::with_capacity(LATENCY_WINDOW),
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
        let out = match self.pending.next().await? {
            Ok((out, took)) => {
                if self.latencies.len() == LATENCY_WINDOW {
                    self.latencies.pop_front();
                }
                self.latencies.push_back(took.as_secs_f64());
                Ok(out)
            }
            Err(e) => Err(e),
        };
        self.last_pull = Some(Instant::now());
        Some(out)
    }

    fn retarget(&mut self) {
        let Depth::Adaptive { min, max } = self.depth else {
            return;
        };
        let latency = self.latencies.iter().copied().fold(f64::INFINITY, f64::min);
        let Some(interval) = self.interval else { return };
        if !latency.is_finite() {
            return;
        }
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
