//! The daemon's TOML configuration: parsed strictly (`deny_unknown_fields`), units in key
//! names, validated once into typed values.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub cache: CacheConfig,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub datasets: Vec<DatasetConfig>,
}

/// `[server]`: where to listen.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// gRPC listen address.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Metrics and health listen address.
    #[serde(default = "default_metrics_listen")]
    pub metrics_listen: SocketAddr,
    /// Distinct `job` label values exported; more jobs are folded into `other`.
    #[serde(default = "default_max_jobs")]
    pub max_job_labels: usize,
}

fn default_max_jobs() -> usize {
    32
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 50051))
}

fn default_metrics_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9464))
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            metrics_listen: default_metrics_listen(),
            max_job_labels: default_max_jobs(),
        }
    }
}

/// `[cache]`: the shared decoded-tile cache.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// Capacity of the decoded-tile cache in bytes.
    #[serde(default = "default_cache_bytes")]
    pub capacity_bytes: u64,
    /// Headers kept open (one per object).
    #[serde(default = "default_header_entries")]
    pub header_entries: u64,
}

fn default_cache_bytes() -> u64 {
    2 * 1024 * 1024 * 1024
}

fn default_header_entries() -> u64 {
    10_000
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            capacity_bytes: default_cache_bytes(),
            header_entries: default_header_entries(),
        }
    }
}

/// `[store]`: object-store timeouts and retries, and the first header read.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    #[serde(default = "default_request_timeout")]
    pub request_timeout_secs: f64,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: f64,
    #[serde(default = "default_retries")]
    pub max_retries: usize,
    #[serde(default = "default_prefix")]
    pub header_prefix_bytes: u64,
    /// Extra delay per GET, for benchmarking latency hiding on local data (0 = none).
    #[serde(default)]
    pub simulated_latency_ms: u64,
    /// S3 endpoint (overrides `AWS_ENDPOINT`), for S3-compatible servers.
    #[serde(default)]
    pub s3_endpoint: Option<String>,
    /// S3 access key id (overrides `AWS_ACCESS_KEY_ID`; prefer the environment or a secret).
    #[serde(default)]
    pub s3_access_key_id: Option<String>,
    /// S3 secret (overrides `AWS_SECRET_ACCESS_KEY`; prefer the environment or a secret).
    #[serde(default)]
    pub s3_secret_access_key: Option<String>,
}

fn default_request_timeout() -> f64 {
    30.0
}
fn default_connect_timeout() -> f64 {
    5.0
}
fn default_retries() -> usize {
    5
}
fn default_prefix() -> u64 {
    32 * 1024
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            request_timeout_secs: default_request_timeout(),
            connect_timeout_secs: default_connect_timeout(),
            max_retries: default_retries(),
            header_prefix_bytes: default_prefix(),
            simulated_latency_ms: 0,
            s3_endpoint: None,
            s3_access_key_id: None,
            s3_secret_access_key: None,
        }
    }
}

/// `[limits]`: what one request may ask for.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    #[serde(default = "default_max_patch")]
    pub max_patch_size: u32,
    #[serde(default = "default_max_batch")]
    pub max_batch_size: u32,
    #[serde(default = "default_max_batch_bytes")]
    pub max_batch_bytes: u64,
    #[serde(default = "default_max_streams")]
    pub max_streams: usize,
    /// Batches queued per stream ahead of the client (memory bound for slow clients).
    #[serde(default = "default_queue")]
    pub stream_queue_batches: usize,
}

fn default_max_patch() -> u32 {
    4096
}
fn default_max_batch() -> u32 {
    4096
}
fn default_max_batch_bytes() -> u64 {
    1 << 30
}
fn default_max_streams() -> usize {
    256
}
fn default_queue() -> usize {
    4
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_patch_size: default_max_patch(),
            max_batch_size: default_max_batch(),
            max_batch_bytes: default_max_batch_bytes(),
            max_streams: default_max_streams(),
            stream_queue_batches: default_queue(),
        }
    }
}

/// `[[datasets]]`: one named dataset.
#[derive(Debug, Clone, Deserialize)]
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
}

impl Config {
    /// Reads and validates a TOML file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
            context: format!("cannot read config {}", path.display()),
            source: e,
        })?;
        Self::parse(&text)
    }

    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> Result<Self> {
        let config: Config =
            toml::from_str(text).map_err(|e| Error::InvalidArgument(format!("config: {}", e.message())))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the values that serde cannot.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(format!("config: {m}")));
        if self.cache.capacity_bytes < 1024 * 1024 {
            return bad("cache.capacity_bytes must be at least 1 MiB".into());
        }
        if self.limits.stream_queue_batches == 0 {
            return bad("limits.stream_queue_batches must be at least 1".into());
        }
        let mut names = std::collections::HashSet::new();
        for d in &self.datasets {
            if d.name.is_empty() || !d.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
                return bad(format!("dataset name {:?}: use letters, digits, - _ .", d.name));
            }
            if !names.insert(&d.name) {
                return bad(format!("dataset {} defined twice", d.name));
            }
            let sources = (!d.scenes.is_empty()) as u8 + d.prefix.is_some() as u8 + d.manifest.is_some() as u8;
            if sources != 1 {
                return bad(format!(
                    "dataset {}: give exactly one of scenes, prefix, manifest",
                    d.name
                ));
            }
            if let Some(b) = &d.bands
                && (b.is_empty() || b.contains(&0))
            {
                return bad(format!("dataset {}: bands are 1-based and non-empty", d.name));
            }
            if let (Some(m), Some(s)) = (&d.mean, &d.std)
                && m.len() != s.len()
            {
                return bad(format!("dataset {}: mean and std differ in length", d.name));
            }
            if d.std.as_ref().is_some_and(|s| s.iter().any(|v| *v <= 0.0)) {
                return bad(format!("dataset {}: std values must be positive", d.name));
            }
        }
        Ok(())
    }

    /// The embedded default: the demo dataset in `dir`, local addresses.
    pub fn demo(dir: &Path) -> Self {
        let url = |p: PathBuf| p.to_string_lossy().into_owned();
        let scenes = (0..crate::demo::SCENES)
            .map(|s| url(dir.join(format!("scene_{s:02}.tif"))))
            .collect();
        Config {
            datasets: vec![DatasetConfig {
                name: "demo".into(),
                scenes,
                prefix: None,
                manifest: None,
                labels: Some(url(dir.join("labels").join("{stem}.tif"))),
                bands: None,
                fill: 0.0,
                mean: Some(vec![30000.0; 4]),
                std: Some(vec![12000.0; 4]),
            }],
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_keys() {
        let c = Config::parse(
            r#"
            [server]
            listen = "127.0.0.1:50051"
            metrics_listen = "127.0.0.1:9464"
            [cache]
            capacity_bytes = 2147483648
            [[datasets]]
            name = "demo"
            scenes = ["file:///data/a.tif", "s3://bucket/b.tif"]
            labels = "file:///data/labels/{stem}.tif"
            bands = [1, 2, 3, 4]
            fill = 0
            "#,
        )
        .unwrap();
        assert_eq!(c.cache.capacity_bytes, 2147483648);
        assert_eq!(c.datasets[0].scenes.len(), 2);
        assert_eq!(c.datasets[0].bands, Some(vec![1, 2, 3, 4]));
    }

    #[test]
    fn rejects_unknown_keys_and_bad_values() {
        assert!(Config::parse("[server]\nlisten = \"127.0.0.1:1\"\nport = 3\n").is_err());
        assert!(Config::parse("[[datasets]]\nname = \"x\"\n").is_err());
        assert!(Config::parse("[[datasets]]\nname = \"x\"\nscenes = [\"a.tif\"]\nprefix = \"s3://b/\"\n").is_err());
        assert!(Config::parse("[[datasets]]\nname = \"x\"\nscenes = [\"a.tif\"]\nbands = [0]\n").is_err());
        assert!(Config::parse("[cache]\ncapacity_bytes = 10\n").is_err());
    }
}
