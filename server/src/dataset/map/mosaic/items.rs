//! Reading STAC documents and opening their assets through the store layer.

use crate::error::Result;
use crate::storage::StoreOptions;
use cogfeed_stac::{HrefRewrite, Item};

/// Reads the Items of the document at `url` (a local path or any store URL; JSON, or
/// stac-geoparquet), as the daemon does.
pub async fn load_items(url: &str, rewrite: &HrefRewrite, store: &StoreOptions) -> Result<Vec<Item>> {
    let stores = crate::storage::Stores::new(store.clone());
    crate::dataset::map::read_items(&stores, url, rewrite).await
}
