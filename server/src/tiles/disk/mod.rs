//! The disk tier (`[cache] disk_dir`, `disk_bytes`): compressed tiles on local disk,
//! keyed by object version and tile, written as fetched, kept across restarts.
//!
//! Layout: `{disk_dir}/tiles-v1/{2 hex}/{64 hex}`, one file per tile (see [`format`]),
//! written to `{disk_dir}/tiles-v1/tmp` and renamed into place, so a reader sees a whole
//! file or none; a file torn by a crash or damaged later fails its length or checksum and
//! is deleted, never served. On start the directory is scanned (sizes and ages, no
//! reads), leftovers in `tmp` are removed, and the index is trimmed to `disk_bytes`;
//! eviction drops the least recently used entry. A lock file keeps a second daemon out.
//! Only objects whose store gives a version (ETag) are kept: a key of URL and size could
//! name different bytes after a restart. Writes run in the background and are skipped
//! (counted) while more than [`MAX_PENDING_BYTES`] wait, so a slow disk never slows a
//! stream. This tier only stores and finds bytes: it never fetches or decodes.

pub mod format;
pub mod index;

use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use bytes::Bytes;

use super::TileKey;
use crate::metrics::Metrics;
use format::Digest;
use index::Index;

/// The tier's label in metrics.
pub const TIER: &str = "disk";
/// Bytes of writes waiting for the disk above which new writes are skipped.
pub const MAX_PENDING_BYTES: u64 = 256 << 20;

/// Why the disk tier could not open.
#[derive(Debug, thiserror::Error)]
pub enum DiskTierError {
    #[error("cache.disk_dir {dir}: {context}: {source}")]
    Io {
        dir: String,
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("cache.disk_dir {dir} is in use by another cogfeed daemon (its lock file is held)")]
    InUse { dir: String },
}

struct Inner {
    root: PathBuf,
    tmp: PathBuf,
    index: Mutex<Index>,
    pending: AtomicU64,
    seq: AtomicU64,
    metrics: Option<Arc<Metrics>>,
    /// Held for the daemon's life: the directory's lock.
    _lock: File,
}

/// Compressed tiles on local disk.
#[derive(Clone)]
pub struct DiskTier {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for DiskTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskTier")
            .field("entries", &self.index().len())
            .finish()
    }
}

impl DiskTier {
    /// Opens (creating it if needed) the tier under `dir`, holding at most
    /// `capacity_bytes` of entries: scans what an earlier run left.
    pub async fn open(dir: &Path, capacity_bytes: u64, metrics: Option<Arc<Metrics>>) -> Result<Self, DiskTierError> {
        let dir = dir.to_path_buf();
        let tier = tokio::task::spawn_blocking(move || Self::open_blocking(&dir, capacity_bytes, metrics))
            .await
            .map_err(|e| DiskTierError::Io {
                dir: String::new(),
                context: "scanning",
                source: std::io::Error::other(e.to_string()),
            })??;
        Ok(tier)
    }

    fn open_blocking(dir: &Path, capacity: u64, metrics: Option<Arc<Metrics>>) -> Result<Self, DiskTierError> {
        let shown = dir.display().to_string();
        let io = |context: &'static str| {
            let dir = shown.clone();
            move |source| DiskTierError::Io { dir, context, source }
        };
        let root = dir.join("tiles-v1");
        let tmp = root.join("tmp");
        fs::create_dir_all(&tmp).map_err(io("creating the directory"))?;
        let lock = File::create(root.join("lock")).map_err(io("creating the lock file"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(DiskTierError::InUse { dir: shown }),
            Err(fs::TryLockError::Error(e)) => return Err(io("locking")(e)),
        }
        for leftover in fs::read_dir(&tmp).map_err(io("reading tmp"))?.flatten() {
            let _ = fs::remove_file(leftover.path());
        }
        let mut found: Vec<(SystemTime, Digest, u64)> = Vec::new();
        for sub in fs::read_dir(&root).map_err(io("scanning"))?.flatten() {
            let name = sub.file_name();
            if name.len() != 2 || !sub.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                continue;
            }
            for file in fs::read_dir(sub.path()).map_err(io("scanning"))?.flatten() {
                let Some(digest) = file.file_name().to_str().and_then(format::parse_name) else {
                    continue;
                };
                let Ok(meta) = file.metadata() else { continue };
                let age = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                found.push((age, digest, meta.len()));
            }
        }
        found.sort();
        let mut index = Index::new(capacity);
        let mut dropped = Vec::new();
        for (_, digest, bytes) in found {
            dropped.extend(index.insert(digest, bytes));
        }
        let tier = Self {
            inner: Arc::new(Inner {
                root,
                tmp,
                index: Mutex::new(index),
                pending: AtomicU64::new(0),
                seq: AtomicU64::new(0),
                metrics,
                _lock: lock,
            }),
        };
        tier.delete(&dropped);
        if let Some(m) = &tier.inner.metrics {
            m.tier_capacity_bytes.with_label_values(&[TIER]).set(capacity as i64);
        }
        tier.publish_size();
        Ok(tier)
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        // A panic while holding this lock cannot leave the index inconsistent in a way
        // that matters more than losing the tier: keep serving.
        self.inner.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn path(&self, digest: &Digest) -> PathBuf {
        let (dir, name) = format::relative_path(digest);
        self.inner.root.join(dir).join(name)
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.index().len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.index().is_empty()
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.index().total()
    }

    fn count(&self, hit: bool) {
        if let Some(m) = &self.inner.metrics {
            let counter = if hit { &m.tier_hits } else { &m.tier_misses };
            counter.with_label_values(&[TIER]).inc();
        }
    }

    fn discarded(&self, reason: &str) {
        if let Some(m) = &self.inner.metrics {
            m.tier_discarded.with_label_values(&[TIER, reason]).inc();
        }
    }

    fn publish_size(&self) {
        if let Some(m) = &self.inner.metrics {
            let total = self.bytes();
            m.tier_size_bytes.with_label_values(&[TIER]).set(total as i64);
        }
    }

    fn delete(&self, digests: &[Digest]) {
        for d in digests {
            let _ = fs::remove_file(self.path(d));
        }
        if !digests.is_empty()
            && let Some(m) = &self.inner.metrics
        {
            m.tier_evictions.with_label_values(&[TIER]).inc_by(digests.len() as u64);
        }
    }

    /// The bytes of `key`, if a whole, intact entry holds them. A torn or damaged entry
    /// is deleted and reads as a miss.
    pub async fn get(&self, key: &TileKey) -> Option<Bytes> {
        let digest = format::digest(key);
        if !self.index().touch(&digest) {
            self.count(false);
            return None;
        }
        let tier = self.clone();
        let found = tokio::task::spawn_blocking(move || tier.read(&digest))
            .await
            .ok()
            .flatten();
        self.count(found.is_some());
        found
    }

    fn read(&self, digest: &Digest) -> Option<Bytes> {
        let path = self.path(digest);
        let file = match fs::read(&path) {
            Ok(f) => f,
            Err(_) => {
                // Deleted under us (evicted by a concurrent write, or by hand).
                self.index().remove(digest);
                self.publish_size();
                return None;
            }
        };
        match format::payload(&file, digest).map(|body| body.len()) {
            Ok(len) => {
                let start = format::HEADER_LEN;
                Some(Bytes::from(file).slice(start..start + len))
            }
            Err(why) => {
                tracing::warn!(reason = %why, "disk tier: a damaged tile entry was deleted, the tile is read from the store");
                self.index().remove(digest);
                let _ = fs::remove_file(&path);
                self.discarded("corrupt");
                self.publish_size();
                None
            }
        }
    }

    /// Writes `bytes` as `key`'s entry in the background (skipped while the disk lags).
    pub fn put(&self, key: &TileKey, bytes: Bytes) {
        let size = bytes.len() as u64;
        if self.inner.pending.fetch_add(size, Ordering::AcqRel) + size > MAX_PENDING_BYTES {
            self.inner.pending.fetch_sub(size, Ordering::AcqRel);
            self.discarded("backlog");
            return;
        }
        let digest = format::digest(key);
        let tier = self.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = tier.write(&digest, &bytes) {
                tracing::warn!(error = %e, "disk tier: a tile entry could not be written");
                tier.discarded("write_failed");
            }
            tier.inner.pending.fetch_sub(size, Ordering::AcqRel);
        });
    }

    fn write(&self, digest: &Digest, payload: &[u8]) -> std::io::Result<()> {
        let seq = self.inner.seq.fetch_add(1, Ordering::Relaxed);
        let tmp = self.inner.tmp.join(format!("{}-{seq}", std::process::id()));
        let written = (|| {
            let mut f = File::create(&tmp)?;
            f.write_all(&format::header(digest, payload))?;
            f.write_all(payload)?;
            let path = self.path(digest);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent)?;
            }
            fs::rename(&tmp, &path)
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
            return written;
        }
        let evicted = self
            .index()
            .insert(*digest, (format::HEADER_LEN + payload.len()) as u64);
        self.delete(&evicted);
        self.publish_size();
        Ok(())
    }

    /// Waits until every write handed to [`DiskTier::put`] so far has finished.
    pub async fn settle(&self) {
        while self.inner.pending.load(Ordering::Acquire) > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(block: usize) -> TileKey {
        TileKey::new(&Arc::from("s3://bucket/scene.tif"), &Arc::from("\"etag-1\""), 0, block)
    }

    fn payload(n: usize) -> Bytes {
        Bytes::from((0..n).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>())
    }

    fn files(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for sub in fs::read_dir(dir.join("tiles-v1")).unwrap().flatten() {
            if sub.file_name().len() == 2 {
                out.extend(fs::read_dir(sub.path()).unwrap().flatten().map(|f| f.path()));
            }
        }
        out
    }

    #[tokio::test]
    async fn entries_survive_a_restart_and_no_url_reaches_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        {
            let tier = DiskTier::open(dir.path(), 1 << 20, None).await.unwrap();
            assert!(tier.get(&key(1)).await.is_none());
            tier.put(&key(1), payload(5000));
            tier.settle().await;
            assert_eq!(tier.get(&key(1)).await.unwrap(), payload(5000));
        }
        let tier = DiskTier::open(dir.path(), 1 << 20, None).await.unwrap();
        assert_eq!(tier.len(), 1);
        assert_eq!(tier.get(&key(1)).await.unwrap(), payload(5000));
        assert!(tier.get(&key(2)).await.is_none());
        let on_disk = fs::read(&files(dir.path())[0]).unwrap();
        assert!(!on_disk.windows(6).any(|w| w == b"bucket"));
    }

    #[tokio::test]
    async fn torn_and_damaged_entries_are_deleted_not_served() {
        let dir = tempfile::tempdir().unwrap();
        {
            let tier = DiskTier::open(dir.path(), 1 << 20, None).await.unwrap();
            tier.put(&key(1), payload(4000));
            tier.put(&key(2), payload(4000));
            tier.settle().await;
        }
        let paths = files(dir.path());
        assert_eq!(paths.len(), 2);
        let torn = fs::read(&paths[0]).unwrap();
        fs::write(&paths[0], &torn[..torn.len() / 2]).unwrap();
        let mut flipped = fs::read(&paths[1]).unwrap();
        flipped[format::HEADER_LEN + 10] ^= 0x40;
        fs::write(&paths[1], flipped).unwrap();
        let tier = DiskTier::open(dir.path(), 1 << 20, None).await.unwrap();
        assert!(tier.get(&key(1)).await.is_none());
        assert!(tier.get(&key(2)).await.is_none());
        assert!(files(dir.path()).is_empty());
        assert_eq!(tier.bytes(), 0);
    }

    #[tokio::test]
    async fn stays_within_its_bytes_dropping_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let entry = (format::HEADER_LEN + 10_000) as u64;
        let tier = DiskTier::open(dir.path(), 3 * entry, None).await.unwrap();
        for b in 0..3 {
            tier.put(&key(b), payload(10_000));
            tier.settle().await;
        }
        assert!(tier.get(&key(0)).await.is_some());
        tier.put(&key(3), payload(10_000));
        tier.settle().await;
        assert!(tier.get(&key(1)).await.is_none(), "the least recently used goes first");
        assert!(tier.get(&key(0)).await.is_some());
        assert_eq!(files(dir.path()).len(), 3);
        drop(tier);
        // A smaller budget on restart trims what an earlier run left.
        let tier = DiskTier::open(dir.path(), entry, None).await.unwrap();
        assert_eq!((tier.len(), files(dir.path()).len()), (1, 1));
    }

    #[tokio::test]
    async fn a_second_daemon_is_kept_out_and_leftovers_are_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let first = DiskTier::open(dir.path(), 1 << 20, None).await.unwrap();
        let err = DiskTier::open(dir.path(), 1 << 20, None).await.unwrap_err();
        assert!(matches!(err, DiskTierError::InUse { .. }), "{err}");
        fs::write(dir.path().join("tiles-v1/tmp/123-4"), b"half a write").unwrap();
        drop(first);
        let _again = DiskTier::open(dir.path(), 1 << 20, None).await.unwrap();
        assert_eq!(fs::read_dir(dir.path().join("tiles-v1/tmp")).unwrap().count(), 0);
    }
}
