//! A map-space sample of one stream: every requested layer warped onto the drawn
//! footprint, draws outside the split, under the valid fraction or missing a date rejected
//! and redrawn (`Plan::attempt`), and balanced streams' class pixels counted. Never sends
//! anything: the pipeline batches what it returns.

use super::{Sample, SampleImage, StreamJob};
use crate::error::Error;
use crate::metrics::Timer;
use crate::sampler::WindowSpec;
use crate::tiles::TileSource;

/// How far below `min_valid_fraction` an estimate from overviews must be for a draw to be
/// rejected without assembling it at full resolution.
const ESTIMATE_MARGIN: f64 = 0.1;
/// Draws rejected on geometry alone (split) tried per data-reading draw.
const GEOMETRY_DRAWS_PER_ATTEMPT: u32 = 64;

/// The layers a sample of `job` assembles: those streamed, and those its valid fraction
/// needs (the reference layer and the mask).
pub(super) fn wanted_layers(job: &StreamJob, map: &crate::dataset::map::MapSpace) -> Vec<usize> {
    let rule = map.valid.as_ref();
    let mut wanted = job.layers.clone();
    if rule.is_some() {
        for l in std::iter::once(0).chain(rule.and_then(|r| r.mask_layer)) {
            if !wanted.contains(&l) {
                wanted.push(l);
            }
        }
    }
    wanted
}

/// The first draw of sample `i` inside the job's split: the one assembled unless its
/// valid fraction rejects it (what a stream's plan publishes).
pub(super) fn first_draw(job: &StreamJob, map: &crate::dataset::map::MapSpace, i: u64) -> Option<WindowSpec> {
    (0..GEOMETRY_DRAWS_PER_ATTEMPT)
        .map_while(|attempt| job.plan.attempt(i, attempt))
        .find(|w| job.split.is_none_or(|split| map.in_split(w, split)))
}

/// A map-space sample: every requested layer warped onto the sample's footprint. A draw
/// whose footprint is outside the requested split, or whose valid fraction is under the
/// dataset's minimum, is rejected and redrawn (`Plan::attempt`): the sample stays a pure
/// function of the data, the seed and its position.
pub(super) async fn load_map_sample(
    job: &StreamJob,
    map: &crate::dataset::map::MapSpace,
    cache: &dyn TileSource,
    i: u64,
) -> Result<Sample, Error> {
    let metrics = job.metrics.clone();
    let _timer = metrics
        .as_ref()
        .map(|m| Timer::start(&m.stage_seconds.with_label_values(&["warp"])));
    let rule = map.valid.as_ref();
    // A grid covers, and a point is its own sample: neither is redrawn.
    let redrawn = !matches!(
        job.plan.kind(),
        crate::sampler::SamplerKind::Grid | crate::sampler::SamplerKind::Points
    );
    let min = rule.and_then(|r| r.min).filter(|_| redrawn);
    let full_series = redrawn && rule.is_some_and(|r| r.require_full_series);
    let wanted = wanted_layers(job, map);
    let max_reads = rule.map_or(crate::dataset::map::DEFAULT_ATTEMPTS, |r| r.max_attempts);
    let max_draws = max_reads.saturating_mul(GEOMETRY_DRAWS_PER_ATTEMPT);
    let (mut reads, mut rejected_split, mut rejected_valid, mut rejected_series) = (0u32, 0u32, 0u32, 0u32);
    for attempt in 0..max_draws {
        let Some(window) = job.plan.attempt(i, attempt) else {
            break;
        };
        if let Some(split) = job.split
            && !map.in_split(&window, split)
        {
            rejected_split += 1;
            continue;
        }
        if reads == max_reads {
            break;
        }
        reads += 1;
        if let Some(min) = min
            && let Some(estimate) = map.estimate_valid(cache, &window).await?
            && estimate < min - ESTIMATE_MARGIN
        {
            rejected_valid += 1;
            continue;
        }
        let (mut all, meta) = map.sample(cache, &window, &wanted).await?;
        if let Some(min) = min
            && meta.valid_fraction.unwrap_or(0.0) < min
        {
            rejected_valid += 1;
            continue;
        }
        if full_series && meta.times.iter().any(|(_, days)| days.iter().any(Option::is_none)) {
            rejected_series += 1;
            continue;
        }
        let layers: Vec<Vec<u8>> = job.layers.iter().map(|&l| std::mem::take(&mut all[l])).collect();
        if job.plan.kind() == crate::sampler::SamplerKind::Balanced {
            count_classes(job, map, &layers, window.width);
        }
        let point = job.plan.point_of(i);
        let set = map.points.as_ref();
        let meta = crate::dataset::map::SampleMeta {
            point,
            point_id: point.and_then(|p| set?.ids.get(p).cloned()),
            targets: point
                .and_then(|p| {
                    Some(
                        set?.names
                            .iter()
                            .cloned()
                            .zip(set?.values.get(p)?.iter().copied())
                            .collect(),
                    )
                })
                .unwrap_or_default(),
            ..meta
        };
        if let Some(m) = &job.metrics {
            let n = map.take_disagreements();
            if n > 0 {
                m.harmonize_disagreements
                    .with_label_values(&[job.dataset.name.as_str()])
                    .inc_by(n);
            }
        }
        if let Some(m) = &job.metrics
            && attempt > 0
        {
            m.rejected_draws
                .with_label_values(&["split"])
                .inc_by(u64::from(rejected_split));
            m.rejected_draws
                .with_label_values(&["valid"])
                .inc_by(u64::from(rejected_valid));
            m.rejected_draws
                .with_label_values(&["series"])
                .inc_by(u64::from(rejected_series));
        }
        return Ok(Sample {
            image: SampleImage::Owned(Vec::new()),
            label: None,
            window,
            layers,
            meta: Some(meta),
            waited: None,
        });
    }
    let split = job
        .split
        .and_then(|s| map.split.as_ref().map(|r| r.names[s].clone()))
        .map_or(String::new(), |s| format!(" in split {s}"));
    let valid = min.map_or(String::new(), |m| format!(" with a valid fraction of at least {m}"));
    let series = if full_series { " and full time series" } else { "" };
    Err(Error::FailedPrecondition(format!(
        "sample {i}: no draw{split}{valid}{series} ({rejected_split} outside the split, {rejected_valid} under the valid fraction, {rejected_series} with a missing date, {reads} read; raise sampling.max_attempts or lower the threshold)"
    )))
}

/// Adds a balanced sample's class-layer pixels (when that layer is streamed) to
/// `cogfeed_balanced_class_pixels_total`.
fn count_classes(job: &StreamJob, map: &crate::dataset::map::MapSpace, layers: &[Vec<u8>], patch: u32) {
    let (Some(metrics), Some(balance)) = (&job.metrics, &map.balance) else {
        return;
    };
    let Some(bytes) = job.layers.iter().position(|&l| l == balance.layer).map(|i| &layers[i]) else {
        return;
    };
    let spec = &map.layers[balance.layer];
    let (_, _, h, w) = map.layer_shapes(patch)[balance.layer];
    let plane = (h * w * spec.dtype.size()).min(bytes.len());
    let mut counts = vec![0u64; balance.shares.len()];
    for v in cogfeed_geo::warp::samples_to_f64(spec.dtype, &bytes[..plane]) {
        if let Ok(k) = balance.shares.binary_search_by(|s| (s.class as f64).total_cmp(&v)) {
            counts[k] += 1;
        }
    }
    for (s, n) in balance.shares.iter().zip(counts) {
        if n > 0 {
            metrics
                .balanced_class_pixels
                .with_label_values(&[job.dataset.name.as_str(), s.class.to_string().as_str()])
                .inc_by(n);
        }
    }
}
