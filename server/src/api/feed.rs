//! The `cogfeed.v1.Feed` service: glue between the RPCs and the rest of the daemon. Each
//! call is checked against the caller's scope, validated into a job (`job.rs`), admitted
//! against the slots and the memory budget, and run; statuses come from `crate::error`.

use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures::Stream;
use tokio::sync::{Semaphore, mpsc};
use tonic::{Request, Response, Status};

use cogfeed_proto::v1 as pb;
use cogfeed_proto::v1::feed_server::Feed;

use crate::config::LimitsConfig;
use crate::dataset::Catalog;
use crate::error::Error;
use crate::memory::{MemoryBudget, Reservation};
use crate::metrics::Metrics;
use crate::pipeline::{self, QueueObserver};
use crate::tiles::TileSource;
use crate::tiles::region;

use super::auth::{Auth, JobSlots, Principal};
use super::connections;
use super::convert;
use super::footprint;
use super::job;
use super::stream::{MeteredStream, StreamLease, StreamQueue};
use crate::api::live::{LiveStreams, StreamInfo};

/// Metadata a client sends at each stream open: seconds its training loop waited for data
/// since its previous stream open.
pub const DATA_WAIT_HEADER: &str = "cogfeed-data-wait-seconds";

/// Shared state of the service.
#[derive(Debug)]
pub struct FeedService {
    pub catalog: Arc<Catalog>,
    /// Decoded tiles: this replica's cache, or the fleet around it.
    pub tiles: Arc<dyn TileSource>,
    pub limits: LimitsConfig,
    pub streams: Arc<Semaphore>,
    pub metrics: Arc<Metrics>,
    /// Set to true when the daemon shuts down.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// Tokens, scopes and per-caller limits.
    pub auth: Arc<Auth>,
    /// Concurrent streams per job name.
    pub jobs: Arc<JobSlots>,
    /// Request-sized memory of all calls together.
    pub memory: MemoryBudget,
    /// Open streams, for the status page.
    pub live: Arc<LiveStreams>,
}

/// Bytes of a response that hold their share of the memory budget until sent.
struct Reserved(Vec<u8>, #[allow(dead_code)] Arc<(Reservation, Reservation)>);

impl AsRef<[u8]> for Reserved {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl FeedService {
    /// The caller attached by the auth interceptor (or, without it, authenticated here).
    fn caller<T>(&self, r: &Request<T>) -> Result<Principal, Status> {
        match r.extensions().get::<Principal>() {
            Some(p) => Ok(p.clone()),
            None => {
                let ip = connections::remote_addr(r).map(|a| a.ip());
                self.auth.authenticate(None, ip).map_err(|e| e.to_status())
            }
        }
    }

    /// The caller, if it may read `dataset`; PERMISSION_DENIED otherwise.
    fn allowed<T>(&self, r: &Request<T>, dataset: &str) -> Result<Principal, Status> {
        let caller = self.caller(r)?;
        if dataset.chars().count() > job::MAX_NAME_CHARS {
            return Err(Error::NotFound(format!("dataset {} not found", job::shown(dataset))).into());
        }
        caller.check(dataset).map_err(|e| e.to_status())?;
        Ok(caller)
    }

    fn refused(&self, limit: &str, e: Error) -> Status {
        self.metrics.admission_refused.with_label_values(&[limit]).inc();
        e.to_status()
    }

    /// Reserves `bytes` from the caller's share, then from the daemon's budget.
    async fn reserve(&self, caller: &Principal, bytes: u64, what: &str) -> Result<(Reservation, Reservation), Status> {
        let wait = self.limits.admission_wait();
        let own = caller
            .memory()
            .reserve(bytes, &format!("{what} for {}", caller.name()), wait)
            .await
            .map_err(|e| self.refused("caller_memory", e))?;
        let all = self
            .memory
            .reserve(bytes, what, wait)
            .await
            .map_err(|e| self.refused("memory", e))?;
        Ok((own, all))
    }

    /// Adds the client's reported data wait to its job's counter, and returns it.
    fn record_data_wait<T>(&self, r: &Request<T>, labels: &[&str; 2]) -> f64 {
        let wait = r
            .metadata()
            .get(DATA_WAIT_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|w| w.is_finite() && (0.0..=1e7).contains(w));
        if let Some(w) = wait {
            self.metrics
                .client_data_wait_seconds
                .with_label_values(labels)
                .inc_by(w);
        }
        wait.unwrap_or(0.0)
    }
}

type BatchStream = Pin<Box<dyn Stream<Item = Result<pb::Batch, Status>> + Send>>;

#[tonic::async_trait]
impl Feed for FeedService {
    async fn list_datasets(
        &self,
        r: Request<pb::ListDatasetsRequest>,
    ) -> Result<Response<pb::ListDatasetsResponse>, Status> {
        let caller = self.caller(&r)?;
        let datasets = self
            .catalog
            .all()
            .iter()
            .filter(|d| caller.may_read(&d.name))
            .map(|d| pb::DatasetSummary {
                name: d.name.clone(),
                scenes: d.scenes.len() as u32,
                labels: d.label_dtype.is_some(),
                version: d.version.clone(),
            })
            .collect();
        Ok(Response::new(pb::ListDatasetsResponse { datasets }))
    }

    async fn describe_dataset(
        &self,
        r: Request<pb::DescribeDatasetRequest>,
    ) -> Result<Response<pb::DatasetInfo>, Status> {
        self.allowed(&r, &r.get_ref().dataset)?;
        let ds = job::dataset(&self.catalog, &r.get_ref().dataset)?;
        Ok(Response::new(convert::dataset_info(&ds)))
    }

    type StreamBatchesStream = BatchStream;

    async fn stream_batches(&self, r: Request<pb::StreamBatchesRequest>) -> Result<Response<BatchStream>, Status> {
        let read = job::datasets_read(r.get_ref());
        let caller = self.allowed(&r, read.first().copied().unwrap_or_default())?;
        for d in read.iter().skip(1) {
            self.allowed(&r, d)?;
        }
        // Validate first: a bad request holds nothing.
        let admitted = job::stream_job(&self.catalog, &self.limits, &self.memory, r.get_ref())?;
        let global = self.streams.clone().try_acquire_owned().map_err(|_| {
            self.refused(
                "streams",
                Error::LimitExceeded(format!(
                    "too many concurrent streams (limits.max_streams = {})",
                    self.limits.max_streams
                )),
            )
        })?;
        let caller_slot = caller.stream_slot().map_err(|e| self.refused("caller", e))?;
        let job_slot = self
            .jobs
            .acquire(&r.get_ref().job)
            .map_err(|e| self.refused("job", e))?;
        let batch_mib = admitted.stream_bytes as f64 / (1u64 << 20) as f64;
        let what = format!("a stream holding up to {batch_mib:.1} MiB of batches");
        let memory = self.reserve(&caller, admitted.stream_bytes, &what).await?;
        let job = admitted.job.observed(self.metrics.clone(), self.shutdown.clone());
        let labels = [job.dataset.name.clone(), self.metrics.job_label(&r.get_ref().job)];
        let label_refs = [labels[0].as_str(), labels[1].as_str()];
        let reported_wait = self.record_data_wait(&r, &label_refs);
        let live = self.live.open(StreamInfo {
            dataset: labels[0].clone(),
            job: labels[1].clone(),
            rank: job.share.rank,
            world: job.share.world,
            epoch: job.plan.epoch(),
            samples_in_epoch: job.samples_in_epoch(),
            batches: job.batch_count(),
            cursor: job.share.cursor,
            reported_wait,
        });
        let span = tracing::info_span!(
            "stream",
            dataset = %job.dataset.name,
            job = %r.get_ref().job,
            caller = %caller.name(),
            rank = job.share.rank,
            world = job.share.world
        );
        tracing::info!(parent: &span, batches = job.batch_count(), cursor = job.share.cursor, "stream opened");
        // The stream's CPU share and what it holds: slots and memory go back when the
        // stream has ended *and* the last of its CPU work has (see cogfeed-cpu).
        let tenant = cogfeed_cpu::Tenant::new(caller.name());
        tenant.hold(Box::new((global, caller_slot, job_slot, memory)));
        let lease = StreamLease::new(Box::new(tenant.clone()), connections::connection(&r));
        let queue = Arc::new(StreamQueue::new(
            self.metrics.clone(),
            labels.clone(),
            lease.clone(),
            self.limits.stall_timeout_secs,
            span.clone(),
        ));
        let (tx, rx) = mpsc::channel(self.limits.stream_queue_batches);
        let observer: Arc<dyn QueueObserver> = queue.clone();
        tokio::spawn(cogfeed_cpu::scope(
            tenant,
            tracing::Instrument::instrument(pipeline::run(job, self.tiles.clone(), tx, Some(observer)), span.clone()),
        ));
        let stream = MeteredStream::new(
            rx,
            self.catalog.clone(),
            queue,
            lease,
            self.metrics.clone(),
            labels,
            span,
        )
        .listed(live);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn count_batches(
        &self,
        r: Request<pb::StreamBatchesRequest>,
    ) -> Result<Response<pb::CountBatchesResponse>, Status> {
        for d in job::datasets_read(r.get_ref()) {
            self.allowed(&r, d)?;
        }
        let job = job::stream_job(&self.catalog, &self.limits, &self.memory, r.get_ref())?.job;
        Ok(Response::new(pb::CountBatchesResponse {
            batches: job.batch_count(),
            samples_in_epoch: job.samples_in_epoch(),
            batches_in_epoch: job.share.batches(),
        }))
    }

    async fn read_window(&self, r: Request<pb::ReadWindowRequest>) -> Result<Response<pb::ReadWindowResponse>, Status> {
        self.allowed(&r, &r.get_ref().dataset)?;
        let w = job::window_job(&self.catalog, &self.limits, r.get_ref())?;
        // The response, plus as much again for the stitching and the encoder's copy.
        let caller = self.caller(&r)?;
        let what = format!("a window of {} bytes", w.bytes);
        let memory = Arc::new(self.reserve(&caller, w.bytes.saturating_mul(2), &what).await?);
        let ds = &w.dataset;
        let scene = &ds.scenes[w.scene];
        let context = format!("dataset {}", ds.name);
        let scene_object = scene.tiles()?;
        let image = region::read(self.tiles.as_ref(), scene_object, w.window, &w.bands, 0.0)
            .await
            .map_err(|e| Error::tiff(scene_object.url.as_ref(), e).to_status_in(&context))?;
        let label = match (&scene.label, w.labels) {
            (Some(l), true) => Some(
                region::read(self.tiles.as_ref(), l, w.window, &[0], 0.0)
                    .await
                    .map_err(|e| Error::tiff(l.url.as_ref(), e).to_status_in(&context))?,
            ),
            (None, true) => {
                return Err(Error::FailedPrecondition(format!(
                    "scene {} of dataset {} has no label",
                    scene.name, ds.name
                ))
                .into());
            }
            _ => None,
        };
        Ok(Response::new(pb::ReadWindowResponse {
            image: Some(pb::Tensor {
                dtype: image.dtype.name().to_string(),
                shape: vec![image.bands as i64, image.height as i64, image.width as i64],
                data: Bytes::from_owner(Reserved(image.data, memory.clone())),
            }),
            label: label.map(|l| pb::Tensor {
                dtype: l.dtype.name().to_string(),
                shape: vec![l.height as i64, l.width as i64],
                data: Bytes::from_owner(Reserved(l.data, memory.clone())),
            }),
        }))
    }

    async fn read_footprint(&self, r: Request<pb::ReadFootprintRequest>) -> Result<Response<pb::Batch>, Status> {
        let caller = self.allowed(&r, &r.get_ref().dataset)?;
        // Validate first: a bad request holds nothing.
        let job = footprint::footprint_job(&self.catalog, &self.limits, r.get_ref())?;
        let map = job.map()?;
        let what = format!("{} footprints of {} bytes", job.placed.len(), job.bytes);
        let memory = Arc::new(self.reserve(&caller, job.memory_bytes, &what).await?);
        let read = pipeline::footprints::FootprintRead {
            map,
            placed: &job.placed,
            layers: &job.layers,
            wanted: &job.wanted,
            shapes: &job.shapes,
            dataset_version: &job.dataset.version,
        };
        let context = format!("dataset {}", job.dataset.name);
        // CPU work on the caller's tenant of the fair pool; the tenant keeps the memory
        // until the last of it has ended. A client that goes away drops this future, and
        // with it every load in flight.
        let tenant = cogfeed_cpu::Tenant::new(caller.name());
        tenant.hold(Box::new(memory.clone()));
        let wrap = |bytes: Vec<u8>| Bytes::from_owner(Reserved(bytes, memory.clone()));
        let batch = cogfeed_cpu::scope(
            tenant,
            pipeline::footprints::read_footprints(&read, self.tiles.as_ref(), &wrap),
        )
        .await
        .map_err(|e| e.to_status_in(&context))?;
        Ok(Response::new(convert::batch(batch)))
    }
}
