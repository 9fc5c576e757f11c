//! The shared caches: decoded tiles (by bytes) and opened headers (by object).
//!
//! One tile cache serves every stream and job. Keys carry the object's version (ETag, or
//! size when the store has none), so a replaced object never mixes old and new tiles.
//! `try_get_with` gives single-flight: concurrent requests for one missing tile cause one
//! range GET and one decode; the others wait for it. moka weights are u32, so tiles are
//! weighed in KiB and caches larger than 4 GiB work. The cache knows nothing of a fleet:
//! `cluster::FleetTiles` wraps it behind the same [`TileSource`] interface. A miss gets its
//! compressed bytes through [`tiers::Tiers`] (compressed RAM, disk, store).

pub mod compressed;
pub mod disk;
pub mod open;
pub mod region;
pub mod tiers;

pub use open::{open, open_object};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::metrics::{Metrics, Timer};
use cogfeed_tiff::{Cog, TiffError, TiffResult};

/// One object tiles are read from: its URL (part of the cache key, and the name in the
/// log), its version (ETag, or size when the store has none) and its opened header.
#[derive(Debug, Clone)]
pub struct TileObject {
    pub url: Arc<str>,
    pub version: Arc<str>,
    pub cog: Cog,
}

impl TileObject {
    /// The object `url` opened as `cog`; its version from the store's ETag or its size.
    pub fn new(url: &str, cog: Cog) -> Self {
        let version = cog
            .version()
            .map(str::to_string)
            .unwrap_or_else(|| format!("size-{}", cog.header().object_size));
        Self {
            url: Arc::from(url),
            version: Arc::from(version),
            cog,
        }
    }

    /// The key of block `block` of `level` of this object.
    pub fn key(&self, level: usize, block: usize) -> TileKey {
        TileKey::new(&self.url, &self.version, level, block)
    }
}

/// Identity of one decoded block.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TileKey {
    /// Object URL.
    pub object: Arc<str>,
    /// Object version (ETag or size).
    pub version: Arc<str>,
    pub level: u32,
    pub block: u32,
}

impl TileKey {
    pub fn new(object: &Arc<str>, version: &Arc<str>, level: usize, block: usize) -> Self {
        Self {
            object: object.clone(),
            version: version.clone(),
            level: level as u32,
            block: block as u32,
        }
    }
}

/// A decoded block, shared by every reader.
pub type Tile = Arc<Vec<u8>>;

/// A tile's weight in a moka cache: KiB (moka weights are u32), at least 1.
pub(crate) fn tile_kib(_key: &TileKey, tile: &Tile) -> u32 {
    (tile.len() / 1024).clamp(1, u32::MAX as usize) as u32
}

/// Where the pipeline gets decoded tiles: this replica's cache ([`TileCache`]), or, in a
/// fleet, the cluster's wrapper around it (`cluster::FleetTiles`), decorator style.
#[async_trait::async_trait]
pub trait TileSource: Send + Sync + std::fmt::Debug {
    /// Block `block` of `level` of `object`, decoded, loaded once however many ask.
    async fn tile(&self, object: &TileObject, level: usize, block: usize) -> TiffResult<Tile>;
}

#[async_trait::async_trait]
impl TileSource for TileCache {
    async fn tile(&self, object: &TileObject, level: usize, block: usize) -> TiffResult<Tile> {
        self.get_local(object, level, block).await
    }
}

/// Cache counters.
#[derive(Debug, Default)]
pub struct CacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    /// Requests that waited for another request's load of the same tile.
    pub coalesced: AtomicU64,
}

/// The decoded-tile cache.
#[derive(Clone)]
pub struct TileCache {
    cache: moka::future::Cache<TileKey, Tile>,
    stats: Arc<CacheStats>,
    metrics: Option<Arc<Metrics>>,
    tiers: tiers::Tiers,
}

impl std::fmt::Debug for TileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TileCache")
            .field("entries", &self.cache.entry_count())
            .finish()
    }
}

impl TileCache {
    /// A cache holding about `capacity_bytes` of decoded tiles.
    pub fn new(capacity_bytes: u64) -> Self {
        Self::with_metrics(capacity_bytes, None)
    }

    /// Like [`TileCache::new`], exporting hits, misses, waits, evictions, size and decode
    /// latency into `metrics`.
    pub fn with_metrics(capacity_bytes: u64, metrics: Option<Arc<Metrics>>) -> Self {
        let mut builder = moka::future::Cache::builder()
            .max_capacity(capacity_bytes / 1024)
            .weigher(tile_kib);
        if let Some(m) = &metrics {
            m.cache_capacity_bytes.set(capacity_bytes as i64);
            let evictions = m.cache_evictions.clone();
            builder = builder.eviction_listener(move |_k, _v, cause| {
                if cause == moka::notification::RemovalCause::Size {
                    evictions.inc();
                }
            });
        }
        Self {
            cache: builder.build(),
            stats: Arc::new(CacheStats::default()),
            metrics,
            tiers: tiers::Tiers::default(),
        }
    }

    /// This cache with `tiers` below it (compressed RAM, disk).
    pub fn with_tiers(mut self, tiers: tiers::Tiers) -> Self {
        self.tiers = tiers;
        self
    }

    /// The tiers below this cache.
    pub fn tiers(&self) -> &tiers::Tiers {
        &self.tiers
    }

    /// Counters.
    pub fn stats(&self) -> &CacheStats {
        &self.stats
    }

    /// Bytes held (approximately; moka applies weights asynchronously).
    pub fn weighted_kib(&self) -> u64 {
        self.cache.weighted_size()
    }

    pub(crate) fn hit(&self) {
        self.stats.hits.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = &self.metrics {
            m.cache_hits.inc();
        }
    }

    pub(crate) fn loaded_from(&self, source: &str) {
        if let Some(m) = &self.metrics {
            m.tiles_loaded.with_label_values(&[source]).inc();
        }
    }

    pub(crate) fn miss_or_wait(&self, miss: bool) {
        if miss {
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stats.coalesced.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(m) = &self.metrics {
            if miss {
                m.cache_misses.inc();
                m.cache_size_bytes.set((self.cache.weighted_size() * 1024) as i64);
            } else {
                m.cache_coalesced.inc();
            }
        }
    }

    /// Gets one block's compressed bytes (tiers, else the store) and decodes it.
    pub(crate) async fn load(&self, object: &TileObject, level: usize, block: usize) -> TiffResult<Tile> {
        let cog = &object.cog;
        let (raw, source) = self.tiers.fetch(object, level, block).await?;
        let timer = self.metrics.as_ref().map(|m| {
            let codec = cog.level(level).map(|l| l.compression.name()).unwrap_or_default();
            Timer::start(&m.decode_seconds.with_label_values(&[codec.as_str()]))
        });
        let mut decoded = cog.decode_blocks(level, vec![block], vec![raw]).await?;
        drop(timer);
        self.loaded_from(source.label());
        let tile = decoded
            .pop()
            .ok_or_else(|| TiffError::Internal("no block decoded".into()))?;
        Ok(Arc::new(tile))
    }

    /// Block `block` of `level` of `object` from this replica's main cache, loaded from
    /// the store once; never asks a peer (what an owner does).
    pub async fn get_local(&self, object: &TileObject, level: usize, block: usize) -> TiffResult<Tile> {
        let key = object.key(level, block);
        if let Some(tile) = self.cache.get(&key).await {
            self.hit();
            return Ok(tile);
        }
        let loaded = AtomicBool::new(false);
        let result = self
            .cache
            .try_get_with(key, async {
                loaded.store(true, Ordering::Relaxed);
                self.load(object, level, block).await
            })
            .await
            .map_err(|e: Arc<TiffError>| (*e).clone());
        self.miss_or_wait(loaded.load(Ordering::Relaxed));
        result
    }
}

/// Opened headers by object URL and version, so scenes shared by datasets open once.
#[derive(Clone)]
pub struct HeaderCache {
    cache: moka::future::Cache<Arc<str>, Cog>,
}

impl std::fmt::Debug for HeaderCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderCache")
            .field("entries", &self.cache.entry_count())
            .finish()
    }
}

impl HeaderCache {
    /// A cache of at most `entries` headers.
    pub fn new(entries: u64) -> Self {
        Self {
            cache: moka::future::Cache::new(entries),
        }
    }

    /// The header of `url`, opened with `open` on a miss (single-flight).
    pub async fn get_or_open<F>(&self, url: &str, open: F) -> TiffResult<Cog>
    where
        F: std::future::Future<Output = TiffResult<Cog>>,
    {
        self.cache
            .try_get_with(Arc::from(url), open)
            .await
            .map_err(|e: Arc<TiffError>| (*e).clone())
    }

    /// Forgets `url` (its object changed).
    pub async fn invalidate(&self, url: &str) {
        self.cache.invalidate(url).await;
    }
}
