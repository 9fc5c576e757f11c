//! The compressed tier: tile bytes as fetched, in RAM, below the decoded cache.
//!
//! A DEFLATE tile is 3–6× smaller than its pixels, so a GiB here holds several times the
//! tiles a GiB of decoded cache does: a decoded-tile miss that hits this tier costs one
//! decode, not a GET. Keys are the decoded cache's ([`TileKey`]: object, version, level,
//! block), so a replaced object never serves old bytes. Weighed in KiB (moka weights are
//! u32). It only stores and finds bytes; it never fetches, decodes or touches the disk.

use std::sync::Arc;

use bytes::Bytes;

use super::TileKey;
use crate::metrics::Metrics;

/// The tier's label in metrics.
pub const TIER: &str = "compressed";

/// Compressed tile bytes in RAM, bounded by bytes.
#[derive(Clone)]
pub struct CompressedTier {
    cache: moka::future::Cache<TileKey, Bytes>,
    metrics: Option<Arc<Metrics>>,
}

impl std::fmt::Debug for CompressedTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompressedTier")
            .field("entries", &self.cache.entry_count())
            .finish()
    }
}

fn bytes_kib(_key: &TileKey, bytes: &Bytes) -> u32 {
    (bytes.len() / 1024).clamp(1, u32::MAX as usize) as u32
}

impl CompressedTier {
    /// A tier holding about `capacity_bytes` of compressed tiles.
    pub fn new(capacity_bytes: u64, metrics: Option<Arc<Metrics>>) -> Self {
        let mut builder = moka::future::Cache::builder()
            .max_capacity((capacity_bytes / 1024).max(1))
            .weigher(bytes_kib);
        if let Some(m) = &metrics {
            m.tier_capacity_bytes
                .with_label_values(&[TIER])
                .set(capacity_bytes as i64);
            let evictions = m.tier_evictions.with_label_values(&[TIER]);
            builder = builder.eviction_listener(move |_k, _v, cause| {
                if cause == moka::notification::RemovalCause::Size {
                    evictions.inc();
                }
            });
        }
        Self {
            cache: builder.build(),
            metrics,
        }
    }

    /// The bytes of `key`, if held (counted as a hit or a miss).
    pub async fn get(&self, key: &TileKey) -> Option<Bytes> {
        let found = self.cache.get(key).await;
        if let Some(m) = &self.metrics {
            let counter = if found.is_some() { &m.tier_hits } else { &m.tier_misses };
            counter.with_label_values(&[TIER]).inc();
        }
        found
    }

    /// Keeps `bytes` as the compressed form of `key`.
    pub async fn insert(&self, key: TileKey, bytes: Bytes) {
        self.cache.insert(key, bytes).await;
        if let Some(m) = &self.metrics {
            let kib = self.cache.weighted_size();
            m.tier_size_bytes.with_label_values(&[TIER]).set((kib * 1024) as i64);
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

    #[tokio::test]
    async fn finds_what_it_keeps_and_stays_within_capacity() {
        let tier = CompressedTier::new(1 << 20, None);
        tier.insert(key(0), Bytes::from(vec![7u8; 4096])).await;
        assert_eq!(tier.get(&key(0)).await.unwrap().len(), 4096);
        assert!(tier.get(&key(1)).await.is_none());
        for b in 0..64 {
            tier.insert(key(b), Bytes::from(vec![b as u8; 64 * 1024])).await;
        }
        let held = tier.weighted_kib().await;
        assert!(held <= 1024, "{held} KiB held");
    }

    #[tokio::test]
    async fn another_version_is_another_tile() {
        let tier = CompressedTier::new(1 << 20, None);
        tier.insert(key(3), Bytes::from_static(b"old")).await;
        let newer = TileKey::new(&Arc::from("s3://b/o.tif"), &Arc::from("etag-2"), 0, 3);
        assert!(tier.get(&newer).await.is_none());
    }
}
