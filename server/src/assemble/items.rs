//! Reading STAC documents and opening their assets through the store layer.

use std::sync::Arc;

use crate::cache::TileObject;
use crate::error::{Error, Result};
use crate::storage::{StoreOptions, open_url};
use cogfeed_stac::{HrefRewrite, Item};
use cogfeed_tiff::{Cog, OpenOptions, RangeReader};

/// Reads the Items of the document at `url` (a local path or any store URL; JSON, or
/// stac-geoparquet), as the daemon does.
pub async fn load_items(url: &str, rewrite: &HrefRewrite, store: &StoreOptions) -> Result<Vec<Item>> {
    let stores = crate::storage::Stores::new(store.clone());
    crate::stacset::read_items(&stores, url, rewrite).await
}

/// Opens the COG at `href` (header read) as a cache object.
pub async fn open_object(href: &str, store: &StoreOptions, options: OpenOptions) -> Result<TileObject> {
    let reader: Arc<dyn RangeReader> = open_url(href, store)?;
    let cog = Cog::open(reader, options).await.map_err(|e| Error::tiff(href, e))?;
    Ok(TileObject::new(href, cog))
}
