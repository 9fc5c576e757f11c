//! Object stores: a URL becomes an `object_store` store plus a path, and the pair becomes a
//! [`RangeReader`] for the format code.
//!
//! Credentials and endpoints come from each store's standard environment variables
//! (`AWS_*` incl. `AWS_ENDPOINT` and `AWS_ALLOW_HTTP`, `AZURE_*`, `GOOGLE_*`), read by the
//! `object_store` builders, unless a dataset's [`StoreProfile`] says otherwise (unsigned,
//! requester-pays, a region, credentials from other variables). Every store gets retries with exponential backoff and a
//! per-request timeout. No credential is ever part of an error message.

pub mod attempts;
pub mod pc_sign;
pub mod profile;
pub mod rate;
pub mod registry;
pub mod url;

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};

use crate::error::Result;
use cogfeed_tiff::{Prefix, RangeReader, ReadError};
pub use profile::{StoreProfile, StoreRules};
pub use registry::Stores;
pub use url::{Location, Scheme};

/// Default ceiling of a store's request rate: below S3's 5,500 GET/s per prefix.
pub const DEFAULT_MAX_REQUESTS_PER_SECOND: f64 = 3500.0;

/// Timeouts and retries applied to every store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Limit for one request, from connect to last byte.
    pub request_timeout: Duration,
    /// Limit for establishing a connection.
    pub connect_timeout: Duration,
    /// Retries of a failed request (5xx, timeouts, connection errors).
    pub max_retries: usize,
    /// Give up retrying after this long.
    pub retry_timeout: Duration,
    /// Added to every GET by [`ObjectReader`]: simulates a remote store's round trip for
    /// benchmarks on local data (object_store's `ThrottledStore` cannot wrap local files).
    /// Zero in production.
    pub simulated_latency: Duration,
    /// S3 endpoint, key id and secret overriding the environment (None = environment).
    pub s3_endpoint: Option<String>,
    pub s3_access_key_id: Option<String>,
    pub s3_secret_access_key: Option<crate::config::Secret>,
    /// Each store's request rate: the governor's ceiling (where it starts) and floor.
    pub max_requests_per_second: f64,
    pub min_requests_per_second: f64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            max_retries: 5,
            retry_timeout: Duration::from_secs(60),
            simulated_latency: Duration::ZERO,
            s3_endpoint: None,
            s3_access_key_id: None,
            s3_secret_access_key: None,
            max_requests_per_second: DEFAULT_MAX_REQUESTS_PER_SECOND,
            min_requests_per_second: 1.0,
        }
    }
}

/// Builds the store for `location` (one store per bucket/container/origin), with the
/// settings of `profile` where a dataset gave some.
pub fn build_store(
    location: &Location,
    options: &StoreOptions,
    profile: Option<&StoreProfile>,
    governor: Option<Arc<rate::RateGovernor>>,
) -> Result<Arc<dyn ObjectStore>> {
    // Planetary Computer: the container's SAS tokens, refreshed; a refusal (403) marks the
    // cached one stale.
    let signer = match profile {
        Some(p) if location.scheme == Scheme::Azure && p.config.sign == crate::config::Sign::PlanetaryComputer => {
            let account = p
                .config
                .account
                .clone()
                .or_else(|| std::env::var("AZURE_STORAGE_ACCOUNT_NAME").ok())
                .ok_or_else(|| crate::Error::InvalidUrl {
                    url: location.url.clone(),
                    reason:
                        "sign = \"planetary-computer\" needs [datasets.store] account (or AZURE_STORAGE_ACCOUNT_NAME)"
                            .into(),
                })?;
            Some(Arc::new(pc_sign::PcSigner::new(
                p.config
                    .sas_api
                    .as_deref()
                    .unwrap_or(crate::config::PLANETARY_COMPUTER_SAS_API),
                &account,
                &location.container,
                p.subscription_key.clone(),
            )))
        }
        _ => None,
    };
    let connector = || attempts::CountingConnector {
        governor: governor.clone(),
        on_denied: signer.clone(),
    };
    use object_store::{BackoffConfig, ClientConfigKey, RetryConfig};
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: options.max_retries,
        retry_timeout: options.retry_timeout,
    };
    let timeout = format!("{}ms", options.request_timeout.as_millis());
    let connect = format!("{}ms", options.connect_timeout.as_millis());
    let invalid = |e: object_store::Error| crate::Error::InvalidUrl {
        url: location.url.clone(),
        reason: e.to_string(),
    };
    let store: Arc<dyn ObjectStore> = match location.scheme {
        Scheme::Local => Arc::new(object_store::local::LocalFileSystem::new()),
        Scheme::S3 => {
            use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
            let mut b = AmazonS3Builder::from_env()
                .with_bucket_name(&location.container)
                .with_retry(retry)
                .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::Timeout), &timeout)
                .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout), &connect)
                .with_http_connector(connector());
            if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none() {
                b = b.with_region("us-east-1");
            }
            if let Some(endpoint) = &options.s3_endpoint {
                b = b
                    .with_endpoint(endpoint)
                    .with_allow_http(endpoint.starts_with("http://"));
            }
            if let Some(id) = &options.s3_access_key_id {
                b = b.with_access_key_id(id);
            }
            if let Some(secret) = &options.s3_secret_access_key {
                b = b.with_secret_access_key(secret.expose());
            }
            if let Some(p) = profile {
                if let Some(region) = &p.config.region {
                    b = b.with_region(region);
                }
                if let Some(endpoint) = &p.config.endpoint {
                    b = b
                        .with_endpoint(endpoint)
                        .with_allow_http(endpoint.starts_with("http://"));
                }
                if let Some((id, secret, token)) = &p.s3_credentials {
                    b = b
                        .with_access_key_id(id.expose())
                        .with_secret_access_key(secret.expose());
                    if let Some(t) = token {
                        b = b.with_token(t.expose());
                    }
                }
                b = b
                    .with_skip_signature(p.config.anonymous)
                    .with_request_payer(p.config.request_payer);
            }
            Arc::new(b.build().map_err(invalid)?)
        }
        Scheme::Azure => {
            use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
            let mut b = MicrosoftAzureBuilder::from_env()
                .with_container_name(&location.container)
                .with_retry(retry)
                .with_config(AzureConfigKey::Client(ClientConfigKey::Timeout), &timeout)
                .with_config(AzureConfigKey::Client(ClientConfigKey::ConnectTimeout), &connect)
                .with_http_connector(connector());
            if let Some(p) = profile {
                if let Some(account) = &p.config.account {
                    b = b.with_account(account);
                }
                if let Some(endpoint) = &p.config.endpoint {
                    b = b
                        .with_endpoint(endpoint.clone())
                        .with_allow_http(endpoint.starts_with("http://"));
                }
                if let Some(key) = &p.azure_account_key {
                    b = b.with_access_key(key.expose());
                }
                b = b.with_skip_signature(p.config.anonymous);
            }
            if let Some(s) = &signer {
                b = b.with_credentials(s.clone());
            }
            Arc::new(b.build().map_err(invalid)?)
        }
        Scheme::Gcs => {
            use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
            let mut b = GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(&location.container)
                .with_retry(retry)
                .with_config(GoogleConfigKey::Client(ClientConfigKey::Timeout), &timeout)
                .with_config(GoogleConfigKey::Client(ClientConfigKey::ConnectTimeout), &connect)
                .with_http_connector(connector());
            if let Some(p) = profile {
                b = b.with_skip_signature(p.config.anonymous);
            }
            Arc::new(b.build().map_err(invalid)?)
        }
        Scheme::Http => {
            use object_store::http::HttpBuilder;
            let b = HttpBuilder::new()
                .with_url(location.container.clone())
                .with_retry(retry)
                .with_config(ClientConfigKey::Timeout, &timeout)
                .with_config(ClientConfigKey::ConnectTimeout, &connect)
                .with_config(ClientConfigKey::AllowHttp, "true")
                .with_http_connector(connector());
            Arc::new(b.build().map_err(invalid)?)
        }
    };
    Ok(store)
}

/// Opens `url` as a range reader with its own store.
pub fn open_url(url: &str, options: &StoreOptions) -> Result<Arc<ObjectReader>> {
    let location = Location::parse(url)?;
    let store = build_store(&location, options, None, None)?;
    Ok(Arc::new(ObjectReader::new(store, location)))
}

/// One object in one store, readable by byte ranges.
#[derive(Debug, Clone)]
pub struct ObjectReader {
    store: Arc<dyn ObjectStore>,
    location: Location,
    latency: Duration,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    /// The ETag seen by the first read: later reads require it (`If-Match`), so a replaced
    /// object is never read half old, half new.
    etag: Arc<std::sync::OnceLock<String>>,
    /// A refused read is tried once more (its signer has refreshed its token by then).
    retry_denied: bool,
}

impl ObjectReader {
    /// Reads `location` through `store` (which must be the store for its container).
    pub fn new(store: Arc<dyn ObjectStore>, location: Location) -> Self {
        Self {
            store,
            location,
            latency: Duration::ZERO,
            metrics: None,
            etag: Arc::new(std::sync::OnceLock::new()),
            retry_denied: false,
        }
    }

    /// A read the store refuses (403, 401) is tried once more: for stores whose
    /// credentials expire (SAS tokens), refreshed after a refusal.
    pub fn with_retry_denied(mut self, retry: bool) -> Self {
        self.retry_denied = retry;
        self
    }

    async fn get(&self, options: GetOptions) -> object_store::Result<object_store::GetResult> {
        match self.store.get_opts(&self.location.path, options.clone()).await {
            Err(object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. })
                if self.retry_denied =>
            {
                tracing::warn!(object = %crate::redact::secrets(&self.location.url), "the store refused a read: retrying with a fresh token");
                self.store.get_opts(&self.location.path, options).await
            }
            other => other,
        }
    }

    /// Records requests, bytes and latency into `metrics`.
    pub fn with_metrics(mut self, metrics: Option<Arc<crate::metrics::Metrics>>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Runs one request with its metrics: in flight, latency, result and bytes.
    async fn metered<T>(
        &self,
        op: &str,
        request: impl std::future::Future<Output = Result<T, ReadError>>,
        size: impl Fn(&T) -> usize,
    ) -> Result<T, ReadError> {
        self.delay().await;
        let Some(m) = &self.metrics else {
            return request.await;
        };
        let store = self.location.scheme.name();
        let in_flight = m.store_in_flight.with_label_values(&[store]);
        in_flight.inc();
        let timer = m.store_seconds.with_label_values(&[store, op]).start_timer();
        let (out, attempts) = attempts::observe(request).await;
        timer.observe_duration();
        in_flight.dec();
        // Every attempt at this object but the last was retried (credential fetches aside).
        let name = self.location.path.filename().unwrap_or_default();
        let ours: Vec<_> = attempts.iter().filter(|a| a.path.ends_with(name)).collect();
        for a in ours.iter().take(ours.len().saturating_sub(1)) {
            m.store_retries
                .with_label_values(&[store, a.outcome.retry_reason()])
                .inc();
        }
        let result = match &out {
            Ok(v) => {
                let n = size(v);
                m.store_bytes.with_label_values(&[store, op]).inc_by(n as u64);
                "ok"
            }
            Err(ReadError::NotFound) => "not_found",
            Err(_) => "error",
        };
        m.store_requests.with_label_values(&[store, op, result]).inc();
        out
    }

    /// Adds `latency` before every GET (benchmarks only).
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    async fn fetch_prefix(&self, len: u64) -> Result<Prefix, ReadError> {
        let options = GetOptions {
            range: Some(GetRange::Bounded(0..len.max(1))),
            ..Default::default()
        };
        let result = match self.get(options).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Err(ReadError::NotFound),
            Err(e) => {
                // A zero-length object cannot serve a range; tell it apart with a HEAD.
                let meta = self.store.head(&self.location.path).await.map_err(read_error)?;
                if meta.size == 0 {
                    return Ok(Prefix {
                        bytes: Bytes::new(),
                        object_size: 0,
                        version: meta.e_tag,
                    });
                }
                return Err(read_error(e));
            }
        };
        let object_size = result.meta.size;
        let version = result.meta.e_tag.clone();
        if let Some(tag) = &version {
            let _ = self.etag.set(tag.clone());
        }
        let bytes = result.bytes().await.map_err(read_error)?;
        Ok(Prefix {
            bytes,
            object_size,
            version,
        })
    }

    async fn fetch_range(&self, range: Range<u64>) -> Result<Bytes, ReadError> {
        let want = range.end - range.start;
        let options = GetOptions {
            range: Some(GetRange::Bounded(range)),
            if_match: self.etag.get().cloned(),
            ..Default::default()
        };
        let result = self.get(options).await.map_err(read_error)?;
        // Stores that ignore If-Match still report the ETag of what they sent.
        if let (Some(expected), Some(got)) = (self.etag.get(), result.meta.e_tag.as_ref())
            && expected != got
        {
            return Err(ReadError::Changed);
        }
        let bytes = result.bytes().await.map_err(read_error)?;
        if bytes.len() as u64 != want {
            return Err(ReadError::Other(format!(
                "store returned {} of {want} bytes",
                bytes.len()
            )));
        }
        Ok(bytes)
    }

    async fn delay(&self) {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
    }

    /// The object's path inside its store.
    pub fn path(&self) -> &Path {
        &self.location.path
    }
}

/// Maps a store error onto the reader's small error set.
pub fn read_error(e: object_store::Error) -> ReadError {
    match e {
        object_store::Error::NotFound { .. } => ReadError::NotFound,
        object_store::Error::Precondition { .. } | object_store::Error::NotModified { .. } => ReadError::Changed,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            ReadError::Other("access denied by the store".into())
        }
        other => ReadError::Unavailable(other.to_string()),
    }
}

impl RangeReader for ObjectReader {
    fn name(&self) -> &str {
        &self.location.url
    }

    fn read_prefix(&self, len: u64) -> BoxFuture<'_, Result<Prefix, ReadError>> {
        Box::pin(self.metered("get", self.fetch_prefix(len), |p: &Prefix| p.bytes.len()))
    }

    fn read_range(&self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes, ReadError>> {
        Box::pin(self.metered("get", self.fetch_range(range), |b: &Bytes| b.len()))
    }
}
