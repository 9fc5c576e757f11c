//! The compressed tier: tile bytes as fetched, in RAM, below the decoded cache.
//!
//! A DEFLATE tile is 3–6× smaller than its pixels, so a GiB here holds several times the
//! tiles a GiB of decoded cache does: a decoded-tile miss that hits this tier costs one
//! decode, not a GET. Keys are the decoded cache's ([`TileKey`]: object, version, level,
//! block), so a replaced object never serves old bytes. Weighed in KiB (moka weights are
//! u32). A missing tile's bytes come from the caller's fetch, run once however many ask at
//! the same time (a load and a plan's prefetch of one tile make one GET). It never fetches
//! by itself, decodes or touches the disk.

use std::sync::Arc;

use bytes::Bytes;
use cogfeed_tiff::TiffResult;

use super::TileKey;
use crate::metrics::Metrics;

/// The tier's label in metrics.
pub const TIER: &str = "compressed";
/// The label of the area prefetched bytes wait in for their read ([`CompressedTier::prefetched`]).
pub const PREFETCHED: &str = "prefetched";

/// Compressed tile bytes in RAM, bounded by bytes.
#[derive(Clone)]
pub struct CompressedTier {
    cache: moka::future::Cache<TileKey, Bytes>,
    capacity_bytes: u64,
    label: &'static str,
    metrics: Option<Arc<Metrics>>,
}

impl std::fmt::Debug for CompressedTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompressedTier")
            .field("label", &self.label)
            .field("entries", &self.cache.entry_count())
            .finish()
    }
}

fn bytes_kib(_key: &TileKey, bytes: &Bytes) -> u32 {
    (bytes.len() / 1024).clamp(1, u32::MAX as usize) as u32
}

impl CompressedTier {
    /// A tier holding about `capacity_bytes` of compressed tiles: moka's TinyLFU, which
    /// keeps the tiles read again and again (a block's spill tiles) over those read once.
    pub fn new(capacity_bytes: u64, metrics: Option<Arc<Metrics>>) -> Self {
        Self::build(capacity_bytes, TIER, moka::policy::EvictionPolicy::tiny_lfu(), metrics)
    }

    /// The area prefetched bytes wait in until their read takes them, about
    /// `capacity_bytes`, least recently fetched first. Not TinyLFU: its admission turns
    /// away a tile fetched once for one read at a time, exactly what a prefetch is.
    pub fn prefetched(capacity_bytes: u64, metrics: Option<Arc<Metrics>>) -> Self {
        Self::build(capacity_bytes, PREFETCHED, moka::policy::EvictionPolicy::lru(), metrics)
    }

    fn build(
        capacity_bytes: u64,
        label: &'static str,
        policy: moka::policy::EvictionPolicy,
        metrics: Option<Arc<Metrics>>,
    ) -> Self {
        let mut builder = moka::future::Cache::builder()
            .eviction_policy(policy)
            .max_capacity((capacity_bytes / 1024).max(1))
            .weigher(bytes_kib);
        if let Some(m) = &metrics {
            m.tier_capacity_bytes
                .with_label_values(&[label])
                .set(capacity_bytes as i64);
            let evictions = m.tier_evictions.with_label_values(&[label]);
            builder = builder.eviction_listener(move |_k, _v, cause| {
                if cause == moka::notification::RemovalCause::Size {
                    evictions.inc();
                }
            });
        }
        Self {
            cache: builder.build(),
            capacity_bytes,
            label,
            metrics,
        }
    }

    /// The tier's capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Whether `key` is held (neither a hit nor a miss: what a prefetch asks first).
    pub fn contains(&self, key: &TileKey) -> bool {
        self.cache.contains_key(key)
    }

    /// The bytes of `key`: held (a hit), or fetched by `fetch` (a miss) and kept unless
    /// empty (a sparse block costs no GET). Concurrent calls for one missing key run one
    /// fetch; the others wait for it. Also whether this call's fetch ran.
    pub async fn get_or_fetch(
        &self,
        key: TileKey,
        fetch: impl std::future::Future<Output = TiffResult<Bytes>>,
    ) -> TiffResult<(Bytes, bool)> {
        let entry = self
            .cache
            .entry(key)
            .or_try_insert_with(fetch)
            .await
            .map_err(|e| (*e).clone())?;
        let fetched = entry.is_fresh();
        if let Some(m) = &self.metrics {
            let counter = if fetched { &m.tier_misses } else { &m.tier_hits };
            counter.with_label_values(&[self.label]).inc();
        }
        if fetched && entry.value().is_empty() {
            self.cache.invalidate(entry.key()).await;
        } else if fetched {
            self.sized();
        }
        Ok((entry.into_value(), fetched))
    }

    /// Keeps `bytes` as the compressed form of `key` (empty bytes are not kept).
    pub async fn insert(&self, key: TileKey, bytes: Bytes) {
        if !bytes.is_empty() {
            self.cache.insert(key, bytes).await;
            self.sized();
        }
    }

    /// Takes the bytes of `key` out, if held (counted as a hit or a miss).
    pub async fn take(&self, key: &TileKey) -> Option<Bytes> {
        let found = self.cache.remove(key).await;
        if let Some(m) = &self.metrics {
            let counter = if found.is_some() { &m.tier_hits } else { &m.tier_misses };
            counter.with_label_values(&[self.label]).inc();
            if found.is_some() {
                self.sized();
            }
        }
        found
    }

    /// Drops `key` if held (neither a hit nor a miss).
    pub async fn discard(&self, key: &TileKey) {
        if self.cache.remove(key).await.is_some() {
            self.sized();
        }
    }

    /// Sets the size gauge.
    fn sized(&self) {
        if let Some(m) = &self.metrics {
            let kib = self.cache.weighted_size();
            m.tier_size_bytes
                .with_label_values(&[self.label])
                .set((kib * 1024) as i64);
        }
    }

    /// KiB held (approximately: moka applies weights lazily).
    pub async fn weighted_kib(&self) -> u64 {
        self.cache.run_pending_tasks().await;
        self.cache.weighted_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(block: usize) -> TileKey {
        TileKey::new(&Arc::from("s3://b/o.tif"), &Arc::from("etag-1"), 0, block)
    }

    async fn put(tier: &CompressedTier, key: TileKey, bytes: Bytes) -> bool {
        tier.get_or_fetch(key, async { Ok(bytes) }).await.unwrap().1
    }

    #[tokio::test]
    async fn finds_what_it_keeps_and_stays_within_capacity() {
        let tier = CompressedTier::new(1 << 20, None);
        assert!(put(&tier, key(0), Bytes::from(vec![7u8; 4096])).await);
        assert!(tier.contains(&key(0)) && !tier.contains(&key(1)));
        // Held: the fetch does not run again.
        let (again, fetched) = tier
            .get_or_fetch(key(0), async {
                Err(cogfeed_tiff::TiffError::Internal("fetched".into()))
            })
            .await
            .unwrap();
        assert_eq!((again.len(), fetched), (4096, false));
        for b in 0..64 {
            put(&tier, key(b), Bytes::from(vec![b as u8; 64 * 1024])).await;
        }
        let held = tier.weighted_kib().await;
        assert!(held <= 1024, "{held} KiB held");
    }

    #[tokio::test]
    async fn another_version_is_another_tile() {
        let tier = CompressedTier::new(1 << 20, None);
        put(&tier, key(3), Bytes::from_static(b"old")).await;
        let newer = TileKey::new(&Arc::from("s3://b/o.tif"), &Arc::from("etag-2"), 0, 3);
        assert!(!tier.contains(&newer));
    }

    #[tokio::test]
    async fn concurrent_asks_fetch_once_and_empty_blocks_are_not_kept() {
        let tier = CompressedTier::new(1 << 20, None);
        let runs = std::sync::atomic::AtomicUsize::new(0);
        let fetch = || async {
            runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            Ok(Bytes::from_static(b"tile"))
        };
        let (a, b) = tokio::join!(tier.get_or_fetch(key(5), fetch()), tier.get_or_fetch(key(5), fetch()));
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!((a.0.as_ref(), b.0.as_ref()), (&b"tile"[..], &b"tile"[..]));
        assert_eq!(runs.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert!(a.1 != b.1, "exactly one of them fetched");
        // A failed fetch keeps nothing and is not cached as a failure.
        let failed = tier
            .get_or_fetch(key(6), async { Err(cogfeed_tiff::TiffError::Internal("down".into())) })
            .await;
        assert!(failed.is_err() && !tier.contains(&key(6)));
        assert!(put(&tier, key(7), Bytes::new()).await);
        tier.cache.run_pending_tasks().await;
        assert!(!tier.contains(&key(7)));
    }

    #[tokio::test]
    async fn prefetched_bytes_are_taken_once_and_the_oldest_go_first() {
        let area = CompressedTier::prefetched(256 * 1024, None);
        for b in 0..3 {
            area.insert(key(b), Bytes::from(vec![b as u8; 64 * 1024])).await;
        }
        assert_eq!(area.take(&key(1)).await.unwrap()[0], 1);
        assert!(area.take(&key(1)).await.is_none());
        // Full: a new tile is admitted (no TinyLFU), the least recently fetched leaves.
        for b in 3..8 {
            area.insert(key(b), Bytes::from(vec![b as u8; 64 * 1024])).await;
            area.cache.run_pending_tasks().await;
        }
        assert!(area.contains(&key(7)) && !area.contains(&key(0)));
    }
}
