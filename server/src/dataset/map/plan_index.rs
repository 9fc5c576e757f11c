//! The plan index of a STAC dataset: what a restart reads back instead of parsing the STAC
//! document and opening every drawable Item's reference asset. It holds the selected Items
//! (priority order, only the assets some layer reads), which of them are drawn, their
//! reference grids, what each layer's assets hold, and the dataset version. It is kept in
//! `[cache] index_dir`, keyed by the document's URL and ETag, the points file's ETag and the
//! dataset's whole configuration, so a changed document, points file or key plans again.
//!
//! A restart that reads it back does not open the reference assets: an asset that changed
//! while the document did not is found when a sample first reads it (its header is checked
//! then, as every other asset's is), and a dataset refresh after a change plans again.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::DatasetConfig;
use crate::storage::Stores;
use cogfeed_geo::Affine;
use cogfeed_stac::Item;
use cogfeed_tiff::RangeReader;

/// Bumped when the format changes: older files are then ignored.
const FORMAT: &str = "cogfeed-plan-1";

/// What each layer's assets hold (from the first Item that has them all).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LayerFacts {
    /// The assets' sample type.
    pub dtype: String,
    pub bands: usize,
    pub asset_bands: Vec<usize>,
    /// The finest pixel size among the assets.
    pub finest: f64,
}

/// One reference grid.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GridEntry {
    pub crs: String,
    pub transform: Affine,
    pub width: u64,
    pub height: u64,
    pub block: (u64, u64),
}

impl GridEntry {
    /// The entry of `g`.
    pub fn of(g: &super::RefGrid) -> Self {
        Self {
            crs: g.crs.to_string(),
            transform: g.transform,
            width: g.width,
            height: g.height,
            block: g.block,
        }
    }
}

/// A dataset's plan.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    /// What it was planned from (see `key`); empty when not kept.
    pub key: String,
    pub items: Vec<Item>,
    /// Scene → Item index.
    pub drawn: Vec<usize>,
    /// Scene → reference grid.
    pub grids: Vec<GridEntry>,
    pub facts: Vec<LayerFacts>,
    pub version: String,
}

/// The key of dataset `c`'s plan: its document's URL, ETag and size, its points file's
/// ETag and size, and its whole configuration. None when the document cannot say (a prefix of Item files, a store
/// without ETags, an unreadable document: those are planned every time).
pub async fn key(stores: &Stores, c: &DatasetConfig) -> Option<String> {
    let url = c.stac.as_deref()?;
    if url.ends_with('/') {
        return None;
    }
    let prefix = stores.reader(url).ok()?.read_prefix(1).await.ok()?;
    let etag = prefix.version?;
    let config = serde_json::to_string(c).ok()?;
    let mut text = format!("{FORMAT}\t{url}\t{etag}\t{}\t{config}", prefix.object_size);
    // The points enter the version: a changed points file plans again too.
    if let Some(points) = &c.points {
        let p = stores.reader(points).ok()?.read_prefix(1).await.ok()?;
        text.push_str(&format!("\tpoints\t{}\t{}", p.version?, p.object_size));
    }
    Some(hex::encode(Sha256::digest(text.as_bytes())))
}

/// Where dataset `name`'s plan with `key` is kept under `dir`.
pub fn path(dir: &std::path::Path, name: &str, key: &str) -> std::path::PathBuf {
    dir.join(format!("{}-{}.plan.json", file_stem(name), &key[..key.len().min(16)]))
}

/// `name` as a file name's stem (letters, digits, `-` and `_`).
pub fn file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The plan at `path` when it belongs to `key` and holds together.
pub fn load(path: &std::path::Path, key: &str) -> Option<Plan> {
    let bytes = std::fs::read(path).ok()?;
    let plan: Plan = serde_json::from_slice(&bytes).ok()?;
    let whole =
        plan.key == key && plan.drawn.len() == plan.grids.len() && plan.drawn.iter().all(|&i| i < plan.items.len());
    whole.then_some(plan)
}

/// Writes `plan` to `path`.
pub fn save(path: &std::path::Path, plan: &Plan) -> std::io::Result<()> {
    write_atomically(path, &serde_json::to_vec(plan).map_err(std::io::Error::other)?)
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a reader never sees
/// half a file (and two writers of the same file leave one whole one).
pub fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
