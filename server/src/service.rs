//! The gRPC service `cogfeed.v1.Feed`: the only module that touches tonic and the generated
//! protocol. Validates requests, runs pipelines, maps errors to statuses (once, here).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::Stream;
use prometheus::IntGauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tonic::{Request, Response, Status};

use cogfeed_proto::v1 as pb;
use cogfeed_proto::v1::feed_server::Feed;

use crate::auth::{Auth, JobSlot, JobSlots, Principal};
use crate::cache::TileCache;
use crate::catalog::{Catalog, Dataset};
use crate::cog::{ReadError, TiffError};
use crate::config::LimitsConfig;
use crate::error::{Error, ErrorCode};
use crate::metrics::Metrics;
use crate::pipeline::lookahead::{Budget, Depth};
use crate::pipeline::transform::{OutType, Transform};
use crate::pipeline::{self, BatchOut, QueueObserver, StreamJob, TensorOut, patch};
use crate::sampler::{Plan, PlanSpec, SamplerKind, SceneGrid, Share, WindowSpec};

/// Maps a crate error onto a gRPC status; the message names dataset, object and tile.
pub fn status(e: &Error) -> Status {
    let msg = e.to_string();
    match e.code() {
        ErrorCode::InvalidArgument => Status::invalid_argument(msg),
        ErrorCode::NotFound => Status::not_found(msg),
        ErrorCode::FailedPrecondition => Status::failed_precondition(msg),
        ErrorCode::DataLoss => Status::data_loss(msg),
        ErrorCode::Unavailable => Status::unavailable(msg),
        ErrorCode::ResourceExhausted => Status::resource_exhausted(msg),
        ErrorCode::Unauthenticated => Status::unauthenticated(msg),
        ErrorCode::PermissionDenied => Status::permission_denied(msg),
        ErrorCode::Internal => {
            tracing::error!(error = %msg, "internal error");
            Status::internal("internal error")
        }
    }
}

/// Shared state of the service.
#[derive(Debug)]
pub struct FeedService {
    pub catalog: Arc<Catalog>,
    pub cache: TileCache,
    pub limits: LimitsConfig,
    pub streams: Arc<Semaphore>,
    pub metrics: Arc<Metrics>,
    /// Set to true when the daemon shuts down.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// Tokens, scopes and per-caller limits.
    pub auth: Arc<Auth>,
    /// Concurrent streams per job name.
    pub jobs: Arc<JobSlots>,
    /// Look-ahead of all streams beyond their floors.
    pub prefetch_budget: Budget,
}

/// Queue depth of one stream, added into its job's gauge. After the stream closes, late
/// pushes and failed sends no longer touch the gauge.
struct StreamQueue {
    gauge: IntGauge,
    /// Batches counted into the gauge, and whether the stream has closed.
    state: std::sync::Mutex<(i64, bool)>,
}

impl StreamQueue {
    fn change(&self, delta: i64) {
        if let Ok(mut st) = self.state.lock()
            && !st.1
        {
            st.0 += delta;
            self.gauge.add(delta);
        }
    }

    fn popped(&self) {
        self.change(-1);
    }

    fn close(&self) {
        if let Ok(mut st) = self.state.lock() {
            self.gauge.sub(st.0);
            *st = (0, true);
        }
    }
}

impl QueueObserver for StreamQueue {
    fn pushed(&self) {
        self.change(1);
    }
    fn unpushed(&self) {
        self.change(-1);
    }
}

/// The response stream of one `StreamBatches` call: maps batches to messages and keeps the
/// stream's metrics (sent bytes/patches/batches, queue depth, starved time, errors, active
/// streams). Dropping it (client gone) releases the stream's permit and its gauges.
struct MeteredStream {
    rx: mpsc::Receiver<Result<BatchOut, Error>>,
    catalog: Arc<Catalog>,
    queue: Arc<StreamQueue>,
    metrics: Arc<Metrics>,
    labels: [String; 2],
    waiting_since: Option<Instant>,
    active: IntGauge,
    _permits: (OwnedSemaphorePermit, OwnedSemaphorePermit, JobSlot),
    _span: tracing::Span,
}

impl Stream for MeteredStream {
    type Item = Result<pb::Batch, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.rx.poll_recv(cx) {
            Poll::Pending => {
                // The transport asked for the next batch and none is ready: starved.
                if self.waiting_since.is_none() {
                    self.waiting_since = Some(Instant::now());
                }
                Poll::Pending
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(item)) => {
                let waited = self.waiting_since.take();
                let this = &*self;
                let labels = [this.labels[0].as_str(), this.labels[1].as_str()];
                if let Some(t) = waited {
                    this.metrics
                        .starved_seconds
                        .with_label_values(&labels)
                        .inc_by(t.elapsed().as_secs_f64());
                }
                Poll::Ready(Some(match item {
                    Ok(batch) => {
                        this.queue.popped();
                        let bytes = batch.image.data.len() + batch.label.as_ref().map_or(0, |l| l.data.len());
                        this.metrics.bytes_sent.with_label_values(&labels).inc_by(bytes as u64);
                        this.metrics
                            .patches_sent
                            .with_label_values(&labels)
                            .inc_by(batch.windows.len() as u64);
                        this.metrics.batches_sent.with_label_values(&labels).inc();
                        Ok(batch_pb(batch))
                    }
                    Err(e) => {
                        if matches!(
                            &e,
                            Error::Tiff {
                                source: TiffError::Read(ReadError::Changed),
                                ..
                            }
                        ) {
                            // An object of the dataset was replaced: re-open the dataset so
                            // the next streams read the new version.
                            let (catalog, name) = (this.catalog.clone(), this.labels[0].clone());
                            tokio::spawn(async move {
                                if let Err(e) = catalog.refresh(&name).await {
                                    tracing::warn!(dataset = %name, error = %e, "dataset refresh failed");
                                }
                            });
                        }
                        let status = status(&e);
                        let code = format!("{:?}", status.code());
                        this.metrics
                            .stream_errors
                            .with_label_values(&[labels[0], labels[1], code.as_str()])
                            .inc();
                        tracing::warn!(parent: &this._span, error = %e, "stream failed");
                        Err(status)
                    }
                }))
            }
        }
    }
}

impl Drop for MeteredStream {
    fn drop(&mut self) {
        self.active.dec();
        self.queue.close();
        tracing::debug!(parent: &self._span, "stream closed");
    }
}

fn invalid(msg: impl Into<String>) -> Status {
    Status::invalid_argument(msg.into())
}

fn tensor(t: TensorOut) -> pb::Tensor {
    pb::Tensor {
        dtype: t.dtype.to_string(),
        shape: t.shape,
        data: t.data,
    }
}

fn window_pb(w: &WindowSpec) -> pb::Window {
    pb::Window {
        scene: w.scene,
        col: w.col,
        row: w.row,
        width: w.width,
        height: w.height,
        level: w.level,
        padded: w.padded,
    }
}

fn batch_pb(b: BatchOut) -> pb::Batch {
    pb::Batch {
        epoch: b.epoch,
        index: b.index,
        cursor: b.cursor,
        image: Some(tensor(b.image)),
        label: b.label.map(tensor),
        windows: b.windows.iter().map(window_pb).collect(),
        batches_in_epoch: b.batches_in_epoch,
    }
}

impl FeedService {
    /// The caller attached by the auth interceptor (anonymous, if allowed, when the
    /// service runs without it).
    fn caller<T>(&self, r: &Request<T>) -> Result<Principal, Status> {
        match r.extensions().get::<Principal>() {
            Some(p) => Ok(p.clone()),
            None => self.auth.authenticate(None).map_err(|e| status(&e)),
        }
    }

    /// The caller, if it may read `dataset`; PERMISSION_DENIED otherwise.
    fn allowed<T>(&self, r: &Request<T>, dataset: &str) -> Result<Principal, Status> {
        let caller = self.caller(r)?;
        caller.check(dataset).map_err(|e| status(&e))?;
        Ok(caller)
    }

    fn dataset(&self, name: &str) -> Result<Arc<Dataset>, Status> {
        self.catalog
            .get(name)
            .ok_or_else(|| Status::not_found(format!("dataset {name:?} not found")))
    }

    fn bands(ds: &Dataset, requested: &[u32]) -> Result<Vec<usize>, Status> {
        if requested.is_empty() {
            return Ok(ds.bands.clone());
        }
        let nbands = ds.scenes[0].cog.header().levels[0].bands;
        requested
            .iter()
            .map(|&b| {
                if b == 0 || b as usize > nbands {
                    Err(invalid(format!(
                        "band {b} of dataset {} (bands are 1..={nbands})",
                        ds.name
                    )))
                } else {
                    Ok(b as usize - 1)
                }
            })
            .collect()
    }

    /// Validates a stream request into a job.
    pub fn job(&self, r: &pb::StreamBatchesRequest) -> Result<StreamJob, Status> {
        let ds = self.dataset(&r.dataset)?;
        let kind = match pb::Sampler::try_from(r.sampler) {
            Ok(pb::Sampler::Aligned) => SamplerKind::Aligned,
            Ok(pb::Sampler::Grid) => SamplerKind::Grid,
            Ok(pb::Sampler::Random) | Ok(pb::Sampler::Unspecified) => SamplerKind::Random,
            Err(_) => return Err(invalid(format!("unknown sampler {}", r.sampler))),
        };
        if r.batch_size == 0 {
            return Err(invalid("batch_size must be positive"));
        }
        if r.batch_size > self.limits.max_batch_size {
            return Err(invalid(format!(
                "batch_size {} exceeds the limit of {}",
                r.batch_size, self.limits.max_batch_size
            )));
        }
        if r.patch_size == 0 {
            return Err(invalid("patch_size must be positive"));
        }
        if r.patch_size > self.limits.max_patch_size {
            return Err(invalid(format!(
                "patch_size {} exceeds the limit of {}",
                r.patch_size, self.limits.max_patch_size
            )));
        }
        let world = r.world_size.max(1) as u64;
        if r.rank as u64 >= world {
            return Err(invalid(format!("rank {} is not below world_size {world}", r.rank)));
        }
        let out = OutType::parse(&r.dtype).ok_or_else(|| {
            invalid(format!(
                "unknown dtype {:?} (native, float32, float16, bfloat16, uint8, uint16)",
                r.dtype
            ))
        })?;
        if r.normalize && !out.is_float() {
            return Err(invalid("normalize needs a float dtype (float32, float16, bfloat16)"));
        }
        if r.level as usize >= ds.levels {
            return Err(invalid(format!(
                "level {} requested, dataset {} has levels 0..={}",
                r.level,
                ds.name,
                ds.levels - 1
            )));
        }
        if r.labels && ds.label_dtype.is_none() {
            return Err(Status::failed_precondition(format!(
                "dataset {} has no labels",
                ds.name
            )));
        }
        let bands = Self::bands(&ds, &r.bands)?;
        // Checked: whatever the limits in the config, a product never wraps around.
        let batch_bytes = [
            r.patch_size as u64,
            r.patch_size as u64,
            out.size(ds.dtype) as u64,
            r.batch_size as u64,
        ]
        .iter()
        .try_fold(bands.len() as u64, |acc, &x| acc.checked_mul(x))
        .unwrap_or(u64::MAX);
        if batch_bytes > self.limits.max_batch_bytes {
            return Err(invalid(format!(
                "a batch would hold {batch_bytes} bytes, over the limit of {}",
                self.limits.max_batch_bytes
            )));
        }
        let grids: Vec<SceneGrid> = ds
            .scenes
            .iter()
            .map(|s| {
                let l = &s.cog.header().levels[r.level as usize];
                SceneGrid {
                    width: l.width,
                    height: l.height,
                    block_width: l.block_width,
                    block_height: l.block_height,
                }
            })
            .collect();
        let spec = PlanSpec {
            kind,
            patch: r.patch_size,
            stride: if r.stride == 0 { r.patch_size } else { r.stride },
            level: r.level,
            seed: r.seed,
            epoch: r.epoch,
            samples_per_epoch: r.samples_per_epoch,
        };
        let plan = Plan::new(spec, grids).map_err(|m| invalid(format!("dataset {}: {m}", ds.name)))?;
        if r.cursor > plan.len() {
            return Err(invalid(format!(
                "cursor {} is past the end of the epoch ({} samples)",
                r.cursor,
                plan.len()
            )));
        }
        let share = Share {
            batch: r.batch_size as u64,
            rank: r.rank as u64,
            world,
            cursor: r.cursor,
            epoch_len: plan.len(),
        };
        let normalize = r.normalize.then(|| {
            bands
                .iter()
                .map(|b| {
                    let i = ds.bands.iter().position(|x| x == b);
                    i.map_or((0.0, 1.0), |i| (ds.mean[i], ds.std[i]))
                })
                .collect()
        });
        // Samples in flight: by Little's law from measured latency and consumption (at least
        // two batches), or the client's explicit choice; either way within the per-stream
        // memory budget.
        let sample_bytes = (batch_bytes / u64::from(r.batch_size.max(1))).max(1);
        let floor = (2 * r.batch_size as usize).clamp(16, 256);
        let ceiling = ((self.limits.max_prefetch_bytes / sample_bytes) as usize).clamp(floor, 4096);
        let prefetch = if r.prefetch > 0 {
            Depth::Fixed((r.prefetch as usize).min(ceiling))
        } else {
            Depth::Adaptive {
                min: floor,
                max: ceiling,
            }
        };
        Ok(StreamJob {
            dataset: ds,
            plan: Arc::new(plan),
            share,
            epoch: r.epoch,
            bands,
            labels: r.labels,
            transform: Transform {
                out,
                normalize,
                augment: r.augment,
            },
            max_batches: r.max_batches,
            prefetch,
            metrics: None,
            shutdown: Some(self.shutdown.clone()),
            budget: Some((self.prefetch_budget.clone(), sample_bytes)),
        })
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
        let ds = self.dataset(&r.get_ref().dataset)?;
        let scenes = ds
            .scenes
            .iter()
            .map(|s| pb::SceneInfo {
                index: s.index as u32,
                name: s.name.clone(),
                levels: s
                    .cog
                    .header()
                    .levels
                    .iter()
                    .map(|l| pb::Level {
                        width: l.width,
                        height: l.height,
                        block_width: l.block_width as u32,
                        block_height: l.block_height as u32,
                    })
                    .collect(),
                has_label: s.label.is_some(),
            })
            .collect();
        Ok(Response::new(pb::DatasetInfo {
            name: ds.name.clone(),
            version: ds.version.clone(),
            bands: ds.bands.iter().map(|b| *b as u32 + 1).collect(),
            dtype: ds.dtype.name().to_string(),
            labels: ds.label_dtype.is_some(),
            label_dtype: ds.label_dtype.map(|d| d.name().to_string()).unwrap_or_default(),
            fill: ds.fill,
            mean: ds.mean.clone(),
            std: ds.std.clone(),
            scenes,
        }))
    }

    type StreamBatchesStream = BatchStream;

    async fn stream_batches(&self, r: Request<pb::StreamBatchesRequest>) -> Result<Response<BatchStream>, Status> {
        let caller = self.allowed(&r, &r.get_ref().dataset)?;
        let permit: OwnedSemaphorePermit = self.streams.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "too many concurrent streams (limit {})",
                self.limits.max_streams
            ))
        })?;
        let caller_slot = caller.stream_slot().map_err(|e| status(&e))?;
        let job_slot = self.jobs.acquire(&r.get_ref().job).map_err(|e| status(&e))?;
        let mut job = self.job(r.get_ref())?;
        job.metrics = Some(self.metrics.clone());
        let labels = [job.dataset.name.clone(), self.metrics.job_label(&r.get_ref().job)];
        let span = tracing::info_span!(
            "stream",
            dataset = %job.dataset.name,
            job = %r.get_ref().job,
            caller = %caller.name(),
            rank = job.share.rank,
            world = job.share.world
        );
        tracing::info!(parent: &span, batches = job.batch_count(), cursor = job.share.cursor, "stream opened");
        let label_refs = [labels[0].as_str(), labels[1].as_str()];
        let queue = Arc::new(StreamQueue {
            gauge: self.metrics.queue_depth.with_label_values(&label_refs),
            state: std::sync::Mutex::new((0, false)),
        });
        let active = self.metrics.active_streams.with_label_values(&label_refs);
        active.inc();
        let (tx, rx) = mpsc::channel(self.limits.stream_queue_batches);
        let observer: Arc<dyn QueueObserver> = queue.clone();
        tokio::spawn(tracing::Instrument::instrument(
            pipeline::run(job, self.cache.clone(), tx, Some(observer)),
            span.clone(),
        ));
        let stream = MeteredStream {
            rx,
            catalog: self.catalog.clone(),
            queue,
            metrics: self.metrics.clone(),
            labels,
            waiting_since: None,
            active,
            _permits: (permit, caller_slot, job_slot),
            _span: span,
        };
        Ok(Response::new(Box::pin(stream)))
    }

    async fn count_batches(
        &self,
        r: Request<pb::StreamBatchesRequest>,
    ) -> Result<Response<pb::CountBatchesResponse>, Status> {
        self.allowed(&r, &r.get_ref().dataset)?;
        let job = self.job(r.get_ref())?;
        Ok(Response::new(pb::CountBatchesResponse {
            batches: job.batch_count(),
            samples_in_epoch: job.plan.len(),
            batches_in_epoch: job.share.batches(),
        }))
    }

    async fn read_window(&self, r: Request<pb::ReadWindowRequest>) -> Result<Response<pb::ReadWindowResponse>, Status> {
        self.allowed(&r, &r.get_ref().dataset)?;
        let r = r.into_inner();
        let ds = self.dataset(&r.dataset)?;
        let scene = ds.scenes.get(r.scene as usize).ok_or_else(|| {
            invalid(format!(
                "scene {} of dataset {} ({} scenes)",
                r.scene,
                ds.name,
                ds.scenes.len()
            ))
        })?;
        if r.width == 0
            || r.height == 0
            || r.width > self.limits.max_patch_size
            || r.height > self.limits.max_patch_size
        {
            return Err(invalid(format!(
                "window size {}x{} (1..={})",
                r.width, r.height, self.limits.max_patch_size
            )));
        }
        let bands = Self::bands(&ds, &r.bands)?;
        let window = WindowSpec {
            scene: r.scene,
            col: r.col,
            row: r.row,
            width: r.width,
            height: r.height,
            level: r.level,
            padded: false,
        };
        let read = |cog, object, version, bands: Vec<usize>| {
            let cache = self.cache.clone();
            async move {
                let region = patch::fetch_region(&cache, cog, object, version, window, &bands, 0.0)
                    .await
                    .map_err(|e| status(&Error::tiff(object.as_ref(), e)))?;
                crate::cog::on_cpu_pool(move || region.assemble())
                    .await
                    .map_err(|e| status(&Error::tiff(object.as_ref(), e)))
            }
        };
        let image = read(&scene.cog, &scene.url, &scene.version, bands).await?;
        let label = match (&scene.label, r.labels) {
            (Some(l), true) => Some(read(&l.cog, &l.url, &l.version, vec![0]).await?),
            (None, true) => {
                return Err(Status::failed_precondition(format!(
                    "dataset {} has no labels",
                    ds.name
                )));
            }
            _ => None,
        };
        Ok(Response::new(pb::ReadWindowResponse {
            image: Some(pb::Tensor {
                dtype: image.dtype.name().to_string(),
                shape: vec![image.bands as i64, image.height as i64, image.width as i64],
                data: image.data.into(),
            }),
            label: label.map(|l| pb::Tensor {
                dtype: l.dtype.name().to_string(),
                shape: vec![l.height as i64, l.width as i64],
                data: l.data.into(),
            }),
        }))
    }
}
