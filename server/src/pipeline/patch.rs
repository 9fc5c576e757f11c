//! Patches: the tiles a window needs (through the shared cache), stitched into a band-major
//! array, padded with the fill value where the window leaves the scene.

use std::sync::Arc;

use crate::cache::{Tile, TileCache};
use crate::cog::{Cog, Level, Raster, TiffResult, WindowRequest, dtype, window};
use crate::sampler::WindowSpec;

/// Tiles of one object needed for one window, fetched (or found) in the cache.
pub struct RegionTiles {
    pub level: Level,
    pub request: WindowRequest,
    pub bands: Vec<usize>,
    pub blocks: Vec<usize>,
    pub tiles: Vec<Tile>,
    pub window: WindowSpec,
    pub fill: f64,
}

/// Fetches the tiles of `window` (clipped to the scene) for `bands` of `cog`.
pub async fn fetch_region(
    cache: &TileCache,
    cog: &Cog,
    object: &Arc<str>,
    version: &Arc<str>,
    window: WindowSpec,
    bands: &[usize],
    fill: f64,
) -> TiffResult<RegionTiles> {
    let level = cog.level(window.level as usize)?.clone();
    let width = (window.width as u64).min(level.width.saturating_sub(window.col));
    let height = (window.height as u64).min(level.height.saturating_sub(window.row));
    let request = WindowRequest {
        level: window.level as usize,
        col: window.col,
        row: window.row,
        width,
        height,
        bands: Some(bands.to_vec()),
    };
    window::validate(&level, &request, u64::MAX)?;
    let blocks = window::blocks_for(&level, &request, bands);
    let tiles = futures::future::try_join_all(
        blocks
            .iter()
            .map(|&b| cache.get(cog, version, object, window.level as usize, b)),
    )
    .await?;
    Ok(RegionTiles {
        level,
        request,
        bands: bands.to_vec(),
        blocks,
        tiles,
        window,
        fill,
    })
}

impl RegionTiles {
    /// Stitches the tiles into a `bands x height x width` raster of the full window.
    pub fn assemble(&self) -> Raster {
        let dt = self.level.dtype;
        let es = dt.size();
        let (w, h) = (self.window.width as usize, self.window.height as usize);
        let clipped = self.request.width as usize != w || self.request.height as usize != h;
        let mut inner = Raster {
            dtype: dt,
            bands: self.bands.len(),
            height: self.request.height as usize,
            width: self.request.width as usize,
            data: vec![0u8; self.bands.len() * self.request.height as usize * self.request.width as usize * es],
        };
        for (b, tile) in self.blocks.iter().zip(&self.tiles) {
            window::paste(&self.level, *b, tile, &self.request, &self.bands, &mut inner);
        }
        if !clipped {
            return inner;
        }
        let one = dtype::fill_bytes(dt, self.fill);
        let mut data = one.repeat(self.bands.len() * w * h);
        let (iw, ih) = (inner.width, inner.height);
        for b in 0..self.bands.len() {
            for y in 0..ih {
                let s = (b * ih + y) * iw * es;
                let d = (b * h + y) * w * es;
                data[d..d + iw * es].copy_from_slice(&inner.data[s..s + iw * es]);
            }
        }
        Raster {
            dtype: dt,
            bands: self.bands.len(),
            height: h,
            width: w,
            data,
        }
    }
}
