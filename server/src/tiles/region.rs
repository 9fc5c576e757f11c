//! Patches: the tiles a window needs (through the shared cache), stitched into a band-major
//! array, padded with the fill value where the window leaves the scene. The one window
//! loader of the daemon: streams and `ReadWindow` both read through it. Decides which
//! blocks a window reads only at their top (a row-limited decode), for reads and plans alike.

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

/// The blocks of one window: what [`fetch_region`] fetches, and what a stream's plan says
/// it will read.
pub struct WindowBlocks {
    pub level: Level,
    pub request: WindowRequest,
    pub blocks: Vec<usize>,
    /// For each block, the rows from its top a row-limited decode reads ([`top_rows`]).
    pub top_rows: Vec<u32>,
}

/// The fewest rows a row-limited decode reads (a block's top sixteenth when that is more).
pub const TOP_ROWS_MIN: u64 = 64;

/// How many rows from the top of block `block` a window needs decoded, when that is few
/// enough for a row-limited decode to pay; 0: decode the whole block.
///
/// A window that ends within the block's top sixteenth (at least [`TOP_ROWS_MIN`] rows)
/// reads that many rows, the same count for every such window so they share one decoded
/// entry: the footprints that spill a few rows over a tile's upper edge (a 32-row footprint
/// near the bottom of the tile above) decode ~6 % of the tile below instead of all of it.
/// Blocks of fewer than 16 such units (below 1024 rows: cheap to decode whole, and more
/// likely to be read whole soon after), and codecs that cannot stop early
/// ([`cogfeed_tiff::decode::decodes_rows`]), decode whole.
pub fn top_rows(level: &Level, request: &WindowRequest, block: usize) -> u32 {
    let rows = level.block_rows(block);
    let unit = (rows / 16).max(TOP_ROWS_MIN);
    if unit * 16 > rows || !cogfeed_tiff::decode::decodes_rows(level) {
        return 0;
    }
    let within = block as u64 % level.blocks_per_plane().max(1);
    let top = within / level.blocks_across().max(1) * level.block_height;
    let end = (request.row + request.height).saturating_sub(top);
    if end == 0 || end > unit {
        return 0;
    }
    u32::try_from(unit).unwrap_or(0)
}

/// The level, request and blocks of `window` (clipped to the scene) for `bands` of
/// `object`: what [`fetch_region`] fetches, and what a stream's plan says it will read.
pub fn region_blocks(object: &TileObject, window: WindowSpec, bands: &[usize]) -> TiffResult<WindowBlocks> {
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
    let top_rows = blocks.iter().map(|&b| top_rows(&level, &request, b)).collect();
    Ok(WindowBlocks {
        level,
        request,
        blocks,
        top_rows,
    })
}

/// Fetches the tiles of `window` (clipped to the scene) for `bands` of `object`.
pub async fn fetch_region(
    cache: &dyn TileSource,
    object: &TileObject,
    window: WindowSpec,
    bands: &[usize],
    fill: f64,
) -> TiffResult<RegionTiles> {
    let WindowBlocks {
        level,
        request,
        blocks,
        top_rows,
    } = region_blocks(object, window, bands)?;
    let at = window.level as usize;
    let tiles = futures::future::try_join_all(
        blocks
            .iter()
            .zip(&top_rows)
            .map(|(&b, &rows)| cache.tile_rows(object, at, b, rows)),
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
