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
    let shape = match t.shape[..] {
        [b, c, h, w] => [b, c, h, w],
        [b, h, w] => [b, 1, h, w],
        _ => anyhow::bail!("cannot stitch a tensor of shape {:?}", t.shape),
    };
    macro_rules! conv {
        ($ty:ty) => {
            t.values::<$ty>()
                .ok_or_else(|| anyhow::anyhow!("malformed {} tensor", t.dtype))?
                .iter()
                .map(|&v| v as f32)
                .collect()
        };
    }
    let v: Vec<f32> = match t.dtype.as_str() {
        "uint8" => conv!(u8),
        "int8" => conv!(i8),
        "uint16" => conv!(u16),
        "int16" => conv!(i16),
        "uint32" => conv!(u32),
        "int32" => conv!(i32),
        "float32" => conv!(f32),
        "float64" => conv!(f64),
        other => anyhow::bail!("cannot stitch {other} values (stream native or float32)"),
    };
    Ok((v, shape))
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
