//! `cogfeed warp`: one footprint from STAC Items, the debugging view of a map-space sample
//! and the interface the warp conformance corpus drives.

use crate::error::{Error, Result};
use crate::storage::StoreOptions;
use crate::tiles::TileCache;
use cogfeed_geo::warp::Resampling;
use cogfeed_geo::{Crs, Footprint};
use cogfeed_stac::{HrefRewrite, Item};
use cogfeed_tiff::{DType, OpenOptions};

use super::{AssetSource, SourceRead};

/// What `cogfeed warp` was asked for.
#[derive(Debug, Clone)]
pub struct WarpRequest {
    pub items: String,
    pub ids: Vec<String>,
    pub assets: Vec<String>,
    pub crs: String,
    pub bounds: [f64; 4],
    pub resolution: f64,
    pub resampling: String,
    pub nodata: f64,
}

/// The warped footprint: `(bands, height, width)` samples of `dtype`, little-endian.
#[derive(Debug, Clone)]
pub struct WarpOutput {
    pub dtype: DType,
    pub shape: [usize; 3],
    pub data: Vec<u8>,
    /// Per asset, what each source read.
    pub reads: Vec<(String, Vec<SourceRead>)>,
}

/// Largest f64 working copy of the output (pixels × assets × 8 bytes; multi-band assets
/// are checked again by the sources).
const MAX_OUTPUT_WORKING_BYTES: u64 = 2 << 30;

/// Cache for one command: enough for a few thousand 512² uint16 tiles.
const COMMAND_CACHE_BYTES: u64 = 1 << 30;

/// Whether `nodata` is a value of `dtype`.
pub fn fits(dtype: DType, nodata: f64) -> bool {
    let int = |lo: f64, hi: f64| nodata.fract() == 0.0 && nodata >= lo && nodata <= hi;
    match dtype {
        DType::U8 => int(0.0, 255.0),
        DType::I8 => int(-128.0, 127.0),
        DType::U16 => int(0.0, 65535.0),
        DType::I16 => int(-32768.0, 32767.0),
        DType::U32 => int(0.0, u32::MAX as f64),
        DType::I32 => int(i32::MIN as f64, i32::MAX as f64),
        DType::U64 | DType::I64 => nodata.fract() == 0.0,
        DType::F32 => nodata.is_nan() || nodata.abs() <= f32::MAX as f64,
        _ => true,
    }
}

/// Items one warp may mosaic (each opens its assets and warps onto the footprint).
const MAX_IDS: usize = 1024;

/// Runs one warp.
pub async fn warp(req: &WarpRequest, store: &StoreOptions) -> Result<WarpOutput> {
    if req.ids.is_empty() {
        return Err(Error::InvalidArgument("--ids is empty".into()));
    }
    if req.ids.len() > MAX_IDS {
        return Err(Error::InvalidArgument(format!(
            "--ids lists {} items (at most {MAX_IDS})",
            req.ids.len()
        )));
    }
    let mut seen = std::collections::HashSet::with_capacity(req.ids.len());
    if let Some(twice) = req.ids.iter().find(|id| !seen.insert(id.as_str())) {
        return Err(Error::InvalidArgument(format!(
            "--ids names item {twice:?} twice (each item is mosaicked once, in the order given)"
        )));
    }
    if req.assets.is_empty() {
        return Err(Error::InvalidArgument("--assets is empty".into()));
    }
    let resampling = Resampling::parse(&req.resampling).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "resampling {:?}: expected one of nearest, bilinear, cubic, average, mode",
            req.resampling
        ))
    })?;
    let crs = Crs::parse(&req.crs)?;
    let footprint = Footprint::new(crs, req.bounds, req.resolution)?;
    let pixels = footprint.width().saturating_mul(footprint.height());
    if pixels.saturating_mul(req.assets.len() as u64).saturating_mul(8) > MAX_OUTPUT_WORKING_BYTES {
        return Err(Error::LimitExceeded(format!(
            "{}x{} pixels x {} assets is over the {} MiB a warp may work on",
            footprint.width(),
            footprint.height(),
            req.assets.len(),
            MAX_OUTPUT_WORKING_BYTES >> 20
        )));
    }
    let all = crate::dataset::map::load_items(&req.items, &HrefRewrite::default(), store).await?;
    let chosen: Vec<&Item> = req
        .ids
        .iter()
        .map(|id| {
            all.iter()
                .find(|it| &it.id == id)
                .ok_or_else(|| Error::NotFound(format!("no item {id:?} in {}", req.items)))
        })
        .collect::<Result<_>>()?;
    // Every asset must be on some item before anything is read; items without it are
    // left out of that asset's mosaic (a label asset lives on other items than bands).
    for key in &req.assets {
        if !chosen.iter().any(|it| it.assets.contains_key(key)) {
            chosen[0].asset(key)?;
        }
    }
    let cache = TileCache::new(COMMAND_CACHE_BYTES);
    let mut per_asset = Vec::with_capacity(req.assets.len());
    for key in &req.assets {
        let holders = chosen.iter().filter(|it| it.assets.contains_key(key));
        let opened = futures::future::try_join_all(holders.map(|it| async move {
            let asset = it.asset(key)?;
            let object = crate::tiles::open_object(&asset.href, store, OpenOptions::default()).await?;
            AssetSource::new(&it.id, asset, object)
        }))
        .await?;
        per_asset.push((key.clone(), opened));
    }
    let dtype = per_asset[0].1[0].dtype;
    for (key, sources) in &per_asset {
        if let Some(s) = sources.iter().find(|s| s.dtype != dtype) {
            return Err(Error::InvalidArgument(format!(
                "item {}, asset {key} holds {} where item {}, asset {} holds {}: mixed data types are refused (cast on the client)",
                s.item,
                s.dtype.name(),
                per_asset[0].1[0].item,
                per_asset[0].0,
                dtype.name()
            )));
        }
    }
    if !fits(dtype, req.nodata) {
        return Err(Error::InvalidArgument(format!(
            "nodata {} does not fit the assets' data type {}",
            req.nodata,
            dtype.name()
        )));
    }
    let (w, h) = (footprint.width() as usize, footprint.height() as usize);
    let mut data = Vec::new();
    let mut bands = 0;
    let mut reads = Vec::new();
    let mut touched = false;
    for (key, sources) in &per_asset {
        let (m, r) = super::mosaic(&cache, sources, sources[0].bands, &footprint, resampling).await?;
        touched |= r.iter().any(|x| x.window.is_some());
        bands += m.bands;
        data.extend_from_slice(&m.to_bytes(dtype, req.nodata, resampling != Resampling::Nearest));
        reads.push((key.clone(), r));
    }
    if !touched {
        return Err(Error::InvalidArgument(format!(
            "footprint {:?} in {} lies outside every item ({})",
            req.bounds,
            req.crs,
            req.ids.join(", ")
        )));
    }
    Ok(WarpOutput {
        dtype,
        shape: [bands, h, w],
        data,
        reads,
    })
}
