//! `cogfeed-client stitch`: streams a grid with overlap and stitches one layer's own values
//! back into a COG per scene (the identity model) — a check of the round trip, and the
//! shape of the loop a model's predictions go through (`cogfeed_client::stitch`).

use std::path::PathBuf;

use futures::StreamExt;

use cogfeed_client::stitch::{StitchOptions, Stitcher};
use cogfeed_client::{Client, Tensor, pb};

use super::progress;

/// The tensor's values as f32 `[B, C, H, W]` (a `[B, H, W]` label as one channel).
fn as_f32(t: &Tensor) -> anyhow::Result<(Vec<f32>, [usize; 4])> {
    let t = t.to_pb();
    let shape = cogfeed_render::batch::dims(&t)?;
    Ok((cogfeed_render::batch::values_f32(&t, None)?, shape))
}

/// Streams `request` (a grid) and writes the stitched layer; returns the files written.
pub async fn run(
    client: &mut Client,
    request: pb::StreamBatchesRequest,
    opts: StitchOptions,
    out: &str,
) -> anyhow::Result<Vec<PathBuf>> {
    if request.sampler != pb::Sampler::Grid as i32 {
        anyhow::bail!("stitch needs --sampler grid (with --stride below --patch-size for overlap)");
    }
    let info = client.describe(&request.dataset).await?;
    let total = client.count(request.clone()).await?.batches;
    let layer = opts.layer.clone();
    let mut stitcher = Stitcher::new(&info, out, opts)?;
    let bar = progress::bar(Some(total), "batches");
    let mut stream = Box::pin(client.stream(request).await?);
    while let Some(b) = stream.next().await {
        let b = b?;
        let tensor = if info.layers.is_empty() {
            &b.image
        } else {
            b.layer(&layer)
                .ok_or_else(|| anyhow::anyhow!("the batch has no layer {layer} (ask for it with --layers)"))?
        };
        let (values, shape) = as_f32(tensor)?;
        stitcher.add(&b.windows, &values, shape)?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    let peak = stitcher.peak_tiles_in_memory;
    let incomplete = stitcher.incomplete_tiles;
    let written = stitcher.finish()?;
    eprintln!(
        "stitched {} file(s); at most {peak} tiles in memory; {incomplete} tiles incomplete",
        written.len()
    );
    Ok(written)
}
