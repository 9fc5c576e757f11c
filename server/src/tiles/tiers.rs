//! Where a decoded-tile miss gets its compressed bytes: the compressed RAM tier, then the
//! disk tier, then the store, filling the tiers above on the way back (§9 "Tiers").
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
    Compressed,
    Disk,
    Store,
}

impl Source {
    /// The `source` label of `cogfeed_tiles_loaded_total`.
    pub fn label(self) -> &'static str {
        match self {
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
}

impl Tiers {
    /// The given tiers (`None`: that tier is off).
    pub fn new(compressed: Option<CompressedTier>, disk: Option<DiskTier>) -> Self {
        Self { compressed, disk }
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
    /// tier that holds them, else from the store (then kept by every tier).
    pub async fn fetch(&self, object: &TileObject, level: usize, block: usize) -> TiffResult<(Bytes, Source)> {
        let key = object.key(level, block);
        if let Some(c) = &self.compressed
            && let Some(bytes) = c.get(&key).await
        {
            return Ok((bytes, Source::Compressed));
        }
        let durable = object.cog.version().is_some();
        let disk = self.disk.as_ref().filter(|_| durable);
        if let Some(d) = disk
            && let Some(bytes) = d.get(&key).await
        {
            if let Some(c) = &self.compressed {
                c.insert(key, bytes.clone()).await;
            }
            return Ok((bytes, Source::Disk));
        }
        let bytes = object
            .cog
            .fetch_blocks(level, &[block])
            .await?
            .pop()
            .ok_or_else(|| TiffError::Internal("no block fetched".into()))?;
        if !bytes.is_empty() {
            if let Some(d) = disk {
                d.put(&key, bytes.clone());
            }
            if let Some(c) = &self.compressed {
                c.insert(key, bytes.clone()).await;
            }
        }
        Ok((bytes, Source::Store))
    }
}
