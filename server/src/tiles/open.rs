//! Opening COGs as cache objects: the one way to open one (through the store layer and,
//! in the daemon, the header cache). A file cut short is refused when it is opened. Never
//! reads tiles.

use std::sync::Arc;

use super::{HeaderCache, TileObject};
use crate::error::{Error, Result};
use crate::storage::{StoreOptions, Stores, open_url};
use cogfeed_tiff::{Cog, OpenOptions, RangeReader};

/// Opens the COG at `url` through the header cache: the one way the daemon opens a COG.
pub async fn open(stores: &Stores, headers: &HeaderCache, url: &str, options: &OpenOptions) -> Result<TileObject> {
    let reader: Arc<dyn RangeReader> = stores.reader(url)?;
    let cog = headers
        .get_or_open(url, Cog::open(reader, options.clone()))
        .await
        .map_err(|e| Error::tiff(url, e))?;
    check_complete(url, &cog)?;
    Ok(TileObject::new(url, cog))
}

/// A file cut short (its tile offsets point past its end) is reported when it is opened,
/// not at the first sample that needs a missing tile.
fn check_complete(url: &str, cog: &Cog) -> Result<()> {
    let h = cog.header();
    for (li, level) in h.levels.iter().enumerate() {
        for b in 0..level.offsets.len() {
            if let Some(r) = level.block_range(b)
                && r.end > h.object_size
            {
                return Err(Error::tiff(
                    url,
                    cogfeed_tiff::TiffError::Malformed(format!(
                        "truncated file: block {b} of level {li} ends at byte {}, the object has {}",
                        r.end, h.object_size
                    )),
                ));
            }
        }
    }
    Ok(())
}

/// Opens the COG at `href` (header read) as a cache object.
pub async fn open_object(href: &str, store: &StoreOptions, options: OpenOptions) -> Result<TileObject> {
    let reader: Arc<dyn RangeReader> = open_url(href, store)?;
    let cog = Cog::open(reader, options).await.map_err(|e| Error::tiff(href, e))?;
    Ok(TileObject::new(href, cog))
}
