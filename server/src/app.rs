//! Builds the daemon from a `Config` and serves it: gRPC (Feed, Peer, health, reflection
//! v1 and v1alpha) on one listener until the shutdown future resolves, and `/metrics`,
//! `/healthz`, `/readyz` on another. Every background task watches one cancellation token
//! ([`App::stop`]), cancelled when serving ends.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use cogfeed_proto::v1::feed_server::FeedServer;

use crate::api::auth::{Auth, JobSlots};
use crate::api::live::LiveStreams;
use crate::api::peer::PeerService;
use crate::api::{FeedService, MAX_MESSAGE_BYTES, MAX_REQUEST_BYTES, connections, tls};
use crate::cluster::Cluster;
use crate::config::Config;
use crate::dataset::Catalog;
use crate::error::{Error, Result};
use crate::memory::MemoryBudget;
use crate::metrics::Metrics;
use crate::storage::{StoreOptions, Stores};
use crate::tiles::{HeaderCache, TileCache, TileSource};
use cogfeed_tiff::OpenOptions;

/// Bound on the time from the shutdown signal to the end of serving (the README promises
/// an exit within 10 s; the rest is left for the process to wind down).
pub const DRAIN: Duration = Duration::from_secs(8);

/// A built daemon: catalog opened, caches ready.
#[derive(Debug, Clone)]
pub struct App {
    pub catalog: Arc<Catalog>,
    /// This replica's tile cache (what the Peer service serves from).
    pub cache: TileCache,
    /// Where streams get tiles: the cache, or the fleet around it.
    pub tiles: Arc<dyn TileSource>,
    pub headers: HeaderCache,
    pub stores: Arc<Stores>,
    pub config: Config,
    /// One permit per allowed concurrent stream.
    pub streams: Arc<Semaphore>,
    /// Every metric, exported on the metrics listener.
    pub metrics: Arc<Metrics>,
    /// Tells running streams that the daemon is shutting down.
    pub shutdown: Arc<tokio::sync::watch::Sender<bool>>,
    /// Tokens, scopes and per-caller limits.
    pub auth: Arc<Auth>,
    /// Concurrent streams per job.
    pub jobs: Arc<JobSlots>,
    /// TLS for the gRPC listener, when configured.
    pub tls: Option<Arc<tls::Reloading>>,
    /// The fleet this replica belongs to, when configured.
    pub cluster: Option<Arc<Cluster>>,
    /// Request-sized memory of all calls together.
    pub memory: MemoryBudget,
    /// Cancelled when serving ends: every background task watches it.
    pub stop: CancellationToken,
    /// Open streams, for the status page.
    pub live: Arc<LiveStreams>,
    /// When the daemon was built (uptime on the status page).
    pub started: std::time::Instant,
}

impl App {
    /// Opens every dataset of `config`.
    pub async fn build(config: Config) -> Result<Self> {
        crate::dataset::check_config(&config)?;
        let s = &config.store;
        let secs = |v: f64, what: &str| {
            if v.is_finite() && v > 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(Error::InvalidArgument(format!("config: store.{what} must be positive")))
            }
        };
        let metrics = Arc::new(Metrics::new(config.server.max_job_labels));
        let stop = CancellationToken::new();
        if config.limits.prefetch_budget_bytes.is_some() {
            tracing::warn!("limits.prefetch_budget_bytes is ignored: look-ahead draws from limits.memory_budget_bytes");
        }
        let memory = MemoryBudget::new(crate::memory::budget_bytes(&config.limits));
        metrics.memory_budget_bytes.set(memory.total_bytes() as i64);
        let stores = Arc::new(
            Stores::new(StoreOptions {
                request_timeout: secs(s.request_timeout_secs, "request_timeout_secs")?,
                connect_timeout: secs(s.connect_timeout_secs, "connect_timeout_secs")?,
                max_retries: s.max_retries,
                retry_timeout: Duration::from_secs(60),
                simulated_latency: Duration::from_millis(s.simulated_latency_ms),
                s3_endpoint: s.s3_endpoint.clone(),
                s3_access_key_id: s.s3_access_key_id.clone(),
                s3_secret_access_key: s.s3_secret_access_key.clone(),
                max_requests_per_second: s.max_requests_per_second,
                min_requests_per_second: s.min_requests_per_second,
            })
            .with_rules(crate::dataset::store_rules::store_rules(&config.datasets)?)
            .with_metrics(metrics.clone()),
        );
        let auth = Arc::new(Auth::new(&config.auth, &config.limits)?);
        let jobs = JobSlots::new(config.limits.max_streams_per_job);
        let tls = match &config.tls {
            Some(t) => Some(tls::Reloading::new(t.clone())?),
            None => None,
        };
        let cache = TileCache::with_eviction(
            config.cache.capacity_bytes,
            config.cache.eviction,
            Some(metrics.clone()),
        )
        .with_tiers(tiers(&config.cache, &metrics).await?);
        let mut tiles: Arc<dyn TileSource> = Arc::new(cache.clone());
        let cluster = match &config.cluster {
            Some(c) => {
                let cluster = Cluster::new(c, Some(metrics.clone()))?;
                if let Some(dns) = &c.peers_dns {
                    cluster.watch_dns(dns.clone(), Duration::from_secs_f64(c.refresh_secs), stop.clone());
                }
                let near = c.near_cache_bytes.unwrap_or(config.cache.capacity_bytes / 8);
                tiles = Arc::new(crate::cluster::FleetTiles::new(cache.clone(), cluster.clone(), near));
                Some(cluster)
            }
            None => None,
        };
        let headers = HeaderCache::new(config.cache.header_entries);
        let options = OpenOptions {
            prefix_bytes: s.header_prefix_bytes.max(16),
            max_window_bytes: config.limits.max_batch_bytes,
            ..Default::default()
        };
        let catalog = Arc::new(
            Catalog::build(
                &config.datasets,
                stores.clone(),
                headers.clone(),
                options,
                config.cache.index_dir(),
                config.server.require_all_datasets,
            )
            .await?
            .with_cache_bytes(config.cache.capacity_bytes),
        );
        metrics.datasets_unready.set(catalog.unready().len() as i64);
        if !catalog.unready().is_empty() {
            tokio::spawn(retry_unready(catalog.clone(), metrics.clone(), stop.clone()));
        }
        Ok(Self {
            catalog,
            cache,
            tiles,
            headers,
            stores,
            streams: Arc::new(Semaphore::new(config.limits.max_streams)),
            metrics,
            shutdown: Arc::new(tokio::sync::watch::channel(false).0),
            auth,
            jobs,
            tls,
            cluster,
            memory,
            stop,
            live: LiveStreams::new(),
            started: std::time::Instant::now(),
            config,
        })
    }

    /// The gRPC service over this app's state.
    pub fn service(&self) -> FeedService {
        FeedService {
            catalog: self.catalog.clone(),
            tiles: self.tiles.clone(),
            limits: self.config.limits.clone(),
            streams: self.streams.clone(),
            metrics: self.metrics.clone(),
            shutdown: self.shutdown.subscribe(),
            auth: self.auth.clone(),
            jobs: self.jobs.clone(),
            memory: self.memory.clone(),
            live: self.live.clone(),
        }
    }

    /// Serves `/metrics`, `/healthz`, `/readyz` and the status page (`/`, `/preview.png`)
    /// on `listener` until `shutdown` resolves.
    pub async fn serve_metrics(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        use axum::http::{HeaderMap, StatusCode, header};
        use axum::response::IntoResponse;
        use axum::routing::get;
        let open_to = listener.local_addr().ok().filter(|a| !a.ip().is_loopback());
        if self.auth.status_closed() {
            tracing::warn!(
                "[auth] required = true and no auth.metrics_token_sha256: the status page, previews and /metrics refuse every request (only /healthz and /readyz answer)"
            );
        } else if let Some(addr) = open_to
            && !self.auth.required()
            && self.config.auth.metrics_token_sha256.is_none()
        {
            tracing::warn!(
                %addr,
                "the status page, its previews and /metrics answer anyone who can reach this address: set auth.metrics_token_sha256 or bind the metrics listener to loopback"
            );
        }
        let metrics = self.metrics.clone();
        let auth = self.auth.clone();
        let ready = self.metrics.clone();
        let catalog = self.catalog.clone();
        let memory = self.memory.clone();
        let router = axum::Router::new()
            .route(
                "/metrics",
                get(move |headers: HeaderMap| {
                    let m = metrics.clone();
                    let auth = auth.clone();
                    let reserved = memory.total_bytes() - memory.available_bytes();
                    async move {
                        m.memory_reserved_bytes.set(reserved as i64);
                        let token = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
                        if auth.status_closed() {
                            return crate::status::closed();
                        }
                        if !auth.metrics_allowed(token) {
                            return (
                                StatusCode::UNAUTHORIZED,
                                [(header::WWW_AUTHENTICATE, "Bearer")],
                                "this endpoint requires a bearer token\n",
                            )
                                .into_response();
                        }
                        ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], m.render()).into_response()
                    }
                }),
            )
            .merge(crate::status::routes(self.status_state()))
            .route("/healthz", get(|| async { "ok\n" }))
            .route(
                "/readyz",
                get(
                    move |axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>| {
                        let serving = ready.ready.get() == 1;
                        let body = readiness(&catalog, serving, q.get("dataset").map(String::as_str));
                        async move { body }
                    },
                ),
            );
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|e| Error::Io {
                context: "metrics server".into(),
                source: e,
            })
    }

    /// Streams running now.
    pub fn active_streams(&self) -> usize {
        self.config.limits.max_streams - self.streams.available_permits()
    }

    /// What the status page may see.
    pub fn status_state(&self) -> crate::status::StatusState {
        crate::status::StatusState {
            auth: self.auth.clone(),
            catalog: self.catalog.clone(),
            tiles: self.tiles.clone(),
            limits: self.config.limits.clone(),
            memory: self.memory.clone(),
            metrics: self.metrics.clone(),
            live: self.live.clone(),
            started: self.started,
            streams: self.streams.clone(),
        }
    }

    /// Serves gRPC on `listener` until `shutdown` resolves; then running streams end with
    /// UNAVAILABLE naming their cursor, and the server stops within [`DRAIN`] at most.
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        self.serve_with_drain(listener, shutdown, DRAIN).await
    }

    /// [`App::serve`] with an explicit bound on the drain after shutdown.
    pub async fn serve_with_drain(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
        drain: Duration,
    ) -> Result<()> {
        let (health_reporter, health) = tonic_health::server::health_reporter();
        health_reporter.set_serving::<FeedServer<FeedService>>().await;
        self.metrics.ready.set(1);
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(cogfeed_proto::v1::FILE_DESCRIPTOR_SET)
        };
        let reflection_v1 = reflection()
            .build_v1()
            .map_err(|e| Error::InvalidArgument(format!("reflection: {e}")))?;
        // grpcio-reflection and older grpcurl still ask v1alpha.
        let reflection_v1alpha = reflection()
            .build_v1alpha()
            .map_err(|e| Error::InvalidArgument(format!("reflection: {e}")))?;
        let feed = tonic::service::interceptor::InterceptedService::new(
            FeedServer::new(self.service())
                .max_decoding_message_size(MAX_REQUEST_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            self.auth.interceptor(),
        );
        let peer = tonic::service::interceptor::InterceptedService::new(
            cogfeed_proto::v1::peer_server::PeerServer::new(PeerService {
                catalog: self.catalog.clone(),
                cache: self.cache.clone(),
                auth: self.auth.clone(),
                metrics: self.metrics.clone(),
                memory: self.memory.clone(),
            })
            .max_decoding_message_size(MAX_REQUEST_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
            self.auth.peer_interceptor(),
        );
        let stop = self.shutdown.clone();
        let metrics = self.metrics.clone();
        let (signalled_tx, signalled_rx) = tokio::sync::oneshot::channel::<()>();
        let signalled = async move {
            shutdown.await;
            metrics.ready.set(0);
            // Streams end with UNAVAILABLE and their cursor; clients reconnect elsewhere.
            let _ = stop.send(true);
            let _ = signalled_tx.send(());
        };
        let limits = &self.config.limits;
        let router = grpc_transport()
            .max_concurrent_streams(Some(limits.max_streams_per_connection))
            .http2_keepalive_interval(Some(limits.keepalive()))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)))
            .add_service(health)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(feed)
            .add_service(peer);
        let registry = connections::Registry::new(
            limits.max_connections,
            limits.idle_timeout(),
            Some(self.metrics.clone()),
        );
        let accepted = connections::accept(listener, registry, self.stop.clone());
        let server: std::pin::Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send + '_>> =
            match &self.tls {
                Some(t) => {
                    t.watch(self.stop.clone());
                    Box::pin(router.serve_with_incoming_shutdown(tls::incoming(accepted, t.clone()), signalled))
                }
                None => Box::pin(router.serve_with_incoming_shutdown(accepted, signalled)),
            };
        // Background tasks end with serving, however it ends.
        let _stop_tasks = self.stop.clone().drop_guard();
        let bound = async move {
            if signalled_rx.await.is_ok() {
                tokio::time::sleep(drain).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let result = tokio::select! {
            r = server => r,
            _ = bound => {
                tracing::warn!("connections still open after the drain period; exiting");
                Ok(())
            }
        };
        result.map_err(|e| Error::Io {
            context: "grpc server".into(),
            source: std::io::Error::other(e.to_string()),
        })
    }
}

/// The daemon's HTTP/2 transport: windows and frames sized for batches of tens of MiB, no
/// Nagle delay. `cogfeed serve-synthetic` uses the same.
pub fn grpc_transport() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .initial_stream_window_size(Some(8 << 20))
        .initial_connection_window_size(Some(32 << 20))
        .max_frame_size(Some((1 << 20) - 1))
        .tcp_nodelay(true)
}

/// How often the unready datasets are looked at (each is tried on its own back-off).
const RETRY_TICK: Duration = Duration::from_secs(1);

/// Tries the unready datasets again until none is left or the daemon stops.
async fn retry_unready(catalog: Arc<Catalog>, metrics: Arc<Metrics>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(RETRY_TICK) => {}
        }
        let left = catalog.retry_unready().await;
        metrics.datasets_unready.set(left as i64);
        if left == 0 {
            return;
        }
    }
}

/// `/readyz`: 200 while the daemon serves, naming how many configured datasets do not
/// (a broken dataset must not take a replica out of its load balancer for the others);
/// `?dataset=NAME`: 200 when that dataset serves, else 503 (an unknown name reads as
/// unready, so the open probe does not tell which names exist).
fn readiness(catalog: &Catalog, serving: bool, dataset: Option<&str>) -> (axum::http::StatusCode, String) {
    use axum::http::StatusCode;
    if !serving {
        return (StatusCode::SERVICE_UNAVAILABLE, "starting\n".into());
    }
    if let Some(name) = dataset {
        return if catalog.get(name).is_some() {
            (StatusCode::OK, "ready\n".into())
        } else {
            (StatusCode::SERVICE_UNAVAILABLE, "dataset not serving\n".into())
        };
    }
    let unready = catalog.unready().len();
    if unready == 0 {
        (StatusCode::OK, "ready\n".into())
    } else {
        (
            StatusCode::OK,
            format!(
                "ready: {unready} of {} configured datasets unready (retried in the background; the status page says why)\n",
                catalog.configured()
            ),
        )
    }
}

/// The tiers below the decoded cache that `[cache]` asks for (compressed RAM, disk).
async fn tiers(c: &crate::config::CacheConfig, metrics: &Arc<Metrics>) -> Result<crate::tiles::tiers::Tiers> {
    use crate::tiles::{compressed::CompressedTier, disk::DiskTier};
    let compressed =
        (c.compressed_bytes() > 0).then(|| CompressedTier::new(c.compressed_bytes(), Some(metrics.clone())));
    let disk = match c.disk_dir() {
        Some(dir) => {
            let tier = DiskTier::open(dir, c.disk_bytes, Some(metrics.clone()))
                .await
                .map_err(|e| Error::Io {
                    context: "opening the disk tier".into(),
                    source: std::io::Error::other(e.to_string()),
                })?;
            tracing::info!(entries = tier.len(), bytes = tier.bytes(), "disk tier opened");
            Some(tier)
        }
        None => None,
    };
    let tiers = crate::tiles::tiers::Tiers::new(compressed, disk);
    Ok(match c.plan_prefetch_bytes() {
        0 => tiers,
        n => tiers.with_prefetch(CompressedTier::prefetched(n, Some(metrics.clone()))),
    })
}
