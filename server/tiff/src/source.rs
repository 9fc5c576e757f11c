//! The byte-range I/O seam between the format code and any store.
//!
//! `cog` never sees `object_store`: it asks a [`RangeReader`] for byte ranges and gets
//! `Bytes` back. `storage` implements the trait over object stores; [`MemoryReader`]
//! implements it over bytes already in memory (tests, fuzzing, benchmarks).
//! Implementations must be cheap to share (`Arc`) and safe to call concurrently.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::future::BoxFuture;

/// Why a range could not be read. Kept small so every store maps onto it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReadError {
    /// The object does not exist.
    #[error("object not found")]
    NotFound,
    /// The store could not be reached or kept failing after its retries.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The object was replaced since its header was read (its ETag changed).
    #[error("object changed since it was opened (new version)")]
    Changed,
    /// The store refused or answered something unusable.
    #[error("read failed: {0}")]
    Other(String),
}

/// The first bytes of an object, with what the store said about the object.
#[derive(Debug, Clone)]
pub struct Prefix {
    /// Up to the requested number of bytes from offset 0 (fewer for small objects).
    pub bytes: Bytes,
    /// Size of the whole object in bytes.
    pub object_size: u64,
    /// Store version tag (ETag or similar), when the store has one.
    pub version: Option<String>,
}

/// Reads byte ranges of one object.
pub trait RangeReader: Send + Sync + std::fmt::Debug {
    /// The object as users name it (URL), for error messages.
    fn name(&self) -> &str;
    /// Reads `[0, len)` (clamped to the object) and reports the object's size.
    fn read_prefix(&self, len: u64) -> BoxFuture<'_, Result<Prefix, ReadError>>;
    /// Reads exactly `range`; a range past the end of the object is an error.
    fn read_range(&self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes, ReadError>>;
}

/// A [`RangeReader`] over bytes in memory that counts the requests it serves.
#[derive(Debug, Clone)]
pub struct MemoryReader {
    name: String,
    data: Bytes,
    requests: Arc<AtomicU64>,
}

impl MemoryReader {
    /// Wraps `data`, naming it `name` in errors.
    pub fn new(name: impl Into<String>, data: impl Into<Bytes>) -> Self {
        Self {
            name: name.into(),
            data: data.into(),
            requests: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Number of reads served so far (prefix and range reads).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

impl RangeReader for MemoryReader {
    fn name(&self) -> &str {
        &self.name
    }

    fn read_prefix(&self, len: u64) -> BoxFuture<'_, Result<Prefix, ReadError>> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let end = len.min(self.data.len() as u64) as usize;
        let prefix = Prefix {
            bytes: self.data.slice(..end),
            object_size: self.data.len() as u64,
            version: None,
        };
        Box::pin(async move { Ok(prefix) })
    }

    fn read_range(&self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes, ReadError>> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let size = self.data.len() as u64;
        let result = if range.start > range.end || range.end > size {
            Err(ReadError::Other(format!(
                "range {}..{} outside object of {size} bytes",
                range.start, range.end
            )))
        } else {
            Ok(self.data.slice(range.start as usize..range.end as usize))
        };
        Box::pin(async move { result })
    }
}
