//! STAC catalogs: Items and their assets as cogfeed understands them.
//!
//! [`item`] turns one STAC Item (JSON) into an [`Item`] with per-asset grids (projection
//! extension), band types and nodata (raster extension); [`document`] reads the documents
//! Items come in (ItemCollection, a single Item, a JSON array, newline-delimited Items),
//! resolves relative hrefs against the document and applies `href_rewrite`; [`geoparquet`]
//! reads stac-geoparquet files, within a bound on what they decode to ([`budget`]). No
//! network and no file access happen here: the caller fetches the bytes.

#![deny(missing_docs)]

pub mod budget;
pub mod describe;
pub mod document;
pub mod filter;
pub mod geoparquet;
pub mod index;
pub mod item;
mod pages;
pub mod points;

pub use budget::DEFAULT_MAX_DECODED_BYTES;
pub use describe::{describe, describe_text};
pub use document::{HrefRewrite, parse_document, parse_document_keeping, resolve_href};
pub use filter::ItemFilter;
pub use geoparquet::{is_parquet, parse_geoparquet, parse_geoparquet_bounded};
pub use index::BboxIndex;
pub use item::{Asset, BandInfo, Item, KeepProperties};

/// A STAC document or Item that cogfeed cannot use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StacError {
    /// Not JSON, or JSON that is not STAC.
    #[error("{doc}: not a STAC document: {reason}")]
    NotStac {
        /// The document, as the caller names it.
        doc: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An Item with a missing or malformed field.
    #[error("{doc}: item {item}: {reason}")]
    BadItem {
        /// The document, as the caller names it.
        doc: String,
        /// The Item's id.
        item: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An asset with a missing or malformed field.
    #[error("item {item}, asset {asset}: {reason}")]
    BadAsset {
        /// The Item's id.
        item: String,
        /// The asset's key.
        asset: String,
        /// What is wrong with it.
        reason: String,
    },
}
