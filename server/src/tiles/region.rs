//! Patches: the tiles a window needs (through the shared cache), stitched into a band-major
//! array, padded with the fill value where the window leaves the scene. The one window
//! loader of the daemon: streams and `ReadWindow` both read through it.

use crate::sampler::WindowSpec;
use crate::tiles::{Tile, TileObject, TileSource};
use cogfeed_tiff::{Level, Raster, TiffResult, WindowRequest, dtype, on_cpu_pool, window};

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

/// The level, request and blocks of `window` (clipped to the scene) for `bands` of
/// `object`: what [`fetch_region`] fetches, and what a stream's plan says it will read.
pub fn region_blocks(
    object: &TileObject,
    window: WindowSpec,
    bands: &[usize],
) -> TiffResult<(Level, WindowRequest, Vec<usize>)> {
    let level = object.cog.level(window.level as usize)?.clone();
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
    // The reader's own size limit holds here too (the service admitted the request's
    // memory already; this is the backstop against a window it did not foresee).
    window::validate(&level, &request, object.cog.max_window_bytes())?;
    let blocks = window::blocks_for(&level, &request, bands);
    Ok((level, request, blocks))
}

/// Fetches the tiles of `window` (clipped to the scene) for `bands` of `object`.
pub async fn fetch_region(
    cache: &dyn TileSource,
    object: &TileObject,
    window: WindowSpec,
    bands: &[usize],
    fill: f64,
) -> TiffResult<RegionTiles> {
    let (level, request, blocks) = region_blocks(object, window, bands)?;
    let tiles =
        futures::future::try_join_all(blocks.iter().map(|&b| cache.tile(object, window.level as usize, b))).await?;
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

/// Reads `window` of `object` for `bands`: the tiles through the cache, stitched and
/// padded on the CPU pool.
pub async fn read(
    cache: &dyn TileSource,
    object: &TileObject,
    window: WindowSpec,
    bands: &[usize],
    fill: f64,
) -> TiffResult<Raster> {
    let region = fetch_region(cache, object, window, bands, fill).await?;
    on_cpu_pool(move || region.assemble()).await
}

impl RegionTiles {
    /// Stitches the tiles straight into `out`, a zeroed buffer of exactly the window's
    /// `bands x height x width` samples (a sample's slice of its batch's buffer, so the
    /// batch needs no copy). False, and `out` untouched, when the image's edge clips the
    /// window (padding is [`RegionTiles::assemble`]'s) or `out` has another size.
    pub fn assemble_into(&self, out: &mut [u8]) -> bool {
        let es = self.level.dtype.size();
        let (w, h) = (self.window.width as usize, self.window.height as usize);
        if self.request.width as usize != w
            || self.request.height as usize != h
            || out.len() != self.bands.len() * w * h * es
        {
            return false;
        }
        for (b, tile) in self.blocks.iter().zip(&self.tiles) {
            let planes = window::Planes {
                width: w,
                height: h,
                data: &mut *out,
            };
            window::paste_into(&self.level, *b, tile, &self.request, &self.bands, planes);
        }
        true
    }

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
