//! Datasets: their scenes (explicit, listed under a prefix, or from a manifest file), label
//! pairing, bands, statistics and version (a hash of the scene manifest incl. versions).
//!
//! Everything about a dataset is checked once, at start-up, in one pass: objects that
//! cannot be opened, files truncated before their last tile, scenes of another band count
//! or dtype, labels of another size, dtype or overview count than their scene. Every bad
//! object is named; `on_bad_object = "skip"` serves the rest. A dataset that fails to open
//! does not take the others down: it is kept unready (see [`unready`]) and retried with
//! back-off, unless `server.require_all_datasets` asks for the old all-or-nothing start.
//! Clients only ever name datasets; every URL comes from the configuration.

pub mod map;
pub mod store_rules;
pub mod unready;

pub use map::rules::check_config;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use futures::StreamExt;
use sha2::{Digest, Sha256};

use crate::config::{DatasetConfig, OnBadObject, OnCorrupt};
use crate::error::{Error, Result};
use crate::storage::Stores;
use crate::tiles::{HeaderCache, TileObject, open};
use cogfeed_tiff::{DType, OpenOptions};
use unready::Unready;

/// One scene of a dataset.
#[derive(Debug, Clone)]
pub struct Scene {
    pub index: usize,
    /// File name (what clients see).
    pub name: String,
    /// The scene's object (scene datasets). Map-space scenes are reference grids: their
    /// assets are opened when a sample reads them, so they have none here.
    pub object: Option<TileObject>,
    /// The label raster paired with it (same grid).
    pub label: Option<TileObject>,
}

impl Scene {
    /// The scene's object; an error for a map-space scene.
    pub fn tiles(&self) -> Result<&TileObject> {
        self.object.as_ref().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "scene {} is a map-space reference grid, not one object",
                self.name
            ))
        })
    }
}

/// A served dataset.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub name: String,
    pub scenes: Vec<Scene>,
    /// 0-based bands served (requests may pick among these only).
    pub bands: Vec<usize>,
    pub dtype: DType,
    pub label_dtype: Option<DType>,
    pub fill: f64,
    pub mean: Vec<f64>,
    pub std: Vec<f64>,
    pub version: String,
    /// Overview levels every scene and label has.
    pub levels: usize,
    /// What a corrupt tile or missing object does to a sample by default.
    pub on_corrupt: OnCorrupt,
    /// STAC datasets: Items, layers and reference grids (scenes are then the drawable
    /// Items' reference assets). None for scene datasets.
    pub map: Option<Arc<crate::dataset::map::MapSpace>>,
    /// `[datasets.sampling]`'s order: what a request that names none gets.
    pub order: crate::sampler::OrderChoice,
}

/// Every dataset of the configuration. A dataset whose objects change is re-opened in
/// place (`refresh`): its version changes, and streams started after that see the new data.
#[derive(Debug)]
pub struct Catalog {
    datasets: RwLock<BTreeMap<String, Arc<Dataset>>>,
    /// Every scene and label of every dataset by URL (what peers ask for).
    objects: RwLock<HashMap<Arc<str>, TileObject>>,
    configs: Vec<DatasetConfig>,
    stores: Arc<Stores>,
    headers: HeaderCache,
    options: OpenOptions,
    /// Where per-version indexes are kept (None: not persisted).
    index_dir: Option<std::path::PathBuf>,
    refreshing: Mutex<HashSet<String>>,
    /// Datasets whose last re-open failed: when, and how many times in a row (the next
    /// attempt waits 2^n s, at most [`unready::RETRY_MAX`]).
    refresh_failures: Mutex<HashMap<String, (std::time::Instant, u32)>>,
    /// Configured datasets that failed to open and serve nothing yet.
    unready: RwLock<BTreeMap<String, Unready>>,
    /// The decoded-tile cache's capacity, which sizes a locality order's default dial.
    cache_bytes: u64,
}

fn stem(url: &str) -> &str {
    let name = url.rsplit('/').next().unwrap_or(url);
    name.rsplit_once('.').map(|(s, _)| s).unwrap_or(name)
}

/// Scene headers opened at once while building a dataset.
const OPEN_CONCURRENCY: usize = 64;

/// Opens a scene and its label raster (checked to be on the same grid, with as many
/// overview levels).
async fn open_scene(
    c: &DatasetConfig,
    stores: &Stores,
    headers: &HeaderCache,
    options: &OpenOptions,
    url: String,
) -> Result<(TileObject, Option<TileObject>)> {
    let url = url.as_str();
    let scene = open(stores, headers, url, options).await?;
    let label = match &c.labels {
        Some(template) => {
            let label_url = template.replace("{stem}", stem(url));
            let label = open(stores, headers, &label_url, options).await?;
            let (l, s) = (&label.cog.header().levels, &scene.cog.header().levels);
            if (l[0].width, l[0].height) != (s[0].width, s[0].height) {
                return Err(Error::InvalidArgument(format!(
                    "label {label_url} is {}x{}, its scene {url} is {}x{}",
                    l[0].width, l[0].height, s[0].width, s[0].height
                )));
            }
            if l[0].bands != 1 {
                return Err(Error::InvalidArgument(format!(
                    "label {label_url} has {} bands, labels have one",
                    l[0].bands
                )));
            }
            if l.len() < s.len() {
                return Err(Error::InvalidArgument(format!(
                    "label {label_url} has {} overview levels, its scene {url} has {}: \
                     windows at the missing levels could not be paired",
                    l.len() - 1,
                    s.len() - 1
                )));
            }
            for (i, (ll, sl)) in l.iter().zip(s.iter()).enumerate() {
                if (ll.width, ll.height) != (sl.width, sl.height) {
                    return Err(Error::InvalidArgument(format!(
                        "label {label_url} level {i} is {}x{}, its scene's is {}x{}",
                        ll.width, ll.height, sl.width, sl.height
                    )));
                }
            }
            Some(label)
        }
        None => None,
    };
    Ok((scene, label))
}

impl Catalog {
    /// Opens every scene and label of every dataset. A dataset that fails is logged with
    /// its full error and kept unready ([`Catalog::retry_unready`] tries it again); the
    /// build fails only when no dataset opens, or when `require_all` and any one fails
    /// (then with that dataset's error).
    pub async fn build(
        configs: &[DatasetConfig],
        stores: Arc<Stores>,
        headers: HeaderCache,
        options: OpenOptions,
        index_dir: Option<std::path::PathBuf>,
        require_all: bool,
    ) -> Result<Self> {
        let mut datasets = BTreeMap::new();
        let mut failed: Vec<(String, Error)> = Vec::new();
        for c in configs {
            match Self::dataset(c, &stores, &headers, &options, index_dir.as_deref(), false).await {
                Ok(d) => {
                    datasets.insert(c.name.clone(), Arc::new(d));
                }
                Err(e) if require_all => return Err(e),
                Err(e) => failed.push((c.name.clone(), e)),
            }
        }
        if datasets.is_empty() && !failed.is_empty() {
            if failed.len() == 1 {
                return Err(failed.remove(0).1);
            }
            let all: Vec<String> = failed.iter().map(|(n, e)| format!("dataset {n}: {e}")).collect();
            return Err(Error::FailedPrecondition(format!(
                "no dataset could be opened: {}",
                all.join("; ")
            )));
        }
        let mut unready = BTreeMap::new();
        for (name, e) in failed {
            tracing::error!(
                dataset = %name,
                error = %e,
                "dataset failed to open: the others are served, this one is retried in the background"
            );
            unready.insert(name, Unready::new(e.client_message()));
        }
        let objects = RwLock::new(Self::index(&datasets));
        Ok(Self {
            datasets: RwLock::new(datasets),
            objects,
            configs: configs.to_vec(),
            stores,
            headers,
            options,
            index_dir,
            refreshing: Mutex::new(HashSet::new()),
            refresh_failures: Mutex::new(HashMap::new()),
            unready: RwLock::new(unready),
            cache_bytes: crate::config::CacheConfig::default().capacity_bytes,
        })
    }

    /// The configured datasets that serve nothing yet, by name.
    pub fn unready(&self) -> BTreeMap<String, Unready> {
        self.unready.read().map(|u| u.clone()).unwrap_or_default()
    }

    /// Why dataset `name` does not serve (None: it serves, or it is not configured).
    pub fn unready_message(&self, name: &str) -> Option<String> {
        let u = self.unready.read().ok()?;
        u.get(name).map(|u| u.client_message(name))
    }

    /// Tells the catalog the decoded-tile cache's capacity (streams size the default
    /// `open_blocks` of a locality order from it).
    pub fn with_cache_bytes(mut self, bytes: u64) -> Self {
        self.cache_bytes = bytes;
        self
    }

    /// The decoded-tile cache's capacity.
    pub fn cache_bytes(&self) -> u64 {
        self.cache_bytes
    }

    /// Configured datasets, ready or not.
    pub fn configured(&self) -> usize {
        self.configs.len()
    }

    /// Tries again every unready dataset whose back-off has passed; one that opens joins
    /// the catalog and serves from then on. Returns how many are still unready.
    pub async fn retry_unready(&self) -> usize {
        let due: Vec<String> = self
            .unready()
            .into_iter()
            .filter(|(_, u)| u.next_attempt_in().is_zero())
            .map(|(n, _)| n)
            .collect();
        for name in due {
            let Some(config) = self.configs.iter().find(|c| c.name == name) else {
                continue;
            };
            let result = self.reopen(config, false).await;
            match result {
                Ok(dataset) => {
                    tracing::info!(dataset = %name, version = %dataset.version, "dataset opened on retry: it serves from now on");
                    if let Ok(mut all) = self.datasets.write() {
                        all.insert(name.clone(), Arc::new(dataset));
                        let index = Self::index(&all);
                        if let Ok(mut objects) = self.objects.write() {
                            *objects = index;
                        }
                    }
                    if let Ok(mut u) = self.unready.write() {
                        u.remove(&name);
                    }
                }
                Err(e) => {
                    if let Ok(mut u) = self.unready.write()
                        && let Some(entry) = u.get_mut(&name)
                    {
                        entry.failed_again(e.client_message());
                        tracing::warn!(
                            dataset = %name,
                            error = %e,
                            attempts = entry.attempts,
                            next_in_secs = entry.next_attempt_in().as_secs(),
                            "dataset still fails to open"
                        );
                    }
                }
            }
        }
        self.unready.read().map(|u| u.len()).unwrap_or(0)
    }

    /// Re-opens dataset `name` from its configuration (after one of its objects changed):
    /// headers are read again, the version is recomputed, and the new dataset replaces the
    /// old one for streams started from now on. Concurrent refreshes of one dataset run once.
    pub async fn refresh(&self, name: &str) -> Result<()> {
        let Some(config) = self.configs.iter().find(|c| c.name == name) else {
            return Ok(());
        };
        if let Ok(failures) = self.refresh_failures.lock()
            && let Some((at, n)) = failures.get(name)
            && at.elapsed() < unready::backoff(*n)
        {
            // A document that stays unreadable is not re-planned on every failing stream.
            return Ok(());
        }
        {
            let Ok(mut busy) = self.refreshing.lock() else {
                return Ok(());
            };
            if !busy.insert(name.to_string()) {
                return Ok(());
            }
        }
        if let Some(old) = self.get(name) {
            for scene in &old.scenes {
                for o in scene.object.iter().chain(&scene.label) {
                    self.headers.invalidate(&o.url).await;
                }
            }
            if let Some(map) = &old.map {
                for url in map.asset_urls() {
                    self.headers.invalidate(url).await;
                }
            }
        }
        let result = self.reopen(config, true).await;
        if let Ok(mut busy) = self.refreshing.lock() {
            busy.remove(name);
        }
        if let Ok(mut failures) = self.refresh_failures.lock() {
            match &result {
                Ok(_) => {
                    failures.remove(name);
                }
                Err(_) => {
                    let n = failures.get(name).map_or(0, |f| f.1).saturating_add(1);
                    failures.insert(name.to_string(), (std::time::Instant::now(), n));
                }
            }
        }
        let dataset = result?;
        tracing::info!(dataset = %name, version = %dataset.version, "dataset re-opened after a change");
        if let Ok(mut all) = self.datasets.write() {
            all.insert(name.to_string(), Arc::new(dataset));
            let index = Self::index(&all);
            if let Ok(mut objects) = self.objects.write() {
                *objects = index;
            }
        }
        Ok(())
    }

    /// Every object of `datasets` by URL.
    fn index(datasets: &BTreeMap<String, Arc<Dataset>>) -> HashMap<Arc<str>, TileObject> {
        let mut objects = HashMap::new();
        for d in datasets.values() {
            for s in &d.scenes {
                for o in s.object.iter().chain(&s.label) {
                    objects.insert(o.url.clone(), o.clone());
                }
            }
        }
        objects
    }

    async fn scene_urls(c: &DatasetConfig, stores: &Stores) -> Result<Vec<String>> {
        if let Some(prefix) = &c.prefix {
            return stores.list_tiffs(prefix).await;
        }
        if let Some(manifest) = &c.manifest {
            let text = std::fs::read_to_string(manifest).map_err(|e| Error::Io {
                context: format!("cannot read manifest {manifest}"),
                source: e,
            })?;
            return Ok(text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string)
                .collect());
        }
        Ok(c.scenes.clone())
    }

    /// Opens `config` again with this catalog's stores, caches and options (a retry of an
    /// unready dataset, or a refresh when `replan`).
    async fn reopen(&self, config: &DatasetConfig, replan: bool) -> Result<Dataset> {
        Self::dataset(
            config,
            &self.stores,
            &self.headers,
            &self.options,
            self.index_dir.as_deref(),
            replan,
        )
        .await
    }

    async fn dataset(
        c: &DatasetConfig,
        stores: &Arc<Stores>,
        headers: &HeaderCache,
        options: &OpenOptions,
        index_dir: Option<&std::path::Path>,
        replan: bool,
    ) -> Result<Dataset> {
        if c.stac.is_some() {
            return Self::stac_dataset(c, stores, headers, options, index_dir, replan).await;
        }
        let urls = Self::scene_urls(c, stores).await?;
        if urls.is_empty() {
            return Err(Error::InvalidArgument(format!("dataset {} has no scenes", c.name)));
        }
        // Headers open concurrently (a thousand scenes at 100 ms each would take minutes
        // one by one); `buffered` keeps the scene order. Every scene is tried, so that one
        // pass names every bad object.
        // Owned URLs: a stream over borrowed items would make this future's type
        // higher-ranked, and it could no longer be spawned (dataset refresh).
        let opened: Vec<Result<(TileObject, Option<TileObject>)>> = futures::stream::iter(urls.clone())
            .map(|url| open_scene(c, stores, headers, options, url))
            .buffered(OPEN_CONCURRENCY)
            .collect()
            .await;
        let mut good = Vec::with_capacity(urls.len());
        let mut bad: Vec<String> = Vec::new();
        for (url, r) in urls.iter().zip(opened) {
            match r {
                Ok(pair) => good.push((url, pair)),
                Err(e) => bad.push(e.to_string()),
            }
        }
        // Every scene must match the first good one; every label the first label.
        if let Some((_, (first, first_label))) = good.first() {
            let f = &first.cog.header().levels[0];
            let (nbands, dtype) = (f.bands, f.dtype);
            let label_dtype = first_label.as_ref().map(|l| l.cog.header().levels[0].dtype);
            let first_url = first.url.clone();
            good.retain(|(url, (scene, label))| {
                let l = &scene.cog.header().levels[0];
                if l.bands != nbands || l.dtype != dtype {
                    bad.push(format!(
                        "scene {url} has {} bands of {}, the first scene {first_url} {nbands} of {}",
                        l.bands,
                        l.dtype.name(),
                        dtype.name()
                    ));
                    return false;
                }
                if let (Some(label), Some(want)) = (label, label_dtype) {
                    let got = label.cog.header().levels[0].dtype;
                    if got != want {
                        bad.push(format!(
                            "label {} is {}, the first scene's label is {}",
                            label.url,
                            got.name(),
                            want.name()
                        ));
                        return false;
                    }
                }
                true
            });
        }
        if !bad.is_empty() {
            for b in &bad {
                tracing::error!(dataset = %c.name, problem = %b, "bad object");
            }
            if c.on_bad_object == OnBadObject::Fail || good.is_empty() {
                let what = if good.is_empty() {
                    "no usable scene"
                } else {
                    "bad objects"
                };
                return Err(Error::InvalidArgument(format!(
                    "dataset {}: {what} ({} of {}): {}{}",
                    c.name,
                    bad.len(),
                    urls.len(),
                    bad.join("; "),
                    if good.is_empty() {
                        ""
                    } else {
                        " (on_bad_object = \"skip\" serves the rest)"
                    }
                )));
            }
            tracing::warn!(
                dataset = %c.name,
                skipped = bad.len(),
                served = good.len(),
                "on_bad_object = skip: serving the dataset without its bad objects"
            );
        }
        let mut scenes = Vec::with_capacity(good.len());
        let mut hasher = Sha256::new();
        // The configured order enters the version where set (older versions stay).
        if let Some(sm) = c.sampling.as_ref().filter(|s| s.has_order()) {
            hasher.update(format!("order\t{}\n", sm.version_text()));
        }
        for (index, (url, (object, label))) in good.into_iter().enumerate() {
            hasher.update(format!(
                "{url}\t{}\t{}\n",
                object.version,
                object.cog.header().object_size
            ));
            if let Some(l) = &label {
                hasher.update(format!(
                    "label\t{}\t{}\t{}\n",
                    l.url,
                    l.version,
                    l.cog.header().object_size
                ));
            }
            scenes.push(Scene {
                index,
                name: url.rsplit('/').next().unwrap_or(url).to_string(),
                object: Some(object),
                label,
            });
        }
        let objects: Vec<&TileObject> = scenes.iter().map(Scene::tiles).collect::<Result<_>>()?;
        let first = &objects[0].cog.header().levels[0];
        let (nbands, dtype) = (first.bands, first.dtype);
        let bands: Vec<usize> = match &c.bands {
            Some(b) => b.iter().map(|&b| b as usize - 1).collect(),
            None => (0..nbands).collect(),
        };
        if let Some(&b) = bands.iter().find(|&&b| b >= nbands) {
            return Err(Error::InvalidArgument(format!(
                "dataset {}: band {} of {nbands}",
                c.name,
                b + 1
            )));
        }
        let label_dtype = scenes[0].label.as_ref().map(|l| l.cog.header().levels[0].dtype);
        let levels = objects.iter().map(|o| o.cog.header().levels.len()).min().unwrap_or(1);
        let stat = |v: &Option<Vec<f64>>, default: f64| -> Result<Vec<f64>> {
            match v {
                None => Ok(vec![default; bands.len()]),
                Some(v) if v.len() == bands.len() => Ok(v.clone()),
                Some(v) if v.len() == nbands => Ok(bands.iter().map(|&b| v[b]).collect()),
                Some(v) => Err(Error::InvalidArgument(format!(
                    "dataset {}: {} statistics for {} bands",
                    c.name,
                    v.len(),
                    bands.len()
                ))),
            }
        };
        Ok(Dataset {
            name: c.name.clone(),
            mean: stat(&c.mean, 0.0)?,
            std: stat(&c.std, 1.0)?,
            scenes,
            bands,
            dtype,
            label_dtype,
            fill: c.fill,
            version: hex::encode(hasher.finalize())[..16].to_string(),
            levels,
            on_corrupt: c.on_corrupt,
            map: None,
            order: configured_order(c),
        })
    }

    /// A STAC dataset: scenes are the drawable Items' reference assets; the reference layer
    /// gives bands, dtype and fill.
    async fn stac_dataset(
        c: &DatasetConfig,
        stores: &Arc<Stores>,
        headers: &HeaderCache,
        options: &OpenOptions,
        index_dir: Option<&std::path::Path>,
        replan: bool,
    ) -> Result<Dataset> {
        let (map, version) = crate::dataset::map::MapSpace::build(
            c,
            stores.clone(),
            headers.clone(),
            options.clone(),
            index_dir,
            replan,
        )
        .await?;
        let reference = &map.layers[0];
        let scenes = (0..map.grids.len())
            .map(|index| Scene {
                index,
                name: map.items[map.drawn[index]].id.clone(),
                object: None,
                label: None,
            })
            .collect();
        Ok(Dataset {
            name: c.name.clone(),
            scenes,
            bands: (0..reference.bands).collect(),
            dtype: reference.dtype,
            label_dtype: None,
            fill: reference.nodata,
            mean: vec![0.0; reference.bands],
            std: vec![1.0; reference.bands],
            version,
            levels: 1,
            on_corrupt: c.on_corrupt,
            map: Some(Arc::new(map)),
            order: configured_order(c),
        })
    }

    /// The opened object `url` (a scene or a label of any dataset).
    pub fn object(&self, url: &str) -> Option<TileObject> {
        self.objects.read().ok()?.get(url).cloned()
    }

    /// The object `url` a peer asks for: a scene or label (opened at start-up), else an
    /// asset a map-space dataset's layers read (opened now, through the header cache).
    /// None when no dataset reads it: a peer never makes this replica open anything else.
    pub async fn peer_object(&self, url: &str) -> Option<Result<TileObject>> {
        if let Some(o) = self.object(url) {
            return Some(Ok(o));
        }
        for ds in self.all() {
            if let Some(map) = &ds.map
                && let Some(opened) = map.peer_object(url).await
            {
                return Some(opened);
            }
        }
        None
    }

    /// The dataset called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Dataset>> {
        self.datasets.read().ok()?.get(name).cloned()
    }

    /// All datasets, by name.
    pub fn all(&self) -> Vec<Arc<Dataset>> {
        self.datasets
            .read()
            .map(|d| d.values().cloned().collect())
            .unwrap_or_default()
    }
}

/// A dataset's configured order (checked with the config: a bad one never gets here).
fn configured_order(c: &DatasetConfig) -> crate::sampler::OrderChoice {
    c.sampling
        .as_ref()
        .and_then(|s| crate::sampler::OrderChoice::configured(s.order.as_deref(), s.open_blocks, s.visits).ok())
        .unwrap_or_default()
}
