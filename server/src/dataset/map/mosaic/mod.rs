//! Map-space assembly: one footprint, one asset, the Items that may cover it (priority
//! order) → a mosaic on the footprint's grid.
//!
//! Plans in map space and reads in file space (docs/src/design/map-space.md): per Item, the overview level
//! GDAL's warper would pick and the source window (plus the kernel's margin) come from
//! [`cogfeed_geo::warp::plan`]; that window's tiles come through the [`TileSource`] (the shared
//! cache: the key stays the source tile); the warp runs on the CPU pool.

pub mod command;
pub mod source;

use crate::error::{Error, Result};
use crate::sampler::WindowSpec;
use crate::tiles::TileSource;
use crate::tiles::region;
use cogfeed_geo::warp::kernel::Source;
use cogfeed_geo::warp::plan::{self, PixelMapper};
use cogfeed_geo::warp::{
    MappedPoints, Mosaic, NodataTest, Resampling, Warped, exact, samples_to_f64, validity, warp_mapped,
};
use cogfeed_geo::{Crs, Footprint, Transformer};
use cogfeed_tiff::{DType, on_cpu_pool};
use futures::StreamExt;
use source::GridKey;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

pub use source::AssetSource;

/// Largest source window one warp decodes, in bytes of its f64 working copy: a footprint
/// far coarser than a file without overviews would otherwise read the whole file.
pub const MAX_SOURCE_WINDOW_BYTES: u64 = 1 << 30;

/// Footprints (and source windows) up to this many pixels are warped on the calling task:
/// at most a few hundred µs of work, below what trips to the CPU pool cost in the whole.
const INLINE_PIXELS: u64 = 128 * 128;

/// What one source read for a footprint: which level, which window.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceRead {
    pub item: String,
    pub level: usize,
    pub window: Option<plan::SourceWindow>,
}

/// Where a source grid (CRS, transform, size and overview sizes) meets a footprint: the
/// level GDAL would read, its grid, the source window (None: the footprint misses it) and,
/// once a warp needs them, the footprint's points mapped into that level. Every asset and
/// date on one grid shares one plan ([`GridPlans`]).
#[derive(Debug)]
pub struct GridPlan {
    pub level: usize,
    pub grid: plan::LevelGrid,
    pub window: Option<plan::SourceWindow>,
    points: OnceLock<MappedPoints>,
}

impl GridPlan {
    /// The footprint's points `resampling` samples, mapped into this plan's level of a
    /// source in `crs`: computed by the first warp that needs them, shared by the rest.
    fn points(&self, footprint: &Footprint, crs: &Crs, resampling: Resampling) -> &MappedPoints {
        self.points.get_or_init(|| {
            let transformer = Transformer::new(&footprint.crs, crs);
            let mapper = PixelMapper {
                footprint,
                transformer: &transformer,
                level: self.grid,
            };
            MappedPoints::new(&mapper, resampling)
        })
    }
}

/// Where a source meets a footprint: its grid's plan and what is the source's own.
#[derive(Debug, Clone)]
pub struct Planned<'a> {
    pub source: &'a AssetSource,
    pub plan: Arc<GridPlan>,
    /// Added to the source's valid pixels after the warp (Sentinel-2 harmonisation:
    /// `harmonize::apply`); 0 by default.
    pub shift: i32,
}

impl Planned<'_> {
    /// The source window (None: the footprint misses the source).
    pub fn window(&self) -> Option<plan::SourceWindow> {
        self.plan.window
    }
}

/// Grid plans of one footprint and kernel, by source grid: the 16 dates and four 10 m
/// bands of a Sentinel-2 tile plan (and map the footprint's points) once, not 64 times.
#[derive(Debug)]
pub struct GridPlans {
    footprint: Footprint,
    resampling: Resampling,
    by_grid: Mutex<HashMap<GridKey, Arc<GridPlan>>>,
}

impl GridPlans {
    /// No plans yet for `footprint` and `resampling`.
    pub fn new(footprint: &Footprint, resampling: Resampling) -> Self {
        Self {
            footprint: footprint.clone(),
            resampling,
            by_grid: Mutex::new(HashMap::new()),
        }
    }

    /// `src` planned for the footprint: its grid's plan, made on the first source of that grid.
    pub fn plan<'a>(&self, src: &'a AssetSource) -> Result<Planned<'a>> {
        let key = src.grid_key();
        let known = self.by_grid.lock().ok().and_then(|m| m.get(key).cloned());
        let plan = match known {
            Some(p) => p,
            None => {
                let p = Arc::new(grid_plan(src, &self.footprint, self.resampling)?);
                if let Ok(mut m) = self.by_grid.lock() {
                    m.entry(key.clone()).or_insert_with(|| p.clone());
                }
                p
            }
        };
        Ok(Planned {
            source: src,
            plan,
            shift: 0,
        })
    }
}

/// Plans `src` for `footprint` on its own (no plan shared).
pub fn plan_source<'a>(src: &'a AssetSource, footprint: &Footprint, resampling: Resampling) -> Result<Planned<'a>> {
    Ok(Planned {
        source: src,
        plan: Arc::new(grid_plan(src, footprint, resampling)?),
        shift: 0,
    })
}

/// The plan of `src`'s grid for `footprint`.
fn grid_plan(src: &AssetSource, footprint: &Footprint, resampling: Resampling) -> Result<GridPlan> {
    let transformer = Transformer::new(&footprint.crs, &src.crs);
    let full = src
        .level_grid(0)
        .ok_or_else(|| Error::InvalidArgument(format!("item {}, asset {}: no image", src.item, src.asset)))?;
    let level = plan::target_ratio(footprint, &transformer, full)
        .map(|t| plan::choose_level(t, &src.overview_factors()))
        .unwrap_or(0);
    let grid = src
        .level_grid(level)
        .ok_or_else(|| Error::InvalidArgument(format!("item {}, asset {}: no level {level}", src.item, src.asset)))?;
    let mapper = PixelMapper {
        footprint,
        transformer: &transformer,
        level: grid,
    };
    Ok(GridPlan {
        level,
        grid,
        window: plan::source_window(&mapper, resampling),
        points: OnceLock::new(),
    })
}

/// The window of its level a planned source reads (None: the footprint misses it).
pub fn read_spec(planned: &Planned<'_>) -> Result<Option<WindowSpec>> {
    let Some(window) = planned.plan.window else {
        return Ok(None);
    };
    Ok(Some(WindowSpec {
        scene: 0,
        col: window.col,
        row: window.row,
        width: u32::try_from(window.width).map_err(|_| Error::InvalidArgument("source window too wide".into()))?,
        height: u32::try_from(window.height).map_err(|_| Error::InvalidArgument("source window too tall".into()))?,
        level: planned.plan.level as u32,
        padded: false,
    }))
}

/// The tiles of a planned source's window, fetched; None when the footprint misses it.
async fn fetch(
    tiles: &dyn TileSource,
    planned: &Planned<'_>,
    footprint: &Footprint,
) -> Result<Option<(plan::SourceWindow, region::RegionTiles)>> {
    let (src, level) = (planned.source, planned.plan.level);
    let Some(window) = planned.plan.window else {
        return Ok(None);
    };
    let working = window
        .width
        .saturating_mul(window.height)
        .saturating_mul(src.bands as u64)
        .saturating_mul(8);
    if working > MAX_SOURCE_WINDOW_BYTES {
        return Err(Error::LimitExceeded(format!(
            "item {}, asset {}: the footprint needs a {}x{} source window at level {level} ({} MiB to warp, at most {}): the file has no overview near {} CRS units",
            src.item,
            src.asset,
            window.width,
            window.height,
            working >> 20,
            MAX_SOURCE_WINDOW_BYTES >> 20,
            footprint.resolution
        )));
    }
    let spec = read_spec(planned)?.ok_or_else(|| Error::InvalidArgument("no source window".into()))?;
    let bands: Vec<usize> = (0..src.bands).collect();
    let region = region::fetch_region(tiles, &src.object, spec, &bands, 0.0)
        .await
        .map_err(|e| Error::tiff(src.object.url.as_ref(), e))?;
    Ok(Some((window, region)))
}

/// Whether warping `window` onto `footprint` is small enough to run on the calling task.
fn is_small(footprint: &Footprint, window: &plan::SourceWindow) -> bool {
    (footprint.width() * footprint.height()).max(window.width * window.height) <= INLINE_PIXELS
}

/// The general warp of a stitched window of `src`: decoded to f64, its validity, the
/// kernel over the plan's points, harmonisation's shift.
fn warp_raster(
    raster: &cogfeed_tiff::Raster,
    src: &AssetSource,
    plan: &GridPlan,
    footprint: &Footprint,
    window: &plan::SourceWindow,
    resampling: Resampling,
    shift: i32,
) -> Warped {
    let values = samples_to_f64(raster.dtype, &raster.data);
    let tests: Vec<NodataTest> = src.nodata.iter().map(|&nd| NodataTest::new(raster.dtype, nd)).collect();
    let valid = validity(&values, raster.width * raster.height, &tests);
    let source = Source {
        width: raster.width,
        height: raster.height,
        bands: src.bands,
        values: &values,
        valid: &valid,
    };
    let mapped = plan.points(footprint, &src.crs, resampling);
    let mut warped = warp_mapped(mapped, window, &source, resampling);
    crate::dataset::map::harmonize::apply(&mut warped.values, &warped.valid, &src.nodata, shift);
    warped
}

/// Warps a fetched window of `planned` onto the footprint: inline when the work is small (a
/// hand-off to the CPU pool and back costs more than warping a few thousand pixels), else
/// one trip to the pool.
async fn warp_fetched(
    planned: &Planned<'_>,
    footprint: &Footprint,
    resampling: Resampling,
    (window, region): (plan::SourceWindow, region::RegionTiles),
) -> Result<Warped> {
    let (footprint, src, plan, shift) = (
        footprint.clone(),
        planned.source.clone(),
        planned.plan.clone(),
        planned.shift,
    );
    let small = is_small(&footprint, &window);
    let work = move || warp_raster(&region.assemble(), &src, &plan, &footprint, &window, resampling, shift);
    if small {
        return Ok(work());
    }
    on_cpu_pool(work)
        .await
        .map_err(|e| Error::tiff(planned.source.item.clone(), e))
}

/// Warps one planned source onto the footprint; None when the footprint misses it.
async fn warp_one(
    tiles: &dyn TileSource,
    planned: &Planned<'_>,
    footprint: &Footprint,
    resampling: Resampling,
) -> Result<Option<Warped>> {
    let Some(fetched) = fetch(tiles, planned, footprint).await? else {
        return Ok(None);
    };
    Ok(Some(warp_fetched(planned, footprint, resampling, fetched).await?))
}

/// One planned source, the only one of its mosaic, warped onto `footprint` and written into
/// `out` as samples of `dtype` (nodata `nodata` where it gives nothing): the bytes
/// [`mosaic_planned`] of it and [`Mosaic::to_bytes_into`] give. A small bilinear or cubic
/// window of 8- or 16-bit samples in the output's type goes through the integer kernel where
/// it applies ([`exact`]: no f64 copies, no mosaic, no conversion pass); every other one
/// through the general warp of the same stitched window. False where `out` does not hold
/// exactly the layer's part.
pub async fn single_into(
    tiles: &dyn TileSource,
    planned: &Planned<'_>,
    footprint: &Footprint,
    resampling: Resampling,
    (dtype, nodata): (DType, f64),
    out: &mut [u8],
) -> Result<bool> {
    let src = planned.source;
    let mut m = Mosaic::new(src.bands, footprint.width() as usize, footprint.height() as usize);
    let avoid = resampling != Resampling::Nearest;
    let Some((window, region)) = fetch(tiles, planned, footprint).await? else {
        return Ok(m.to_bytes_into(dtype, nodata, avoid, out));
    };
    let warped = if is_small(footprint, &window) {
        let raster = region.assemble();
        let kernel = match resampling {
            Resampling::Bilinear => Some(exact::bilinear_into as exact::Kernel),
            Resampling::Cubic => Some(exact::cubic_into as exact::Kernel),
            _ => None,
        };
        if let Some(kernel) = kernel
            && planned.shift == 0
            && src.bands == 1
            && raster.dtype == dtype
        {
            let typed = exact::TypedWindow {
                dtype,
                width: raster.width,
                height: raster.height,
                bytes: &raster.data,
            };
            let mapped = planned.plan.points(footprint, &src.crs, resampling);
            let src_nodata = src.nodata.first().copied().flatten();
            if kernel(mapped, &window, &typed, src_nodata, nodata, out) {
                return Ok(true);
            }
        }
        warp_raster(
            &raster,
            src,
            &planned.plan,
            footprint,
            &window,
            resampling,
            planned.shift,
        )
    } else {
        warp_fetched(planned, footprint, resampling, (window, region)).await?
    };
    m.add_owned(warped);
    Ok(m.to_bytes_into(dtype, nodata, avoid, out))
}

/// Warps `sources` (one asset of several Items, priority order) onto `footprint`: the
/// first source with a valid pixel wins it. Also says what each source read.
pub async fn mosaic(
    tiles: &dyn TileSource,
    sources: &[AssetSource],
    bands: usize,
    footprint: &Footprint,
    resampling: Resampling,
) -> Result<(Mosaic, Vec<SourceRead>)> {
    let planned = sources
        .iter()
        .map(|s| plan_source(s, footprint, resampling))
        .collect::<Result<Vec<_>>>()?;
    let reads = planned
        .iter()
        .map(|p| SourceRead {
            item: p.source.item.clone(),
            level: p.plan.level,
            window: p.plan.window,
        })
        .collect();
    Ok((
        mosaic_planned(tiles, &planned, bands, footprint, resampling).await?,
        reads,
    ))
}

/// [`mosaic`] of sources already planned for `footprint`. Sources are read concurrently;
/// each must have `bands` bands (with no source, the mosaic is `bands` bands of nothing).
pub async fn mosaic_planned(
    tiles: &dyn TileSource,
    planned: &[Planned<'_>],
    bands: usize,
    footprint: &Footprint,
    resampling: Resampling,
) -> Result<Mosaic> {
    if let Some(s) = planned.iter().map(|p| p.source).find(|s| s.bands != bands) {
        return Err(Error::InvalidArgument(format!(
            "item {}, asset {}: {} bands where the layer expects {bands}",
            s.item, s.asset, s.bands
        )));
    }
    // In priority order, a few at a time, each added and dropped as it comes: the working
    // set is bounded by MOSAIC_IN_FLIGHT warps whatever the number of overlapping Items,
    // and once every pixel is filled the rest are never read (dropping the stream cancels
    // warps in flight; the CPU pool skips those not started).
    let mut m = Mosaic::new(bands, footprint.width() as usize, footprint.height() as usize);
    if planned.is_empty() {
        return Ok(m);
    }
    let mut next = planned.iter();
    let mut warps = futures::stream::FuturesOrdered::new();
    loop {
        while warps.len() < MOSAIC_IN_FLIGHT {
            let Some(p) = next.next() else { break };
            warps.push_back(warp_one(tiles, p, footprint, resampling));
        }
        let Some(w) = warps.next().await else { break };
        if let Some(w) = w? {
            m.add_owned(w);
        }
        if m.is_full() {
            break;
        }
    }
    Ok(m)
}

/// Sources of one mosaic warped at once: what a load holds beside the mosaic itself.
pub const MOSAIC_IN_FLIGHT: usize = 2;
