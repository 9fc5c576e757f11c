//! The request-rate governor of one store (bucket, container or origin): every HTTP attempt
//! to it — first tries and `object_store`'s own retries, from every stream and job of the
//! daemon — waits for a slot of a paced schedule whose rate adapts additive-increase /
//! multiplicative-decrease, the way TCP shares a link: a throttle answer (503: S3 SlowDown,
//! Azure ServerBusy; 429: GCS, Planetary Computer) cuts the rate to 90 % of the rate the
//! store answered in the last moments (at most 95 % of the rate; 50 % when too few answers
//! came to tell), so a daemon far above a store's limit is there at the first signal and
//! one near it stays near; at most once per 100 ms, so one burst of answers is one signal.
//! 100 ms in which attempts waited for slots and none was throttled raise it by 2 %, up to
//! the ceiling. At the ceiling nothing is paced: it is where the rate starts, so a store
//! that never throttles never waits. Never reads or changes a request.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Decrease factor on a throttle answer.
const DECREASE: f64 = 0.5;
/// Increase per quiet interval, as a fraction of the rate.
const INCREASE: f64 = 0.02;
/// A quiet interval.
const INCREASE_EVERY: Duration = Duration::from_millis(100);
/// Throttle answers closer together than this are one signal.
const DECREASE_EVERY: Duration = Duration::from_millis(100);
/// Requests that may go at once after an idle spell.
const BURST: f64 = 4.0;

/// Where a governor reports its state.
#[derive(Debug, Clone)]
pub struct RateMetrics {
    /// The rate now (requests per second).
    pub rate: prometheus::Gauge,
    /// Throttle answers seen.
    pub throttled: prometheus::IntCounter,
    /// Time attempts waited for their slot.
    pub waited: prometheus::Counter,
}

#[derive(Debug)]
struct State {
    rate: f64,
    /// The next free slot.
    next: Instant,
    last_decrease: Option<Instant>,
    last_increase: Instant,
    /// An attempt waited for its slot since the last increase (the rate is what binds).
    bound: bool,
    /// When the last answers that were not throttles came (at most [`RECENT`]).
    recent: std::collections::VecDeque<Instant>,
}

/// Answers kept to estimate the rate the store answers.
const RECENT: usize = 64;

impl State {
    /// The rate of recent answers that were not throttles: over the last [`RECENT`] of
    /// them within 2 s, when there are at least 4 over 50 ms or more (else unknown).
    fn answered_rate(&self, now: Instant) -> Option<f64> {
        let young: Vec<&Instant> = self
            .recent
            .iter()
            .filter(|t| now.duration_since(**t) <= Duration::from_secs(2))
            .collect();
        let (first, last) = (young.first()?, young.last()?);
        let span = last.duration_since(**first).as_secs_f64();
        (young.len() >= 4 && span >= 0.05).then(|| (young.len() - 1) as f64 / span)
    }
}

/// One store's governor.
#[derive(Debug)]
pub struct RateGovernor {
    ceiling: f64,
    floor: f64,
    state: Mutex<State>,
    metrics: Option<RateMetrics>,
}

impl RateGovernor {
    /// A governor between `floor` and `ceiling` requests per second, starting at the ceiling.
    pub fn new(ceiling: f64, floor: f64, metrics: Option<RateMetrics>) -> Self {
        let ceiling = ceiling.max(floor).max(0.1);
        let now = Instant::now();
        if let Some(m) = &metrics {
            m.rate.set(ceiling);
        }
        Self {
            ceiling,
            floor: floor.clamp(0.1, ceiling),
            state: Mutex::new(State {
                rate: ceiling,
                next: now,
                last_decrease: None,
                last_increase: now,
                bound: false,
                recent: std::collections::VecDeque::with_capacity(RECENT),
            }),
            metrics,
        }
    }

    /// The rate now (requests per second).
    pub fn rate(&self) -> f64 {
        self.state.lock().map(|s| s.rate).unwrap_or(self.ceiling)
    }

    /// How long the next attempt must wait for its slot (the slot is taken).
    fn reserve(&self) -> Duration {
        let Ok(mut s) = self.state.lock() else {
            return Duration::ZERO;
        };
        let now = Instant::now();
        if s.rate >= self.ceiling {
            // Never throttled (or recovered): nothing is paced.
            s.next = now;
            return Duration::ZERO;
        }
        let interval = Duration::from_secs_f64(1.0 / s.rate);
        // An idle spell leaves at most a small burst of unused slots.
        let earliest = now.checked_sub(interval.mul_f64(BURST)).unwrap_or(now);
        let slot = s.next.max(earliest);
        s.next = slot + interval;
        let wait = slot.saturating_duration_since(now);
        if !wait.is_zero() {
            s.bound = true;
        }
        wait
    }

    /// Waits for this attempt's slot.
    pub async fn admit(&self) {
        let wait = self.reserve();
        if !wait.is_zero() {
            if let Some(m) = &self.metrics {
                m.waited.inc_by(wait.as_secs_f64());
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// Feeds back how an attempt was answered: `throttled` for 503 and 429.
    pub fn answered(&self, throttled: bool) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        let now = Instant::now();
        if throttled {
            if let Some(m) = &self.metrics {
                m.throttled.inc();
            }
            if s.last_decrease.is_none_or(|t| now.duration_since(t) >= DECREASE_EVERY) {
                let rate = match s.answered_rate(now) {
                    // What the store just took, a little under: a daemon far above its
                    // limit is there at the first signal, one near it stays near.
                    Some(a) => (a * 0.9).min(s.rate * 0.95),
                    None => s.rate * DECREASE,
                };
                s.rate = rate.max(self.floor);
                s.last_decrease = Some(now);
                s.last_increase = now;
                s.bound = false;
            }
        } else {
            if s.recent.len() == RECENT {
                s.recent.pop_front();
            }
            s.recent.push_back(now);
        }
        if !throttled && now.duration_since(s.last_increase) >= INCREASE_EVERY {
            if s.bound {
                s.rate = (s.rate * (1.0 + INCREASE)).min(self.ceiling);
            }
            s.last_increase = now;
            s.bound = false;
        }
        if let Some(m) = &self.metrics {
            m.rate.set(s.rate);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttles_cut_quiet_spells_raise_and_the_ceiling_holds() {
        let g = RateGovernor::new(100.0, 1.0, None);
        assert_eq!(g.rate(), 100.0);
        g.answered(true);
        assert!((g.rate() - 50.0).abs() < 1e-9);
        // A burst of answers to the same overload is one signal.
        g.answered(true);
        assert!((g.rate() - 50.0).abs() < 1e-9);
        // Paced: 50 per second means slots 20 ms apart after the burst allowance.
        let waits: Vec<Duration> = (0..10).map(|_| g.reserve()).collect();
        assert!(waits[9] > Duration::from_millis(50), "{waits:?}");
        std::thread::sleep(INCREASE_EVERY);
        g.answered(false);
        assert!((g.rate() - 51.0).abs() < 1e-9, "{}", g.rate());
        for _ in 0..1000 {
            g.answered(true);
            std::thread::sleep(Duration::from_micros(1));
        }
        assert!(g.rate() >= 1.0);
    }

    #[test]
    fn without_throttling_nothing_waits() {
        let g = RateGovernor::new(10_000.0, 1.0, None);
        assert!((0..4).all(|_| g.reserve().is_zero()));
    }
}
