//! Rust client of the cogfeed daemon: connect, list and describe datasets, stream typed
//! batches and resume from a cursor.
//!
//! Connections use large HTTP/2 frames and windows (the biggest throughput lever measured
//! for multi-megabyte batches) and accept messages up to 1 GiB.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tonic::transport::{Channel, Endpoint};

pub use cogfeed_proto::v1 as pb;
use pb::feed_client::FeedClient;

/// Largest message accepted from the server.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

/// Client errors.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The address is not a valid endpoint.
    #[error("invalid server address {0}")]
    Address(String),
    /// The connection could not be made.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: tonic::transport::Error,
    },
    /// The server answered with an error status.
    #[error("{}: {}", .0.code(), .0.message())]
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
}

impl TryFrom<pb::Batch> for Batch {
    type Error = ClientError;
    fn try_from(b: pb::Batch) -> Result<Self, ClientError> {
        let image = b
            .image
            .ok_or_else(|| ClientError::Malformed("batch without image".into()))?;
        Ok(Batch {
            epoch: b.epoch,
            index: b.index,
            cursor: b.cursor,
            batches_in_epoch: b.batches_in_epoch,
            image: Tensor::from_pb(image)?,
            label: b.label.map(Tensor::from_pb).transpose()?,
            windows: b.windows,
        })
    }
}

/// A connection to one daemon.
#[derive(Debug, Clone)]
pub struct Client {
    inner: FeedClient<Channel>,
    addr: String,
}

/// True for errors worth reconnecting after.
fn is_unavailable(e: &ClientError) -> bool {
    match e {
        ClientError::Status(s) => s.code() == tonic::Code::Unavailable,
        ClientError::Connect { .. } => true,
        _ => false,
    }
}

/// `host:port` or a full `http://` URL.
fn endpoint_url(addr: &str) -> String {
    if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

impl Client {
    /// Connects to `addr`.
    pub async fn connect(addr: &str) -> Result<Self, ClientError> {
        let url = endpoint_url(addr);
        let endpoint = Endpoint::from_shared(url.clone())
            .map_err(|_| ClientError::Address(addr.to_string()))?
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .initial_stream_window_size(Some(16 << 20))
            .initial_connection_window_size(Some(64 << 20))
            .http2_adaptive_window(false)
            .max_frame_size(1u32 << 20);
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| ClientError::Connect { addr: url, source: e })?;
        let inner = FeedClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(1 << 20);
        Ok(Self {
            inner,
            addr: addr.to_string(),
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
        struct State {
            addr: String,
            request: pb::StreamBatchesRequest,
            stream: Option<futures::stream::BoxStream<'static, Result<Batch, ClientError>>>,
            delivered: u64,
            base: u64,
            retry_for: Duration,
            done: bool,
        }
        let state = State {
            addr: self.addr.clone(),
            request,
            stream: None,
            delivered: 0,
            base: 0,
            retry_for,
            done: false,
        };
        futures::stream::unfold(state, |mut st| async move {
            let mut backoff = Duration::from_millis(100);
            let mut failing_since: Option<std::time::Instant> = None;
            loop {
                if st.done {
                    return None;
                }
                if st.stream.is_none() {
                    let attempt = async {
                        let mut c = Client::connect(&st.addr).await?;
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
                        if st.request.max_batches > 0 {
                            st.request.max_batches -= 1;
                            // 0 would mean "the whole epoch" to the server: stop here instead.
                            st.done = st.request.max_batches == 0;
                        }
                        return Some((Ok(b), st));
                    }
                    Some(Err(e)) if is_unavailable(&e) => {
                        st.stream = None;
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

    /// Streams batches for `request`; resume by setting `request.cursor` to the cursor of
    /// the last batch received.
    pub async fn stream(
        &mut self,
        request: pb::StreamBatchesRequest,
    ) -> Result<impl futures::Stream<Item = Result<Batch, ClientError>> + use<>, ClientError> {
        let stream = self.inner.stream_batches(request).await?.into_inner();
        Ok(stream.map(|item| item.map_err(ClientError::from).and_then(Batch::try_from)))
    }
}
