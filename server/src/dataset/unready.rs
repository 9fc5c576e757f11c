//! Datasets that failed to open: why (in client-safe words), since when, how many attempts,
//! and when the next one is due. The catalog keeps one entry per configured dataset that
//! serves nothing yet; a retry that succeeds removes it.
//!
//! Owns the bookkeeping and the retry schedule only. It must never hold an error's full
//! text (URLs, store words): what it keeps is shown on `/readyz`, the status page and to
//! gRPC clients.

use std::time::{Duration, Instant, SystemTime};

/// The longest wait between two attempts to open a dataset that keeps failing.
pub const RETRY_MAX: Duration = Duration::from_secs(300);

/// The wait after `failures` failed attempts in a row: 2^n s, capped at [`RETRY_MAX`].
pub fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.min(9)).min(RETRY_MAX)
}

/// One configured dataset that does not serve.
#[derive(Debug, Clone)]
pub struct Unready {
    /// Why the last attempt failed, as a client may read it (object names, no URLs).
    pub reason: String,
    /// When the first attempt failed (wall clock, for the status page).
    pub since: SystemTime,
    /// Failed attempts in a row.
    pub attempts: u32,
    /// When the last attempt ended.
    last: Instant,
}

impl Unready {
    /// The first failure of a dataset.
    pub fn new(reason: String) -> Self {
        Self {
            reason,
            since: SystemTime::now(),
            attempts: 1,
            last: Instant::now(),
        }
    }

    /// Another failed attempt.
    pub fn failed_again(&mut self, reason: String) {
        self.reason = reason;
        self.attempts = self.attempts.saturating_add(1);
        self.last = Instant::now();
    }

    /// Time left before the next attempt is due (zero: due now).
    pub fn next_attempt_in(&self) -> Duration {
        backoff(self.attempts).saturating_sub(self.last.elapsed())
    }

    /// What a client reads when it names this dataset.
    pub fn client_message(&self, name: &str) -> String {
        format!(
            "dataset {name} is not ready: it failed to open ({}); the daemon retries it (attempt {} failed, next in {} s)",
            self.reason,
            self.attempts,
            self.next_attempt_in().as_secs()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_to_five_minutes() {
        assert_eq!(backoff(1), Duration::from_secs(2));
        assert_eq!(backoff(4), Duration::from_secs(16));
        assert_eq!(backoff(9), RETRY_MAX);
        assert_eq!(backoff(u32::MAX), RETRY_MAX);
        let mut u = Unready::new("store unavailable in x.tif".into());
        assert!(u.next_attempt_in() > Duration::from_secs(1));
        u.failed_again("read failed in y.tif".into());
        assert_eq!(u.attempts, 2);
        let m = u.client_message("s2");
        assert!(
            m.starts_with("dataset s2 is not ready: it failed to open (read failed in y.tif)"),
            "{m}"
        );
    }
}
