//! Reading STAC documents and opening their assets through the store layer.

use std::sync::Arc;

use crate::cache::TileObject;
use crate::cog::{Cog, OpenOptions, RangeReader};
use crate::error::{Error, Result};
use crate::stac::{HrefRewrite, Item, StacError, parse_document};
use crate::storage::{StoreOptions, open_url};

/// Largest STAC JSON document read whole.
pub const MAX_DOCUMENT_BYTES: u64 = 512 << 20;

/// Reads the Items of the document at `url` (a local path or any store URL).
pub async fn load_items(url: &str, rewrite: &HrefRewrite, store: &StoreOptions) -> Result<Vec<Item>> {
    let reader = open_url(url, store)?;
    let prefix = reader
        .read_prefix(MAX_DOCUMENT_BYTES)
        .await
        .map_err(|e| Error::tiff(url, e.into()))?;
    if prefix.object_size > prefix.bytes.len() as u64 {
        return Err(Error::Stac(StacError::NotStac {
            doc: url.to_string(),
            reason: format!(
                "{} bytes (documents are read whole, at most {MAX_DOCUMENT_BYTES}; use stac-geoparquet)",
                prefix.object_size
            ),
        }));
    }
    Ok(parse_document(url, &prefix.bytes, rewrite)?)
}

/// Opens the COG at `href` (header read) as a cache object.
pub async fn open_object(href: &str, store: &StoreOptions, options: OpenOptions) -> Result<TileObject> {
    let reader: Arc<dyn RangeReader> = open_url(href, store)?;
    let cog = Cog::open(reader, options).await.map_err(|e| Error::tiff(href, e))?;
    Ok(TileObject::new(href, cog))
}
