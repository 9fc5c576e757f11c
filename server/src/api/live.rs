//! The streams open right now, for the status page: who (dataset, job, rank), where in the
//! epoch (cursor over the epoch's samples), how fast (bytes and batches sent), and how
//! starved (time the transport waited for a batch). An entry lives exactly as long as its
//! stream: the [`LiveEntry`] guard removes it on drop.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One open stream.
#[derive(Debug)]
pub struct LiveStream {
    pub id: u64,
    pub info: StreamInfo,
    pub started: Instant,
    cursor: AtomicU64,
    sent_batches: AtomicU64,
    sent_bytes: AtomicU64,
    starved_us: AtomicU64,
}

/// A snapshot of a [`LiveStream`].
#[derive(Debug, Clone)]
pub struct LiveFigures {
    pub cursor: u64,
    pub batches_sent: u64,
    pub bytes_sent: u64,
    pub seconds: f64,
    pub starved_seconds: f64,
}

impl LiveFigures {
    pub fn mb_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes_sent as f64 / self.seconds / 1e6
        } else {
            0.0
        }
    }

    pub fn starved_fraction(&self) -> f64 {
        if self.seconds > 0.0 {
            (self.starved_seconds / self.seconds).min(1.0)
        } else {
            0.0
        }
    }
}

impl LiveStream {
    /// Counts one batch sent, and where it left the cursor.
    pub fn sent(&self, bytes: u64, cursor: u64) {
        self.sent_batches.fetch_add(1, Ordering::Relaxed);
        self.sent_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.cursor.store(cursor, Ordering::Relaxed);
    }

    /// Adds time the transport waited for a batch.
    pub fn starved(&self, secs: f64) {
        self.starved_us.fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
    }

    pub fn figures(&self) -> LiveFigures {
        LiveFigures {
            cursor: self.cursor.load(Ordering::Relaxed),
            batches_sent: self.sent_batches.load(Ordering::Relaxed),
            bytes_sent: self.sent_bytes.load(Ordering::Relaxed),
            seconds: self.started.elapsed().as_secs_f64(),
            starved_seconds: self.starved_us.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }

    /// Fraction of the epoch behind the cursor.
    pub fn progress(&self) -> f64 {
        if self.info.samples_in_epoch == 0 {
            return 1.0;
        }
        (self.cursor.load(Ordering::Relaxed) as f64 / self.info.samples_in_epoch as f64).min(1.0)
    }
}

/// What a stream is: who, which epoch, how long.
#[derive(Debug, Clone)]
pub struct StreamInfo {
    pub dataset: String,
    /// The job's name as its metrics label (bounded, so the page is too).
    pub job: String,
    pub rank: u64,
    pub world: u64,
    pub epoch: u64,
    /// Samples in the whole epoch (all ranks).
    pub samples_in_epoch: u64,
    /// Batches this stream will send.
    pub batches: u64,
    /// Where it starts.
    pub cursor: u64,
    /// The client's reported data wait at this stream's open, seconds.
    pub reported_wait: f64,
}

/// Every open stream.
#[derive(Debug, Default)]
pub struct LiveStreams {
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, Arc<LiveStream>>>,
}

/// Keeps a stream listed; dropping it removes the entry.
#[derive(Debug)]
pub struct LiveEntry {
    registry: Arc<LiveStreams>,
    pub stream: Arc<LiveStream>,
}

impl Drop for LiveEntry {
    fn drop(&mut self) {
        if let Ok(mut open) = self.registry.open.lock() {
            open.remove(&self.stream.id);
        }
    }
}

impl LiveStreams {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Lists a stream until the returned guard drops.
    pub fn open(self: &Arc<Self>, info: StreamInfo) -> LiveEntry {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let stream = Arc::new(LiveStream {
            id,
            cursor: AtomicU64::new(info.cursor),
            info,
            started: Instant::now(),
            sent_batches: AtomicU64::new(0),
            sent_bytes: AtomicU64::new(0),
            starved_us: AtomicU64::new(0),
        });
        if let Ok(mut open) = self.open.lock() {
            open.insert(id, stream.clone());
        }
        LiveEntry {
            registry: self.clone(),
            stream,
        }
    }

    /// The open streams, oldest first.
    pub fn snapshot(&self) -> Vec<Arc<LiveStream>> {
        self.open
            .lock()
            .map(|o| o.values().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(job: &str) -> StreamInfo {
        StreamInfo {
            dataset: "demo".into(),
            job: job.into(),
            rank: 1,
            world: 2,
            epoch: 0,
            samples_in_epoch: 100,
            batches: 5,
            cursor: 20,
            reported_wait: 0.5,
        }
    }

    #[test]
    fn entries_live_as_long_as_their_guard() {
        let live = LiveStreams::new();
        let a = live.open(new("a"));
        let b = live.open(new("b"));
        assert_eq!(live.snapshot().len(), 2);
        a.stream.sent(1000, 40);
        a.stream.starved(0.25);
        let f = a.stream.figures();
        assert_eq!((f.batches_sent, f.bytes_sent, f.cursor), (1, 1000, 40));
        assert!((a.stream.progress() - 0.4).abs() < 1e-12);
        assert!((f.starved_seconds - 0.25).abs() < 1e-6);
        drop(a);
        let left = live.snapshot();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].info.job, "b");
        drop(b);
        assert!(live.snapshot().is_empty());
    }
}
