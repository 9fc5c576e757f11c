//! The shared caches: decoded tiles (by bytes) and opened headers (by object).
//!
//! One tile cache serves every stream and job. Keys carry the object's version (ETag, or
//! size when the store has none), so a replaced object never mixes old and new tiles.
//! Loads are single-flight: concurrent requests for one missing tile cause one range GET
//! and one decode; the others wait for it. Decoded tiles live in a [`store::TileStore`],
//! evicted by what open streams plan to read next ([`board::PlanBoard`]) or by recency.
//! Headers live in moka. The cache knows nothing of a fleet:
//! `cluster::FleetTiles` wraps it behind the same [`TileSource`] interface. A miss gets its
//! compressed bytes through [`tiers::Tiers`] (compressed RAM, disk, store).

pub mod board;
pub mod compressed;
pub mod disk;
pub mod open;
pub mod region;
pub mod store;
pub mod tiers;

pub use open::{open, open_object};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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

    /// Whether the object lives in a remote store (a read costs a round trip), not in a
    /// local file.
    pub fn is_remote(&self) -> bool {
        crate::storage::Location::parse(&self.url).is_ok_and(|l| l.scheme != crate::storage::Scheme::Local)
    }

    /// The key of block `block` of `level` of this object.
    pub fn key(&self, level: usize, block: usize) -> TileKey {
        TileKey::new(&self.url, &self.version, level, block)
    }
}

/// Blocks of one level of one object: what a stream's plan says a sample reads, and what
/// a prefetch fetches.
#[derive(Debug, Clone)]
pub struct PlannedBlocks {
    pub object: TileObject,
    pub level: usize,
    pub blocks: Vec<usize>,
    /// For each block, the rows from its top a row-limited decode reads (0: the whole
    /// block; [`region::top_rows`]).
    pub top_rows: Vec<u32>,
    /// Whether the sample surely reads them (false: a mosaic's later source, read only
    /// where the first leaves pixels empty; planned for eviction, not prefetched).
    pub sure: bool,
}

impl PlannedBlocks {
    /// The blocks' keys.
    pub fn keys(&self) -> impl Iterator<Item = TileKey> + '_ {
        self.blocks
            .iter()
            .zip(&self.top_rows)
            .map(|(&b, &rows)| self.object.key(self.level, b).top_rows(rows))
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
    /// The block's top rows only (a row-limited decode, [`region::top_rows`]); 0: the
    /// whole block.
    pub rows: u32,
}

impl TileKey {
    /// The key's stable 64-bit digest ([`crate::rng::digest`] of URL, version, level and
    /// block): its owner in a fleet and its id on plan boards, the same in every replica.
    /// A block's top rows share the whole block's digest: one owner, one planned use.
    pub fn digest(&self) -> u64 {
        let (level, block) = (self.level.to_le_bytes(), self.block.to_le_bytes());
        crate::rng::digest_parts([
            self.object.as_bytes(),
            &[0],
            self.version.as_bytes(),
            &[0],
            &level,
            &block,
        ])
    }

    pub fn new(object: &Arc<str>, version: &Arc<str>, level: usize, block: usize) -> Self {
        Self {
            object: object.clone(),
            version: version.clone(),
            level: level as u32,
            block: block as u32,
            rows: 0,
        }
    }

    /// This block's top `rows` rows (0: the whole block).
    pub fn top_rows(mut self, rows: u32) -> Self {
        self.rows = rows;
        self
    }

    /// The whole block this key is part of.
    pub fn whole(&self) -> Self {
        self.clone().top_rows(0)
    }
}

/// A decoded block, shared by every reader.
pub type Tile = Arc<Vec<u8>>;

/// A tile's weight in a moka cache (the fleet's near cache): KiB (moka weights are u32),
/// at least 1.
pub(crate) fn tile_kib(_key: &TileKey, tile: &Tile) -> u32 {
    (tile.len() / 1024).clamp(1, u32::MAX as usize) as u32
}

/// Where the pipeline gets decoded tiles: this replica's cache ([`TileCache`]), or, in a
/// fleet, the cluster's wrapper around it (`cluster::FleetTiles`), decorator style.
#[async_trait::async_trait]
pub trait TileSource: Send + Sync + std::fmt::Debug {
    /// Block `block` of `level` of `object`, decoded, loaded once however many ask.
    async fn tile(&self, object: &TileObject, level: usize, block: usize) -> TiffResult<Tile>;

    /// The top `rows` rows of block `block` (a row-limited decode; [`region::top_rows`]
    /// decides when), or the whole block: when it is held already, when `rows` is 0, or when
    /// this source only serves whole blocks (this default). Readers use no row below `rows`.
    async fn tile_rows(&self, object: &TileObject, level: usize, block: usize, rows: u32) -> TiffResult<Tile> {
        let _ = rows;
        self.tile(object, level, block).await
    }

    /// Where streams publish what they will read, when this source evicts by the plan.
    fn board(&self) -> Option<Arc<board::PlanBoard>> {
        None
    }

    /// Where one new stream relays its plan for tiles other replicas own (a fleet's
    /// owners); None when no other cache holds tiles for this one.
    fn plan_relay(&self) -> Option<Box<dyn board::PlanRelay>> {
        None
    }

    /// Fetches the compressed bytes of a tile a stream's plan reads soon into a tier
    /// below the decoded cache, without decoding it: how many bytes it fetched. None when
    /// it fetched nothing (held already, not this source's to fetch, or failed: the read
    /// itself reports errors). Never fails a stream.
    /// `rows`: the read will take only the block's top rows ([`region::top_rows`]; 0: the
    /// whole block), so a held top-rows entry makes the prefetch needless too.
    async fn prefetch(&self, _object: &TileObject, _level: usize, _block: usize, _rows: u32) -> Option<usize> {
        None
    }

    /// Compressed bytes one stream may have prefetched ahead of its reads (0: this source
    /// does not prefetch).
    fn prefetch_budget(&self) -> u64 {
        0
    }
}

#[async_trait::async_trait]
impl TileSource for TileCache {
    async fn tile(&self, object: &TileObject, level: usize, block: usize) -> TiffResult<Tile> {
        self.get_local(object, level, block).await
    }

    async fn tile_rows(&self, object: &TileObject, level: usize, block: usize, rows: u32) -> TiffResult<Tile> {
        self.get_local_rows(object, level, block, rows).await
    }

    fn board(&self) -> Option<Arc<board::PlanBoard>> {
        (self.store.eviction() == store::Eviction::Plan).then(|| self.store.board().clone())
    }

    async fn prefetch(&self, object: &TileObject, level: usize, block: usize, rows: u32) -> Option<usize> {
        self.prefetch_local(object, level, block, rows).await
    }

    fn prefetch_budget(&self) -> u64 {
        self.tiers
            .prefetched()
            .map_or(0, |p| p.capacity_bytes() / PREFETCH_SHARE)
    }
}

/// One stream's prefetched bytes ahead of its reads are at most the prefetch area's
/// capacity over this: two streams prefetching at once do not evict each other's bytes
/// before they are read.
const PREFETCH_SHARE: u64 = 2;

/// Cache counters.
#[derive(Debug, Default)]
pub struct CacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    /// Requests that waited for another request's load of the same tile.
    pub coalesced: AtomicU64,
    /// Misses that decoded only a block's top rows (row-limited decodes). Whether a read
    /// of a tile's top rows finds the whole tile loaded or decodes its rows depends on
    /// which load came first, so this part of `misses` varies with timing; the rest, the
    /// whole-tile decodes, does not.
    pub top_rows_decodes: AtomicU64,
}

/// The decoded-tile cache.
#[derive(Clone)]
pub struct TileCache {
    store: Arc<store::TileStore>,
    stats: Arc<CacheStats>,
    metrics: Option<Arc<Metrics>>,
    tiers: tiers::Tiers,
}

impl std::fmt::Debug for TileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TileCache").field("entries", &self.store.len()).finish()
    }
}

impl TileCache {
    /// A cache holding about `capacity_bytes` of decoded tiles, evicted by the plan.
    pub fn new(capacity_bytes: u64) -> Self {
        Self::with_metrics(capacity_bytes, None)
    }

    /// Like [`TileCache::new`], exporting hits, misses, waits, evictions, size and decode
    /// latency into `metrics`.
    pub fn with_metrics(capacity_bytes: u64, metrics: Option<Arc<Metrics>>) -> Self {
        Self::with_eviction(capacity_bytes, store::Eviction::Plan, metrics)
    }

    /// A cache of `capacity_bytes` evicting by `eviction`, reporting into `metrics`.
    pub fn with_eviction(capacity_bytes: u64, eviction: store::Eviction, metrics: Option<Arc<Metrics>>) -> Self {
        let mut store = store::TileStore::new(capacity_bytes, eviction, board::PlanBoard::new());
        if let Some(m) = &metrics {
            m.cache_capacity_bytes.set(capacity_bytes as i64);
            let (evictions, planned) = (m.cache_evictions.clone(), m.cache_evictions_planned.clone());
            store = store.on_evict(move |n, p| {
                evictions.inc_by(n);
                planned.inc_by(p);
            });
        }
        Self {
            store: Arc::new(store),
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

    /// KiB of decoded tiles held.
    pub fn weighted_kib(&self) -> u64 {
        self.store.kib()
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
                m.cache_size_bytes.set((self.store.kib() * 1024) as i64);
                m.plan_uses.set(self.store.board().entries() as i64);
            } else {
                m.cache_coalesced.inc();
            }
        }
    }

    /// Gets one block's compressed bytes (tiers, else the store) and decodes it.
    pub(crate) async fn load(&self, object: &TileObject, level: usize, block: usize) -> TiffResult<Tile> {
        self.load_rows(object, level, block, 0).await
    }

    /// [`TileCache::load`] decoding only the block's top `rows` rows (0: all of them). The
    /// compressed bytes fetched (and kept by the tiers) are the whole block's either way.
    async fn load_rows(&self, object: &TileObject, level: usize, block: usize, rows: u32) -> TiffResult<Tile> {
        let cog = &object.cog;
        let (raw, source) = self.tiers.fetch(object, level, block).await?;
        let tile = if rows == 0 {
            // Row-limited decodes are not timed: the histogram stays one of whole blocks.
            let timer = self.metrics.as_ref().map(|m| {
                let codec = cog.level(level).map(|l| l.compression.name()).unwrap_or_default();
                Timer::start(&m.decode_seconds.with_label_values(&[codec.as_str()]))
            });
            let mut decoded = cog.decode_blocks(level, vec![block], vec![raw]).await?;
            drop(timer);
            decoded
                .pop()
                .ok_or_else(|| TiffError::Internal("no block decoded".into()))?
        } else {
            cog.decode_block_rows(level, block, raw, rows as usize).await?
        };
        self.loaded_from(source.label());
        if rows != 0 {
            self.stats.top_rows_decodes.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(m) = &self.metrics {
            let extent = if rows == 0 { "whole" } else { "top_rows" };
            m.tiles_decoded.with_label_values(&[extent]).inc();
            m.tiles_decoded_bytes
                .with_label_values(&[extent])
                .inc_by(tile.len() as u64);
        }
        Ok(Arc::new(tile))
    }

    /// [`TileSource::prefetch`] into this replica's tiers (what an owner does): nothing
    /// when the decoded cache holds the tile or is loading it (its bytes may be fetched
    /// already and decoding, and the compressed tier may not have kept them).
    pub async fn prefetch_local(&self, object: &TileObject, level: usize, block: usize, rows: u32) -> Option<usize> {
        let whole = object.key(level, block);
        if self.store.holds_or_loads(&whole) || (rows != 0 && self.store.holds_or_loads(&whole.top_rows(rows))) {
            return None;
        }
        let fetched = self.tiers.prefetch(object, level, block).await.ok().flatten()?;
        if let Some(m) = &self.metrics {
            m.prefetched_tiles.inc();
            m.prefetched_bytes.inc_by(fetched as u64);
        }
        Some(fetched)
    }

    /// Block `block` of `level` of `object` from this replica's main cache, loaded from
    /// the store once; never asks a peer (what an owner does).
    pub async fn get_local(&self, object: &TileObject, level: usize, block: usize) -> TiffResult<Tile> {
        self.get_local_rows(object, level, block, 0).await
    }

    /// [`TileCache::get_local`] for a window that reads only the block's top `rows` rows
    /// (0: the whole block): the whole block when it is held or being loaded, else those
    /// rows alone, decoded once and kept under their own key (a sixteenth of the whole or less)
    /// until evicted like any tile.
    pub async fn get_local_rows(&self, object: &TileObject, level: usize, block: usize, rows: u32) -> TiffResult<Tile> {
        let whole = object.key(level, block);
        if let Some(tile) = self.store.get(&whole) {
            self.hit();
            return Ok(tile);
        }
        let key = if rows == 0 {
            whole
        } else {
            let top = whole.clone().top_rows(rows);
            if let Some(tile) = self.store.get(&top) {
                self.hit();
                return Ok(tile);
            }
            if self.store.holds_or_loads(&whole) { whole } else { top }
        };
        let (this, object) = (self.clone(), object.clone());
        let rows = key.rows;
        let (result, got) = self
            .store
            .get_or_load(key, async move { this.load_rows(&object, level, block, rows).await })
            .await;
        match got {
            store::Got::Hit => self.hit(),
            store::Got::Loaded => self.miss_or_wait(true),
            store::Got::Joined => self.miss_or_wait(false),
        }
        result.map_err(|e| (*e).clone())
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
