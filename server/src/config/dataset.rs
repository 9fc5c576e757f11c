//! The `[[datasets]]` part of the schema: scene and STAC datasets, their layers,
//! sampling, balance and split tables, and the bad-data policies. Syntax only: the rules
//! that need the domain (kernels, time rules, CRS) are checked by `dataset::map::rules`.

use serde::{Deserialize, Serialize};

/// What a dataset does with a sample whose tile is corrupt or whose object is missing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnCorrupt {
    /// The stream ends with DATA_LOSS (or NOT_FOUND) naming the object and tile.
    #[default]
    Fail,
    /// The sample is left out of its batch, counted and logged; deterministic.
    Skip,
}

/// What start-up does with a scene or label that cannot be opened or fails its checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnBadObject {
    /// The daemon does not start; every bad object is listed.
    #[default]
    Fail,
    /// The dataset is served without them; every bad object is logged.
    Skip,
}

/// `[[datasets]]`: one named dataset.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetConfig {
    pub name: String,
    /// Explicit scene URLs.
    #[serde(default)]
    pub scenes: Vec<String>,
    /// Every `.tif`/`.tiff` directly under this prefix URL (listed on the store).
    #[serde(default)]
    pub prefix: Option<String>,
    /// A text file listing one scene URL per line.
    #[serde(default)]
    pub manifest: Option<String>,
    /// Label raster URL template; `{stem}` is the scene file name without extension.
    #[serde(default)]
    pub labels: Option<String>,
    /// 1-based bands served (default: all).
    #[serde(default)]
    pub bands: Option<Vec<u32>>,
    /// Value for pixels outside a scene (grid padding).
    #[serde(default)]
    pub fill: f64,
    /// Per-band mean for normalisation.
    #[serde(default)]
    pub mean: Option<Vec<f64>>,
    /// Per-band standard deviation for normalisation.
    #[serde(default)]
    pub std: Option<Vec<f64>>,
    /// A corrupt tile or missing object while streaming: `fail` (default) or `skip`.
    #[serde(default)]
    pub on_corrupt: OnCorrupt,
    /// A scene or label that cannot be opened at start-up: `fail` (default) or `skip`.
    #[serde(default)]
    pub on_bad_object: OnBadObject,
    /// A STAC source instead of `scenes`: an ItemCollection / Item / newline-delimited
    /// Items document, or a prefix (ending in `/`) of Item JSON files. Samples are then
    /// footprints in map space built from the Items' assets (docs/src/design/map-space.md).
    #[serde(default)]
    pub stac: Option<String>,
    /// STAC datasets: `native` (each sample in its Item's CRS) or `EPSG:<code>`.
    #[serde(default)]
    pub crs: Option<String>,
    /// STAC datasets: URL prefix rewrites applied to asset hrefs (longest prefix first).
    #[serde(default)]
    pub href_rewrite: std::collections::BTreeMap<String, String>,
    /// STAC datasets: the prefixes asset hrefs must start with (after `..` is resolved);
    /// default: the catalog document's own store (its directory for a local catalog) and
    /// the `href_rewrite` targets. An Item with an asset elsewhere is a bad object.
    #[serde(default)]
    pub allowed_prefixes: Option<Vec<String>>,
    /// STAC datasets: which Items are used (`datetime`, `bbox`, `collections`, and
    /// property predicates such as `"eo:cloud_cover" = "<= 20"`).
    #[serde(default)]
    pub filter: Option<toml::Table>,
    /// STAC datasets: mosaic priority, first key first: `datetime`, `-datetime` (newest
    /// first), `id`, `-id`. Default `["datetime", "id"]`.
    #[serde(default)]
    pub priority: Option<Vec<String>>,
    /// STAC datasets: which Items may fill a footprint besides the one it was drawn from:
    /// `same_day` (default: Items of the drawn Item's collection acquired the same UTC
    /// day; Items of other collections whatever their date) or `all`.
    #[serde(default)]
    pub mosaic: Option<String>,
    /// STAC datasets: the named output layers; the first is the reference layer.
    #[serde(default)]
    pub layers: Vec<LayerConfig>,
    /// STAC datasets: an area of interest `[minlon, minlat, maxlon, maxlat]` (EPSG:4326);
    /// samples are drawn only where an Item's reference grid meets it.
    #[serde(default)]
    pub aoi: Option<[f64; 4]>,
    /// STAC datasets: which drawn samples are kept (valid- and cloud-aware sampling).
    #[serde(default)]
    pub sampling: Option<SamplingConfig>,
    /// STAC datasets: spatial train/val/test splits.
    #[serde(default)]
    pub split: Option<SplitConfig>,
    /// STAC datasets: points for the `points` sampler (GeoJSON of Point features, or CSV
    /// with lon/lat columns); their numeric attributes travel as targets.
    #[serde(default)]
    pub points: Option<String>,
    /// CRS of `points` (default EPSG:4326).
    #[serde(default)]
    pub points_crs: Option<String>,
    /// STAC datasets: class-balanced draws for the `balanced` sampler.
    #[serde(default)]
    pub balance: Option<BalanceConfig>,
    /// How this dataset's objects are requested (absent: the stores' environment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<DatasetStoreConfig>,
}

/// How requests are signed (`[datasets.store] sign`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sign {
    /// The store's own credentials (environment, or the `*_env` variables named here).
    #[default]
    None,
    /// Planetary Computer: short-lived SAS tokens from its token API (`sas_api`), one per
    /// account and container, refreshed before they expire (Azure).
    PlanetaryComputer,
}

/// `[datasets.store]`: how the dataset's objects are requested — its document and every
/// asset href, scene, label and points file — applied per bucket, container or origin
/// they live in. Credentials are given by the *names* of environment variables, never
/// their values.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields)]
pub struct DatasetStoreConfig {
    /// Unsigned requests (public buckets: Earth Search's `sentinel-cogs`, public GCS).
    #[serde(default)]
    pub anonymous: bool,
    /// S3 requester-pays (`x-amz-request-payer: requester`, e.g. `s3://usgs-landsat`).
    #[serde(default)]
    pub request_payer: bool,
    /// How requests are signed.
    #[serde(default)]
    pub sign: Sign,
    /// S3 region of the dataset's buckets (default: `AWS_REGION`, else us-east-1).
    #[serde(default)]
    pub region: Option<String>,
    /// Endpoint of the dataset's buckets or containers: S3-compatible (default: `[store]
    /// s3_endpoint`, else `AWS_ENDPOINT`, else AWS) or Azure Blob (default: the account's).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Environment variable holding the S3 access key id.
    #[serde(default)]
    pub access_key_id_env: Option<String>,
    /// Environment variable holding the S3 secret access key.
    #[serde(default)]
    pub secret_access_key_env: Option<String>,
    /// Environment variable holding an S3 session token.
    #[serde(default)]
    pub session_token_env: Option<String>,
    /// Environment variable holding an Azure storage account key.
    #[serde(default)]
    pub azure_account_key_env: Option<String>,
    /// Azure storage account of the dataset's containers (default: `AZURE_STORAGE_ACCOUNT_NAME`),
    /// e.g. `sentinel2l2a01` for Planetary Computer's Sentinel-2 L2A.
    #[serde(default)]
    pub account: Option<String>,
    /// `sign = "planetary-computer"`: the token API (default: Planetary Computer's own).
    #[serde(default)]
    pub sas_api: Option<String>,
    /// `sign = "planetary-computer"`: environment variable holding a subscription key
    /// (sent as `Ocp-Apim-Subscription-Key`; optional).
    #[serde(default)]
    pub subscription_key_env: Option<String>,
}

/// Planetary Computer's token API.
pub const PLANETARY_COMPUTER_SAS_API: &str = "https://planetarycomputer.microsoft.com/api/sas/v1";

/// `[[datasets.layers]]`: one named output of a STAC dataset.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LayerConfig {
    pub name: String,
    /// Asset keys, in band order.
    pub assets: Vec<String>,
    /// Pixel size in CRS units (default: the finest of its assets, from the first Item).
    #[serde(default)]
    pub resolution: Option<f64>,
    /// nearest (default), bilinear, cubic, average, mode.
    #[serde(default)]
    pub resampling: Option<String>,
    /// Output sample type (default: the assets' own).
    #[serde(default)]
    pub dtype: Option<String>,
    /// Value where no Item has data (default 0).
    #[serde(default)]
    pub nodata: Option<f64>,
    /// Which Items this layer reads, on top of the dataset's filter (same keys): e.g.
    /// `collections` for a layer of another collection, `"sat:orbit_state" = "ascending"`.
    #[serde(default)]
    pub filter: Option<toml::Table>,
    /// Dates per sample (the layer's tensor is then `[B, T, C, H, W]`); 0 or absent: one
    /// mosaic, as without time.
    #[serde(default)]
    pub time_steps: Option<u32>,
    /// `latest` (default: the T latest dates up to the drawn Item's), `even` (T dates
    /// nearest to T instants evenly spaced over `time_range`) or `season` (every date in
    /// `season` of the drawn Item's year, oldest first, up to T).
    #[serde(default)]
    pub time_rule: Option<String>,
    /// `even`: `["YYYY-MM-DD", "YYYY-MM-DD"]`, both days included.
    #[serde(default)]
    pub time_range: Option<[String; 2]>,
    /// `season`: `["MM-DD", "MM-DD"]`, both days included (may wrap the new year).
    #[serde(default)]
    pub season: Option<[String; 2]>,
    /// Sentinel-2 L2A harmonisation per Item (its processing baseline): `s2-l2a` puts every
    /// date on the pre-04.00 scale (subtract BOA_ADD_OFFSET where applied), `s2-l2a-new`
    /// on the 04.00 scale (add it where not). Absent: values as the Items hold them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harmonize: Option<String>,
}

/// `[datasets.sampling]`: which drawn samples are kept (STAC datasets, random and aligned
/// samplers; a sample that fails is redrawn deterministically), and the order an epoch is
/// served in (`order`, `open_blocks`, `visits`: every dataset).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SamplingConfig {
    /// Least fraction of the reference layer's pixels that hold data (and, with
    /// `mask_layer`, are not of an invalid class).
    #[serde(default)]
    pub min_valid_fraction: Option<f64>,
    /// A layer whose first band holds classes (e.g. Sentinel-2 SCL).
    #[serde(default)]
    pub mask_layer: Option<String>,
    /// Classes of `mask_layer` that count as invalid (e.g. `[0, 1, 3, 8, 9, 10]`).
    #[serde(default)]
    pub invalid_classes: Vec<i64>,
    /// Draws tried per sample before the stream fails (default 64).
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// Keep only draws whose streamed time layers fill all their steps: a draw with a
    /// missing date is rejected and redrawn like an invalid one (random, aligned and
    /// balanced samplers; a grid or points sampler keeps its samples).
    #[serde(default)]
    pub require_full_series: bool,
    /// How an epoch is ordered: `"random"` (the default: the sampler's own order) or
    /// `"local"` (samples grouped by the reference grid's tile block and served so that
    /// samples sharing source tiles come close together). Requests may override it.
    #[serde(default)]
    pub order: Option<String>,
    /// `order = "local"`: groups served side by side (1..=4096; default: sized from the
    /// tile cache, see the sampling docs).
    #[serde(default)]
    pub open_blocks: Option<u32>,
    /// `order = "local"`: times each group is opened per epoch (1..=64; default 1).
    #[serde(default)]
    pub visits: Option<u32>,
}

impl SamplingConfig {
    /// The keys that keep or reject samples (STAC datasets only), as opposed to the order.
    pub fn has_rules(&self) -> bool {
        self.min_valid_fraction.is_some()
            || self.mask_layer.is_some()
            || !self.invalid_classes.is_empty()
            || self.max_attempts.is_some()
            || self.require_full_series
    }

    /// The keys that order the epoch.
    pub fn has_order(&self) -> bool {
        self.order.is_some() || self.open_blocks.is_some() || self.visits.is_some()
    }

    /// What a dataset's version hashes: the rules as they were written before the order
    /// keys existed (so versions of older configs stay), then the order keys where set.
    pub fn version_text(&self) -> String {
        let rules = format!(
            "SamplingConfig {{ min_valid_fraction: {:?}, mask_layer: {:?}, invalid_classes: {:?}, max_attempts: {:?}, require_full_series: {:?} }}",
            self.min_valid_fraction, self.mask_layer, self.invalid_classes, self.max_attempts, self.require_full_series
        );
        if self.has_order() {
            format!(
                "{rules}\torder\t{:?}\t{:?}\t{:?}",
                self.order, self.open_blocks, self.visits
            )
        } else {
            rules
        }
    }
}

/// `[datasets.balance]`: class-balanced sampling from a class layer's histograms.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BalanceConfig {
    /// The class layer (its first band holds integer classes).
    pub layer: String,
    /// Target share of each listed class among counted pixels (`{ "6" = 0.3 }`); classes
    /// not listed share the rest in their natural ratios.
    #[serde(default)]
    pub proportions: std::collections::BTreeMap<String, f64>,
    /// `inverse`: inverse-frequency weights, every class present gets an equal share.
    #[serde(default)]
    pub weights: Option<String>,
    /// Side of a candidate cell in reference pixels (default 256): histograms are per
    /// cell, and a balanced draw picks a cell, then a window in it.
    #[serde(default)]
    pub cell_size: Option<u32>,
    /// Class-layer samples across a cell when its histogram is computed (default 16).
    #[serde(default)]
    pub samples_per_cell: Option<u32>,
    /// Classes not counted (default: the class layer's nodata).
    #[serde(default)]
    pub ignore: Vec<i64>,
}

/// `[datasets.split]`: leak-free spatial splits over equal-area cells.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SplitConfig {
    /// Cell side in metres, in EPSG:6933 (equal-area).
    pub cell_size: f64,
    /// Split name → fraction of the cells (they must add up to 1).
    pub fractions: std::collections::BTreeMap<String, f64>,
    #[serde(default)]
    pub seed: u64,
}
