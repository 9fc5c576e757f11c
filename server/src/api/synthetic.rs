//! A bare `Feed` that streams one prebuilt batch again and again: the transport's limit.
//!
//! `cogfeed serve-synthetic` runs it. Its batches cost nothing to make (every message shares
//! the same tensor `Bytes`), so what a client receives from it is what tonic, HTTP/2 and the
//! kernel carry on this machine, with the daemon's transport settings and codec.
//! `client/bench/warm_bench.py` measures the daemon's warm delivery against it. Every other
//! call answers UNIMPLEMENTED.

use std::pin::Pin;

use bytes::Bytes;
use cogfeed_proto::v1 as pb;
use cogfeed_proto::v1::feed_server::{Feed, FeedServer};
use futures::Stream;
use tonic::{Request, Response, Status};

use super::MAX_MESSAGE_BYTES;

/// The shape of the synthetic batches: what `cogfeed-client bench` would ask the daemon.
#[derive(Debug, Clone, Copy)]
pub struct SyntheticShape {
    pub batch_size: usize,
    pub bands: usize,
    pub patch_size: usize,
    /// Bytes per image sample (1, 2, 4 or 8).
    pub sample_bytes: usize,
    /// Adds a uint8 label tensor `[B, H, W]`.
    pub label: bool,
}

/// The bare service.
#[derive(Debug, Clone)]
pub struct SyntheticFeed {
    batch: pb::Batch,
}

impl SyntheticFeed {
    /// A service whose every batch has `shape`.
    pub fn new(shape: SyntheticShape) -> Self {
        let (b, c, p) = (shape.batch_size, shape.bands, shape.patch_size);
        let dtype = match shape.sample_bytes {
            1 => "uint8",
            4 => "float32",
            8 => "float64",
            _ => "uint16",
        };
        let tensor = |dtype: &str, dims: Vec<i64>, bytes: usize| pb::Tensor {
            dtype: dtype.into(),
            shape: dims,
            // Not zeros: a page of zeros can be shared by the kernel, real data cannot.
            data: Bytes::from((0..bytes).map(|i| (i * 31 + 7) as u8).collect::<Vec<u8>>()),
        };
        let dims = |c: Option<usize>| {
            let mut d = vec![b as i64];
            d.extend(c.map(|c| c as i64));
            d.extend([p as i64, p as i64]);
            d
        };
        let batch = pb::Batch {
            image: Some(tensor(dtype, dims(Some(c)), b * c * p * p * shape.sample_bytes)),
            label: shape.label.then(|| tensor("uint8", dims(None), b * p * p)),
            windows: vec![pb::Window::default(); b],
            ..Default::default()
        };
        Self { batch }
    }

    /// The tonic service, with the daemon's message limit.
    pub fn server(self) -> FeedServer<Self> {
        FeedServer::new(self).max_encoding_message_size(MAX_MESSAGE_BYTES)
    }
}

/// What every call but `StreamBatches` answers.
fn only_stream_batches() -> Status {
    Status::unimplemented("synthetic feed: StreamBatches only")
}

type BatchStream = Pin<Box<dyn Stream<Item = Result<pb::Batch, Status>> + Send>>;

#[tonic::async_trait]
impl Feed for SyntheticFeed {
    async fn list_datasets(
        &self,
        _: Request<pb::ListDatasetsRequest>,
    ) -> Result<Response<pb::ListDatasetsResponse>, Status> {
        Err(only_stream_batches())
    }

    async fn describe_dataset(
        &self,
        _: Request<pb::DescribeDatasetRequest>,
    ) -> Result<Response<pb::DatasetInfo>, Status> {
        Err(only_stream_batches())
    }

    type StreamBatchesStream = BatchStream;

    /// Batches without end (the client stops reading); `epoch` is echoed.
    async fn stream_batches(&self, r: Request<pb::StreamBatchesRequest>) -> Result<Response<BatchStream>, Status> {
        let epoch = r.get_ref().epoch;
        let batch = self.batch.clone();
        let stream = futures::stream::iter((0u64..).map(move |index| {
            let mut b = batch.clone();
            b.epoch = epoch;
            b.index = index;
            Ok(b)
        }));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn read_window(&self, _: Request<pb::ReadWindowRequest>) -> Result<Response<pb::ReadWindowResponse>, Status> {
        Err(only_stream_batches())
    }

    async fn count_batches(
        &self,
        _: Request<pb::StreamBatchesRequest>,
    ) -> Result<Response<pb::CountBatchesResponse>, Status> {
        Err(only_stream_batches())
    }

    async fn read_footprint(&self, _: Request<pb::ReadFootprintRequest>) -> Result<Response<pb::Batch>, Status> {
        Err(only_stream_batches())
    }
}
