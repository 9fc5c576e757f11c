//! Map-space geometry: coordinate reference systems, affine pixel grids, footprints, and
//! the warp (resampling kernels, source-window plans, mosaics) from source grids onto them.
//!
//! The one seam for geometry (DESIGN §8): CRS parsing and point transformation
//! ([`crs`]), affine transforms between pixel and map coordinates ([`affine`]), and the
//! output grid of a sample ([`footprint`]). Pure: nothing here reads a file or a store.

#![deny(missing_docs)]

pub mod affine;
pub mod crs;
pub mod footprint;
pub mod warp;

pub use affine::Affine;
pub use crs::{Crs, Transformer};
pub use footprint::Footprint;

/// A geometry that cannot be built or used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GridError {
    /// A CRS string or code that names no CRS cogfeed knows.
    #[error("{0:?} is not a CRS (expected EPSG:<code> of a known CRS)")]
    UnknownCrs(String),
    /// An affine transform that cannot be inverted or has non-finite terms.
    #[error("degenerate transform {0}")]
    Degenerate(String),
    /// Footprint bounds or resolution that make no grid.
    #[error("invalid footprint: {0}")]
    InvalidFootprint(String),
}
