//! STAC datasets in map space: the selected Items, the layers, one reference grid per
//! drawable Item (what the sampler plans over), and the assembly of one sample: a
//! footprint in map space warped from every Item that may cover it, layer by layer.
//!
//! Start-up reads the STAC document(s), filters and orders the Items, and opens the
//! reference asset of every drawable Item (its header checks the STAC projection fields and
//! gives the tile grid aligned sampling needs). Other assets open on first use through the
//! shared header cache. The sampler is the pixel-space one (`sampler::Plan`) run over the
//! reference grids, so determinism, ranks, cursors and resume are unchanged.

use std::sync::Arc;

use chrono::NaiveDate;
use futures::StreamExt;
use sha2::{Digest, Sha256};

use crate::config::DatasetConfig;
use crate::error::{Error, Result};
use crate::sampler::{SceneGrid, WindowSpec};
use crate::storage::{StoreOptions, Stores};
use crate::tiles::open;
use crate::tiles::{HeaderCache, TileSource};
use cogfeed_geo::warp::Resampling;
use cogfeed_geo::{Affine, Crs, Footprint, Transformer};
use cogfeed_stac::points;
use cogfeed_stac::{HrefRewrite, Item, ItemFilter, KeepProperties, StacError, parse_document_keeping};
use cogfeed_tiff::{DType, OpenOptions, RangeReader};
use mosaic::AssetSource;

pub mod balance;
mod build;
pub mod confine;
pub mod footprint;
mod geometry;
pub mod harmonize;
mod items;
mod layer;
pub mod mosaic;
pub mod peer_objects;
pub mod plan_index;
mod planned;
pub mod rules;
pub mod split;
pub mod time;
pub mod valid;

use geometry::*;
use items::*;
pub use items::{load_items, read_items};

/// Largest STAC JSON document read whole.
const MAX_DOCUMENT_BYTES: u64 = 512 << 20;
/// Smallest limit on a JSON document, however small the memory budget.
const MIN_DOCUMENT_BYTES: u64 = 16 << 20;
/// Largest stac-geoparquet file read whole (about ten million Items).
const MAX_PARQUET_BYTES: u64 = 4 << 30;
/// Opened (Item, asset) sources kept for the next sample.
const SOURCE_CACHE_ENTRIES: u64 = 65_536;
/// Item JSON files read at once from a prefix.
const LIST_CONCURRENCY: usize = 32;
/// Data-reading draws per sample before a stream with `min_valid_fraction` fails.
pub const DEFAULT_ATTEMPTS: u32 = 64;
/// Longest a start-up open of one asset may take (retries included) before the object is
/// reported bad: one href that never answers must not hold start-up for minutes.
const OPEN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
/// Pixels across the coarse footprint that estimates a valid fraction from overviews.
const ESTIMATE_SIDE: u64 = 32;

/// One output layer.
#[derive(Debug, Clone)]
pub struct LayerSpec {
    pub name: String,
    pub assets: Vec<String>,
    pub resolution: f64,
    pub resampling: Resampling,
    /// Output sample type.
    pub dtype: DType,
    /// Bands over all assets.
    pub bands: usize,
    /// Bands of each asset, in `assets` order.
    pub asset_bands: Vec<usize>,
    /// Fill where no Item has data.
    pub nodata: f64,
    /// Which Items the layer reads, on top of the dataset's filter.
    pub filter: Option<ItemFilter>,
    /// The layer's time series (None: one mosaic).
    pub time: Option<time::TimeSpec>,
    /// Sentinel-2 harmonisation (`harmonize`; None: values as the Items hold them).
    pub harmonize: Option<harmonize::Harmonize>,
}

impl LayerSpec {
    /// Dates stacked per sample (1 without time).
    pub fn steps(&self) -> usize {
        self.time.as_ref().map_or(1, |t| t.steps)
    }

    fn reads(&self, item: &Item) -> bool {
        self.assets.iter().all(|a| item.assets.contains_key(a)) && self.filter.as_ref().is_none_or(|f| f.accepts(item))
    }
}

/// The reference grid of one drawable Item, in the sample CRS.
#[derive(Debug, Clone)]
pub struct RefGrid {
    pub crs: Crs,
    /// Pixel → map, north-up, at the reference layer's resolution.
    pub transform: Affine,
    pub width: u64,
    pub height: u64,
    pub block: (u64, u64),
}

/// Whom a sample is planned on: the drawn Item (its collection and day choose the same-day
/// mosaic, its day is the time layers' reference) or, for a footprint of its own, none and
/// perhaps a reference day.
#[derive(Debug, Clone, Copy, Default)]
pub struct Drawn {
    /// Index of the drawn Item in `MapSpace::items`.
    pub item: Option<usize>,
    /// The reference day when no Item is drawn.
    pub day: Option<NaiveDate>,
}

/// A sample's place: footprint, scale and whom it is planned on.
#[derive(Debug, Clone)]
pub struct Placed {
    pub crs: Crs,
    pub bounds: [f64; 4],
    /// Every layer's pixel size times this (1: the configured resolutions).
    pub scale: f64,
    pub drawn: Drawn,
    /// The sample's datetime when no Item is drawn (RFC 3339).
    pub datetime: Option<String>,
    pub padded: bool,
}

/// What one sample is, for its metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleMeta {
    /// Items whose data some streamed layer's footprint touches, in mosaic priority order:
    /// `cogfeed warp --ids` with these reproduces every layer.
    pub items: Vec<String>,
    /// The Item whose grid the sample was planned on (its reference asset's grid).
    pub drawn: String,
    pub datetime: Option<String>,
    pub crs: String,
    pub bounds: [f64; 4],
    pub resolution: f64,
    pub padded: bool,
    /// The valid fraction of the reference layer (`valid`), when it was assembled.
    pub valid_fraction: Option<f64>,
    /// The split whose cells hold the footprint (datasets with `[datasets.split]`; None:
    /// it straddles splits).
    pub split: Option<String>,
    /// Time layers: the day of each step, oldest first (None: a missing step).
    pub times: Vec<(String, Vec<Option<String>>)>,
    /// Harmonised layers: what was added to each step's valid pixels (`-1000`, `0`,
    /// `+1000`; one step for a layer without time; 0 for a missing step).
    pub harmonized: Vec<(String, Vec<i32>)>,
    /// The points sampler: the point's index in the dataset's points, its id and its
    /// attributes.
    pub point: Option<usize>,
    pub point_id: Option<String>,
    pub targets: Vec<(String, f64)>,
    /// Mixtures: the dataset the sample came from.
    pub dataset: Option<String>,
}

/// A STAC dataset.
#[derive(Debug)]
pub struct MapSpace {
    pub layers: Vec<LayerSpec>,
    /// Selected Items in priority order.
    pub items: Vec<Item>,
    /// EPSG:4326 bbox per Item.
    bboxes: Vec<[f64; 4]>,
    /// The bboxes by 1° cell.
    index: cogfeed_stac::BboxIndex,
    /// The asset hrefs a peer may ask for (a fleet's shared tiles).
    peer_objects: peer_objects::PeerObjects,
    /// Opened and checked assets by (Item, asset key's index in `asset_keys`): shared, so a
    /// sample's ~180 look-ups clone a pointer, not a source.
    sources: moka::future::Cache<(u32, u16), Arc<AssetSource>>,
    /// Every asset key the layers read, numbered (the `sources` cache's key, found without
    /// an allocation).
    asset_keys: std::collections::HashMap<Box<str>, u16>,
    /// Scene index (plan) → Item index.
    pub drawn: Vec<usize>,
    /// Scene index → reference grid.
    pub grids: Vec<RefGrid>,
    /// Scene index → an id shared by the scenes on one reference grid (the dates of one
    /// tile), computed once: a locality order groups their samples together.
    grid_ids: Arc<Vec<u32>>,
    /// Same-day mosaics (within a collection) or every Item.
    mosaic_all: bool,
    /// The dataset's fixed sample CRS (None: native).
    fixed: Option<Crs>,
    stores: Arc<Stores>,
    headers: HeaderCache,
    options: OpenOptions,
    /// `[datasets.sampling]` (None: no valid fraction is computed unless asked).
    pub valid: Option<valid::ValidRule>,
    /// `[datasets.split]`.
    pub split: Option<crate::dataset::map::split::SplitRule>,
    /// `points`: the points and, for those inside a drawable grid, their centre pixel in
    /// every grid that holds them (priority order), in the points' order.
    pub points: Option<points::PointSet>,
    pub point_centres: Arc<Vec<(usize, Vec<crate::sampler::PointCentre>)>>,
    /// `[datasets.balance]`: the fitted class balance (the `balanced` sampler).
    pub balance: Option<balance::Balance>,
    /// Items whose `earthsearch:boa_offset_applied` disagrees with their baseline (a
    /// layer harmonises), not yet added to `cogfeed_harmonize_disagreements_total`: the
    /// first sample streamed takes them ([`MapSpace::take_disagreements`]).
    disagreements: std::sync::atomic::AtomicU64,
}

impl MapSpace {
    /// A bound on the bytes one sample's metadata adds to its batch message (`SampleInfo`
    /// and the points' target tensors), counted with the layers in admission: Item ids
    /// (the Items a sample was made from, up to 8 per step of each layer), per-step dates,
    /// the point's id and attributes. Ids, names and attribute counts are bounded at load.
    pub fn meta_bytes_per_sample(&self) -> u64 {
        const FIXED: u64 = 256; // drawn id framing, CRS, bounds, resolution, flags, split
        let longest_id = self.items.iter().map(|i| i.id.len()).max().unwrap_or(0) as u64;
        let steps: u64 = self.layers.iter().map(|l| l.steps() as u64).sum();
        let listed = (self.items.len() as u64).min(steps.saturating_mul(8)).max(1);
        let mut bytes = FIXED
            .saturating_add(listed.saturating_mul(longest_id + 4))
            .saturating_add(longest_id);
        for l in self.layers.iter().filter(|l| l.time.is_some()) {
            // One "YYYY-MM-DD" per step, and the layer's name.
            bytes = bytes.saturating_add(l.steps() as u64 * 12 + l.name.len() as u64 + 8);
        }
        for l in self.layers.iter().filter(|l| l.harmonize.is_some()) {
            // One int32 varint (at most 10 bytes) per step, and the layer's name.
            bytes = bytes.saturating_add(l.steps() as u64 * 10 + l.name.len() as u64 + 8);
        }
        if let Some(p) = &self.points {
            let longest_point = p.ids.iter().map(String::len).max().unwrap_or(0) as u64;
            let names: u64 = p.names.iter().map(|n| n.len() as u64 + 12).sum();
            // The map entries of SampleInfo.targets, and a float64 per attribute in the
            // batch's target tensors.
            bytes = bytes
                .saturating_add(longest_point)
                .saturating_add(names)
                .saturating_add(p.names.len() as u64 * 8);
        }
        bytes
    }

    /// Items of disagreeing flags not yet counted (then 0): see `disagreements`.
    pub fn take_disagreements(&self) -> u64 {
        self.disagreements.swap(0, std::sync::atomic::Ordering::Relaxed)
    }

    /// What a harmonised `layer` adds to Item `index`'s valid pixels (0 without
    /// `harmonize`).
    fn shift(&self, layer: &LayerSpec, index: usize) -> i32 {
        layer
            .harmonize
            .map_or(0, |h| h.shift(harmonize::item_scale(&self.items[index])))
    }

    /// `native`, or the fixed sample CRS.
    pub fn crs_name(&self) -> String {
        match &self.fixed {
            Some(c) => c.to_string(),
            None => "native".into(),
        }
    }

    /// Every Item's id and lon/lat bbox.
    pub fn item_boxes(&self) -> impl Iterator<Item = (&str, [f64; 4])> {
        self.items
            .iter()
            .map(|i| i.id.as_str())
            .zip(self.bboxes.iter().copied())
    }

    /// The URL of every asset a layer reads, of every Item.
    pub fn asset_urls(&self) -> impl Iterator<Item = &str> {
        self.items.iter().flat_map(|it| {
            self.layers
                .iter()
                .flat_map(|l| l.assets.iter())
                .filter_map(|a| it.assets.get(a).map(|x| x.href.as_str()))
        })
    }

    /// Items in the dataset (after the filter).
    pub fn item_count(&self) -> usize {
        self.items.len()
    }

    /// The plan's view of scene `i`.
    pub fn scene_grid(&self, i: usize) -> SceneGrid {
        let g = &self.grids[i];
        SceneGrid {
            width: g.width,
            height: g.height,
            block_width: g.block.0,
            block_height: g.block.1,
        }
    }

    /// Scene → an id shared by the scenes on one reference grid (CRS, transform, shape and
    /// blocks alike: the dates of one tile), so a locality order groups them together.
    pub fn grid_ids(&self) -> Arc<Vec<u32>> {
        self.grid_ids.clone()
    }

    /// The footprint bounds of `window` (reference-grid pixels of its scene).
    pub fn bounds(&self, window: &WindowSpec) -> [f64; 4] {
        let g = &self.grids[window.scene as usize];
        let (x0, y0) = g.transform.apply(window.col as f64, window.row as f64);
        let (x1, y1) = g.transform.apply(
            (window.col + window.width as u64) as f64,
            (window.row + window.height as u64) as f64,
        );
        [x0.min(x1), y0.min(y1), x0.max(x1), y0.max(y1)]
    }

    /// The drawn Item of scene `scene`.
    pub fn drawn_of(&self, scene: usize) -> Drawn {
        Drawn {
            item: Some(self.drawn[scene]),
            day: None,
        }
    }

    /// Items (indices, priority order) that may fill `bounds` for `layer` of a sample planned
    /// on `drawn`.
    fn candidates(&self, drawn: Drawn, layer: &LayerSpec, crs: &Crs, bounds: [f64; 4]) -> Vec<usize> {
        let drawn = drawn.item.map(|i| &self.items[i]).ok_or(drawn.day);
        let bb = lonlat_bbox(crs, bounds);
        let near = match bb {
            Some(b) => self.index.query(b),
            None => (0..self.items.len()).collect(),
        };
        near.into_iter()
            .filter(|&i| {
                let it = &self.items[i];
                if !layer.reads(it) {
                    return false;
                }
                if let Some(b) = bb {
                    let ib = self.bboxes[i];
                    if ib[0] > b[2] || ib[2] < b[0] || ib[1] > b[3] || ib[3] < b[1] {
                        return false;
                    }
                }
                // A time layer chooses its dates itself.
                if self.mosaic_all || layer.time.is_some() {
                    return true;
                }
                let drawn = match drawn {
                    Ok(d) => d,
                    // No Item drawn: the reference day's Items (every Item without one).
                    Err(reference) => return reference.is_none_or(|r| day(it).is_none_or(|d| d == r)),
                };
                if it.id == drawn.id {
                    return true;
                }
                if it.collection != drawn.collection {
                    return true;
                }
                match (day(it), day(drawn)) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                }
            })
            .collect()
    }

    async fn source(&self, index: usize, key: &str) -> Result<Arc<AssetSource>> {
        let cache_key = self.asset_keys.get(key).map(|&k| (index as u32, k));
        if let Some(k) = &cache_key
            && let Some(s) = self.sources.get(k).await
        {
            return Ok(s);
        }
        let item = &self.items[index];
        let asset = item.asset(key)?;
        let object = open(&self.stores, &self.headers, &asset.href, &self.options).await?;
        let source = Arc::new(AssetSource::new(&item.id, asset, object)?);
        // A key no layer names (none today) is opened each time, through the header cache.
        if let Some(k) = cache_key {
            self.sources.insert(k, source.clone()).await;
        }
        Ok(source)
    }

    /// Assembles sample `window`: one little-endian tensor `[C, H_l, W_l]` (time layers
    /// `[T, C, H_l, W_l]`) for each layer in `wanted` (others stay empty), and the
    /// sample's metadata. With the reference layer among them its valid fraction is
    /// computed (with the mask layer's classes when that is among them too).
    pub async fn sample(
        &self,
        tiles: &dyn TileSource,
        window: &WindowSpec,
        wanted: &[usize],
    ) -> Result<(Vec<Vec<u8>>, SampleMeta)> {
        let scene = window.scene as usize;
        let placed = Placed {
            crs: self.grids[scene].crs.clone(),
            bounds: self.bounds(window),
            scale: 1.0,
            drawn: self.drawn_of(scene),
            datetime: None,
            padded: window.padded,
        };
        let side = |l: &LayerSpec| {
            let s = self.layer_side(window.width, l.resolution.max(self.layers[0].resolution));
            (s, s)
        };
        self.assemble(tiles, &placed, wanted, &side).await
    }

    /// Assembles the sample `placed` (see [`MapSpace::sample`]); `side` gives the
    /// (height, width) a layer's valid fraction is counted over.
    pub(crate) async fn assemble(
        &self,
        tiles: &dyn TileSource,
        placed: &Placed,
        wanted: &[usize],
        side: &(dyn Fn(&LayerSpec) -> (usize, usize) + Sync),
    ) -> Result<(Vec<Vec<u8>>, SampleMeta)> {
        let (crs, bounds) = (&placed.crs, placed.bounds);
        // Every wanted layer at once: a cold sample waits one round trip of the store, not
        // one per layer.
        let loads = self.layers.iter().enumerate().map(|(li, layer)| async move {
            if !wanted.contains(&li) {
                return Ok(None);
            }
            let fp = Footprint::new(crs.clone(), bounds, layer.resolution * placed.scale)?;
            self.layer_bytes(tiles, placed.drawn, layer, &fp).await.map(Some)
        });
        let loaded = futures::future::try_join_all(loads).await?;
        let mut out = Vec::with_capacity(self.layers.len());
        // Items sort in priority order, so their indices do too.
        let mut used = std::collections::BTreeSet::new();
        let (mut times, mut harmonized) = (Vec::new(), Vec::new());
        for (layer, one) in self.layers.iter().zip(loaded) {
            let Some((bytes, u, days, shifts)) = one else {
                out.push(Vec::new());
                continue;
            };
            used.extend(u);
            if let Some(days) = days {
                times.push((layer.name.clone(), days));
            }
            if layer.harmonize.is_some() {
                harmonized.push((layer.name.clone(), shifts));
            }
            out.push(bytes);
        }
        let drawn = placed.drawn.item.map(|i| &self.items[i]);
        let present: Vec<(String, Vec<bool>)> = times
            .iter()
            .map(|(name, days): &(String, Vec<Option<String>>)| {
                (name.clone(), days.iter().map(Option::is_some).collect())
            })
            .collect();
        let valid_fraction = self.valid_fraction(&out, &present, side);
        Ok((
            out,
            SampleMeta {
                items: used.into_iter().map(|i| self.items[i].id.clone()).collect(),
                drawn: drawn.map_or(String::new(), |d| d.id.clone()),
                datetime: match drawn {
                    Some(d) => d.datetime.map(|t| t.to_rfc3339()),
                    None => placed.datetime.clone(),
                },
                crs: crs.to_string(),
                bounds,
                resolution: self.layers[0].resolution * placed.scale,
                padded: placed.padded,
                valid_fraction,
                split: self
                    .split
                    .as_ref()
                    .and_then(|s| s.footprint_split(crs, bounds).map(|i| s.names[i].clone())),
                times,
                harmonized,
                point: None,
                point_id: None,
                targets: Vec::new(),
                dataset: None,
            },
        ))
    }

    /// The valid fraction of assembled layers `out`, each `side(layer)` (height, width)
    /// pixels (None without the reference layer).
    fn valid_fraction(
        &self,
        out: &[Vec<u8>],
        times: &[(String, Vec<bool>)],
        side: &(dyn Fn(&LayerSpec) -> (usize, usize) + Sync),
    ) -> Option<f64> {
        let view = |li: usize| -> Option<valid::LayerView<'_>> {
            let l = &self.layers[li];
            let bytes = out.get(li).filter(|b| !b.is_empty())?;
            let present = times
                .iter()
                .find(|(name, _)| name == &l.name)
                .map(|(_, p)| p.as_slice());
            let (height, width) = side(l);
            Some(valid::LayerView {
                bytes,
                dtype: l.dtype,
                steps: l.steps(),
                bands: l.bands,
                height,
                width,
                nodata: l.nodata,
                present,
            })
        };
        let reference = view(0)?;
        let rule = self.valid.as_ref();
        let mask = rule
            .and_then(|r| r.mask_layer)
            .and_then(|m| Some((view(m)?, rule?.invalid_classes.as_slice())));
        valid::fraction(&reference, mask.as_ref().map(|(v, c)| (v, *c)))
    }

    /// Estimates the valid fraction of `window` from a footprint about `ESTIMATE_SIDE`
    /// pixels across (overview levels do the reading); None when the window is already
    /// that small (the full assembly costs as much) or the reference layer is a time
    /// series.
    pub async fn estimate_valid(&self, tiles: &dyn TileSource, window: &WindowSpec) -> Result<Option<f64>> {
        let f = u64::from(window.width) / ESTIMATE_SIDE;
        if f < 2 || self.layers[0].time.is_some() {
            return Ok(None);
        }
        let scene = window.scene as usize;
        let crs = self.grids[scene].crs.clone();
        let bounds = self.bounds(window);
        let coarse = self.layers[0].resolution * f as f64;
        let mut out = vec![Vec::new(); self.layers.len()];
        let mask = self.valid.as_ref().and_then(|r| r.mask_layer);
        for li in std::iter::once(0).chain(mask) {
            let layer = &self.layers[li];
            let fp = Footprint::new(crs.clone(), bounds, layer.resolution.max(coarse))?;
            out[li] = self.layer_bytes(tiles, self.drawn_of(scene), layer, &fp).await?.0;
        }
        let side = |l: &LayerSpec| {
            let s = self.layer_side(window.width, l.resolution.max(coarse));
            (s, s)
        };
        Ok(self.valid_fraction(&out, &[], &side))
    }

    /// The `points` plan's centres for `patch`-pixel windows: per point, the first grid
    /// (priority order) that holds its whole window, else the first that holds the point
    /// (the window then starts at that grid's edge), and only points whose window lies in
    /// `split` when one is given.
    pub fn centres_for(&self, patch: u32, split: Option<usize>) -> Vec<(usize, crate::sampler::PointCentre)> {
        let half = u64::from(patch) / 2;
        self.point_centres
            .iter()
            .filter_map(|(p, grids)| {
                let fits = |c: &&crate::sampler::PointCentre| {
                    let g = &self.grids[c[0] as usize];
                    c[1] >= half
                        && c[2] >= half
                        && c[1] - half + u64::from(patch) <= g.width
                        && c[2] - half + u64::from(patch) <= g.height
                };
                let c = *grids.iter().find(fits).or(grids.first())?;
                let keep = split.is_none_or(|s| {
                    let w = WindowSpec {
                        scene: c[0] as u32,
                        col: c[1].saturating_sub(half),
                        row: c[2].saturating_sub(half),
                        width: patch,
                        height: patch,
                        level: 0,
                        padded: false,
                    };
                    self.in_split(&w, s)
                });
                keep.then_some((*p, c))
            })
            .collect()
    }

    /// Whether `window`'s footprint lies in split `split` (its cells all of that split).
    pub fn in_split(&self, window: &WindowSpec, split: usize) -> bool {
        let crs = &self.grids[window.scene as usize].crs;
        self.split
            .as_ref()
            .is_some_and(|s| s.footprint_split(crs, self.bounds(window)) == Some(split))
    }

    /// Pixels across a layer at `resolution` for a `patch`-pixel reference window.
    fn layer_side(&self, patch: u32, resolution: f64) -> usize {
        ((patch as f64 * self.layers[0].resolution) / resolution + 0.5).floor() as usize
    }

    /// Output shape `(T, C, H, W)` of each layer for a `patch` × `patch` reference window
    /// (T = 1 for layers without time).
    pub fn layer_shapes(&self, patch: u32) -> Vec<(usize, usize, usize, usize)> {
        self.layers
            .iter()
            .map(|l| {
                let side = self.layer_side(patch, l.resolution);
                (l.steps(), l.bands, side, side)
            })
            .collect()
    }
}

/// Scene → an id shared by equal reference grids (CRS, transform, shape and blocks).
fn grid_ids_of(grids: &[RefGrid]) -> Vec<u32> {
    let mut seen: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    grids
        .iter()
        .map(|g| {
            let next = seen.len() as u32;
            *seen.entry(format!("{g:?}")).or_insert(next)
        })
        .collect()
}
