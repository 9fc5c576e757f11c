//! One asset of one Item, opened: its COG, full-resolution grid, CRS, per-band nodata,
//! sample type and overview levels, with the STAC projection fields checked against the
//! file's own header.

use crate::error::{Error, Result};
use crate::tiles::TileObject;
use cogfeed_geo::warp::plan::LevelGrid;
use cogfeed_geo::{Affine, Crs};
use cogfeed_stac::{Asset, StacError};
use cogfeed_tiff::DType;

/// Relative tolerance between STAC's `proj:transform` and the file's geotransform.
const TRANSFORM_TOLERANCE: f64 = 1e-6;

/// The identity of a source grid: two sources with equal keys map every footprint alike.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GridKey {
    crs: u32,
    transform: [u64; 6],
    levels: Vec<(u64, u64)>,
}

/// An asset ready to be warped.
#[derive(Debug, Clone)]
pub struct AssetSource {
    pub item: String,
    pub asset: String,
    pub object: TileObject,
    pub crs: Crs,
    /// Full-resolution pixel → map transform.
    pub transform: Affine,
    pub width: u64,
    pub height: u64,
    pub bands: usize,
    pub dtype: DType,
    /// Source nodata per band (None: every value is data).
    pub nodata: Vec<Option<f64>>,
    /// [`Self::grid_key`], computed once.
    grid: GridKey,
}

impl AssetSource {
    /// Checks `asset` of `item` against the opened `object` and builds the source.
    pub fn new(item: &str, asset: &Asset, object: TileObject) -> Result<Self> {
        let bad = |reason: String| {
            Error::Stac(StacError::BadAsset {
                item: item.to_string(),
                asset: asset.key.clone(),
                reason,
            })
        };
        let header = object.cog.header().clone();
        let full = header
            .levels
            .first()
            .ok_or_else(|| bad("the file has no image".into()))?;
        let (width, height) = (full.width, full.height);
        if let Some((rows, cols)) = asset.shape
            && (rows, cols) != (height, width)
        {
            return Err(bad(format!(
                "proj:shape [{rows}, {cols}] but the file is {height} rows by {width} columns"
            )));
        }
        let file_transform = header
            .geo
            .geotransform
            .map(Affine::from_gdal)
            .transpose()
            .ok()
            .flatten();
        let transform = match (asset.transform, file_transform) {
            (Some(s), Some(f)) => {
                let (px, _) = s.pixel_size();
                let tol = TRANSFORM_TOLERANCE * px.max(1e-12);
                let (sv, fv) = (s.to_stac(), f.to_stac());
                let off = [sv[2] - fv[2], sv[5] - fv[5]];
                let lin = [sv[0] - fv[0], sv[1] - fv[1], sv[3] - fv[3], sv[4] - fv[4]];
                if off
                    .iter()
                    .any(|d| d.abs() > tol.max(1e-9 * sv[2].abs().max(sv[5].abs())))
                    || lin.iter().any(|d| d.abs() > tol)
                {
                    return Err(bad(format!("proj:transform {sv:?} does not match the file's {fv:?}")));
                }
                s
            }
            (Some(s), None) => s,
            (None, Some(f)) => f,
            (None, None) => {
                return Err(bad("no proj:transform and the file has no georeferencing".into()));
            }
        };
        let crs = match (asset.epsg, header.geo.epsg) {
            (Some(s), Some(f)) if s != f => {
                return Err(bad(format!("proj:epsg {s} but the file says EPSG:{f}")));
            }
            (Some(code), _) | (None, Some(code)) => Crs::from_epsg(code).map_err(|e| bad(e.to_string()))?,
            (None, None) => return Err(bad("no proj:epsg/proj:code and the file names no EPSG code".into())),
        };
        let bands = full.bands;
        if !asset.bands.is_empty() && asset.bands.len() != bands {
            return Err(bad(format!(
                "raster:bands lists {} bands, the file has {bands}",
                asset.bands.len()
            )));
        }
        let dtype = full.dtype;
        if let Some(t) = asset.bands.iter().find_map(|b| b.data_type.as_deref())
            && t != dtype.name()
        {
            return Err(bad(format!(
                "raster:bands data_type {t} but the file holds {}",
                dtype.name()
            )));
        }
        let file_nodata = header.geo.nodata_value();
        let nodata = (0..bands)
            .map(|b| asset.bands.get(b).and_then(|i| i.nodata).or(file_nodata))
            .collect();
        let t = transform.to_stac();
        let grid = GridKey {
            crs: crs.code(),
            transform: t.map(f64::to_bits),
            levels: header
                .levels
                .iter()
                .map(|l| (l.width, l.height))
                .chain([(width, height)])
                .collect(),
        };
        Ok(Self {
            item: item.to_string(),
            asset: asset.key.clone(),
            object,
            crs,
            transform,
            width,
            height,
            bands,
            dtype,
            nodata,
            grid,
        })
    }

    /// What makes two sources one grid: CRS, transform, size and every level's size.
    pub fn grid_key(&self) -> &GridKey {
        &self.grid
    }

    /// Level `n`'s grid (0 = full resolution).
    pub fn level_grid(&self, n: usize) -> Option<LevelGrid> {
        let lvl = self.object.cog.header().levels.get(n)?;
        LevelGrid::overview(&self.transform, self.width, self.height, lvl.width, lvl.height)
    }

    /// Decimation factor (x) of each overview level, level 1 first.
    pub fn overview_factors(&self) -> Vec<f64> {
        self.object.cog.header().levels[1..]
            .iter()
            .map(|l| self.width as f64 / l.width.max(1) as f64)
            .collect()
    }
}
