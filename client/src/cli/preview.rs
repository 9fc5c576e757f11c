//! `cogfeed-client preview`: streams batches and writes each as a PNG grid of samples
//! (composite, class overlay, captions, legend; rules in `cogfeed_render`).

use std::path::{Path, PathBuf};

use futures::StreamExt;

use cogfeed_client::{Client, pb};
use cogfeed_render::batch::Options;

use super::progress;

/// Where batch `i` of `n` goes: `out` itself for one batch, `stem-00i.ext` for more.
pub fn numbered(out: &Path, i: u64, n: u64) -> PathBuf {
    if n <= 1 {
        return out.to_path_buf();
    }
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = out
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_else(|| "png".into());
    out.with_file_name(format!("{stem}-{i:03}.{ext}"))
}

/// Streams `request` (max_batches of it, at least one) and writes one picture per batch.
pub async fn run(
    client: &mut Client,
    mut request: pb::StreamBatchesRequest,
    options: &Options,
    out: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    let info = client.describe(&request.dataset).await?;
    request.max_batches = request.max_batches.max(1);
    let n = request.max_batches;
    let bar = progress::bar(Some(n), "batches");
    let mut stream = Box::pin(client.stream(request).await?);
    let mut written = Vec::new();
    let mut i = 0;
    while let Some(b) = stream.next().await {
        let b = b?;
        let picture = cogfeed_render::render(&cogfeed_render::batch::preview(&info, &b.to_pb(), options)?)?;
        let path = numbered(out, i, n);
        std::fs::write(&path, picture.to_png()?)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        written.push(path);
        i += 1;
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(written)
}
