//! Request validation: a `StreamBatchesRequest` or `ReadWindowRequest` becomes a typed job,
//! or INVALID_ARGUMENT / NOT_FOUND / FAILED_PRECONDITION naming what is wrong. Every size
//! the client chooses is checked against the limits here and its memory computed, so the
//! caller can admit it against the daemon's budget before anything is allocated. Client
//! strings (dataset and job names) are bounded and checked before they reach a log line,
//! an error message or a metric label.

use std::sync::Arc;

use cogfeed_proto::v1 as pb;

use crate::config::{LimitsConfig, OnCorrupt};
use crate::dataset::{Catalog, Dataset};
use crate::error::Error;
use crate::memory::MemoryBudget;
use crate::pipeline::StreamJob;
use crate::pipeline::lookahead::Depth;
use crate::pipeline::transform::{OutType, Transform};
use crate::sampler::{Plan, PlanSpec, SamplerKind, SceneGrid, Share, WindowSpec};

/// Longest dataset or job name accepted (dataset names in the config are shorter still).
pub const MAX_NAME_CHARS: usize = 128;

/// Batches a stream holds at most besides its queue: one blocked on the full queue, one
/// being assembled, two in the transport (tonic's encode buffer, HTTP/2's send buffer).
const BATCHES_BESIDE_QUEUE: u64 = 4;

/// Most datasets one mixture stream draws from.
const MAX_MIXTURE_PARTS: usize = 16;
/// Samples per period of a mixture: weights are quotas of it.
const MIXTURE_PERIOD: u64 = 1000;

fn invalid(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(msg.into())
}

/// A client string for a message: at most 64 characters, control characters escaped.
pub fn shown(s: &str) -> String {
    let cut: String = s.chars().take(64).collect();
    let more = if s.chars().count() > 64 { "…" } else { "" };
    format!("{:?}{more}", cut)
}

/// Checks a job name: up to 128 letters, digits and `- _ . : / @ +` (it becomes a log field
/// and a metric label, so nothing that could forge a line or bloat an exposition).
pub fn check_job(job: &str) -> Result<(), Error> {
    if job.chars().count() > MAX_NAME_CHARS {
        return Err(invalid(format!(
            "job name of {} characters (at most {MAX_NAME_CHARS})",
            job.chars().count()
        )));
    }
    if let Some(c) = job
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_.:/@+".contains(*c)))
    {
        return Err(invalid(format!(
            "job name {}: character {c:?} (use letters, digits and - _ . : / @ +)",
            shown(job)
        )));
    }
    Ok(())
}

/// The dataset called `name`; UNAVAILABLE for a configured one that failed to open (it
/// is retried), else NOT_FOUND (the name shown bounded and escaped).
pub fn dataset(catalog: &Catalog, name: &str) -> Result<Arc<Dataset>, Error> {
    if name.chars().count() <= MAX_NAME_CHARS {
        if let Some(d) = catalog.get(name) {
            return Ok(d);
        }
        if let Some(why) = catalog.unready_message(name) {
            return Err(Error::Unready(why));
        }
    }
    Err(Error::NotFound(format!("dataset {} not found", shown(name))))
}

/// The 0-based bands of a request: the dataset's bands when none are named, else the named
/// ones, each among the dataset's served bands and none twice.
pub fn bands(ds: &Dataset, requested: &[u32]) -> Result<Vec<usize>, Error> {
    if requested.is_empty() {
        return Ok(ds.bands.clone());
    }
    let served = || {
        ds.bands
            .iter()
            .map(|b| (b + 1).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if requested.len() > ds.bands.len() {
        return Err(invalid(format!(
            "{} bands requested, dataset {} serves {} ({})",
            requested.len(),
            ds.name,
            ds.bands.len(),
            served()
        )));
    }
    let mut out: Vec<usize> = Vec::with_capacity(requested.len());
    for &b in requested {
        let zero_based = (b as usize).checked_sub(1);
        match zero_based {
            Some(z) if ds.bands.contains(&z) => {
                if out.contains(&z) {
                    return Err(invalid(format!("band {b} requested twice")));
                }
                out.push(z);
            }
            _ => {
                return Err(invalid(format!(
                    "band {b} is not served by dataset {} (bands {})",
                    ds.name,
                    served()
                )));
            }
        }
    }
    Ok(out)
}

/// `value` of the request field `what` is positive and at most `limit`.
fn within(what: &str, value: u32, limit: u32) -> Result<(), Error> {
    if value == 0 {
        return Err(invalid(format!("{what} must be positive")));
    }
    if value > limit {
        return Err(invalid(format!("{what} {value} exceeds the limit of {limit}")));
    }
    Ok(())
}

/// `level` is an overview level every scene of `ds` has.
fn check_level(ds: &Dataset, level: u32) -> Result<(), Error> {
    if level as usize >= ds.levels {
        return Err(invalid(format!(
            "level {level} requested, dataset {} has levels 0..={}",
            ds.name,
            ds.levels - 1
        )));
    }
    Ok(())
}

fn corrupt_policy(ds: &Dataset, requested: &str) -> Result<OnCorrupt, Error> {
    match requested {
        "" => Ok(ds.on_corrupt),
        "fail" => Ok(OnCorrupt::Fail),
        "skip" => Ok(OnCorrupt::Skip),
        other => Err(invalid(format!("on_corrupt {} (fail, skip)", shown(other)))),
    }
}

/// A validated stream request and the memory it needs.
#[derive(Debug)]
pub struct Admitted {
    pub job: StreamJob,
    /// Bytes the stream holds at most, outside of look-ahead beyond its floor.
    pub stream_bytes: u64,
}

/// The plan, share and look-ahead of a stream, once its sample size is known.
struct Planned {
    plan: Plan,
    share: Share,
    prefetch: Depth,
    reserved: usize,
    stream_bytes: u64,
}

/// The sizes a stream is planned with: bytes per sample sent and per sample while it
/// loads, and the decoded-tile cache's capacity (a locality order's default dial).
struct Sizes {
    sample_bytes: u64,
    load_bytes: u64,
    cache_bytes: u64,
}

fn plan_stream(
    ds: &Dataset,
    limits: &LimitsConfig,
    r: &pb::StreamBatchesRequest,
    kind: SamplerKind,
    build: impl FnOnce(PlanSpec) -> Result<Plan, String>,
    sizes: Sizes,
) -> Result<Planned, Error> {
    let Sizes {
        sample_bytes,
        load_bytes,
        cache_bytes,
    } = sizes;
    let batch_bytes = sample_bytes.saturating_mul(u64::from(r.batch_size));
    if batch_bytes > limits.max_batch_bytes {
        return Err(invalid(format!(
            "a batch would hold {batch_bytes} bytes, over the limit of {} (limits.max_batch_bytes)",
            limits.max_batch_bytes
        )));
    }
    let spec = PlanSpec {
        kind,
        patch: r.patch_size,
        stride: if r.stride == 0 { r.patch_size } else { r.stride },
        level: r.level,
        seed: r.seed,
        epoch: r.epoch,
        samples_per_epoch: r.samples_per_epoch,
    };
    let plan = build(spec).map_err(|m| invalid(format!("dataset {}: {m}", ds.name)))?;
    let plan = super::order::ordered(plan, ds, r, sample_bytes, cache_bytes)?;
    if r.cursor > plan.len() {
        return Err(invalid(format!(
            "cursor {} is past the end of the epoch ({} samples)",
            r.cursor,
            plan.len()
        )));
    }
    let world = r.world_size.max(1) as u64;
    let share = Share {
        batch: r.batch_size as u64,
        rank: r.rank as u64,
        world,
        cursor: r.cursor,
        epoch_len: plan.len(),
        // A grid is a cover: its last, partial step is sent too.
        keep_tail: kind == SamplerKind::Grid,
    };
    let floor = (2 * r.batch_size as usize).clamp(16, 256);
    let ceiling = ((limits.max_prefetch_bytes / load_bytes.max(1)) as usize).clamp(floor, 4096);
    let prefetch = if r.prefetch > 0 {
        Depth::Fixed((r.prefetch as usize).min(ceiling))
    } else {
        Depth::Adaptive {
            min: floor,
            max: ceiling,
        }
    };
    let reserved = match prefetch {
        Depth::Fixed(n) => n.min(floor),
        Depth::Adaptive { min, .. } => min,
    };
    let queued = limits.stream_queue_batches as u64 + BATCHES_BESIDE_QUEUE;
    let stream_bytes = batch_bytes
        .saturating_mul(queued)
        .saturating_add(load_bytes.saturating_mul(reserved as u64))
        .saturating_add(plan.order_bytes());
    Ok(Planned {
        plan,
        share,
        prefetch,
        reserved,
        stream_bytes,
    })
}

/// A stream of a map-space (STAC) dataset: layers instead of bands; the sample is the
/// footprint of a reference-grid window.
fn map_stream_job(
    ds: &Arc<Dataset>,
    map: &crate::dataset::map::MapSpace,
    limits: &LimitsConfig,
    memory: &MemoryBudget,
    r: &pb::StreamBatchesRequest,
    kind: SamplerKind,
    cache_bytes: u64,
) -> Result<Admitted, Error> {
    let refuse = |what: &str| {
        Err(invalid(format!(
            "dataset {} is a map-space dataset: {what} (set dtype per layer in the config)",
            ds.name
        )))
    };
    if !r.bands.is_empty() {
        return refuse("it serves layers, not bands");
    }
    if r.labels {
        return refuse("labels are a layer: name it in layers");
    }
    if r.normalize || r.augment {
        return refuse("normalize and augment are not supported on its layers yet");
    }
    if !(r.dtype.is_empty() || r.dtype == "native") {
        return refuse("the request dtype must be native");
    }
    let mut layers = Vec::with_capacity(r.layers.len().max(1));
    if r.layers.is_empty() {
        layers.extend(0..map.layers.len());
    } else {
        for name in &r.layers {
            let i = map.layers.iter().position(|l| &l.name == name).ok_or_else(|| {
                invalid(format!(
                    "dataset {} has no layer {} (layers {})",
                    ds.name,
                    shown(name),
                    map.layers
                        .iter()
                        .map(|l| l.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            if layers.contains(&i) {
                return Err(invalid(format!("layer {} requested twice", shown(name))));
            }
            layers.push(i);
        }
    }
    let on_corrupt = corrupt_policy(ds, &r.on_corrupt)?;
    let shapes = map.layer_shapes(r.patch_size);
    // Output bytes per sample (what batches hold) and, while a sample loads, the warp's
    // working set on top: f64 values and a validity flag per output pixel of each layer.
    let (mut sample_bytes, mut working) = (0u64, 0u64);
    // Layers the valid fraction needs are assembled too, though not sent.
    let mut assembled = layers.clone();
    if let Some(rule) = &map.valid {
        for l in std::iter::once(0).chain(rule.mask_layer) {
            if !assembled.contains(&l) {
                assembled.push(l);
            }
        }
    }
    for &l in &assembled {
        let (t, c, h, w) = shapes[l];
        let pixels = (h as u64).saturating_mul(w as u64).saturating_mul(t as u64);
        let values = pixels.saturating_mul(c as u64);
        sample_bytes = sample_bytes.saturating_add(values.saturating_mul(map.layers[l].dtype.size() as u64));
        // The mosaic and the warps in flight beside it, f64 values and a flag per pixel each.
        let held = (crate::dataset::map::mosaic::MOSAIC_IN_FLIGHT + 1) as u64;
        working = working.saturating_add(values.saturating_mul(8).saturating_add(pixels).saturating_mul(held));
    }
    // Every byte of the message counts: the sample's metadata too.
    let sample_bytes = sample_bytes.saturating_add(map.meta_bytes_per_sample()).max(1);
    let split = if r.split.is_empty() {
        None
    } else {
        let rule = map.split.as_ref().ok_or_else(|| {
            invalid(format!(
                "dataset {} has no [datasets.split]: split {} cannot be served",
                ds.name,
                shown(&r.split)
            ))
        })?;
        let i = rule.index_of(&r.split).ok_or_else(|| {
            invalid(format!(
                "dataset {} has no split {} (splits {})",
                ds.name,
                shown(&r.split),
                rule.names.join(", ")
            ))
        })?;
        if kind == SamplerKind::Grid {
            return Err(invalid(
                "a grid covers every scene whole: request a split with the random, aligned or points sampler",
            ));
        }
        Some(i)
    };
    let grids: Vec<SceneGrid> = (0..ds.scenes.len()).map(|i| map.scene_grid(i)).collect();
    let load_bytes = sample_bytes.saturating_add(working);
    let plan_of = |spec: PlanSpec| {
        if kind == SamplerKind::Balanced {
            let b = map
                .balance
                .as_ref()
                .ok_or("the balanced sampler needs [datasets.balance] in the dataset's config")?;
            return Plan::balanced(spec, grids, b.cells.clone());
        }
        if kind != SamplerKind::Points {
            return Plan::new(spec, grids);
        }
        if map.points.is_none() {
            return Err("the points sampler needs `points` in the dataset's config".into());
        }
        let centres = Arc::new(map.centres_for(spec.patch, split));
        Plan::points(spec, grids, centres)
    };
    let build = |spec: PlanSpec| plan_of(spec).map(|p| p.sharing_grids(map.grid_ids()));
    let sizes = Sizes {
        sample_bytes,
        load_bytes,
        cache_bytes,
    };
    let p = plan_stream(ds, limits, r, kind, build, sizes)?;
    Ok(Admitted {
        job: StreamJob {
            dataset: ds.clone(),
            plan: Arc::new(p.plan),
            share: p.share,
            epoch: r.epoch,
            bands: Vec::new(),
            labels: false,
            transform: Transform {
                out: OutType::Native,
                normalize: None,
                augment: false,
            },
            max_batches: r.max_batches,
            prefetch: p.prefetch,
            metrics: None,
            shutdown: None,
            budget: Some((memory.clone(), load_bytes, p.reserved)),
            on_corrupt,
            stall_timeout: Some(limits.stall_timeout()),
            layers,
            split,
            mixture: None,
        },
        stream_bytes: p.stream_bytes,
    })
}

/// Validates a stream request into a job; look-ahead beyond the reserved floor will take
/// its memory from `memory`.
pub fn stream_job(
    catalog: &Catalog,
    limits: &LimitsConfig,
    memory: &MemoryBudget,
    r: &pb::StreamBatchesRequest,
) -> Result<Admitted, Error> {
    let admitted = if r.mixture.is_empty() {
        single_job(catalog, limits, memory, r)?
    } else {
        mixture_job(catalog, limits, memory, r)?
    };
    check_version(&admitted.job, r)?;
    Ok(admitted)
}

/// A resume (cursor > 0) names the version its cursor was taken on: a dataset that has
/// changed since plans other samples, so the cursor no longer means what it meant.
fn check_version(job: &StreamJob, r: &pb::StreamBatchesRequest) -> Result<(), Error> {
    if r.cursor == 0 || r.dataset_version.is_empty() {
        return Ok(());
    }
    let now = job.version();
    if r.dataset_version == now {
        return Ok(());
    }
    Err(Error::FailedPrecondition(format!(
        "the dataset changed since this cursor was taken (version {} then, {now} now): resuming at cursor {} would repeat or skip samples; restart the epoch at cursor 0",
        shown(&r.dataset_version),
        r.cursor
    )))
}

/// A stream of one dataset (not a mixture).
fn single_job(
    catalog: &Catalog,
    limits: &LimitsConfig,
    memory: &MemoryBudget,
    r: &pb::StreamBatchesRequest,
) -> Result<Admitted, Error> {
    let ds = dataset(catalog, &r.dataset)?;
    check_job(&r.job)?;
    let kind = match pb::Sampler::try_from(r.sampler) {
        Ok(pb::Sampler::Aligned) => SamplerKind::Aligned,
        Ok(pb::Sampler::Grid) => SamplerKind::Grid,
        Ok(pb::Sampler::Points) => SamplerKind::Points,
        Ok(pb::Sampler::Balanced) => SamplerKind::Balanced,
        Ok(pb::Sampler::Random) | Ok(pb::Sampler::Unspecified) => SamplerKind::Random,
        Err(_) => return Err(invalid(format!("unknown sampler {}", r.sampler))),
    };
    within("batch_size", r.batch_size, limits.max_batch_size)?;
    within("patch_size", r.patch_size, limits.max_patch_size)?;
    let world = r.world_size.max(1) as u64;
    if r.rank as u64 >= world {
        return Err(invalid(format!("rank {} is not below world_size {world}", r.rank)));
    }
    let out = OutType::parse(&r.dtype).ok_or_else(|| {
        invalid(format!(
            "unknown dtype {} (native, float32, float16, bfloat16, uint8, uint16)",
            shown(&r.dtype)
        ))
    })?;
    if r.normalize && !out.is_float() {
        return Err(invalid("normalize needs a float dtype (float32, float16, bfloat16)"));
    }
    check_level(&ds, r.level)?;
    if let Some(map) = &ds.map {
        return map_stream_job(&ds, map, limits, memory, r, kind, catalog.cache_bytes());
    }
    if !r.layers.is_empty() {
        return Err(invalid(format!(
            "dataset {} is not a map-space dataset: it has no layers (request bands)",
            ds.name
        )));
    }
    if !r.split.is_empty() {
        return Err(invalid(format!(
            "dataset {} is not a map-space dataset: it has no splits",
            ds.name
        )));
    }
    if r.labels && ds.label_dtype.is_none() {
        return Err(Error::FailedPrecondition(format!("dataset {} has no labels", ds.name)));
    }
    let on_corrupt = corrupt_policy(&ds, &r.on_corrupt)?;
    let bands = bands(&ds, &r.bands)?;
    // Checked: whatever the limits in the config, a product never wraps around.
    let pixels = u64::from(r.patch_size) * u64::from(r.patch_size);
    let image_sample = pixels
        .checked_mul(bands.len() as u64)
        .and_then(|x| x.checked_mul(out.size(ds.dtype) as u64))
        .unwrap_or(u64::MAX);
    let label_sample = match (r.labels, ds.label_dtype) {
        (true, Some(d)) => pixels * d.size() as u64,
        _ => 0,
    };
    let sample_bytes = image_sample.saturating_add(label_sample).max(1);
    let grids: Vec<SceneGrid> = ds
        .scenes
        .iter()
        .map(|s| {
            let l = &s.tiles()?.cog.header().levels[r.level as usize];
            Ok(SceneGrid {
                width: l.width,
                height: l.height,
                block_width: l.block_width,
                block_height: l.block_height,
            })
        })
        .collect::<Result<_, Error>>()?;
    let Planned {
        plan,
        share,
        prefetch,
        reserved,
        stream_bytes,
    } = plan_stream(
        &ds,
        limits,
        r,
        kind,
        |spec| Plan::new(spec, grids),
        Sizes {
            sample_bytes,
            load_bytes: sample_bytes,
            cache_bytes: catalog.cache_bytes(),
        },
    )?;
    let normalize = r.normalize.then(|| {
        bands
            .iter()
            .map(|b| {
                let i = ds.bands.iter().position(|x| x == b);
                i.map_or((0.0, 1.0), |i| (ds.mean[i], ds.std[i]))
            })
            .collect()
    });
    Ok(Admitted {
        job: StreamJob {
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
            shutdown: None,
            budget: Some((memory.clone(), sample_bytes, reserved)),
            on_corrupt,
            stall_timeout: Some(limits.stall_timeout()),
            layers: Vec::new(),
            split: None,
            mixture: None,
        },
        stream_bytes,
    })
}

/// The datasets a request reads: its `dataset`, or its mixture's parts.
pub fn datasets_read(r: &pb::StreamBatchesRequest) -> Vec<&str> {
    if r.mixture.is_empty() {
        vec![r.dataset.as_str()]
    } else {
        r.mixture.iter().map(|p| p.dataset.as_str()).collect()
    }
}

/// A mixture stream: each part is validated as a stream of its own (same request, its
/// dataset), the parts must give the requested layers the same names, shapes and types,
/// and the samples are dealt to the parts by `Interleave` in proportion to the weights.
fn mixture_job(
    catalog: &Catalog,
    limits: &LimitsConfig,
    memory: &MemoryBudget,
    r: &pb::StreamBatchesRequest,
) -> Result<Admitted, Error> {
    if !r.dataset.is_empty() {
        return Err(invalid("give either dataset or mixture, not both"));
    }
    if r.mixture.len() > MAX_MIXTURE_PARTS {
        return Err(invalid(format!(
            "a mixture of {} parts (at most {MAX_MIXTURE_PARTS})",
            r.mixture.len()
        )));
    }
    match pb::Sampler::try_from(r.sampler) {
        Ok(pb::Sampler::Grid) | Ok(pb::Sampler::Points) => {
            return Err(invalid(
                "a mixture draws with the random, aligned or balanced sampler (a grid covers and points are one dataset's)",
            ));
        }
        _ => {}
    }
    // Proportions from weights scaled by the largest, so huge weights (1.5e308 : 1e308)
    // keep their ratio instead of overflowing the sum.
    let largest = r.mixture.iter().map(|p| p.weight).fold(0.0f64, f64::max);
    let scale = if largest.is_finite() && largest > 0.0 {
        largest
    } else {
        1.0
    };
    let total: f64 = r.mixture.iter().map(|p| p.weight / scale).sum();
    let mut parts = Vec::with_capacity(r.mixture.len());
    let mut stream_bytes = 0u64;
    let mut quotas = Vec::with_capacity(r.mixture.len());
    for (k, part) in r.mixture.iter().enumerate() {
        if !(part.weight.is_finite() && part.weight > 0.0) {
            return Err(invalid(format!(
                "mixture part {}: weight {} is not a positive number",
                shown(&part.dataset),
                part.weight
            )));
        }
        if r.mixture[..k].iter().any(|q| q.dataset == part.dataset) {
            return Err(invalid(format!("mixture part {} given twice", shown(&part.dataset))));
        }
        let one = pb::StreamBatchesRequest {
            dataset: part.dataset.clone(),
            mixture: Vec::new(),
            cursor: 0,
            samples_per_epoch: 0,
            max_batches: 0,
            ..r.clone()
        };
        let admitted = stream_job(catalog, limits, memory, &one)?;
        let Some(map) = admitted.job.dataset.map.clone() else {
            return Err(invalid(format!(
                "mixture part {}: only map-space datasets mix (their samples carry their dataset)",
                shown(&part.dataset)
            )));
        };
        stream_bytes = stream_bytes.max(admitted.stream_bytes);
        quotas.push(((part.weight / scale / total * MIXTURE_PERIOD as f64).round() as u64).max(1));
        parts.push((admitted.job, map));
    }
    // Every part must fill the batch's tensors alike.
    // Per requested layer: name, [T, C, H, W], type, whether it is a time series.
    type Output = (String, (usize, usize, usize, usize), &'static str, bool);
    let outputs = |job: &StreamJob, map: &crate::dataset::map::MapSpace| -> Vec<Output> {
        let shapes = map.layer_shapes(r.patch_size);
        job.layers
            .iter()
            .map(|&l| {
                let spec = &map.layers[l];
                (spec.name.clone(), shapes[l], spec.dtype.name(), spec.time.is_some())
            })
            .collect()
    };
    let first = outputs(&parts[0].0, &parts[0].1);
    for (job, map) in &parts[1..] {
        let these = outputs(job, map);
        if these != first {
            return Err(invalid(format!(
                "mixture parts {} and {} give different layers {:?} and {:?} (name, [T, C, H, W], type): request layers they share, of one shape",
                parts[0].0.dataset.name, job.dataset.name, first, these
            )));
        }
    }
    // The shortest period with these proportions (3:1 deals every 4 samples exactly).
    let gcd = quotas.iter().fold(0u64, |a, &b| {
        let (mut a, mut b) = (a, b);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    });
    let quotas = quotas.iter().map(|q| q / gcd.max(1)).collect();
    let interleave = crate::sampler::Interleave::new(quotas, r.seed, r.epoch).map_err(invalid)?;
    let len = if r.samples_per_epoch > 0 {
        r.samples_per_epoch
    } else {
        parts.iter().map(|(j, _)| j.plan.len()).sum()
    };
    if r.cursor > len {
        return Err(invalid(format!(
            "cursor {} is past the end of the epoch ({len} samples)",
            r.cursor
        )));
    }
    let jobs: Vec<StreamJob> = parts.into_iter().map(|(j, _)| j).collect();
    let mut job = jobs[0].clone();
    job.share = Share {
        cursor: r.cursor,
        epoch_len: len,
        keep_tail: false,
        ..job.share
    };
    job.max_batches = r.max_batches;
    job.mixture = Some(Arc::new(crate::pipeline::Mixture {
        parts: jobs,
        interleave,
    }));
    Ok(Admitted { job, stream_bytes })
}

/// A validated `ReadWindow` request.
#[derive(Debug)]
pub struct WindowJob {
    pub dataset: Arc<Dataset>,
    pub scene: usize,
    pub window: WindowSpec,
    pub bands: Vec<usize>,
    pub labels: bool,
    /// Bytes of the response (image and label).
    pub bytes: u64,
}

/// Validates a `ReadWindow` request.
pub fn window_job(catalog: &Catalog, limits: &LimitsConfig, r: &pb::ReadWindowRequest) -> Result<WindowJob, Error> {
    let ds = dataset(catalog, &r.dataset)?;
    if ds.map.is_some() {
        return Err(Error::FailedPrecondition(format!(
            "dataset {} is a map-space dataset: ReadWindow reads pixel windows of scene datasets; stream its layers, or use `cogfeed warp` for one footprint",
            ds.name
        )));
    }
    let scene = r.scene as usize;
    if scene >= ds.scenes.len() {
        return Err(invalid(format!(
            "scene {} of dataset {} ({} scenes)",
            r.scene,
            ds.name,
            ds.scenes.len()
        )));
    }
    if r.width == 0 || r.height == 0 || r.width > limits.max_patch_size || r.height > limits.max_patch_size {
        return Err(invalid(format!(
            "window size {}x{} (1..={})",
            r.width, r.height, limits.max_patch_size
        )));
    }
    check_level(&ds, r.level)?;
    let label_size = match (r.labels, ds.label_dtype) {
        (true, Some(d)) => d.size() as u64,
        (true, None) => {
            return Err(Error::FailedPrecondition(format!("dataset {} has no labels", ds.name)));
        }
        (false, _) => 0,
    };
    let bands = bands(&ds, &r.bands)?;
    let pixels = u64::from(r.width) * u64::from(r.height);
    let bytes = pixels.saturating_mul(bands.len() as u64 * ds.dtype.size() as u64 + label_size);
    if bytes > limits.max_batch_bytes {
        return Err(invalid(format!(
            "a window of {bytes} bytes is over the limit of {} (limits.max_batch_bytes)",
            limits.max_batch_bytes
        )));
    }
    Ok(WindowJob {
        window: WindowSpec {
            scene: r.scene,
            col: r.col,
            row: r.row,
            width: r.width,
            height: r.height,
            level: r.level,
            padded: false,
        },
        dataset: ds,
        scene,
        bands,
        labels: r.labels,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names_are_bounded_and_plain() {
        check_job("").unwrap();
        check_job("train-run_7.rank:3/eval@v2+x").unwrap();
        assert!(check_job(&"x".repeat(129)).is_err());
        assert!(check_job("a\nforged log line").is_err());
        let e = check_job("\u{1b}[31mred").unwrap_err();
        assert!(!e.to_string().contains('\u{1b}'), "{e}");
        assert!(shown(&"y".repeat(900_000)).len() < 80);
    }
}
