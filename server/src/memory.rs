//! The daemon-wide memory budget: every allocation whose size a client chooses (the batches
//! of a stream, its look-ahead, a `ReadWindow` response) is admitted here before it is made.
//!
//! One semaphore counted in KiB stands for `limits.memory_budget_bytes`. A stream reserves
//! its worst case when it opens (queued, blocked, assembling and in-transport batches plus
//! its look-ahead floor) and holds it until it ends; look-ahead beyond the floor takes what
//! is free and never waits. A request that can never fit is refused at once with
//! RESOURCE_EXHAUSTED naming the limit; one that does not fit now waits a bounded time for
//! others to finish, then is refused the same way. Nothing here allocates: it only counts.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, Result};

/// Share of the machine's memory (or of the cgroup's limit) the default budget takes.
const DEFAULT_FRACTION: u64 = 4;
/// Budget when the machine's memory cannot be read.
const FALLBACK_BYTES: u64 = 2 << 30;

/// The daemon-wide budget for request-sized memory.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    kib: Arc<Semaphore>,
    total_kib: u32,
    /// The config key that sets it (named in refusals).
    key: &'static str,
}

/// Memory admitted against the budget; returned when dropped.
#[derive(Debug)]
pub struct Reservation {
    _permit: Option<OwnedSemaphorePermit>,
    bytes: u64,
}

impl Reservation {
    /// Bytes this reservation holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

impl MemoryBudget {
    /// A budget of `bytes` (at most 4 TiB: the semaphore counts KiB in a u32).
    pub fn new(bytes: u64) -> Self {
        Self::named(bytes, "limits.memory_budget_bytes")
    }

    /// A budget set by the config key `key` (a caller's share of the daemon's).
    pub fn named(bytes: u64, key: &'static str) -> Self {
        let kib = u32::try_from(bytes / 1024).unwrap_or(u32::MAX).max(1);
        Self {
            kib: Arc::new(Semaphore::new((kib as usize).min(Semaphore::MAX_PERMITS))),
            total_kib: kib,
            key,
        }
    }

    /// The whole budget in bytes.
    pub fn total_bytes(&self) -> u64 {
        u64::from(self.total_kib) * 1024
    }

    /// Bytes not reserved now.
    pub fn available_bytes(&self) -> u64 {
        self.kib.available_permits() as u64 * 1024
    }

    fn kib_for(bytes: u64) -> Option<u32> {
        u32::try_from(bytes.div_ceil(1024).max(1)).ok()
    }

    fn refused(&self, bytes: u64, what: &str, waited: bool) -> Error {
        let when = if waited {
            format!(", {} free after waiting", mib(self.available_bytes()))
        } else {
            String::new()
        };
        Error::LimitExceeded(format!(
            "{what} needs {} of memory ({} = {}{when})",
            mib(bytes),
            self.key,
            mib(self.total_bytes())
        ))
    }

    /// Reserves `bytes` now, or None (look-ahead beyond the floor: it simply loads less).
    /// It never takes the last quarter of the budget: that stays for admitting streams and
    /// windows, so one client's look-ahead cannot lock the others out.
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        let kib = Self::kib_for(bytes)?;
        if (self.kib.available_permits() as u64) < kib as u64 + self.total_kib as u64 / 4 {
            return None;
        }
        let permit = self.kib.clone().try_acquire_many_owned(kib).ok()?;
        Some(Reservation {
            _permit: Some(permit),
            bytes,
        })
    }

    /// Reserves `bytes` for `what`, waiting up to `wait` for room; RESOURCE_EXHAUSTED
    /// naming the limit when it never fits or does not fit in time.
    pub async fn reserve(&self, bytes: u64, what: &str, wait: Duration) -> Result<Reservation> {
        let kib = match Self::kib_for(bytes) {
            Some(k) if k <= self.total_kib => k,
            _ => return Err(self.refused(bytes, what, false)),
        };
        if let Ok(p) = self.kib.clone().try_acquire_many_owned(kib) {
            return Ok(Reservation {
                _permit: Some(p),
                bytes,
            });
        }
        match tokio::time::timeout(wait, self.kib.clone().acquire_many_owned(kib)).await {
            Ok(Ok(p)) => Ok(Reservation {
                _permit: Some(p),
                bytes,
            }),
            _ => Err(self.refused(bytes, what, true)),
        }
    }
}

/// The daemon's memory budget in bytes: configured, or [`default_budget_bytes`].
pub fn budget_bytes(limits: &crate::config::LimitsConfig) -> u64 {
    limits.memory_budget_bytes.unwrap_or_else(default_budget_bytes)
}

/// One caller's share of the memory budget (configured, or a quarter of the budget).
pub fn per_caller_bytes(limits: &crate::config::LimitsConfig) -> u64 {
    limits
        .memory_per_caller_bytes
        .unwrap_or_else(|| budget_bytes(limits) / 4)
}

/// The default budget: a quarter of the memory this process may use (the cgroup's limit
/// when one is set, else the machine's), or 2 GiB when neither can be read.
pub fn default_budget_bytes() -> u64 {
    let machine = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
    });
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok());
    let limit = match (machine, cgroup) {
        (Some(m), Some(c)) => m.min(c),
        (Some(m), None) => m,
        (None, Some(c)) => c,
        (None, None) => return FALLBACK_BYTES,
    };
    (limit / DEFAULT_FRACTION).max(64 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reservations_count_wait_and_refuse_by_name() {
        let budget = MemoryBudget::new(10 << 20);
        let a = budget.reserve(6 << 20, "stream a", Duration::ZERO).await.unwrap();
        assert_eq!(budget.available_bytes(), 4 << 20);
        let e = budget
            .reserve(6 << 20, "stream b", Duration::from_millis(20))
            .await
            .unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::ResourceExhausted);
        assert!(e.to_string().contains("limits.memory_budget_bytes"), "{e}");
        assert!(e.to_string().contains("stream b"), "{e}");
        // Never fits: refused at once, without waiting.
        let e = budget
            .reserve(11 << 20, "huge", Duration::from_secs(3600))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("11.0 MiB"), "{e}");
        assert!(budget.try_reserve(5 << 20).is_none());
        // A waiter gets in when memory is returned.
        let b2 = budget.clone();
        let waiter = tokio::spawn(async move { b2.reserve(6 << 20, "stream c", Duration::from_secs(5)).await });
        tokio::task::yield_now().await;
        drop(a);
        let c = waiter.await.unwrap().unwrap();
        assert_eq!(c.bytes(), 6 << 20);
        drop(c);
        assert_eq!(budget.available_bytes(), 10 << 20);
    }

    #[test]
    fn the_default_is_a_fraction_of_this_machine() {
        let b = default_budget_bytes();
        assert!(b >= 64 << 20);
    }
}
