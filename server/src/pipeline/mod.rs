//! The batch pipeline of one stream: plan → tiles (shared cache) → patches → transform →
//! batch → bounded queue.
//!
//! Samples are loaded with an ordered, bounded look-ahead sized by Little's law
//! ([`lookahead`]), so concurrency never changes what a client receives; stitching and
//! transforms run on the CPU pool; the queue towards the client holds at most `queue`
//! batches, so a slow client never grows server memory beyond it, and a client that reads
//! nothing for `stall_timeout` ends its stream. When the client goes away the queue closes
//! and the task ends, dropping everything in flight. Under `on_corrupt = skip` a sample
//! whose data is corrupt or missing is left out of its batch and reported with it: the
//! skip depends only on the data, so every run skips the same samples.

pub mod footprints;
pub mod lookahead;
mod map_sample;
pub mod plan_ahead;
mod prefetch;
pub mod transform;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;

use crate::config::OnCorrupt;
use crate::dataset::Dataset;
use crate::dataset::map::SampleMeta;
use crate::error::{Error, ErrorCode};
use crate::memory::MemoryBudget;
use crate::metrics::{Metrics, Timer};
use crate::sampler::{Plan, Share, WindowSpec};
use crate::tiles::{TileSource, region};
use cogfeed_tiff::{TiffError, on_cpu_pool};
use transform::{Orientation, Transform, cast_plane, orient};

/// A dense little-endian array.
#[derive(Debug, Clone)]
pub struct TensorOut {
    pub dtype: &'static str,
    pub shape: Vec<i64>,
    pub data: Bytes,
}

/// One batch, ready for the wire.
#[derive(Debug, Clone)]
pub struct BatchOut {
    pub epoch: u64,
    pub index: u64,
    pub cursor: u64,
    pub batches_in_epoch: u64,
    pub image: TensorOut,
    pub label: Option<TensorOut>,
    pub windows: Vec<WindowSpec>,
    /// Samples left out under `on_corrupt = skip`.
    pub skipped: Vec<Skipped>,
    /// Map-space datasets: the requested layers after the first (which is `image`), by
    /// name (empty otherwise).
    pub layers: Vec<(String, TensorOut)>,
    /// Map-space datasets: the name of the layer in `image`.
    pub image_layer: Option<String>,
    /// Map-space datasets: what each sample is (empty otherwise).
    pub samples: Vec<SampleMeta>,
    /// Time layers among the requested ones: uint8 `[B, T]`, 1 where a step holds a date.
    pub time_masks: Vec<(String, TensorOut)>,
    /// The points sampler: each point attribute, float64 `[B]`.
    pub targets: Vec<(String, TensorOut)>,
    /// The version of the dataset (or mixture) the batch was drawn from.
    pub dataset_version: Arc<str>,
}

/// A sample left out of its batch because its data could not be read.
#[derive(Debug, Clone)]
pub struct Skipped {
    /// Global position in the epoch.
    pub sample: u64,
    pub window: WindowSpec,
    /// `corrupt` or `missing`.
    pub reason: &'static str,
}

/// Why a failed sample may be skipped (None: the error ends the stream whatever the
/// policy, e.g. a store that is down, which is not a property of the data).
fn skip_reason(e: &Error) -> Option<&'static str> {
    match e.code() {
        ErrorCode::DataLoss => Some("corrupt"),
        ErrorCode::NotFound => Some("missing"),
        _ => None,
    }
}

/// Everything one stream needs.
#[derive(Debug, Clone)]
pub struct StreamJob {
    pub dataset: Arc<Dataset>,
    pub plan: Arc<Plan>,
    pub share: Share,
    pub epoch: u64,
    pub bands: Vec<usize>,
    pub labels: bool,
    pub transform: Transform,
    pub max_batches: u64,
    /// Samples loaded ahead of the one being batched.
    pub prefetch: lookahead::Depth,
    /// Stage timings go here when set.
    pub metrics: Option<Arc<Metrics>>,
    /// Becomes true when the daemon shuts down: the stream ends with UNAVAILABLE.
    pub shutdown: Option<tokio::sync::watch::Receiver<bool>>,
    /// The daemon-wide memory budget, one sample's size in bytes, and the loads the stream
    /// reserved memory for when it opened (look-ahead beyond them takes from the budget).
    pub budget: Option<(MemoryBudget, u64, usize)>,
    /// What a corrupt tile or a missing object does to its sample.
    pub on_corrupt: OnCorrupt,
    /// A client that takes no batch for this long ends the stream (None: never).
    pub stall_timeout: Option<std::time::Duration>,
    /// Map-space datasets: indices of the layers streamed, in request order.
    pub layers: Vec<usize>,
    /// Map-space datasets: the split (index in the dataset's split rule) every sample's
    /// footprint must lie in.
    pub split: Option<usize>,
    /// A mixture: sample `i` is sample `n mod len` of part `p`'s job, where
    /// `(p, n) = interleave.locate(i)` (this job's own plan is then part 0's).
    pub mixture: Option<Arc<Mixture>>,
}

/// The parts of a mixture stream.
#[derive(Debug)]
pub struct Mixture {
    pub parts: Vec<StreamJob>,
    pub interleave: crate::sampler::Interleave,
}

impl Mixture {
    /// The part and the part's sample index of sample `i`.
    fn locate(&self, i: u64) -> (&StreamJob, u64) {
        let (p, n) = self.interleave.locate(i);
        let part = &self.parts[p];
        (part, n % part.plan.len().max(1))
    }
}

impl StreamJob {
    /// The window of sample `i` (in its part's dataset for a mixture).
    pub fn window(&self, i: u64) -> WindowSpec {
        match &self.mixture {
            Some(m) => {
                let (part, n) = m.locate(i);
                part.plan.window(n)
            }
            None => self.plan.window(i),
        }
    }

    /// This job reporting to `metrics` and ending at `shutdown` (a mixture's parts too).
    pub fn observed(mut self, metrics: Arc<Metrics>, shutdown: tokio::sync::watch::Receiver<bool>) -> Self {
        if let Some(mixture) = self.mixture.take() {
            let mut m = Arc::try_unwrap(mixture).unwrap_or_else(|shared| Mixture {
                parts: shared.parts.clone(),
                interleave: shared.interleave.clone(),
            });
            m.parts = m
                .parts
                .into_iter()
                .map(|p| p.observed(metrics.clone(), shutdown.clone()))
                .collect();
            self.mixture = Some(Arc::new(m));
        }
        self.metrics = Some(metrics);
        self.shutdown = Some(shutdown);
        self
    }

    /// The version of what this job draws from: its dataset's, or for a mixture a digest
    /// of its parts' names and versions (any part changing changes it).
    pub fn version(&self) -> String {
        match &self.mixture {
            None => self.dataset.version.clone(),
            Some(m) => {
                use sha2::Digest;
                let mut h = sha2::Sha256::new();
                for p in &m.parts {
                    h.update(p.dataset.name.as_bytes());
                    h.update([0]);
                    h.update(p.dataset.version.as_bytes());
                    h.update([0]);
                }
                format!("mix-{}", &hex::encode(h.finalize())[..16])
            }
        }
    }

    /// Samples in the epoch.
    pub fn samples_in_epoch(&self) -> u64 {
        self.share.epoch_len
    }

    /// Batches this stream will send.
    pub fn batch_count(&self) -> u64 {
        let n = self.share.batches();
        if self.max_batches > 0 {
            n.min(self.max_batches)
        } else {
            n
        }
    }
}

/// One transformed sample.
struct Sample {
    image: SampleImage,
    label: Option<Vec<u8>>,
    window: WindowSpec,
    /// Map-space datasets: the requested layers' bytes and the sample's metadata.
    layers: Vec<Vec<u8>>,
    meta: Option<SampleMeta>,
    /// How long the load waited for its tiles (the latency a deeper look-ahead hides);
    /// None where fetching and computing interleave (map-space warps).
    waited: Option<std::time::Duration>,
}

impl lookahead::Waited for (u64, Result<Sample, Error>) {
    fn waited(&self) -> Option<std::time::Duration> {
        self.1.as_ref().ok().and_then(|s| s.waited)
    }
}

/// A sample's image bytes.
enum SampleImage {
    /// Its own buffer, copied into the batch's.
    Owned(Vec<u8>),
    /// Its slice of the batch's buffer, assembled in place: joined to its neighbours
    /// without a copy (`BytesMut::unsplit`).
    InBatch(BytesMut),
}

/// The batch's image buffer, cut into one zeroed slice per sample in order, when samples
/// can be assembled in place (grid datasets, native samples, no normalisation or
/// augmentation); slices are handed to the loads as the look-ahead starts them.
fn batch_slices(samples: usize, sample_bytes: usize) -> impl Iterator<Item = BytesMut> {
    let mut slab = BytesMut::zeroed(samples * sample_bytes);
    (0..samples).map(move |_| slab.split_to(sample_bytes))
}

async fn load_sample(job: &StreamJob, cache: &dyn TileSource, i: u64, slot: Option<BytesMut>) -> Result<Sample, Error> {
    let Some(mixture) = &job.mixture else {
        return load_one(job, cache, i, slot).await;
    };
    let (part, n) = mixture.locate(i);
    let mut sample = load_one(part, cache, n, slot).await?;
    if let Some(meta) = sample.meta.as_mut() {
        meta.dataset = Some(part.dataset.name.clone());
    }
    Ok(sample)
}

/// Sample `i` of a job that is not a mixture, assembled into `slot` (its slice of the
/// batch's buffer) when it can be.
async fn load_one(job: &StreamJob, cache: &dyn TileSource, i: u64, slot: Option<BytesMut>) -> Result<Sample, Error> {
    let ds = &job.dataset;
    if let Some(map) = &ds.map {
        return map_sample::load_map_sample(job, map, cache, i).await;
    }
    let window = job.plan.window(i);
    let scene = &ds.scenes[window.scene as usize];
    let scene_object = scene.tiles()?;
    let fetching = std::time::Instant::now();
    let image = region::fetch_region(cache, scene_object, window, &job.bands, ds.fill)
        .await
        .map_err(|e| Error::tiff(scene_object.url.as_ref(), e))?;
    let label = match (&scene.label, job.labels) {
        (Some(l), true) => Some(
            region::fetch_region(cache, l, window, &[0], 0.0)
                .await
                .map_err(|e| Error::tiff(l.url.as_ref(), e))?,
        ),
        _ => None,
    };
    let waited = Some(fetching.elapsed());
    let transform = job.transform.clone();
    let key = job.plan.augment_key(i);
    let object = scene_object.url.clone();
    let metrics = job.metrics.clone();
    on_cpu_pool(move || {
        let stage = |name: &str| {
            metrics
                .as_ref()
                .map(|m| Timer::start(&m.stage_seconds.with_label_values(&[name])))
        };
        let assemble = stage("assemble");
        if let (true, Some(mut slot)) = (transform.is_identity(), slot)
            && image.assemble_into(&mut slot)
        {
            let label = label.map(|l| l.assemble().data);
            return Sample {
                image: SampleImage::InBatch(slot),
                label,
                window,
                layers: Vec::new(),
                meta: None,
                waited,
            };
        }
        let raster = image.assemble();
        let (h, w) = (raster.height, raster.width);
        let o = if transform.augment {
            Orientation::from_key(key, h == w)
        } else {
            Orientation::NONE
        };
        let label = label.map(|l| {
            let r = l.assemble();
            if o == Orientation::NONE {
                r.data
            } else {
                orient(&r.data, r.height, r.width, r.dtype.size(), o)
            }
        });
        drop(assemble);
        let _transform = stage("transform");
        if o == Orientation::NONE && transform.keeps_values() {
            // Nothing to change: the stitched patch is the sample.
            return Sample {
                image: SampleImage::Owned(raster.data),
                label,
                window,
                layers: Vec::new(),
                meta: None,
                waited,
            };
        }
        let es = raster.dtype.size();
        let plane_len = h * w * es;
        let mut out = Vec::with_capacity(raster.bands * h * w * transform.out.size(raster.dtype));
        for b in 0..raster.bands {
            let plane = &raster.data[b * plane_len..(b + 1) * plane_len];
            let oriented = if o == Orientation::NONE {
                None
            } else {
                Some(orient(plane, h, w, es, o))
            };
            let norm = transform.normalize.as_ref().and_then(|n| n.get(b).copied());
            cast_plane(
                raster.dtype,
                oriented.as_deref().unwrap_or(plane),
                transform.out,
                norm,
                &mut out,
            );
        }
        Sample {
            image: SampleImage::Owned(out),
            label,
            window,
            layers: Vec::new(),
            meta: None,
            waited,
        }
    })
    .await
    .map_err(|e: TiffError| Error::tiff(object.as_ref(), e))
}

/// Counts batches between the pipeline and the client (shared with the service's stream).
pub trait QueueObserver: Send + Sync {
    /// A batch is entering the queue.
    fn pushed(&self);
    /// A batch that was counted as pushed never made it (the client went away).
    fn unpushed(&self);
    /// The client took no batch for the stall timeout; the stream ends now. `cursor` is
    /// where the batches the client has taken end (it may hold fewer, still in transit).
    fn stalled(&self, cursor: u64);
    /// A sample was left out under `on_corrupt = skip`.
    fn skipped(&self, sample: &Skipped, error: &Error);
}

/// Runs the stream: sends each batch (or the error that ended it) into `tx`. When the
/// receiver goes away (the client left) everything in flight is dropped at once: loads are
/// aborted and CPU work queued for them is never started.
pub async fn run(
    job: StreamJob,
    cache: Arc<dyn TileSource>,
    tx: mpsc::Sender<Result<BatchOut, Error>>,
    queue: Option<Arc<dyn QueueObserver>>,
) {
    let closed = tx.clone();
    let planned = plan(&job, &cache);
    let cursor = planned.as_ref().map(|(c, _)| c.clone());
    tokio::select! {
        () = produce(job, cache, tx, queue, cursor) => {}
        () = closed.closed() => {}
    }
    if let Some((_, planner)) = planned {
        planner.abort();
    }
}

/// Starts `job`'s planner when `cache` evicts by the plan or prefetches, and the memory
/// budget has room for the plan.
fn plan(
    job: &StreamJob,
    cache: &Arc<dyn TileSource>,
) -> Option<(Arc<plan_ahead::Cursor>, tokio::task::JoinHandle<()>)> {
    let board = cache.board();
    let budget = cache.prefetch_budget();
    if board.is_none() && budget == 0 {
        return None;
    }
    let reservation = match &job.budget {
        Some((budget, _, _)) => Some(budget.try_reserve(plan_ahead::plan_bytes())?),
        None => None,
    };
    let (share, batches) = (job.share, job.batch_count());
    let order = (0..batches).flat_map(move |k| share.samples(k));
    Some(plan_ahead::start(
        job.clone(),
        board.as_ref(),
        cache.plan_relay(),
        order,
        reservation,
        (budget > 0).then(|| (cache.clone(), budget)),
    ))
}

/// The body of [`run`].
async fn produce(
    job: StreamJob,
    cache: Arc<dyn TileSource>,
    tx: mpsc::Sender<Result<BatchOut, Error>>,
    queue: Option<Arc<dyn QueueObserver>>,
    cursor: Option<Arc<plan_ahead::Cursor>>,
) {
    let batches = job.batch_count();
    let mut consumed = 0u64;
    let dataset_version: Arc<str> = Arc::from(job.version());
    let b = job.share.batch as usize;
    let ds = &job.dataset;
    let out = job.transform.out;
    let (c, p) = (job.bands.len() as i64, job.plan.window(0).width as i64);
    // Grid samples that need no transform are assembled straight into their batch's buffer.
    let in_place = ds.map.is_none() && job.transform.is_identity();
    let sample_bytes = c as usize * (p * p) as usize * out.size(ds.dtype);
    let share = &job.share;
    let samples = (0..batches).flat_map(move |k| {
        let n = share.samples(k).count();
        let mut slices = in_place.then(|| batch_slices(n, sample_bytes));
        share
            .samples(k)
            .map(move |i| (i, slices.as_mut().and_then(Iterator::next)))
    });
    let shared = Arc::new((job.clone(), cache.clone()));
    let planned = cursor.clone();
    let loads = samples.enumerate().map(move |(position, (i, slot))| {
        let (shared, planned) = (shared.clone(), planned.clone());
        async move {
            let sample = load_sample(&shared.0, shared.1.as_ref(), i, slot).await;
            if let Some(p) = planned {
                p.loaded(position as u64);
            }
            (i, sample)
        }
    });
    let mut loaded = lookahead::Lookahead::new(loads, job.prefetch);
    if let Some((budget, sample_bytes, reserved)) = &job.budget {
        loaded = loaded.with_budget(budget.clone(), *sample_bytes, *reserved);
    }
    for k in 0..batches {
        let mut image = BytesMut::new();
        if !in_place {
            image.reserve(b * sample_bytes);
        }
        let mut label = job.labels.then(Vec::new);
        let mut windows = Vec::with_capacity(b);
        let mut skipped = Vec::new();
        let mut layer_bytes: Vec<Vec<u8>> = vec![Vec::new(); job.layers.len()];
        let mut metas = Vec::new();
        // The last batch of a grid may be smaller.
        let in_batch = job.share.samples(k).count();
        for _ in 0..in_batch {
            let next = match job.shutdown.clone() {
                Some(mut stop) => tokio::select! {
                    s = loaded.next() => s,
                    _ = async {
                        loop {
                            let stopping = *stop.borrow_and_update();
                            if stopping {
                                break;
                            }
                            if stop.changed().await.is_err() {
                                // No daemon to signal a shutdown any more: never fires.
                                std::future::pending::<()>().await;
                            }
                        }
                    } => {
                        let cursor = if k == 0 { job.share.cursor } else { job.share.cursor_after(k - 1) };
                        let _ = tx.send(Err(Error::ShuttingDown { cursor })).await;
                        return;
                    }
                },
                None => loaded.next().await,
            };
            consumed += 1;
            if let Some(c) = &cursor {
                c.advance(consumed);
            }
            // A load task that panicked (a bug) ends the stream with an internal error.
            let next = next.map(|r| {
                r.unwrap_or_else(|e| {
                    (
                        u64::MAX,
                        Err(Error::Io {
                            context: "sample load".into(),
                            source: std::io::Error::other(e.to_string()),
                        }),
                    )
                })
            });
            let sample = match next {
                Some((_, Ok(s))) => s,
                Some((i, Err(e))) => match skip_reason(&e) {
                    Some(reason) if job.on_corrupt == OnCorrupt::Skip && i != u64::MAX => {
                        let skip = Skipped {
                            sample: i,
                            window: job.window(i),
                            reason,
                        };
                        if let Some(q) = &queue {
                            q.skipped(&skip, &e);
                        }
                        skipped.push(skip);
                        continue;
                    }
                    _ => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                },
                None => return,
            };
            match sample.image {
                // The next slice of this batch's buffer: joined without a copy.
                SampleImage::InBatch(slice) => image.unsplit(slice),
                SampleImage::Owned(bytes) => image.extend_from_slice(&bytes),
            }
            if let (Some(all), Some(one)) = (label.as_mut(), sample.label) {
                join_sample(all, one, in_batch);
            }
            for (all, one) in layer_bytes.iter_mut().zip(sample.layers) {
                join_sample(all, one, in_batch);
            }
            metas.extend(sample.meta);
            windows.push(sample.window);
        }
        let label_dtype = ds.label_dtype.map(|d| d.name()).unwrap_or("uint8");
        let n = windows.len() as i64;
        let layers: Vec<(String, TensorOut)> = match &ds.map {
            Some(map) => {
                let shapes = map.layer_shapes(p as u32);
                job.layers
                    .iter()
                    .zip(layer_bytes)
                    .map(|(&l, bytes)| {
                        let (t, c, h, w) = shapes[l];
                        let spec = &map.layers[l];
                        let mut shape = vec![n];
                        if spec.time.is_some() {
                            shape.push(t as i64);
                        }
                        shape.extend([c as i64, h as i64, w as i64]);
                        (
                            spec.name.clone(),
                            TensorOut {
                                dtype: spec.dtype.name(),
                                shape,
                                data: Bytes::from(bytes),
                            },
                        )
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        // The first requested layer of a map-space dataset travels in `image` (older
        // clients read it there), the others in `layers`.
        let mut layers = layers.into_iter();
        let (image_layer, image) = match layers.next() {
            Some((name, t)) => (Some(name), t),
            None => (
                None,
                TensorOut {
                    dtype: out.name(ds.dtype),
                    shape: vec![n, c, p, p],
                    data: Bytes::from(image),
                },
            ),
        };
        let layers: Vec<(String, TensorOut)> = layers.collect();
        let time_masks = match &ds.map {
            Some(map) => job
                .layers
                .iter()
                .filter_map(|&l| {
                    let spec = &map.layers[l];
                    let t = spec.time.as_ref()?.steps;
                    let mut mask = Vec::with_capacity(metas.len() * t);
                    for m in &metas {
                        let days = m.times.iter().find(|(name, _)| name == &spec.name);
                        mask.extend(
                            (0..t).map(|k| u8::from(days.is_some_and(|(_, d)| d.get(k).is_some_and(Option::is_some)))),
                        );
                    }
                    Some((
                        spec.name.clone(),
                        TensorOut {
                            dtype: "uint8",
                            shape: vec![n, t as i64],
                            data: Bytes::from(mask),
                        },
                    ))
                })
                .collect(),
            None => Vec::new(),
        };
        let targets = match ds.map.as_ref().and_then(|m| m.points.as_ref()) {
            Some(points) if job.plan.kind() == crate::sampler::SamplerKind::Points => points
                .names
                .iter()
                .enumerate()
                .map(|(k, name)| {
                    let mut data = Vec::with_capacity(metas.len() * 8);
                    for m in &metas {
                        let v = m.point.and_then(|p| points.values.get(p)).map_or(f64::NAN, |v| v[k]);
                        data.extend_from_slice(&v.to_le_bytes());
                    }
                    (
                        name.clone(),
                        TensorOut {
                            dtype: "float64",
                            shape: vec![n],
                            data: Bytes::from(data),
                        },
                    )
                })
                .collect(),
            _ => Vec::new(),
        };
        let batch = BatchOut {
            epoch: job.epoch,
            index: k,
            cursor: job.share.cursor_after(k),
            batches_in_epoch: job.share.batches(),
            image,
            label: label.map(|l| TensorOut {
                dtype: label_dtype,
                shape: vec![n, p, p],
                data: Bytes::from(l),
            }),
            windows,
            skipped,
            layers,
            image_layer,
            samples: metas,
            time_masks,
            targets,
            dataset_version: dataset_version.clone(),
        };
        if let Some(q) = &queue {
            q.pushed();
        }
        let sent = match job.stall_timeout {
            Some(limit) => match tokio::time::timeout(limit, tx.send(Ok(batch))).await {
                Ok(r) => r.is_ok(),
                Err(_) => {
                    // Nothing taken for the whole stall timeout: end the stream.
                    if let Some(q) = &queue {
                        q.unpushed();
                        let taken = k.saturating_sub(tx.max_capacity() as u64 - tx.capacity() as u64);
                        let cursor = if taken == 0 {
                            job.share.cursor
                        } else {
                            job.share.cursor_after(taken - 1)
                        };
                        q.stalled(cursor);
                    }
                    return;
                }
            },
            None => tx.send(Ok(batch)).await.is_ok(),
        };
        if !sent {
            // The client went away.
            if let Some(q) = &queue {
                q.unpushed();
            }
            return;
        }
    }
}

/// Appends one sample's bytes to its batch tensor: the first sample sizes the tensor for
/// the whole batch (samples of a tensor are equal in size), so it never regrows; a batch
/// of one takes the sample as it is.
fn join_sample(all: &mut Vec<u8>, one: Vec<u8>, in_batch: usize) {
    if all.capacity() == 0 {
        if in_batch <= 1 {
            *all = one;
            return;
        }
        all.reserve_exact(one.len().saturating_mul(in_batch));
    }
    all.extend_from_slice(&one);
}
