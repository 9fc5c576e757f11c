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
use crate::storage::Stores;
use crate::tiles::open;
use crate::tiles::{HeaderCache, TileSource};
use cogfeed_geo::warp::Resampling;
use cogfeed_geo::{Affine, Crs, Footprint, Transformer};
use cogfeed_stac::points;
use cogfeed_stac::{HrefRewrite, Item, ItemFilter, StacError, parse_document};
use cogfeed_tiff::{DType, OpenOptions, RangeReader};
use mosaic::AssetSource;

pub mod balance;
pub mod mosaic;
pub mod plan_index;
pub mod rules;
pub mod split;
pub mod time;
pub mod valid;

/// Largest STAC JSON document read whole.
const MAX_DOCUMENT_BYTES: u64 = 512 << 20;
/// Largest stac-geoparquet file read whole (about ten million Items).
const MAX_PARQUET_BYTES: u64 = 4 << 30;
/// Opened (Item, asset) sources kept for the next sample.
const SOURCE_CACHE_ENTRIES: u64 = 65_536;
/// Item JSON files read at once from a prefix.
const LIST_CONCURRENCY: usize = 32;
/// Data-reading draws per sample before a stream with `min_valid_fraction` fails.
pub const DEFAULT_ATTEMPTS: u32 = 64;
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
    /// Opened and checked assets by (Item, asset key).
    sources: moka::future::Cache<(u32, Arc<str>), AssetSource>,
    /// Scene index (plan) → Item index.
    pub drawn: Vec<usize>,
    /// Scene index → reference grid.
    pub grids: Vec<RefGrid>,
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
}

fn doc_error(doc: &str, reason: String) -> Error {
    Error::Stac(StacError::NotStac {
        doc: doc.to_string(),
        reason,
    })
}

/// Reads every Item of `url`: a JSON document, a stac-geoparquet file, or a prefix (ending
/// in `/`) of `.json` Items.
pub async fn read_items(stores: &Stores, url: &str, rewrite: &HrefRewrite) -> Result<Vec<Item>> {
    async fn read_doc(stores: &Stores, url: String, rewrite: &HrefRewrite) -> Result<Vec<Item>> {
        let reader = stores.reader(&url)?;
        let prefix = reader
            .read_prefix(MAX_PARQUET_BYTES)
            .await
            .map_err(|e| Error::tiff(url.as_str(), e.into()))?;
        if prefix.object_size > prefix.bytes.len() as u64 {
            return Err(doc_error(
                &url,
                format!("{} bytes (at most {MAX_PARQUET_BYTES})", prefix.object_size),
            ));
        }
        if cogfeed_stac::is_parquet(&prefix.bytes) {
            return Ok(cogfeed_stac::parse_geoparquet(&url, prefix.bytes, rewrite)?);
        }
        if prefix.object_size > MAX_DOCUMENT_BYTES {
            return Err(doc_error(
                &url,
                format!(
                    "{} bytes of JSON (at most {MAX_DOCUMENT_BYTES}; use stac-geoparquet for large catalogs)",
                    prefix.object_size
                ),
            ));
        }
        Ok(parse_document(&url, &prefix.bytes, rewrite)?)
    }
    if url.ends_with('/') {
        let urls = stores.list_suffixed(url, &[".json", ".geojson"]).await?;
        if urls.is_empty() {
            return Err(doc_error(url, "no .json Items under this prefix".into()));
        }
        let docs: Vec<Result<Vec<Item>>> = futures::stream::iter(urls)
            .map(|u| read_doc(stores, u, rewrite))
            .buffered(LIST_CONCURRENCY)
            .collect()
            .await;
        let mut items = Vec::new();
        for d in docs {
            items.extend(d?);
        }
        return Ok(items);
    }
    read_doc(stores, url.to_string(), rewrite).await
}

/// Densified edges of a `w` × `h` pixel grid, as map points (`steps` segments a side).
fn edge_points(t: &Affine, w: f64, h: f64, steps: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut xs, mut ys) = (Vec::with_capacity(4 * (steps + 1)), Vec::with_capacity(4 * (steps + 1)));
    for s in 0..=steps {
        let r = s as f64 / steps as f64;
        for (c, rr) in [(r * w, 0.0), (r * w, h), (0.0, r * h), (w, r * h)] {
            let (x, y) = t.apply(c, rr);
            xs.push(x);
            ys.push(y);
        }
    }
    (xs, ys)
}

fn bbox_of(xs: &[f64], ys: &[f64]) -> Option<[f64; 4]> {
    let mut b = [f64::INFINITY, f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY];
    for (&x, &y) in xs.iter().zip(ys) {
        if x.is_finite() && y.is_finite() {
            b = [b[0].min(x), b[1].min(y), b[2].max(x), b[3].max(y)];
        }
    }
    b[0].is_finite().then_some(b)
}

/// The EPSG:4326 bbox of a footprint's `bounds` in `crs`, for pruning candidates: corners
/// and edge midpoints, widened by 0.0005° (~50 m; a footprint's edges bulge far less).
fn lonlat_bbox(crs: &Crs, bounds: [f64; 4]) -> Option<[f64; 4]> {
    let t = Affine::north_up(bounds[0], bounds[3], 1.0);
    let (mut xs, mut ys) = edge_points(&t, bounds[2] - bounds[0], bounds[3] - bounds[1], 2);
    let wgs = Crs::from_epsg(4326).ok()?;
    Transformer::new(crs, &wgs).transform(&mut xs, &mut ys);
    let b = bbox_of(&xs, &ys)?;
    const MARGIN: f64 = 0.0005;
    Some([b[0] - MARGIN, b[1] - MARGIN, b[2] + MARGIN, b[3] + MARGIN])
}

fn day(item: &Item) -> Option<NaiveDate> {
    item.datetime.map(|t| t.date_naive())
}

fn sort_items(items: &mut [Item], keys: &[String]) {
    items.sort_by(|a, b| {
        for k in keys {
            let o = match k.as_str() {
                "datetime" => a.datetime.cmp(&b.datetime),
                "-datetime" => b.datetime.cmp(&a.datetime),
                "id" => a.id.cmp(&b.id),
                _ => b.id.cmp(&a.id),
            };
            if o != std::cmp::Ordering::Equal {
                return o;
            }
        }
        a.id.cmp(&b.id)
    });
}

impl MapSpace {
    /// Builds the dataset `c` (a `stac` one) and returns it with its version. Its plan
    /// (Items, reference grids, version) is read back from `index_dir` when this document
    /// (same ETag) and configuration were planned before (unless `replan`: a refresh after
    /// a change), else planned from the document (`plan`) and written there.
    pub async fn build(
        c: &DatasetConfig,
        stores: Arc<Stores>,
        headers: HeaderCache,
        options: OpenOptions,
        index_dir: Option<&std::path::Path>,
        replan: bool,
    ) -> Result<(Self, String)> {
        let started = std::time::Instant::now();
        let key = plan_index::key(&stores, c).await;
        let path = index_dir
            .zip(key.as_ref())
            .map(|(d, k)| plan_index::path(d, &c.name, k));
        let kept = path
            .as_ref()
            .zip(key.as_ref())
            .filter(|_| !replan)
            .and_then(|(p, k)| plan_index::load(p, k));
        let plan = match kept {
            Some(plan) => {
                tracing::info!(
                    dataset = %c.name,
                    items = plan.items.len(),
                    seconds = started.elapsed().as_secs_f64(),
                    "plan index read back"
                );
                plan
            }
            None => {
                let mut plan = Self::plan(c, &stores, &headers, &options).await?;
                if let (Some(p), Some(k)) = (&path, &key) {
                    plan.key = k.clone();
                    if let Err(e) = plan_index::save(p, &plan) {
                        tracing::warn!(dataset = %c.name, path = %p.display(), error = %e, "plan index not written");
                    }
                }
                plan
            }
        };
        Self::from_plan(c, plan, stores, headers, options, index_dir).await
    }

    /// Plans dataset `c` from its document: reads, filters and orders the Items, opens
    /// every drawable Item's reference asset (checks, tile grid, ETag for the version) and
    /// derives its grid.
    async fn plan(
        c: &DatasetConfig,
        stores: &Arc<Stores>,
        headers: &HeaderCache,
        options: &OpenOptions,
    ) -> Result<plan_index::Plan> {
        let url = c.stac.as_deref().unwrap_or_default();
        let rewrite = HrefRewrite::new(c.href_rewrite.clone());
        let bad = |m: String| Error::InvalidArgument(format!("dataset {}: {m}", c.name));
        let started = std::time::Instant::now();
        let mut items = read_items(stores, url, &rewrite).await?;
        let found = items.len();
        tracing::info!(dataset = %c.name, items = found, seconds = started.elapsed().as_secs_f64(), "items read");
        if let Some(f) = &c.filter {
            let f = ItemFilter::from_table(f).map_err(|e| bad(format!("filter: {e}")))?;
            items.retain(|it| f.accepts(it));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = items.iter().find(|it| !seen.insert(it.id.clone())) {
            return Err(bad(format!("item {} appears twice in {url}", dup.id)));
        }
        let keys = c
            .priority
            .clone()
            .unwrap_or_else(|| vec!["datetime".into(), "id".into()]);
        sort_items(&mut items, &keys);
        let reference = &c.layers[0];
        let ref_asset = &reference.assets[0];
        let layer_filter = |l: &crate::config::LayerConfig| {
            l.filter
                .as_ref()
                .map(ItemFilter::from_table)
                .transpose()
                .map_err(|e| bad(format!("layer {}: filter: {e}", l.name)))
        };
        let reads = |l: &crate::config::LayerConfig, f: &Option<ItemFilter>, it: &Item| {
            l.assets.iter().all(|a| it.assets.contains_key(a)) && f.as_ref().is_none_or(|f| f.accepts(it))
        };
        let ref_filter = layer_filter(reference)?;
        let drawn: Vec<usize> = (0..items.len())
            .filter(|&i| reads(reference, &ref_filter, &items[i]))
            .collect();
        if drawn.is_empty() {
            return Err(bad(format!(
                "none of the {} items ({found} before the filter) has the reference layer's assets {:?}",
                items.len(),
                reference.assets
            )));
        }
        // Every layer's assets must exist on some Item.
        for l in &c.layers {
            for a in &l.assets {
                if !items.iter().any(|it| it.assets.contains_key(a)) {
                    return Err(bad(format!("layer {}: no item has an asset {a:?}", l.name)));
                }
            }
        }
        // Reference assets: opened now (checks, tile grid, ETag for the version).
        let opened: Vec<Result<AssetSource>> = futures::stream::iter(drawn.clone())
            .map(|i| {
                let (stores, headers, options) = (stores.clone(), headers.clone(), options.clone());
                let item = items[i].clone();
                let key = ref_asset.clone();
                async move {
                    let asset = item.asset(&key)?;
                    let object = open(&stores, &headers, &asset.href, &options).await?;
                    AssetSource::new(&item.id, asset, object)
                }
            })
            .buffered(64)
            .collect()
            .await;
        let refs: Vec<AssetSource> = opened.into_iter().collect::<Result<_>>()?;
        tracing::info!(
            dataset = %c.name,
            assets = refs.len(),
            seconds = started.elapsed().as_secs_f64(),
            "reference assets opened"
        );
        // What each layer's assets hold, from the first Item that has them all.
        let mut facts = Vec::with_capacity(c.layers.len());
        for l in &c.layers {
            let filter = layer_filter(l)?;
            let holder = items.iter().find(|it| reads(l, &filter, it)).ok_or_else(|| {
                bad(format!(
                    "layer {}: no single item (passing its filter) has all of {:?}",
                    l.name, l.assets
                ))
            })?;
            let mut f = plan_index::LayerFacts {
                dtype: String::new(),
                bands: 0,
                asset_bands: Vec::with_capacity(l.assets.len()),
                finest: f64::INFINITY,
            };
            let mut dtype: Option<DType> = None;
            for a in &l.assets {
                let asset = holder.asset(a)?;
                let (src_dtype, nb, res) = if holder.id == refs[0].item && a == ref_asset {
                    (refs[0].dtype, refs[0].bands, refs[0].transform.pixel_size().0)
                } else {
                    let object = open(stores, headers, &asset.href, options).await?;
                    let s = AssetSource::new(&holder.id, asset, object)?;
                    (s.dtype, s.bands, s.transform.pixel_size().0)
                };
                if let Some(d) = dtype
                    && d != src_dtype
                {
                    return Err(bad(format!(
                        "layer {}: asset {a} holds {} where the layer's other assets hold {}: mixed data types are refused (set the layer's dtype after splitting it)",
                        l.name,
                        src_dtype.name(),
                        d.name()
                    )));
                }
                dtype = Some(src_dtype);
                f.bands += nb;
                f.asset_bands.push(nb);
                f.finest = f.finest.min(res);
            }
            f.dtype = dtype.unwrap_or(DType::U8).name().to_string();
            facts.push(f);
        }
        let layers = layer_specs(c, &facts)?;
        let fixed = fixed_crs(c)?;
        let res = layers[0].resolution;
        let mut grids = Vec::with_capacity(refs.len());
        for s in &refs {
            grids.push(ref_grid(s, res, fixed.as_ref()).map_err(|m| bad(format!("item {}: {m}", s.item)))?);
        }
        // An area of interest keeps the part of each grid that meets it, whole pixels.
        let (mut drawn, mut refs) = (drawn, refs);
        if let Some(aoi) = c.aoi {
            let clipped: Vec<Option<RefGrid>> = grids.iter().map(|g| clip_to_aoi(g, aoi)).collect();
            let mut kept = (Vec::new(), Vec::new(), Vec::new());
            for ((d, r), g) in drawn.into_iter().zip(refs).zip(clipped) {
                if let Some(g) = g {
                    kept.0.push(d);
                    kept.1.push(r);
                    kept.2.push(g);
                }
            }
            (drawn, refs, grids) = kept;
            if grids.is_empty() {
                return Err(bad(format!("no item's reference grid meets the aoi {aoi:?}")));
            }
        }
        let mut hasher = Sha256::new();
        if let Some(url) = &c.points {
            let p = read_points(stores, url).await?;
            hasher.update(format!("points\t{:?}\t{:?}\t{:?}\n", p.ids, p.coords, p.names));
        }
        for it in &items {
            hasher.update(format!("item\t{}\t{:?}\n", it.id, it.datetime));
            for l in &layers {
                for a in &l.assets {
                    if let Some(asset) = it.assets.get(a) {
                        hasher.update(format!("{a}\t{}\n", asset.href));
                    }
                }
            }
        }
        for s in &refs {
            hasher.update(format!(
                "ref\t{}\t{}\t{}\n",
                s.object.url,
                s.object.version,
                s.object.cog.header().object_size
            ));
        }
        for l in &layers {
            hasher.update(format!(
                "layer\t{}\t{:?}\t{}\t{}\t{}\t{}\n",
                l.name,
                l.assets,
                l.resolution,
                l.resampling.name(),
                l.dtype.name(),
                l.nodata
            ));
            // Keys added later enter the hash only when set: older versions stay.
            if l.filter.is_some() || l.time.is_some() {
                hasher.update(format!("layer-more\t{:?}\t{:?}\n", l.filter, l.time));
            }
        }
        if c.sampling.is_some() || c.split.is_some() {
            hasher.update(format!("sampling\t{:?}\t{:?}\n", c.sampling, c.split));
        }
        if let Some(b) = &c.balance {
            hasher.update(format!("balance\t{b:?}\n"));
        }
        hasher.update(format!(
            "crs\t{:?}\tmosaic\t{:?}\tpriority\t{keys:?}\n",
            fixed, c.mosaic
        ));
        let version = hex::encode(hasher.finalize())[..16].to_string();
        // Only the assets some layer reads are kept (memory, and the index's size).
        let used: std::collections::BTreeSet<&String> = c.layers.iter().flat_map(|l| l.assets.iter()).collect();
        for it in &mut items {
            it.assets.retain(|k, _| used.contains(k));
        }
        Ok(plan_index::Plan {
            key: String::new(),
            items,
            drawn,
            grids: grids.iter().map(plan_index::GridEntry::of).collect(),
            facts,
            version,
        })
    }

    /// The dataset from its plan: layers, sampling rules, grids, bboxes, points and the
    /// class balance.
    async fn from_plan(
        c: &DatasetConfig,
        plan: plan_index::Plan,
        stores: Arc<Stores>,
        headers: HeaderCache,
        options: OpenOptions,
        index_dir: Option<&std::path::Path>,
    ) -> Result<(Self, String)> {
        let bad = |m: String| Error::InvalidArgument(format!("dataset {}: {m}", c.name));
        let plan_index::Plan {
            items,
            drawn,
            grids,
            facts,
            version,
            ..
        } = plan;
        let layers = layer_specs(c, &facts)?;
        let valid = c
            .sampling
            .as_ref()
            .map(|sm| {
                let mask_layer = match &sm.mask_layer {
                    Some(m) => Some(
                        layers
                            .iter()
                            .position(|l| &l.name == m)
                            .ok_or_else(|| bad(format!("sampling.mask_layer {m} is not a layer")))?,
                    ),
                    None => None,
                };
                Ok::<_, Error>(valid::ValidRule {
                    min: sm.min_valid_fraction,
                    mask_layer,
                    invalid_classes: sm.invalid_classes.iter().map(|&v| v as f64).collect(),
                    max_attempts: sm.max_attempts.unwrap_or(DEFAULT_ATTEMPTS),
                })
            })
            .transpose()?;
        let split = c
            .split
            .as_ref()
            .map(crate::dataset::map::split::SplitRule::new)
            .transpose()
            .map_err(|e| bad(format!("split: {e}")))?;
        let fixed = fixed_crs(c)?;
        // Grids share a few CRSs: each is parsed once.
        let mut crss: std::collections::HashMap<String, Crs> = std::collections::HashMap::new();
        let mut ref_grids = Vec::with_capacity(grids.len());
        for g in grids {
            let crs = match crss.get(&g.crs) {
                Some(crs) => crs.clone(),
                None => {
                    let crs = Crs::parse(&g.crs)?;
                    crss.insert(g.crs.clone(), crs.clone());
                    crs
                }
            };
            ref_grids.push(RefGrid {
                crs,
                transform: g.transform,
                width: g.width,
                height: g.height,
                block: g.block,
            });
        }
        let grids = ref_grids;
        if drawn.len() != grids.len() || drawn.iter().any(|&i| i >= items.len()) {
            return Err(bad("the plan's grids and Items disagree".into()));
        }
        let wgs = Crs::from_epsg(4326)?;
        let bboxes: Vec<[f64; 4]> = items
            .iter()
            .map(|it| {
                it.bbox.unwrap_or_else(|| {
                    // No STAC bbox: from the first asset's grid.
                    it.assets
                        .values()
                        .find_map(|a| {
                            let (t, (r, cc), e) = (a.transform?, a.shape?, a.epsg?);
                            let crs = Crs::from_epsg(e).ok()?;
                            let (mut xs, mut ys) = edge_points(&t, cc as f64, r as f64, 20);
                            Transformer::new(&crs, &wgs).transform(&mut xs, &mut ys);
                            bbox_of(&xs, &ys)
                        })
                        .unwrap_or([-180.0, -90.0, 180.0, 90.0])
                })
            })
            .collect();
        let (points, point_centres) = match &c.points {
            Some(url) => {
                let set = read_points(&stores, url).await?;
                let crs = Crs::parse(c.points_crs.as_deref().unwrap_or("EPSG:4326"))?;
                let index = cogfeed_stac::BboxIndex::new(&bboxes, 1.0);
                let centres = place_points(&set, &crs, &items, &bboxes, &index, &drawn, &grids);
                if centres.len() < set.coords.len() {
                    tracing::warn!(
                        dataset = %c.name,
                        points = set.coords.len(),
                        outside = set.coords.len() - centres.len(),
                        "points outside every drawable item's grid are left out"
                    );
                }
                (Some(set), centres)
            }
            None => (None, Vec::new()),
        };
        let rule = c
            .balance
            .as_ref()
            .map(|b| {
                let names: Vec<(String, bool)> = layers.iter().map(|l| (l.name.clone(), l.time.is_some())).collect();
                balance::BalanceRule::new(b, &names)
            })
            .transpose()
            .map_err(bad)?;
        let mut map = Self {
            layers,
            index: cogfeed_stac::BboxIndex::new(&bboxes, 1.0),
            sources: moka::future::Cache::new(SOURCE_CACHE_ENTRIES),
            items,
            bboxes,
            drawn,
            grids,
            mosaic_all: c.mosaic.as_deref() == Some("all"),
            fixed,
            stores,
            headers,
            options,
            valid,
            split,
            points,
            point_centres: Arc::new(point_centres),
            balance: None,
        };
        if let Some(rule) = rule {
            let index = map.class_index(&rule, &c.name, &version, index_dir).await?;
            let fitted = balance::Balance {
                layer: rule.layer,
                ..balance::fit(&index, &rule.targets).map_err(bad)?
            };
            for s in &fitted.shares {
                tracing::info!(
                    dataset = %c.name,
                    class = s.class,
                    natural = s.natural,
                    target = s.target,
                    expected = s.expected,
                    "class balance"
                );
            }
            map.balance = Some(fitted);
        }
        Ok((map, version))
    }

    /// The class histograms of `rule`, read back from `index_dir` when this dataset
    /// version's are there, else counted from the class layer (at `rule.samples` pixels
    /// across a cell, nearest, so the warp reads overviews) and written there.
    async fn class_index(
        &self,
        rule: &balance::BalanceRule,
        name: &str,
        version: &str,
        index_dir: Option<&std::path::Path>,
    ) -> Result<balance::ClassIndex> {
        let key = format!(
            "{version}\tcell {}\tsamples {}\tignore {:?}",
            rule.cell, rule.samples, rule.ignore
        );
        let tag = hex::encode(Sha256::digest(key.as_bytes()))[..16].to_string();
        let safe = plan_index::file_stem(name);
        let path = index_dir.map(|d| d.join(format!("{safe}-{tag}.classes.json")));
        if let Some(p) = &path
            && let Some(index) = balance::load(p, &key)
        {
            tracing::info!(dataset = %name, path = %p.display(), cells = index.cells.len(), "class index read back");
            return Ok(index);
        }
        let started = std::time::Instant::now();
        // A private cache: this pass reads each label tile about once.
        let tiles = crate::tiles::TileCache::with_metrics(64 << 20, None);
        let layer = LayerSpec {
            resampling: Resampling::Nearest,
            time: None,
            ..self.layers[rule.layer].clone()
        };
        let res0 = self.layers[0].resolution;
        let (cell, s) = (u64::from(rule.cell), u64::from(rule.samples));
        let mut values = Vec::with_capacity(self.grids.len());
        for (scene, g) in self.grids.iter().enumerate() {
            let (cols, rows) = (g.width.div_ceil(cell), g.height.div_ceil(cell));
            let (x0, y1) = g.transform.apply(0.0, 0.0);
            let bounds = [
                x0,
                y1 - (rows * cell) as f64 * res0,
                x0 + (cols * cell) as f64 * res0,
                y1,
            ];
            let fp = Footprint::new(g.crs.clone(), bounds, res0 * cell as f64 / s as f64)?;
            let (bytes, _, _) = self.layer_bytes(&tiles, scene, &layer, &fp).await?;
            let plane = (fp.width() * fp.height()) as usize * layer.dtype.size();
            values.push(cogfeed_geo::warp::samples_to_f64(
                layer.dtype,
                &bytes[..plane.min(bytes.len())],
            ));
        }
        let scenes: Vec<balance::SceneClasses<'_>> = values
            .iter()
            .enumerate()
            .map(|(scene, v)| balance::SceneClasses {
                scene: scene as u64,
                values: v,
                width: self.grids[scene].width,
                height: self.grids[scene].height,
            })
            .collect();
        let index = balance::count(rule, layer.nodata, key, &scenes)
            .map_err(|m| Error::InvalidArgument(format!("dataset {name}: balance: {m}")))?;
        tracing::info!(
            dataset = %name,
            cells = index.cells.len(),
            classes = index.classes.len(),
            seconds = started.elapsed().as_secs_f64(),
            "class index counted"
        );
        if let Some(p) = &path
            && let Err(e) = balance::save(p, &index)
        {
            tracing::warn!(dataset = %name, path = %p.display(), error = %e, "class index not written");
        }
        Ok(index)
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

    /// Items (indices, priority order) that may fill `bounds` of scene `scene` for `layer`.
    fn candidates(&self, scene: usize, layer: &LayerSpec, crs: &Crs, bounds: [f64; 4]) -> Vec<usize> {
        let drawn = &self.items[self.drawn[scene]];
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
                if self.mosaic_all || it.id == drawn.id || layer.time.is_some() {
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

    async fn source(&self, index: usize, key: &str) -> Result<AssetSource> {
        let cache_key = (index as u32, Arc::<str>::from(key));
        if let Some(s) = self.sources.get(&cache_key).await {
            return Ok(s);
        }
        let item = &self.items[index];
        let asset = item.asset(key)?;
        let object = open(&self.stores, &self.headers, &asset.href, &self.options).await?;
        let source = AssetSource::new(&item.id, asset, object)?;
        self.sources.insert(cache_key, source.clone()).await;
        Ok(source)
    }

    /// One date's (or the only) mosaic of `layer` on `fp` from the Items `cands`
    /// (priority order): its bytes `[C, H, W]` and the Items whose data it touches.
    async fn layer_mosaic(
        &self,
        tiles: &dyn TileSource,
        layer: &LayerSpec,
        fp: &Footprint,
        cands: &[usize],
    ) -> Result<(Vec<u8>, Vec<usize>)> {
        let mut bytes = Vec::new();
        let mut used = Vec::new();
        for (key, &nb) in layer.assets.iter().zip(&layer.asset_bands) {
            let opened = futures::future::try_join_all(cands.iter().map(|&i| self.source(i, key))).await?;
            // Sources the footprint misses contribute nothing: leave them out before
            // choosing the path.
            let mut planned = Vec::with_capacity(opened.len());
            for (src, &i) in opened.iter().zip(cands) {
                let p = mosaic::plan_source(src, fp, layer.resampling)?;
                if p.window.is_some() {
                    planned.push(p);
                    if !used.contains(&i) {
                        used.push(i);
                    }
                }
            }
            if let [only] = planned.as_slice()
                && let Some(window) = aligned_window(only.source, fp, layer)
            {
                // One source on the footprint's own grid: its pixels are the sample.
                let bands: Vec<usize> = (0..only.source.bands).collect();
                let object = &only.source.object;
                let raster = crate::tiles::region::read(tiles, object, window, &bands, layer.nodata)
                    .await
                    .map_err(|e| Error::tiff(object.url.as_ref(), e))?;
                append(&mut bytes, raster.data);
                continue;
            }
            let m = mosaic::mosaic_planned(tiles, &planned, nb, fp, layer.resampling).await?;
            append(
                &mut bytes,
                m.to_bytes(layer.dtype, layer.nodata, layer.resampling != Resampling::Nearest),
            );
        }
        Ok((bytes, used))
    }

    /// `layer` on `fp`: `[T, C, H, W]` bytes, the Items used and, for a time layer, the
    /// day of each step.
    async fn layer_bytes(
        &self,
        tiles: &dyn TileSource,
        scene: usize,
        layer: &LayerSpec,
        fp: &Footprint,
    ) -> Result<(Vec<u8>, Vec<usize>, Option<Vec<Option<String>>>)> {
        let cands = self.candidates(scene, layer, &fp.crs, fp.bounds);
        let Some(ts) = &layer.time else {
            let (bytes, used) = self.layer_mosaic(tiles, layer, fp, &cands).await?;
            return Ok((bytes, used, None));
        };
        // The dates whose Items meet the footprint.
        let first = &layer.assets[0];
        let opened = futures::future::try_join_all(cands.iter().map(|&i| self.source(i, first))).await?;
        let mut meeting = Vec::with_capacity(cands.len());
        for (src, &i) in opened.iter().zip(&cands) {
            if mosaic::plan_source(src, fp, layer.resampling)?.window.is_some() {
                meeting.push(i);
            }
        }
        let mut dates: Vec<NaiveDate> = meeting.iter().filter_map(|&i| day(&self.items[i])).collect();
        dates.sort_unstable();
        dates.dedup();
        let reference = day(&self.items[self.drawn[scene]]);
        let picked = ts.select(&dates, reference);
        // Every step at once: one round trip of latency, not T.
        let steps = futures::future::try_join_all(picked.iter().map(|d| {
            let of_day: Vec<usize> = meeting
                .iter()
                .copied()
                .filter(|&i| d.is_some() && day(&self.items[i]) == *d)
                .collect();
            async move {
                match d {
                    None => Ok(None),
                    Some(_) => self.layer_mosaic(tiles, layer, fp, &of_day).await.map(Some),
                }
            }
        }))
        .await?;
        let (w, h) = (fp.width() as usize, fp.height() as usize);
        let mut bytes = Vec::with_capacity(ts.steps * layer.bands * w * h * layer.dtype.size());
        let mut used = Vec::new();
        for step in steps {
            match step {
                Some((b, u)) => {
                    bytes.extend_from_slice(&b);
                    used.extend(u);
                }
                None => bytes.extend_from_slice(&cogfeed_geo::warp::Mosaic::new(layer.bands, w, h).to_bytes(
                    layer.dtype,
                    layer.nodata,
                    false,
                )),
            }
        }
        let days = picked.iter().map(|d| d.map(|d| d.to_string())).collect();
        Ok((bytes, used, Some(days)))
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
        let crs = self.grids[scene].crs.clone();
        let bounds = self.bounds(window);
        let mut out = Vec::with_capacity(self.layers.len());
        // Items sort in priority order, so their indices do too.
        let mut used = std::collections::BTreeSet::new();
        let mut times = Vec::new();
        for (li, layer) in self.layers.iter().enumerate() {
            if !wanted.contains(&li) {
                out.push(Vec::new());
                continue;
            }
            let fp = Footprint::new(crs.clone(), bounds, layer.resolution)?;
            let (bytes, u, days) = self.layer_bytes(tiles, scene, layer, &fp).await?;
            used.extend(u);
            if let Some(days) = days {
                times.push((layer.name.clone(), days));
            }
            out.push(bytes);
        }
        let drawn = &self.items[self.drawn[scene]];
        let present: Vec<(String, Vec<bool>)> = times
            .iter()
            .map(|(name, days): &(String, Vec<Option<String>>)| {
                (name.clone(), days.iter().map(Option::is_some).collect())
            })
            .collect();
        let valid_fraction = self.valid_fraction(&out, &present, window.width, 1.0);
        Ok((
            out,
            SampleMeta {
                items: used.into_iter().map(|i| self.items[i].id.clone()).collect(),
                drawn: drawn.id.clone(),
                datetime: drawn.datetime.map(|t| t.to_rfc3339()),
                crs: crs.to_string(),
                bounds,
                resolution: self.layers[0].resolution,
                padded: window.padded,
                valid_fraction,
                split: self
                    .split
                    .as_ref()
                    .and_then(|s| s.footprint_split(&crs, bounds).map(|i| s.names[i].clone())),
                times,
                point: None,
                point_id: None,
                targets: Vec::new(),
                dataset: None,
            },
        ))
    }

    /// The valid fraction of assembled layers `out` of a `patch`-pixel window whose
    /// layers were built at `coarsen` times their resolution (None without the reference
    /// layer).
    fn valid_fraction(&self, out: &[Vec<u8>], times: &[(String, Vec<bool>)], patch: u32, coarsen: f64) -> Option<f64> {
        let view = |li: usize| -> Option<valid::LayerView<'_>> {
            let l = &self.layers[li];
            let bytes = out.get(li).filter(|b| !b.is_empty())?;
            let present = times
                .iter()
                .find(|(name, _)| name == &l.name)
                .map(|(_, p)| p.as_slice());
            let side = self.layer_side(patch, l.resolution.max(self.layers[0].resolution * coarsen));
            Some(valid::LayerView {
                bytes,
                dtype: l.dtype,
                steps: l.steps(),
                bands: l.bands,
                height: side,
                width: side,
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
            out[li] = self.layer_bytes(tiles, scene, layer, &fp).await?.0;
        }
        Ok(self.valid_fraction(&out, &[], window.width, f as f64))
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

/// The layer specs of `c` from what its assets hold.
fn layer_specs(c: &DatasetConfig, facts: &[plan_index::LayerFacts]) -> Result<Vec<LayerSpec>> {
    let bad = |m: String| Error::InvalidArgument(format!("dataset {}: {m}", c.name));
    if facts.len() != c.layers.len() {
        return Err(bad("the plan's layers and the configuration disagree".into()));
    }
    c.layers
        .iter()
        .zip(facts)
        .map(|(l, f)| {
            let filter = l
                .filter
                .as_ref()
                .map(ItemFilter::from_table)
                .transpose()
                .map_err(|e| bad(format!("layer {}: filter: {e}", l.name)))?;
            let time = time::TimeSpec::from_layer(l).map_err(|e| bad(format!("layer {}: {e}", l.name)))?;
            let src = DType::from_name(&f.dtype).ok_or_else(|| bad(format!("layer {}: dtype {}", l.name, f.dtype)))?;
            let dtype = match &l.dtype {
                Some(t) => DType::from_name(t).ok_or_else(|| bad(format!("layer {}: dtype {t}", l.name)))?,
                None => src,
            };
            Ok(LayerSpec {
                name: l.name.clone(),
                assets: l.assets.clone(),
                resolution: l.resolution.unwrap_or(f.finest),
                resampling: l
                    .resampling
                    .as_deref()
                    .map(|k| Resampling::parse(k).unwrap_or(Resampling::Nearest))
                    .unwrap_or(Resampling::Nearest),
                dtype,
                bands: f.bands,
                asset_bands: f.asset_bands.clone(),
                nodata: l.nodata.unwrap_or(0.0),
                filter,
                time,
            })
        })
        .collect()
}

/// The dataset's fixed sample CRS (None: native).
fn fixed_crs(c: &DatasetConfig) -> Result<Option<Crs>> {
    Ok(match c.crs.as_deref() {
        None => None,
        Some(s) if s.eq_ignore_ascii_case("native") => None,
        Some(s) => Some(Crs::parse(s)?),
    })
}

/// Reads and parses the points file at `url`.
async fn read_points(stores: &Stores, url: &str) -> Result<points::PointSet> {
    let reader = stores.reader(url)?;
    let prefix = reader
        .read_prefix(points::MAX_POINTS_BYTES)
        .await
        .map_err(|e| Error::tiff(url, e.into()))?;
    if prefix.object_size > prefix.bytes.len() as u64 {
        return Err(Error::InvalidArgument(format!(
            "points {url}: {} bytes (at most {})",
            prefix.object_size,
            points::MAX_POINTS_BYTES
        )));
    }
    points::parse(url, &prefix.bytes).map_err(|m| Error::InvalidArgument(format!("points {url}: {m}")))
}

/// The centre pixel of each point in every drawable grid that holds it, priority order.
fn place_points(
    set: &points::PointSet,
    crs: &Crs,
    items: &[Item],
    bboxes: &[[f64; 4]],
    index: &cogfeed_stac::BboxIndex,
    drawn: &[usize],
    grids: &[RefGrid],
) -> Vec<(usize, Vec<crate::sampler::PointCentre>)> {
    let mut scene_of = vec![None; items.len()];
    for (scene, &item) in drawn.iter().enumerate() {
        scene_of[item] = Some(scene);
    }
    let wgs = Crs::from_epsg(4326).ok();
    let to_lonlat = wgs.as_ref().map(|w| Transformer::new(crs, w));
    let mut out = Vec::new();
    for (p, &(x, y)) in set.coords.iter().enumerate() {
        let Some((lon, lat)) = to_lonlat.as_ref().and_then(|t| t.point(x, y)) else {
            continue;
        };
        let mut near = index.query([lon, lat, lon, lat]);
        near.sort_unstable();
        let mut inside = Vec::new();
        for i in near {
            let b = bboxes[i];
            let Some(scene) = scene_of[i] else { continue };
            if lon < b[0] || lon > b[2] || lat < b[1] || lat > b[3] {
                continue;
            }
            let g = &grids[scene];
            let Some((gx, gy)) = Transformer::new(crs, &g.crs).point(x, y) else {
                continue;
            };
            let Ok(inv) = g.transform.inverse() else { continue };
            let (col, row) = inv.apply(gx, gy);
            if col >= 0.0 && row >= 0.0 && col < g.width as f64 && row < g.height as f64 {
                inside.push([scene as u64, col.floor() as u64, row.floor() as u64]);
            }
        }
        if !inside.is_empty() {
            out.push((p, inside));
        }
    }
    out
}

/// `part` after `bytes`, without a copy when `bytes` is still empty (one-asset layers).
fn append(bytes: &mut Vec<u8>, part: Vec<u8>) {
    if bytes.is_empty() {
        *bytes = part;
    } else {
        bytes.extend_from_slice(&part);
    }
}

/// The window of `src`'s full-resolution grid that is exactly `fp` (same CRS, north-up,
/// same pixel size, whole-pixel offset, starting inside the image), when the layer's
/// output is then the source's bytes: same sample type, and source nodata equal to the
/// layer's fill (or none). Every kernel reduces to a copy there, as in GDAL, which warps a
/// translation on pixel boundaries with nearest.
fn aligned_window(src: &AssetSource, fp: &Footprint, layer: &LayerSpec) -> Option<WindowSpec> {
    let t = src.transform;
    let res = fp.resolution;
    if src.crs != fp.crs || t.b != 0.0 || t.d != 0.0 || src.dtype != layer.dtype {
        return None;
    }
    let same = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    if !same(t.a, res) || !same(-t.e, res) {
        return None;
    }
    if src.nodata.iter().any(|n| n.is_some_and(|v| v != layer.nodata)) {
        return None;
    }
    let col = (fp.bounds[0] - t.c) / res;
    let row = (t.f - fp.bounds[3]) / res;
    let whole = |v: f64| (v - v.round()).abs() < 1e-6;
    if !whole(col) || !whole(row) || col.round() < 0.0 || row.round() < 0.0 {
        return None;
    }
    let (col, row) = (col.round() as u64, row.round() as u64);
    if col >= src.width || row >= src.height {
        return None;
    }
    Some(WindowSpec {
        scene: 0,
        col,
        row,
        width: u32::try_from(fp.width()).ok()?,
        height: u32::try_from(fp.height()).ok()?,
        level: 0,
        padded: false,
    })
}

/// The part of `g` inside `aoi` (EPSG:4326), snapped outwards to whole pixels (its origin
/// to the tile grid); None when they do not meet.
fn clip_to_aoi(g: &RefGrid, aoi: [f64; 4]) -> Option<RefGrid> {
    let wgs = Crs::from_epsg(4326).ok()?;
    let t = Affine::north_up(aoi[0], aoi[3], 1.0);
    let (mut xs, mut ys) = edge_points(&t, aoi[2] - aoi[0], aoi[3] - aoi[1], 20);
    Transformer::new(&wgs, &g.crs).transform(&mut xs, &mut ys);
    let b = bbox_of(&xs, &ys)?;
    let inv = g.transform.inverse().ok()?;
    let (c0, r0) = inv.apply(b[0], b[3]);
    let (c1, r1) = inv.apply(b[2], b[1]);
    // Snapped to the tile grid, so aligned windows still read one tile each.
    let (bw, bh) = (g.block.0.max(1) as f64, g.block.1.max(1) as f64);
    let col0 = ((c0 / bw).floor() * bw).max(0.0);
    let row0 = ((r0 / bh).floor() * bh).max(0.0);
    let col1 = c1.ceil().min(g.width as f64);
    let row1 = r1.ceil().min(g.height as f64);
    if !(col1 > col0 && row1 > row0) {
        return None;
    }
    let (x0, y0) = g.transform.apply(col0, row0);
    Some(RefGrid {
        crs: g.crs.clone(),
        transform: Affine::north_up(x0, y0, g.transform.a),
        width: (col1 - col0) as u64,
        height: (row1 - row0) as u64,
        block: g.block,
    })
}

/// The reference grid of `s` at resolution `res`, in `fixed` or in the asset's own CRS.
fn ref_grid(s: &AssetSource, res: f64, fixed: Option<&Crs>) -> std::result::Result<RefGrid, String> {
    let t = s.transform;
    let tile = s.object.cog.header().levels[0].block_width as f64;
    let tile_h = s.object.cog.header().levels[0].block_height as f64;
    let (px, py) = t.pixel_size();
    let block = |tile: f64, p: f64| ((tile * p / res).round() as u64).max(1);
    match fixed {
        Some(crs) if crs != &s.crs => {
            let (mut xs, mut ys) = edge_points(&t, s.width as f64, s.height as f64, 20);
            Transformer::new(&s.crs, crs).transform(&mut xs, &mut ys);
            let b = bbox_of(&xs, &ys).ok_or("its grid does not transform into the dataset's CRS")?;
            let (x0, y1) = ((b[0] / res).floor() * res, (b[3] / res).ceil() * res);
            let (x1, y0) = ((b[2] / res).ceil() * res, (b[1] / res).floor() * res);
            Ok(RefGrid {
                crs: crs.clone(),
                transform: Affine::north_up(x0, y1, res),
                width: ((x1 - x0) / res).round() as u64,
                height: ((y1 - y0) / res).round() as u64,
                block: (block(tile, px), block(tile_h, py)),
            })
        }
        _ => {
            if t.b != 0.0 || t.d != 0.0 || t.a <= 0.0 || t.e >= 0.0 {
                return Err("its reference asset's grid is not north-up; use a fixed crs".into());
            }
            Ok(RefGrid {
                crs: s.crs.clone(),
                transform: Affine::north_up(t.c, t.f, res),
                width: (s.width as f64 * px / res + 1e-9).floor() as u64,
                height: (s.height as f64 * py / res + 1e-9).floor() as u64,
                block: (block(tile, px), block(tile_h, py)),
            })
        }
    }
}
