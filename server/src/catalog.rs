//! Datasets: their scenes (explicit, listed under a prefix, or from a manifest file), label
//! pairing, bands, statistics and version (a hash of the scene manifest incl. versions).
//!
//! Clients only ever name datasets; every URL comes from the configuration.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use futures::{StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};

use crate::cache::HeaderCache;
use crate::cog::{Cog, DType, OpenOptions, RangeReader};
use crate::config::DatasetConfig;
use crate::error::{Error, Result};
use crate::storage::Stores;

/// One scene of a dataset.
#[derive(Debug, Clone)]
pub struct Scene {
    pub index: usize,
    /// File name (what clients see).
    pub name: String,
    pub url: Arc<str>,
    pub version: Arc<str>,
    pub cog: Cog,
    pub label: Option<LabelRaster>,
}

/// A label raster paired with a scene.
#[derive(Debug, Clone)]
pub struct LabelRaster {
    pub url: Arc<str>,
    pub version: Arc<str>,
    pub cog: Cog,
}

/// A served dataset.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub name: String,
    pub scenes: Vec<Scene>,
    /// 0-based bands served by default.
    pub bands: Vec<usize>,
    pub dtype: DType,
    pub label_dtype: Option<DType>,
    pub fill: f64,
    pub mean: Vec<f64>,
    pub std: Vec<f64>,
    pub version: String,
    pub levels: usize,
}

/// Every dataset of the configuration. A dataset whose objects change is re-opened in
/// place (`refresh`): its version changes, and streams started after that see the new data.
#[derive(Debug)]
pub struct Catalog {
    datasets: RwLock<BTreeMap<String, Arc<Dataset>>>,
    configs: Vec<DatasetConfig>,
    stores: Arc<Stores>,
    headers: HeaderCache,
    options: OpenOptions,
    refreshing: Mutex<HashSet<String>>,
}

fn version_of(cog: &Cog) -> Arc<str> {
    Arc::from(
        cog.version()
            .map(str::to_string)
            .unwrap_or_else(|| format!("size-{}", cog.header().object_size)),
    )
}

fn stem(url: &str) -> &str {
    let name = url.rsplit('/').next().unwrap_or(url);
    name.rsplit_once('.').map(|(s, _)| s).unwrap_or(name)
}

async fn open(stores: &Stores, headers: &HeaderCache, url: &str, options: &OpenOptions) -> Result<Cog> {
    let reader: Arc<dyn RangeReader> = stores.reader(url)?;
    headers
        .get_or_open(url, Cog::open(reader, options.clone()))
        .await
        .map_err(|e| Error::tiff(url, e))
}

/// Scene headers opened at once while building a dataset.
const OPEN_CONCURRENCY: usize = 64;

/// Opens a scene and its label raster (checked to be on the same grid).
async fn open_scene(
    c: &DatasetConfig,
    stores: &Stores,
    headers: &HeaderCache,
    options: &OpenOptions,
    url: String,
) -> Result<(Cog, Option<LabelRaster>)> {
    let url = url.as_str();
    let cog = open(stores, headers, url, options).await?;
    let label = match &c.labels {
        Some(template) => {
            let label_url = template.replace("{stem}", stem(url));
            let lcog = open(stores, headers, &label_url, options).await?;
            let (l, s) = (
                lcog.level(0).map_err(|e| Error::tiff(&label_url, e))?,
                &cog.header().levels[0],
            );
            if (l.width, l.height) != (s.width, s.height) {
                return Err(Error::InvalidArgument(format!(
                    "label {label_url} is {}x{}, its scene {url} is {}x{}",
                    l.width, l.height, s.width, s.height
                )));
            }
            Some(LabelRaster {
                url: Arc::from(label_url.as_str()),
                version: version_of(&lcog),
                cog: lcog,
            })
        }
        None => None,
    };
    Ok((cog, label))
}

impl Catalog {
    /// Opens every scene and label of every dataset; any problem is an error naming it.
    pub async fn build(
        configs: &[DatasetConfig],
        stores: Arc<Stores>,
        headers: HeaderCache,
        options: OpenOptions,
    ) -> Result<Self> {
        let mut datasets = BTreeMap::new();
        for c in configs {
            let d = Self::dataset(c, &stores, &headers, &options).await?;
            datasets.insert(c.name.clone(), Arc::new(d));
        }
        Ok(Self {
            datasets: RwLock::new(datasets),
            configs: configs.to_vec(),
            stores,
            headers,
            options,
            refreshing: Mutex::new(HashSet::new()),
        })
    }

    /// Re-opens dataset `name` from its configuration (after one of its objects changed):
    /// headers are read again, the version is recomputed, and the new dataset replaces the
    /// old one for streams started from now on. Concurrent refreshes of one dataset run once.
    pub async fn refresh(&self, name: &str) -> Result<()> {
        let Some(config) = self.configs.iter().find(|c| c.name == name) else {
            return Ok(());
        };
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
                self.headers.invalidate(&scene.url).await;
                if let Some(l) = &scene.label {
                    self.headers.invalidate(&l.url).await;
                }
            }
        }
        let result = Self::dataset(config, &self.stores, &self.headers, &self.options).await;
        if let Ok(mut busy) = self.refreshing.lock() {
            busy.remove(name);
        }
        let dataset = result?;
        tracing::info!(dataset = %name, version = %dataset.version, "dataset re-opened after a change");
        if let Ok(mut all) = self.datasets.write() {
            all.insert(name.to_string(), Arc::new(dataset));
        }
        Ok(())
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

    async fn dataset(
        c: &DatasetConfig,
        stores: &Stores,
        headers: &HeaderCache,
        options: &OpenOptions,
    ) -> Result<Dataset> {
        let urls = Self::scene_urls(c, stores).await?;
        if urls.is_empty() {
            return Err(Error::InvalidArgument(format!("dataset {} has no scenes", c.name)));
        }
        let mut scenes = Vec::with_capacity(urls.len());
        let mut hasher = Sha256::new();
        // Headers open concurrently (a thousand scenes at 100 ms each would take minutes
        // one by one); `buffered` keeps the scene order.
        // Owned URLs: a stream over borrowed items would make this future's type
        // higher-ranked, and it could no longer be spawned (dataset refresh).
        let opened: Vec<(Cog, Option<LabelRaster>)> = futures::stream::iter(urls.clone())
            .map(|url| open_scene(c, stores, headers, options, url))
            .buffered(OPEN_CONCURRENCY)
            .try_collect()
            .await?;
        for (index, (url, (cog, label))) in urls.iter().zip(opened).enumerate() {
            let version = version_of(&cog);
            hasher.update(format!("{url}\t{version}\t{}\n", cog.header().object_size));
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
                url: Arc::from(url.as_str()),
                version,
                cog,
                label,
            });
        }
        let first = &scenes[0].cog.header().levels[0];
        let (nbands, dtype) = (first.bands, first.dtype);
        for s in &scenes {
            let l = &s.cog.header().levels[0];
            if l.bands != nbands || l.dtype != dtype {
                return Err(Error::InvalidArgument(format!(
                    "dataset {}: scene {} has {} bands of {}, the first scene {} of {}",
                    c.name,
                    s.url,
                    l.bands,
                    l.dtype.name(),
                    nbands,
                    dtype.name()
                )));
            }
        }
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
        let levels = scenes.iter().map(|s| s.cog.header().levels.len()).min().unwrap_or(1);
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
        })
    }

    /// The dataset called `name`.
    /// The opened object `url` (a scene or a label of any dataset) with its URL and version.
    pub fn object(&self, url: &str) -> Option<(crate::cog::Cog, Arc<str>, Arc<str>)> {
        let datasets = self.datasets.read().ok()?;
        for d in datasets.values() {
            for s in &d.scenes {
                if &*s.url == url {
                    return Some((s.cog.clone(), s.url.clone(), s.version.clone()));
                }
                if let Some(l) = &s.label
                    && &*l.url == url
                {
                    return Some((l.cog.clone(), l.url.clone(), l.version.clone()));
                }
            }
        }
        None
    }

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
