//! Rust client of the cogfeed daemon: connect, list and describe datasets, stream typed
//! batches and resume from a cursor.
//!
//! Connections use large HTTP/2 frames and windows (the biggest throughput lever measured
//! for multi-megabyte batches) and accept messages up to 1 GiB.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

pub use cogfeed_proto::v1 as pb;

pub mod stitch;
mod tls_probe;
use pb::feed_client::FeedClient;

/// Largest message accepted from the server (shared with the daemon).
pub use cogfeed_proto::MAX_MESSAGE_BYTES;

/// Client errors.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The address is not a valid endpoint.
    #[error("invalid server address {0}")]
    Address(String),
    /// The connection could not be made (the message carries the whole cause chain, e.g.
    /// the TLS certificate problem).
    #[error("cannot connect to {addr}: {}", chain(.source))]
    Connect {
        addr: String,
        #[source]
        source: tonic::transport::Error,
    },
    /// TLS or token settings that cannot be used.
    #[error("{0}")]
    Config(String),
    /// The TLS session could not be set up (untrusted server certificate, client
    /// certificate missing or refused, wrong server name).
    #[error("cannot connect to {addr}: {reason}")]
    Tls { addr: String, reason: String },
    /// The server answered with an error status.
    #[error("{}: {}{}", .0.code(), .0.message(), cause(.0))]
    Status(#[from] tonic::Status),
    /// A batch whose tensor does not match its shape or dtype.
    #[error("malformed batch: {0}")]
    Malformed(String),
}

/// A dense little-endian array received from the server (no copy of the payload).
#[derive(Debug, Clone)]
pub struct Tensor {
    pub dtype: String,
    pub shape: Vec<usize>,
    pub data: Bytes,
}

impl Tensor {
    fn from_pb(t: pb::Tensor) -> Result<Self, ClientError> {
        let shape: Vec<usize> = t.shape.iter().map(|&d| d.max(0) as usize).collect();
        let es = match t.dtype.as_str() {
            "uint8" | "int8" => 1,
            "uint16" | "int16" | "float16" | "bfloat16" => 2,
            "uint32" | "int32" | "float32" => 4,
            "uint64" | "int64" | "float64" | "complex64" => 8,
            "complex128" => 16,
            other => return Err(ClientError::Malformed(format!("unknown dtype {other}"))),
        };
        let want = shape.iter().product::<usize>() * es;
        if want != t.data.len() {
            return Err(ClientError::Malformed(format!(
                "{} bytes for shape {shape:?} of {}",
                t.data.len(),
                t.dtype
            )));
        }
        Ok(Self {
            dtype: t.dtype,
            shape,
            data: t.data,
        })
    }

    /// The samples as a typed slice, without copying when the received buffer is aligned
    /// for `T` and copied into an aligned vector otherwise. None if the byte length is not a
    /// multiple of `T`'s size.
    pub fn values<T: bytemuck::Pod>(&self) -> Option<std::borrow::Cow<'_, [T]>> {
        if !self.data.len().is_multiple_of(std::mem::size_of::<T>()) {
            return None;
        }
        match bytemuck::try_cast_slice(&self.data) {
            Ok(s) => Some(std::borrow::Cow::Borrowed(s)),
            Err(_) => Some(std::borrow::Cow::Owned(bytemuck::allocation::pod_collect_to_vec(
                &self.data,
            ))),
        }
    }
}

/// One received batch.
#[derive(Debug, Clone)]
pub struct Batch {
    pub epoch: u64,
    pub index: u64,
    /// Global sample offset after this batch: resume from here.
    pub cursor: u64,
    pub batches_in_epoch: u64,
    pub image: Tensor,
    pub label: Option<Tensor>,
    pub windows: Vec<pb::Window>,
    /// Samples the server left out under `on_corrupt = "skip"` (the tensors hold the rest).
    pub skipped: Vec<pb::SkippedSample>,
    /// Map-space datasets: one tensor per layer, by name, in request order.
    pub layers: Vec<(String, Tensor)>,
    /// Map-space datasets: each sample's Items, CRS, bounds and datetime.
    pub samples: Vec<pb::SampleInfo>,
    /// Time layers: uint8 `[B, T]`, 1 where a step holds a date, by layer name.
    pub time_masks: Vec<(String, Tensor)>,
    /// The points sampler: each point attribute, float64 `[B]`, by name.
    pub targets: Vec<(String, Tensor)>,
    /// The version of the dataset the batch was drawn from: send it back with the cursor
    /// to resume (`StreamBatchesRequest.dataset_version`).
    pub dataset_version: String,
}

impl Tensor {
    /// The tensor as its wire message (bytes shared, not copied).
    pub fn to_pb(&self) -> pb::Tensor {
        pb::Tensor {
            dtype: self.dtype.clone(),
            shape: self.shape.iter().map(|&d| d as i64).collect(),
            data: self.data.clone(),
        }
    }
}

impl Batch {
    /// The tensor of layer `name` (map-space datasets).
    pub fn layer(&self, name: &str) -> Option<&Tensor> {
        self.layers.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// The batch as its wire message (tensor bytes shared, not copied).
    pub fn to_pb(&self) -> pb::Batch {
        let image_layer = self.layers.first().map(|(n, _)| n.clone()).unwrap_or_default();
        pb::Batch {
            dataset_version: self.dataset_version.clone(),
            epoch: self.epoch,
            index: self.index,
            cursor: self.cursor,
            image: Some(self.image.to_pb()),
            label: self.label.as_ref().map(Tensor::to_pb),
            windows: self.windows.clone(),
            batches_in_epoch: self.batches_in_epoch,
            skipped: self.skipped.clone(),
            layers: self
                .layers
                .iter()
                .skip(1)
                .map(|(name, t)| pb::NamedTensor {
                    name: name.clone(),
                    tensor: Some(t.to_pb()),
                })
                .collect(),
            samples: self.samples.clone(),
            image_layer,
            targets: self
                .targets
                .iter()
                .map(|(name, t)| pb::NamedTensor {
                    name: name.clone(),
                    tensor: Some(t.to_pb()),
                })
                .collect(),
            time_masks: self
                .time_masks
                .iter()
                .map(|(name, t)| pb::NamedTensor {
                    name: name.clone(),
                    tensor: Some(t.to_pb()),
                })
                .collect(),
        }
    }
}

impl TryFrom<pb::Batch> for Batch {
    type Error = ClientError;
    fn try_from(b: pb::Batch) -> Result<Self, ClientError> {
        let image = b
            .image
            .ok_or_else(|| ClientError::Malformed("batch without image".into()))?;
        let image = Tensor::from_pb(image)?;
        Ok(Batch {
            dataset_version: b.dataset_version,
            epoch: b.epoch,
            index: b.index,
            cursor: b.cursor,
            batches_in_epoch: b.batches_in_epoch,
            image: image.clone(),
            label: b.label.map(Tensor::from_pb).transpose()?,
            windows: b.windows,
            skipped: b.skipped,
            layers: {
                // The first layer travels in `image`, named by `image_layer`.
                let mut layers = Vec::with_capacity(b.layers.len() + 1);
                if !b.image_layer.is_empty() {
                    layers.push((b.image_layer.clone(), image.clone()));
                }
                for l in b.layers {
                    let t = l
                        .tensor
                        .ok_or_else(|| ClientError::Malformed(format!("layer {} without a tensor", l.name)))?;
                    layers.push((l.name, Tensor::from_pb(t)?));
                }
                layers
            },
            samples: b.samples,
            targets: b
                .targets
                .into_iter()
                .map(|l| {
                    let t = l
                        .tensor
                        .ok_or_else(|| ClientError::Malformed(format!("target {} without a tensor", l.name)))?;
                    Ok((l.name, Tensor::from_pb(t)?))
                })
                .collect::<Result<_, ClientError>>()?,
            time_masks: b
                .time_masks
                .into_iter()
                .map(|l| {
                    let t = l
                        .tensor
                        .ok_or_else(|| ClientError::Malformed(format!("time mask {} without a tensor", l.name)))?;
                    Ok((l.name, Tensor::from_pb(t)?))
                })
                .collect::<Result<_, ClientError>>()?,
        })
    }
}

/// `(cause: cause ...)` of a status that came from the transport, else nothing.
fn cause(s: &tonic::Status) -> String {
    use std::error::Error;
    match s.source() {
        Some(src) => format!(" ({})", chain(src)),
        None => String::new(),
    }
}

/// `error: cause: cause ...`
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = c.source();
    }
    out
}

/// One failed attempt of a resumable stream to reach its daemon.
#[derive(Debug)]
pub struct Retry<'a> {
    pub address: &'a str,
    pub error: &'a ClientError,
    /// Since the first failure of this run of failures.
    pub failing_for: Duration,
    /// The stream gives up after failing this long.
    pub giving_up_after: Duration,
}

/// How to reach a daemon: bearer token and TLS files.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// Sent as `authorization: Bearer <token>` on every call.
    pub token: Option<String>,
    /// PEM CA bundle to verify the server with (TLS; without it, the public web roots).
    pub ca: Option<std::path::PathBuf>,
    /// PEM client certificate and key, for servers that require mTLS.
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
    /// Name expected in the server certificate (default: the address's host).
    pub domain: Option<String>,
}

impl ConnectOptions {
    /// TLS is used for `https://` addresses and whenever a TLS file is given.
    fn tls(&self, addr: &str) -> bool {
        addr.starts_with("https://") || self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }
}

/// Adds the bearer token to every call.
#[derive(Debug, Clone)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            r.metadata_mut().insert("authorization", v.clone());
        }
        Ok(r)
    }
}

/// Header carrying a client's data wait since its previous stream open (seconds), which
/// the daemon adds to `cogfeed_client_data_wait_seconds_total` of the stream's job.
pub const DATA_WAIT_HEADER: &str = "cogfeed-data-wait-seconds";

/// Time a client's consumers spent waiting for batches, and the part already reported.
#[derive(Debug, Default)]
struct DataWait {
    total_micros: std::sync::atomic::AtomicU64,
    sent_micros: std::sync::atomic::AtomicU64,
}

impl DataWait {
    fn add(&self, waited: Duration) {
        self.total_micros
            .fetch_add(waited.as_micros() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// The wait not yet reported, marked as reported.
    fn take_unsent(&self) -> Duration {
        let total = self.total_micros.load(std::sync::atomic::Ordering::Relaxed);
        let sent = self.sent_micros.swap(total, std::sync::atomic::Ordering::Relaxed);
        Duration::from_micros(total.saturating_sub(sent))
    }
}

/// A connection to one daemon.
#[derive(Debug, Clone)]
pub struct Client {
    inner: FeedClient<InterceptedService<Channel, Bearer>>,
    /// The replica this client is connected to.
    addr: String,
    /// Every replica it may use (one entry without a fleet).
    addrs: Vec<String>,
    options: ConnectOptions,
    /// Shared by the client's clones and its resumable streams.
    data_wait: Arc<DataWait>,
}

/// The replicas named by `spec`: a comma-separated list, or one DNS name whose addresses
/// are the replicas (e.g. a Kubernetes headless Service).
pub async fn resolve_replicas(spec: &str) -> Vec<String> {
    let list: Vec<String> = spec
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if list.len() != 1 || list[0].contains("://") {
        return list;
    }
    let one = list[0].clone();
    if one.parse::<std::net::SocketAddr>().is_ok() {
        return list;
    }
    let found: Vec<String> = match tokio::net::lookup_host(one.as_str()).await {
        Ok(addrs) => addrs.filter(|a| a.is_ipv4()).map(|a| a.to_string()).collect(),
        Err(_) => Vec::new(),
    };
    let mut found = found;
    found.sort();
    found.dedup();
    if found.len() > 1 { found } else { list }
}

/// True for errors worth reconnecting after.
fn is_unavailable(e: &ClientError) -> bool {
    match e {
        // A status with a source was made on this side from a transport failure (a daemon
        // killed mid-stream shows up as `Unknown: h2 protocol error`): worth a reconnect.
        ClientError::Status(s) => s.code() == tonic::Code::Unavailable || std::error::Error::source(s).is_some(),
        ClientError::Connect { .. } => true,
        _ => false,
    }
}

/// `host:port` or a full `http://` / `https://` URL.
fn endpoint_url(addr: &str, tls: bool) -> String {
    match addr.split_once("://") {
        Some((_, rest)) if tls => format!("https://{rest}"),
        Some(_) => addr.to_string(),
        None if tls => format!("https://{addr}"),
        None => format!("http://{addr}"),
    }
}

fn read_file(path: &std::path::Path, what: &str) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path).map_err(|e| ClientError::Config(format!("cannot read {what} {}: {e}", path.display())))
}

impl Client {
    /// Connects to `addr` without token or TLS (unless `addr` is `https://`).
    pub async fn connect(addr: &str) -> Result<Self, ClientError> {
        Self::connect_with(addr, ConnectOptions::default()).await
    }

    /// Connects with a token and/or TLS to `addr`: one address, a comma-separated list of
    /// replicas or a DNS name with several addresses; the first replica that answers is
    /// used for calls, and [`Client::stream_resumable`] spreads ranks over all of them.
    pub async fn connect_with(addr: &str, options: ConnectOptions) -> Result<Self, ClientError> {
        let addrs = resolve_replicas(addr).await;
        let mut last = None;
        for one in &addrs {
            match Self::connect_one(one, &options).await {
                Ok(mut c) => {
                    c.addrs = addrs.clone();
                    return Ok(c);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Address(addr.to_string())))
    }

    /// The replica this client is connected to.
    pub fn address(&self) -> &str {
        &self.addr
    }

    /// The replicas this client knows.
    pub fn replicas(&self) -> &[String] {
        &self.addrs
    }

    async fn connect_one(addr: &str, options: &ConnectOptions) -> Result<Self, ClientError> {
        let options = options.clone();
        let tls = options.tls(addr);
        let url = endpoint_url(addr, tls);
        let mut endpoint = Endpoint::from_shared(url.clone())
            .map_err(|_| ClientError::Address(addr.to_string()))?
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .initial_stream_window_size(Some(16 << 20))
            .initial_connection_window_size(Some(64 << 20))
            .http2_adaptive_window(false)
            .max_frame_size(1u32 << 20);
        if tls {
            let mut config = ClientTlsConfig::new();
            let ca = options.ca.as_deref().map(|p| read_file(p, "CA file")).transpose()?;
            config = match &ca {
                Some(pem) => config.ca_certificate(Certificate::from_pem(pem)),
                None => config.with_webpki_roots(),
            };
            let identity = match (&options.cert, &options.key) {
                (Some(c), Some(k)) => Some((read_file(c, "client certificate")?, read_file(k, "client key")?)),
                (None, None) => None,
                _ => return Err(ClientError::Config("give both --cert and --key for mTLS".into())),
            };
            if let Some((cert, key)) = &identity {
                config = config.identity(Identity::from_pem(cert, key));
            }
            if let Some(d) = &options.domain {
                config = config.domain_name(d.clone());
            }
            let uri: tonic::codegen::http::Uri = url.parse().map_err(|_| ClientError::Address(addr.to_string()))?;
            let host = uri.host().unwrap_or("127.0.0.1").trim_matches(['[', ']']).to_string();
            let port = uri.port_u16().unwrap_or(443);
            let domain = options.domain.clone().unwrap_or_else(|| host.clone());
            let id = identity.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice()));
            tls_probe::probe(&host, port, ca.as_deref(), id, &domain)
                .await
                .map_err(|reason| ClientError::Tls {
                    addr: url.clone(),
                    reason,
                })?;
            endpoint = endpoint.tls_config(config).map_err(|e| ClientError::Connect {
                addr: url.clone(),
                source: e,
            })?;
        }
        let bearer = match &options.token {
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse()
                    .map_err(|_| ClientError::Config("the token must be printable ASCII".into()))?,
            ),
            None => None,
        };
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| ClientError::Connect { addr: url, source: e })?;
        let inner = FeedClient::with_interceptor(channel, Bearer(bearer))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(1 << 20);
        Ok(Self {
            inner,
            addr: addr.to_string(),
            addrs: vec![addr.to_string()],
            options,
            data_wait: Arc::default(),
        })
    }

    /// Datasets the server serves.
    pub async fn datasets(&mut self) -> Result<Vec<pb::DatasetSummary>, ClientError> {
        Ok(self
            .inner
            .list_datasets(pb::ListDatasetsRequest {})
            .await?
            .into_inner()
            .datasets)
    }

    /// One dataset in detail.
    pub async fn describe(&mut self, dataset: &str) -> Result<pb::DatasetInfo, ClientError> {
        let r = pb::DescribeDatasetRequest {
            dataset: dataset.to_string(),
        };
        Ok(self.inner.describe_dataset(r).await?.into_inner())
    }

    /// One window of one scene: image `[C, H, W]` and optional label `[H, W]`.
    pub async fn read_window(&mut self, r: pb::ReadWindowRequest) -> Result<(Tensor, Option<Tensor>), ClientError> {
        let resp = self.inner.read_window(r).await?.into_inner();
        let image = resp.image.ok_or_else(|| ClientError::Malformed("no image".into()))?;
        Ok((Tensor::from_pb(image)?, resp.label.map(Tensor::from_pb).transpose()?))
    }

    /// Map-space datasets: the samples of `request`'s footprints, one batch in request
    /// order, each sample what a stream of that footprint carries (layers and `samples`).
    pub async fn read_footprint(&mut self, request: pb::ReadFootprintRequest) -> Result<Batch, ClientError> {
        Batch::try_from(self.inner.read_footprint(request).await?.into_inner())
    }

    /// One footprint of a map-space dataset: `bounds` = [minx, miny, maxx, maxy] in `crs`
    /// (every layer when `layers` is empty; the dataset's resolution, no datetime).
    pub async fn read(
        &mut self,
        dataset: &str,
        crs: &str,
        bounds: [f64; 4],
        layers: &[String],
    ) -> Result<Batch, ClientError> {
        self.read_footprint(pb::ReadFootprintRequest {
            dataset: dataset.to_string(),
            layers: layers.to_vec(),
            footprints: vec![pb::Footprint {
                crs: crs.to_string(),
                bounds: bounds.to_vec(),
                ..Default::default()
            }],
        })
        .await
    }

    /// Batches a stream for `request` would send (the request is validated, no data read).
    pub async fn count(&mut self, request: pb::StreamBatchesRequest) -> Result<pb::CountBatchesResponse, ClientError> {
        Ok(self.inner.count_batches(request).await?.into_inner())
    }

    /// Like [`Client::stream`], but survives the daemon going away: on `UNAVAILABLE` (restart,
    /// shutdown, network blip) it reconnects with exponential backoff for up to
    /// `retry_for` and resumes from the cursor of the last batch delivered, so nothing is
    /// lost or repeated; batch indices continue. Other errors end the stream.
    pub fn stream_resumable(
        &self,
        request: pb::StreamBatchesRequest,
        retry_for: Duration,
    ) -> impl futures::Stream<Item = Result<Batch, ClientError>> + use<> {
        self.stream_resumable_with(request, retry_for, |_: &Retry<'_>| {})
    }

    /// [`Client::stream_resumable`], telling `on_retry` about each failed attempt (a
    /// command-line tool says on stderr that it is waiting for the daemon).
    pub fn stream_resumable_with<F>(
        &self,
        request: pb::StreamBatchesRequest,
        retry_for: Duration,
        on_retry: F,
    ) -> impl futures::Stream<Item = Result<Batch, ClientError>> + use<F>
    where
        F: Fn(&Retry<'_>) + Send + Sync + 'static,
    {
        struct State {
            data_wait: Arc<DataWait>,
            addrs: Vec<String>,
            next: usize,
            options: ConnectOptions,
            request: pb::StreamBatchesRequest,
            stream: Option<futures::stream::BoxStream<'static, Result<Batch, ClientError>>>,
            delivered: u64,
            base: u64,
            retry_for: Duration,
            done: bool,
            on_retry: Box<dyn Fn(&Retry<'_>) + Send + Sync>,
        }
        // Rank r starts on replica r mod n and moves to the next one when its replica fails.
        let n = self.addrs.len().max(1);
        let state = State {
            data_wait: self.data_wait.clone(),
            addrs: self.addrs.clone(),
            next: request.rank as usize % n,
            options: self.options.clone(),
            request,
            stream: None,
            delivered: 0,
            base: 0,
            retry_for,
            done: false,
            on_retry: Box::new(on_retry),
        };
        futures::stream::unfold(state, |mut st| async move {
            // The consumer asked for the next batch now: until it comes, training waits.
            let asked = std::time::Instant::now();
            let mut backoff = Duration::from_millis(100);
            let mut failing_since: Option<std::time::Instant> = None;
            loop {
                if st.done {
                    return None;
                }
                if st.stream.is_none() {
                    let attempt = async {
                        let addr = st.addrs.get(st.next).cloned().unwrap_or_default();
                        let mut c = Client::connect_one(&addr, &st.options).await?;
                        c.data_wait = st.data_wait.clone();
                        c.stream(st.request.clone()).await
                    };
                    match attempt.await {
                        Ok(s) => {
                            st.base = st.delivered;
                            st.stream = Some(Box::pin(s));
                        }
                        Err(e) if is_unavailable(&e) => {
                            let since = *failing_since.get_or_insert_with(std::time::Instant::now);
                            if since.elapsed() > st.retry_for {
                                st.done = true;
                                return Some((Err(e), st));
                            }
                            (st.on_retry)(&Retry {
                                address: st.addrs.get(st.next).map(String::as_str).unwrap_or_default(),
                                error: &e,
                                failing_for: since.elapsed(),
                                giving_up_after: st.retry_for,
                            });
                            // Try the next replica (the same one when there is one).
                            st.next = (st.next + 1) % st.addrs.len().max(1);
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_secs(1));
                            continue;
                        }
                        Err(e) => {
                            st.done = true;
                            return Some((Err(e), st));
                        }
                    }
                }
                let next = match st.stream.as_mut() {
                    Some(s) => s.next().await,
                    None => continue,
                };
                match next {
                    Some(Ok(mut b)) => {
                        b.index += st.base;
                        st.delivered += 1;
                        st.request.cursor = b.cursor;
                        // A resume after a restart is refused if the dataset changed.
                        st.request.dataset_version.clone_from(&b.dataset_version);
                        if st.request.max_batches > 0 {
                            st.request.max_batches -= 1;
                            // 0 would mean "the whole epoch" to the server: stop here instead.
                            st.done = st.request.max_batches == 0;
                        }
                        st.data_wait.add(asked.elapsed());
                        return Some((Ok(b), st));
                    }
                    Some(Err(e)) if is_unavailable(&e) => {
                        st.stream = None;
                        st.next = (st.next + 1) % st.addrs.len().max(1);
                        failing_since.get_or_insert_with(std::time::Instant::now);
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                    }
                    Some(Err(e)) => {
                        st.done = true;
                        return Some((Err(e), st));
                    }
                    None => return None,
                }
            }
        })
    }

    /// Seconds this client's resumable streams kept their consumers waiting for a batch
    /// (the training loop starved), as the Python `Loader.data_wait_seconds`. Each stream
    /// open reports what accrued since the previous one to the daemon ([`DATA_WAIT_HEADER`]).
    pub fn data_wait_seconds(&self) -> f64 {
        self.data_wait.total_micros.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e6
    }

    /// Streams batches for `request`; resume by setting `request.cursor` to the cursor of
    /// the last batch received.
    pub async fn stream(
        &mut self,
        request: pb::StreamBatchesRequest,
    ) -> Result<impl futures::Stream<Item = Result<Batch, ClientError>> + use<>, ClientError> {
        let mut request = tonic::Request::new(request);
        let unsent = self.data_wait.take_unsent();
        if let Ok(v) = format!("{:.6}", unsent.as_secs_f64()).parse() {
            request.metadata_mut().insert(DATA_WAIT_HEADER, v);
        }
        let stream = self.inner.stream_batches(request).await?.into_inner();
        Ok(stream.map(|item| item.map_err(ClientError::from).and_then(Batch::try_from)))
    }
}
