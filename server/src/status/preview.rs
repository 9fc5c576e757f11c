//! The status page's sample preview: one batch of random samples drawn as a PNG by the
//! same renderer as `cogfeed-client preview` (`cogfeed_render`). It runs through the same
//! validation and memory admission as a stream; sizes are fixed by the daemon (a page
//! visitor picks only the dataset and the seed), and at most two are drawn at a time (more
//! are refused with 429, not queued).

use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc};

use cogfeed_proto::v1 as pb;

use super::StatusState;
use crate::api::{convert, job};
use crate::error::Error;
use crate::pipeline;

/// Samples in a preview batch.
pub const SAMPLES: u32 = 9;

/// Previews drawn at once; more are refused (429), not queued.
pub const PARALLEL: usize = 2;

pub fn permits() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(PARALLEL))
}

/// The preview request for `dataset`: random samples, 64 px on STAC datasets (several
/// layers at several resolutions), 128 px with labels on scene datasets.
fn request(state: &StatusState, dataset: &str, seed: u64) -> Result<pb::StreamBatchesRequest, Error> {
    let ds = job::dataset(&state.catalog, dataset)?;
    let (patch, labels) = match &ds.map {
        Some(_) => (64, false),
        None => (128.min(smallest_side(&ds)), ds.label_dtype.is_some()),
    };
    Ok(pb::StreamBatchesRequest {
        dataset: dataset.to_string(),
        job: "status-page".into(),
        sampler: pb::Sampler::Random as i32,
        patch_size: patch,
        batch_size: SAMPLES,
        seed,
        world_size: 1,
        max_batches: 1,
        labels,
        dtype: "native".into(),
        ..Default::default()
    })
}

fn smallest_side(ds: &crate::dataset::Dataset) -> u32 {
    ds.scenes
        .iter()
        .filter_map(|s| {
            s.object
                .as_ref()?
                .cog
                .header()
                .levels
                .first()
                .map(|l| l.width.min(l.height))
        })
        .min()
        .unwrap_or(128)
        .clamp(1, u32::MAX as u64) as u32
}

/// PNG bytes of one batch of `dataset`.
pub async fn png(state: &StatusState, permits: &Semaphore, dataset: &str, seed: u64) -> Result<Vec<u8>, Error> {
    // No queue: a flood of requests is refused at once, not parked on the listener.
    let _permit = permits
        .try_acquire()
        .map_err(|_| Error::LimitExceeded(format!("{PARALLEL} previews are being drawn; retry in a moment")))?;
    let request = request(state, dataset, seed)?;
    let admitted = job::stream_job(&state.catalog, &state.limits, &state.memory, &request)?;
    let what = format!("a status-page preview of {dataset}");
    let _memory = state
        .memory
        .reserve(admitted.stream_bytes, &what, state.limits.admission_wait())
        .await?;
    let ds = admitted.job.dataset.clone();
    let (tx, mut rx) = mpsc::channel(1);
    // Previews share the CPU pool as one caller of their own.
    tokio::spawn(cogfeed_cpu::scope(
        cogfeed_cpu::Tenant::new("status page"),
        pipeline::run(admitted.job, state.tiles.clone(), tx, None),
    ));
    let batch = rx
        .recv()
        .await
        .ok_or_else(|| Error::FailedPrecondition(format!("no sample of {dataset} could be drawn")))??;
    drop(rx);
    let info = convert::dataset_info(&ds);
    let batch = convert::batch(batch);
    tokio::task::spawn_blocking(move || {
        let preview = cogfeed_render::batch::preview(&info, &batch, &Default::default())
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        cogfeed_render::render(&preview)
            .and_then(|p| p.to_png())
            .map_err(|e| Error::InvalidArgument(e.to_string()))
    })
    .await
    .map_err(|e| Error::FailedPrecondition(format!("preview task: {e}")))?
}
