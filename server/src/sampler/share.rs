//! A rank's share of an epoch: which global sample indices each batch of rank `rank` of
//! `world` holds, from a cursor, and the cursor after it.
//!
//! Owns the split of an epoch between ranks and batches. Must never know what a sample is:
//! it deals indices, the plan (and its order) turns them into windows.

/// Which global samples rank `rank` of `world` gets, in batches of `batch`, from `cursor`.
///
/// Full steps (`batch · world` samples) go to the ranks in order. The samples after the
/// last full step are dropped (training: every rank gets the same number of equal
/// batches), unless `keep_tail`: then they make one last, smaller step, split between the
/// ranks in contiguous chunks of `ceil(rest / world)`, so a grid covers its scenes whole
/// and some ranks get one batch more than others.
#[derive(Debug, Clone, Copy)]
pub struct Share {
    pub batch: u64,
    pub rank: u64,
    pub world: u64,
    pub cursor: u64,
    pub epoch_len: u64,
    pub keep_tail: bool,
}

impl Share {
    fn full_steps(&self) -> u64 {
        self.epoch_len.saturating_sub(self.cursor) / (self.batch * self.world)
    }

    /// This rank's part of the last, partial step (empty unless `keep_tail`).
    fn tail(&self) -> std::ops::Range<u64> {
        let base = self.cursor + self.full_steps() * self.batch * self.world;
        if !self.keep_tail || base >= self.epoch_len {
            return 0..0;
        }
        let chunk = (self.epoch_len - base).div_ceil(self.world);
        let start = (base + self.rank * chunk).min(self.epoch_len);
        start..(start + chunk).min(self.epoch_len)
    }

    /// Batches this rank gets.
    pub fn batches(&self) -> u64 {
        self.full_steps() + u64::from(!self.tail().is_empty())
    }

    /// Global sample indices of this rank's batch `k`.
    pub fn samples(&self, k: u64) -> std::ops::Range<u64> {
        if k >= self.full_steps() {
            return self.tail();
        }
        let start = self.cursor + k * self.batch * self.world + self.rank * self.batch;
        start..start + self.batch
    }

    /// Global cursor after batch `k` (all ranks done with that step).
    pub fn cursor_after(&self, k: u64) -> u64 {
        if k >= self.full_steps() {
            return self.epoch_len;
        }
        self.cursor + (k + 1) * self.batch * self.world
    }
}
