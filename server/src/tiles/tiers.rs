//! Where a decoded-tile miss gets its compressed bytes: the bytes a plan prefetched for
//! it, the compressed RAM tier, then the disk tier, then the store, filling the tiers above
//! on the way back (§9 "Tiers"); and where a prefetch puts what it fetches.
//!
//! Owns the order of the tiers and what each one is given; the decoded cache above it
//! keeps single-flight, so this path sees one request per missing tile at a time. Sparse
//! (empty) blocks are never kept: they cost no GET. The disk keeps only objects whose
//! store gave a version (see `disk`). Never decodes.

use bytes::Bytes;
use cogfeed_tiff::{TiffError, TiffResult};

use super::TileObject;
use super::compressed::CompressedTier;
use super::disk::DiskTier;

/// Where a tile's compressed bytes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Prefetched,
    Compressed,
    Disk,
    Store,
}

impl Source {
    /// The `source` label of `cogfeed_tiles_loaded_total`.
    pub fn label(self) -> &'static str {
        match self {
            Source::Prefetched => "prefetched",
            Source::Compressed => "compressed",
            Source::Disk => "disk",
            Source::Store => "store",
        }
    }
}

/// The tiers below the decoded cache (none by default: straight to the store).
#[derive(Debug, Clone, Default)]
pub struct Tiers {
    compressed: Option<CompressedTier>,
    disk: Option<DiskTier>,
    /// Where prefetched bytes wait for their read ([`CompressedTier::prefetched`]).
    prefetched: Option<CompressedTier>,
}

impl Tiers {
    /// The given tiers (`None`: that tier is off).
    pub fn new(compressed: Option<CompressedTier>, disk: Option<DiskTier>) -> Self {
        Self {
            compressed,
            disk,
            prefetched: None,
        }
    }

    /// With prefetching into `area` (built by [`CompressedTier::prefetched`]; it only
    /// works beside the compressed tier, whose single fetch per tile it shares).
    pub fn with_prefetch(mut self, area: CompressedTier) -> Self {
        self.prefetched = self.compressed.is_some().then_some(area);
        self
    }

    /// The area prefetched bytes wait in, if prefetching is on.
    pub fn prefetched(&self) -> Option<&CompressedTier> {
        self.prefetched.as_ref()
    }

    /// The disk tier, if on.
    pub fn disk(&self) -> Option<&DiskTier> {
        self.disk.as_ref()
    }

    /// The compressed tier, if on.
    pub fn compressed(&self) -> Option<&CompressedTier> {
        self.compressed.as_ref()
    }

    /// The compressed bytes of block `block` of `level` of `object`, from the highest
    /// tier that holds them, else from the store (then kept by every tier). With the
    /// compressed tier on, one fetch runs for concurrent asks of one block (a load and a
    /// prefetch included).
    pub async fn fetch(&self, object: &TileObject, level: usize, block: usize) -> TiffResult<(Bytes, Source)> {
        let key = object.key(level, block);
        if let Some(p) = &self.prefetched
            && let Some(bytes) = p.take(&key).await
        {
            return Ok((bytes, Source::Prefetched));
        }
        let Some(c) = &self.compressed else {
            return self.below_compressed(object, level, block).await;
        };
        let mut source = Source::Compressed;
        let fetch = async {
            let (bytes, from) = self.below_compressed(object, level, block).await?;
            source = from;
            Ok(bytes)
        };
        let (bytes, fetched) = c.get_or_fetch(key.clone(), fetch).await?;
        if !fetched && let Some(p) = &self.prefetched {
            // Joined a prefetch's fetch: what it kept for this read is read now.
            p.discard(&key).await;
        }
        Ok((bytes, source))
    }

    /// Fetches a block's compressed bytes ahead of its read (a plan's prefetch) through
    /// the compressed tier (one fetch with a read of the same block), then keeps them
    /// where the read takes them: how many bytes came from the disk or the store; None
    /// when prefetching is off or a tier already holds (or is fetching) them.
    pub async fn prefetch(&self, object: &TileObject, level: usize, block: usize) -> TiffResult<Option<usize>> {
        let (Some(c), Some(p)) = (&self.compressed, &self.prefetched) else {
            return Ok(None);
        };
        let key = object.key(level, block);
        if p.contains(&key) || c.contains(&key) {
            return Ok(None);
        }
        // Kept for the read before the fetch completes, so a read that joined it takes
        // them out again (no copy left behind for a read that already happened); the
        // compressed tier may not admit them (TinyLFU).
        let fetch = async {
            let bytes = self.below_compressed(object, level, block).await?.0;
            p.insert(key.clone(), bytes.clone()).await;
            Ok(bytes)
        };
        let (bytes, fetched) = c.get_or_fetch(key.clone(), fetch).await?;
        Ok(fetched.then_some(bytes.len()))
    }

    /// The block's bytes from the disk tier, else from the store (then written to disk).
    async fn below_compressed(&self, object: &TileObject, level: usize, block: usize) -> TiffResult<(Bytes, Source)> {
        let key = object.key(level, block);
        let durable = object.cog.version().is_some();
        let disk = self.disk.as_ref().filter(|_| durable);
        if let Some(d) = disk
            && let Some(bytes) = d.get(&key).await
        {
            return Ok((bytes, Source::Disk));
        }
        let bytes = object
            .cog
            .fetch_blocks(level, &[block])
            .await?
            .pop()
            .ok_or_else(|| TiffError::Internal("no block fetched".into()))?;
        if let Some(d) = disk
            && !bytes.is_empty()
        {
            d.put(&key, bytes.clone());
        }
        Ok((bytes, Source::Store))
    }
}
