//! The daemon's TOML configuration: parsed strictly (`deny_unknown_fields`), units in key
//! names, validated once into typed values.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

mod dataset;
pub use dataset::*;

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
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
    #[serde(default)]
    pub auth: AuthConfig,
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    #[serde(default)]
    pub cluster: Option<ClusterConfig>,
}

/// `[cluster]`: replicas that share one cache by tile ownership (rendezvous hashing).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// This replica's address as its peers reach it (`host:port`); `COGFEED_CLUSTER_SELF`
    /// overrides it (e.g. `$(POD_IP):50051` on Kubernetes).
    #[serde(rename = "self")]
    pub self_addr: String,
    /// Every replica, this one included.
    #[serde(default)]
    pub peers: Vec<String>,
    /// Or: a DNS name (`name:port`) whose addresses are the replicas, re-resolved every
    /// `refresh_secs` (a headless Service of a StatefulSet).
    #[serde(default)]
    pub peers_dns: Option<String>,
    #[serde(default = "default_refresh")]
    pub refresh_secs: f64,
    /// Deadline of one peer call.
    #[serde(default = "default_peer_timeout")]
    pub peer_timeout_ms: u64,
    /// A peer that failed is skipped for this long.
    #[serde(default = "default_peer_cooldown")]
    pub peer_cooldown_secs: f64,
    /// Tiles owned by other replicas are kept here, beside the main cache (default: an
    /// eighth of `cache.capacity_bytes`).
    #[serde(default)]
    pub near_cache_bytes: Option<u64>,
    /// Token this replica presents to its peers when they require one (a token of theirs
    /// with `datasets = ["*"]`).
    #[serde(default)]
    pub peer_token: Option<Secret>,
}

fn default_refresh() -> f64 {
    5.0
}
fn default_peer_timeout() -> u64 {
    2000
}
fn default_peer_cooldown() -> f64 {
    10.0
}

/// A credential from the config: shown as `<redacted>` by `Debug` and when the config is
/// printed, so it never reaches a log or an error.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself, for the one place that hands it to a store client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

/// `[auth]`: who may call the daemon. Tokens are stored as SHA-256 digests, never in clear.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Refuse calls without a valid token (otherwise anonymous callers read every dataset).
    #[serde(default)]
    pub required: bool,
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    /// Hex SHA-256 of the bearer token `/metrics` and the status page require (None:
    /// open, unless `required` is set, which then closes the whole status listener).
    #[serde(default)]
    pub metrics_token_sha256: Option<String>,
    /// Datasets the metrics token may preview on the status page (a preview is data);
    /// `"*"` = all. Default: all when `required` is false, none when it is true. A data
    /// token presented to `/preview.png` always brings its own scopes.
    #[serde(default)]
    pub metrics_datasets: Option<Vec<String>>,
}

/// `[[auth.tokens]]`: one bearer token.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Hex SHA-256 of the token (`printf %s "$TOKEN" | sha256sum`).
    pub sha256: String,
    /// Dataset names this token may read; `"*"` = all.
    pub datasets: Vec<String>,
    /// Name in logs and errors (default `token-N`, N = its position from 1).
    #[serde(default)]
    pub name: Option<String>,
    /// Concurrent streams for this token (default `limits.max_streams_per_token`).
    #[serde(default)]
    pub max_streams: Option<usize>,
    /// Calls per second for this token (default `limits.requests_per_second`).
    #[serde(default)]
    pub requests_per_second: Option<u32>,
}

/// `[tls]`: serve gRPC over TLS; paths are relative to the config file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// PEM CA bundle: when given, clients must present a certificate it signed (mTLS).
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
}

/// `[server]`: where to listen.
#[derive(Debug, Clone, Deserialize, Serialize)]
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
    /// Refuse to start when any dataset fails to open (default: serve the others and keep
    /// the failed ones unready, retried with back-off up to 5 min).
    #[serde(default)]
    pub require_all_datasets: bool,
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
            require_all_datasets: false,
        }
    }
}

/// `[cache]`: the shared decoded-tile cache.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// Capacity of the decoded-tile cache in bytes.
    #[serde(default = "default_cache_bytes")]
    pub capacity_bytes: u64,
    /// Headers kept open (one per object).
    #[serde(default = "default_header_entries")]
    pub header_entries: u64,
    /// Where per-dataset-version indexes (class histograms of `[datasets.balance]`) are
    /// kept across restarts. Default: `$XDG_CACHE_HOME/cogfeed/index` or
    /// `~/.cache/cogfeed/index`; `""` keeps them in memory only.
    #[serde(default)]
    pub index_dir: Option<PathBuf>,
    /// Capacity of the compressed tier: tile bytes as fetched, in RAM, below the decoded
    /// cache (a miss that hits it costs a decode, not a GET). Default: an eighth of
    /// `capacity_bytes`; 0 turns the tier off. Comes on top of `capacity_bytes`.
    #[serde(default)]
    pub compressed_bytes: Option<u64>,
    /// Capacity of the area where tiles prefetched by streams' plans wait for their read
    /// (remote stores only; beside the compressed tier, which prefetching needs). Default 0:
    /// no prefetching (the look-ahead hid 160 ms round trips on the benchmark machine, and
    /// prefetching gained nothing there). Comes on top of `capacity_bytes` and
    /// `compressed_bytes`.
    #[serde(default)]
    pub plan_prefetch_bytes: Option<u64>,
    /// Where the disk tier keeps compressed tiles across restarts (local NVMe). Default:
    /// none (no disk tier).
    #[serde(default)]
    pub disk_dir: Option<PathBuf>,
    /// Bytes the disk tier may hold (default 10 GiB).
    #[serde(default = "default_disk_bytes")]
    pub disk_bytes: u64,
    /// Which decoded tile goes first when the cache is full: `"plan"` (default: a tile no
    /// open stream plans to read again, then the one whose next planned read is furthest
    /// away) or `"lru"` (the least recently used).
    #[serde(default)]
    pub eviction: Eviction,
}

/// Which decoded tile goes first when the cache is full (`[cache] eviction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Eviction {
    /// A tile no open stream plans to read again, then the furthest next planned read
    /// (Belady).
    #[default]
    Plan,
    /// The least recently used.
    Lru,
}

fn default_disk_bytes() -> u64 {
    10 * 1024 * 1024 * 1024
}

fn default_cache_bytes() -> u64 {
    2 * 1024 * 1024 * 1024
}

impl CacheConfig {
    /// The compressed tier's capacity in bytes (0: off).
    pub fn compressed_bytes(&self) -> u64 {
        self.compressed_bytes.unwrap_or(self.capacity_bytes / 8)
    }

    /// The prefetch area's capacity in bytes (0: no prefetching; always 0 without the
    /// compressed tier).
    pub fn plan_prefetch_bytes(&self) -> u64 {
        match self.compressed_bytes() {
            0 => 0,
            _ => self.plan_prefetch_bytes.unwrap_or(0),
        }
    }

    /// The disk tier's directory, if the tier is on.
    pub fn disk_dir(&self) -> Option<&std::path::Path> {
        self.disk_dir.as_deref().filter(|p| !p.as_os_str().is_empty())
    }

    /// The index directory (None: indexes are not persisted).
    pub fn index_dir(&self) -> Option<PathBuf> {
        match &self.index_dir {
            Some(p) if p.as_os_str().is_empty() => None,
            Some(p) => Some(p.clone()),
            None => std::env::var_os("XDG_CACHE_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .map(|c| c.join("cogfeed").join("index")),
        }
    }
}

fn default_header_entries() -> u64 {
    10_000
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            capacity_bytes: default_cache_bytes(),
            header_entries: default_header_entries(),
            index_dir: None,
            compressed_bytes: None,
            plan_prefetch_bytes: None,
            disk_dir: None,
            disk_bytes: default_disk_bytes(),
            eviction: Default::default(),
        }
    }
}

/// `[store]`: object-store timeouts and retries, and the first header read.
#[derive(Debug, Clone, Deserialize, Serialize)]
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
    pub s3_secret_access_key: Option<Secret>,
    /// Each store's (bucket's) request-rate ceiling: the rate governor starts here and
    /// backs off on 503/429 answers, down to `min_requests_per_second`.
    #[serde(default = "default_max_rps")]
    pub max_requests_per_second: f64,
    #[serde(default = "default_min_rps")]
    pub min_requests_per_second: f64,
}

fn default_max_rps() -> f64 {
    3500.0
}

fn default_min_rps() -> f64 {
    1.0
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
            max_requests_per_second: default_max_rps(),
            min_requests_per_second: default_min_rps(),
        }
    }
}

/// `[limits]`: what one request, one caller and one connection may ask for. Every size a
/// client chooses is also admitted against `memory_budget_bytes` (see `memory.rs`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    #[serde(default = "default_max_patch")]
    pub max_patch_size: u32,
    #[serde(default = "default_max_batch")]
    pub max_batch_size: u32,
    /// Largest batch (and `ReadWindow` response) in bytes.
    #[serde(default = "default_max_batch_bytes")]
    pub max_batch_bytes: u64,
    #[serde(default = "default_max_streams")]
    pub max_streams: usize,
    /// Batches queued per stream ahead of the client (memory bound for slow clients).
    #[serde(default = "default_queue")]
    pub stream_queue_batches: usize,
    /// Bytes of samples one stream may load ahead (the self-tuned look-ahead's ceiling).
    #[serde(default = "default_max_prefetch_bytes")]
    pub max_prefetch_bytes: u64,
    /// Memory all request-sized allocations together may hold: streams' batches and
    /// look-ahead, `ReadWindow` responses (default: a quarter of the machine's or the
    /// cgroup's memory). The tile caches come on top (`cache.capacity_bytes`).
    #[serde(default)]
    pub memory_budget_bytes: Option<u64>,
    /// The most of the memory budget one caller (a token, or an anonymous client address)
    /// may hold, so that one client cannot spend it all (default: a quarter of it).
    #[serde(default)]
    pub memory_per_caller_bytes: Option<u64>,
    /// Deprecated: look-ahead now draws from `memory_budget_bytes`; accepted and ignored.
    #[serde(default, skip_serializing)]
    pub prefetch_budget_bytes: Option<u64>,
    /// How long a request waits for room in the memory budget before RESOURCE_EXHAUSTED.
    #[serde(default = "default_admission_wait")]
    pub admission_wait_secs: f64,
    /// A stream whose client has read nothing for this long is ended (UNAVAILABLE with
    /// the cursor to resume from) and its connection closed, freeing its slot and memory.
    #[serde(default = "default_stall_timeout")]
    pub stall_timeout_secs: f64,
    /// Concurrent streams per token, and per anonymous client address.
    #[serde(default = "default_max_streams_per_token")]
    pub max_streams_per_token: usize,
    /// Concurrent streams per job name.
    #[serde(default = "default_max_streams_per_job")]
    pub max_streams_per_job: usize,
    /// Concurrent calls on one HTTP/2 connection (SETTINGS_MAX_CONCURRENT_STREAMS: more
    /// wait in the client, they are never refused).
    #[serde(default = "default_max_streams_per_connection")]
    pub max_streams_per_connection: u32,
    /// Calls per second per token, and per anonymous client address; bursts of twice as
    /// many pass. Replica-to-replica calls are exempt.
    #[serde(default = "default_rps")]
    pub requests_per_second: u32,
    /// Open gRPC connections; at the limit, the connection idle longest is closed to make
    /// room for a new one.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// A connection whose client sent nothing for this long is closed (live clients answer
    /// the server's HTTP/2 keepalive pings, every `keepalive_secs`).
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout_secs: f64,
    /// Interval of the server's HTTP/2 keepalive pings (a client that does not answer one
    /// within 20 s is disconnected).
    #[serde(default = "default_keepalive")]
    pub keepalive_secs: f64,
}

fn default_admission_wait() -> f64 {
    10.0
}
fn default_stall_timeout() -> f64 {
    300.0
}
fn default_max_streams_per_token() -> usize {
    64
}
fn default_max_streams_per_connection() -> u32 {
    100
}
fn default_max_connections() -> usize {
    1024
}
fn default_idle_timeout() -> f64 {
    120.0
}
fn default_keepalive() -> f64 {
    30.0
}
fn default_max_prefetch_bytes() -> u64 {
    256 << 20
}
fn default_max_streams_per_job() -> usize {
    64
}
fn default_rps() -> u32 {
    200
}

fn default_max_patch() -> u32 {
    4096
}
fn default_max_batch() -> u32 {
    4096
}
fn default_max_batch_bytes() -> u64 {
    256 << 20
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
            max_prefetch_bytes: default_max_prefetch_bytes(),
            memory_budget_bytes: None,
            memory_per_caller_bytes: None,
            prefetch_budget_bytes: None,
            admission_wait_secs: default_admission_wait(),
            stall_timeout_secs: default_stall_timeout(),
            max_streams_per_token: default_max_streams_per_token(),
            max_streams_per_job: default_max_streams_per_job(),
            max_streams_per_connection: default_max_streams_per_connection(),
            requests_per_second: default_rps(),
            max_connections: default_max_connections(),
            idle_timeout_secs: default_idle_timeout(),
            keepalive_secs: default_keepalive(),
        }
    }
}

impl LimitsConfig {
    fn secs(v: f64) -> std::time::Duration {
        std::time::Duration::from_secs_f64(v)
    }

    pub fn admission_wait(&self) -> std::time::Duration {
        Self::secs(self.admission_wait_secs)
    }

    pub fn stall_timeout(&self) -> std::time::Duration {
        Self::secs(self.stall_timeout_secs)
    }

    pub fn idle_timeout(&self) -> std::time::Duration {
        Self::secs(self.idle_timeout_secs)
    }

    pub fn keepalive(&self) -> std::time::Duration {
        Self::secs(self.keepalive_secs)
    }
}

impl Config {
    /// Reads and validates a TOML file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
            context: format!("cannot read config {}", path.display()),
            source: e,
        })?;
        let mut config = Self::parse(&text)?;
        // TLS files are named relative to the config file.
        if let (Some(tls), Some(dir)) = (config.tls.as_mut(), path.parent()) {
            for p in [Some(&mut tls.cert), Some(&mut tls.key), tls.client_ca.as_mut()]
                .into_iter()
                .flatten()
            {
                if p.is_relative() {
                    *p = dir.join(&*p);
                }
            }
        }
        Ok(config)
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
        if self.cache.disk_dir().is_some() && self.cache.disk_bytes < 16 * 1024 * 1024 {
            return bad("cache.disk_bytes must be at least 16 MiB when cache.disk_dir is set".into());
        }
        let (hi, lo) = (self.store.max_requests_per_second, self.store.min_requests_per_second);
        if !(hi.is_finite() && lo.is_finite() && lo >= 0.1 && hi >= lo) {
            return bad(format!(
                "store.min_requests_per_second ({lo}) must be at least 0.1 and at most store.max_requests_per_second ({hi})"
            ));
        }
        if self.limits.stream_queue_batches == 0 {
            return bad("limits.stream_queue_batches must be at least 1".into());
        }
        if self.limits.max_streams_per_token == 0 || self.limits.max_streams_per_job == 0 {
            return bad("limits.max_streams_per_token and max_streams_per_job must be at least 1".into());
        }
        if self.limits.requests_per_second == 0 {
            return bad("limits.requests_per_second must be at least 1".into());
        }
        let l = &self.limits;
        for (name, v) in [
            ("admission_wait_secs", l.admission_wait_secs),
            ("stall_timeout_secs", l.stall_timeout_secs),
            ("idle_timeout_secs", l.idle_timeout_secs),
            ("keepalive_secs", l.keepalive_secs),
        ] {
            if !v.is_finite() || !(0.0..=1e7).contains(&v) || (v == 0.0 && name != "admission_wait_secs") {
                return bad(format!("limits.{name} must be a positive number of seconds"));
            }
        }
        if l.max_streams_per_connection == 0 || l.max_connections == 0 || l.max_streams == 0 {
            return bad("limits.max_streams, max_streams_per_connection and max_connections must be at least 1".into());
        }
        if l.max_batch_bytes == 0 || l.memory_budget_bytes.is_some_and(|b| b < (1 << 20)) {
            return bad("limits.max_batch_bytes must be positive and memory_budget_bytes at least 1 MiB".into());
        }
        if l.max_batch_bytes > cogfeed_proto::MAX_MESSAGE_BYTES as u64 {
            return bad(format!(
                "limits.max_batch_bytes must be at most {} (the largest gRPC message)",
                cogfeed_proto::MAX_MESSAGE_BYTES
            ));
        }
        self.validate_auth()?;
        if let Some(c) = &self.cluster {
            if c.peers.is_empty() == c.peers_dns.is_none() {
                return bad("cluster: give exactly one of peers, peers_dns".into());
            }
            if !c.peers.is_empty() && !c.peers.contains(&c.self_addr) {
                return bad(format!("cluster: self {:?} is not in peers", c.self_addr));
            }
            let positive = c.refresh_secs.is_finite() && c.refresh_secs > 0.0;
            let cooldown = c.peer_cooldown_secs.is_finite() && c.peer_cooldown_secs >= 0.0;
            if !positive || !cooldown || c.peer_timeout_ms == 0 {
                return bad("cluster: refresh_secs, peer_timeout_ms must be positive".into());
            }
            if self.tls.is_some() {
                return bad("cluster with [tls] is not supported yet: peers talk plain gRPC".into());
            }
        }
        let mut names = std::collections::HashSet::new();
        for d in &self.datasets {
            if d.name.is_empty() || !d.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
                return bad(format!("dataset name {:?}: use letters, digits, - _ .", d.name));
            }
            if !names.insert(&d.name) {
                return bad(format!("dataset {} defined twice", d.name));
            }
            let sources = (!d.scenes.is_empty()) as u8
                + d.prefix.is_some() as u8
                + d.manifest.is_some() as u8
                + d.stac.is_some() as u8;
            if sources != 1 {
                return bad(format!(
                    "dataset {}: give exactly one of scenes, prefix, manifest, stac",
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

    fn validate_auth(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(format!("config: {m}")));
        let a = &self.auth;
        if a.required && a.tokens.is_empty() {
            return bad("auth.required = true with no [[auth.tokens]] lets nobody in".into());
        }
        let is_digest = |h: &str| h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit());
        if let Some(m) = &a.metrics_token_sha256
            && !is_digest(m)
        {
            return bad("auth.metrics_token_sha256 must be 64 hex digits (a SHA-256)".into());
        }
        let mut seen = std::collections::HashSet::new();
        for (i, t) in a.tokens.iter().enumerate() {
            let n = i + 1;
            if !is_digest(&t.sha256) {
                return bad(format!(
                    "auth.tokens #{n}: sha256 must be 64 hex digits (the token's SHA-256, never the token)"
                ));
            }
            if !seen.insert(t.sha256.to_ascii_lowercase()) {
                return bad(format!("auth.tokens #{n}: the same token is listed twice"));
            }
            if t.datasets.is_empty() {
                return bad(format!("auth.tokens #{n}: datasets is empty (use [\"*\"] for all)"));
            }
            for d in &t.datasets {
                if d != "*" && !self.datasets.iter().any(|x| &x.name == d) {
                    return bad(format!("auth.tokens #{n}: unknown dataset {d:?}"));
                }
            }
            if t.max_streams == Some(0) || t.requests_per_second == Some(0) {
                return bad(format!("auth.tokens #{n}: limits must be at least 1"));
            }
        }
        for d in a.metrics_datasets.iter().flatten() {
            if d != "*" && !self.datasets.iter().any(|x| &x.name == d) {
                return bad(format!("auth.metrics_datasets: unknown dataset {d:?}"));
            }
        }
        Ok(())
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
        assert!(Config::parse("[cache]\ndisk_dir = \"/tmp/x\"\ndisk_bytes = 1000\n").is_err());
    }

    #[test]
    fn cache_tiers_default_to_an_eighth_in_ram_and_no_disk() {
        let c = Config::parse("[cache]\nplan_prefetch_bytes = 1048576\n").unwrap();
        assert_eq!(
            (c.cache.compressed_bytes(), c.cache.plan_prefetch_bytes()),
            (256 << 20, 1 << 20)
        );
        let c = Config::parse("[cache]\ncapacity_bytes = 8388608\n").unwrap();
        assert_eq!((c.cache.compressed_bytes(), c.cache.disk_dir()), (1048576, None));
        assert_eq!(c.cache.plan_prefetch_bytes(), 0);
        let c = Config::parse(
            "[cache]\ncompressed_bytes = 0\nplan_prefetch_bytes = 1048576\ndisk_dir = \"/nvme/cogfeed\"\ndisk_bytes = 1073741824\n",
        )
            .unwrap();
        assert_eq!((c.cache.compressed_bytes(), c.cache.plan_prefetch_bytes()), (0, 0));
        assert_eq!(c.cache.disk_dir(), Some(std::path::Path::new("/nvme/cogfeed")));
        assert_eq!(c.cache.disk_bytes, 1 << 30);
    }
}
