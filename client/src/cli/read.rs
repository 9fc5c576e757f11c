//! `cogfeed-client read`: one footprint of a map-space dataset through `ReadFootprint`. It
//! prints what came back as JSON (each layer's shape, dtype and sha256, the time masks, the
//! sample's `SampleInfo`) and, with `--out`, writes the tensors without their batch axis:
//! `.npz` with every layer by name (and each time layer's mask as `time_mask/<layer>`), or
//! `.npy` with the one layer asked for.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use sha2::{Digest, Sha256};

use cogfeed_client::{Batch, Client, Tensor, pb};

use super::npy;

/// The footprint to read and where its tensors go.
#[derive(Args, Clone)]
pub struct ReadArgs {
    /// The map-space dataset.
    #[arg(long)]
    dataset: String,
    /// minx,miny,maxx,maxy in --crs.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true, required = true)]
    bounds: Vec<f64>,
    /// CRS of the bounds, EPSG:<code> (in a reference grid's CRS they snap to its pixels).
    #[arg(long)]
    crs: String,
    /// The reference datetime (RFC 3339): time layers end there, same-day mosaics are of it.
    #[arg(long, default_value = "")]
    datetime: String,
    /// The Item whose grid the footprint is planned on (a streamed sample's `drawn`).
    #[arg(long, default_value = "")]
    item: String,
    /// Layers to read, comma separated (default: all).
    #[arg(long, value_delimiter = ',')]
    layers: Vec<String>,
    /// Reference layer pixel size in CRS units (default: the dataset's).
    #[arg(long, default_value_t = 0.0)]
    resolution: f64,
    /// Write the tensors: FILE.npz (every layer) or FILE.npy (one layer: give --layers NAME).
    #[arg(long)]
    out: Option<PathBuf>,
}

impl ReadArgs {
    /// The request for this footprint.
    pub fn request(&self) -> anyhow::Result<pb::ReadFootprintRequest> {
        if self.bounds.len() != 4 {
            anyhow::bail!(
                "--bounds takes four numbers, minx,miny,maxx,maxy ({} given)",
                self.bounds.len()
            );
        }
        Ok(pb::ReadFootprintRequest {
            dataset: self.dataset.clone(),
            layers: self.layers.clone(),
            footprints: vec![pb::Footprint {
                crs: self.crs.clone(),
                bounds: self.bounds.clone(),
                resolution: self.resolution,
                datetime: self.datetime.clone(),
                item: self.item.clone(),
            }],
        })
    }
}

/// A sample's `SampleInfo` as JSON (what `stream --jsonl` prints per sample).
pub fn sample_json(m: &pb::SampleInfo) -> serde_json::Value {
    let mut s = serde_json::json!({
        "items": m.items, "drawn": m.drawn, "crs": m.crs, "bounds": m.bounds,
        "resolution": m.resolution, "padded": m.padded, "datetime": m.datetime,
        "valid_fraction": m.valid_fraction, "split": m.split,
    });
    if !m.dataset.is_empty() {
        s["dataset"] = m.dataset.clone().into();
    }
    if !m.point_id.is_empty() {
        s["point_id"] = m.point_id.clone().into();
        s["targets"] = serde_json::json!(m.targets);
    }
    if !m.datetimes.is_empty() {
        s["datetimes"] = m
            .datetimes
            .iter()
            .map(|d| (d.layer.clone(), serde_json::json!(d.dates)))
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    s
}

/// A tensor of a one-sample batch without its batch axis: (shape, bytes).
fn one(t: &Tensor) -> (&[usize], &[u8]) {
    (t.shape.get(1..).unwrap_or_default(), &t.data)
}

/// The report printed for `b`, and the path written (if any).
fn report(b: &Batch, out: Option<&Path>) -> serde_json::Value {
    let tensor = |t: &Tensor| {
        let (shape, data) = one(t);
        serde_json::json!({"shape": shape, "dtype": t.dtype, "sha256": hex::encode(Sha256::digest(data))})
    };
    let named = |v: &[(String, Tensor)]| -> serde_json::Map<String, serde_json::Value> {
        v.iter().map(|(n, t)| (n.clone(), tensor(t))).collect()
    };
    let mut r = serde_json::json!({
        "dataset_version": b.dataset_version,
        "layers": named(&b.layers),
        "sample": b.samples.first().map(sample_json),
    });
    if !b.time_masks.is_empty() {
        r["time_masks"] = b
            .time_masks
            .iter()
            .map(|(n, t)| (n.clone(), serde_json::json!(t.data.to_vec())))
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    if let Some(path) = out {
        r["written"] = path.display().to_string().into();
    }
    r
}

/// Writes `b`'s tensors to `path` (.npz: all, .npy: the one layer).
fn write(b: &Batch, path: &Path) -> anyhow::Result<()> {
    let file = || {
        std::fs::File::create(path)
            .map(std::io::BufWriter::new)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
    };
    match path.extension().and_then(|e| e.to_str()) {
        Some("npz") => {
            let mut members = Vec::with_capacity(b.layers.len() + b.time_masks.len());
            for (name, t) in &b.layers {
                let (shape, data) = one(t);
                members.push((name.clone(), npy::npy(&t.dtype, shape, data)?));
            }
            for (name, t) in &b.time_masks {
                let (shape, data) = one(t);
                members.push((format!("time_mask/{name}"), npy::npy(&t.dtype, shape, data)?));
            }
            npy::write_npz(file()?, &members)
        }
        Some("npy") => {
            let [(_, t)] = &b.layers[..] else {
                let names: Vec<&str> = b.layers.iter().map(|(n, _)| n.as_str()).collect();
                anyhow::bail!(
                    "a .npy holds one layer, this footprint has {} ({}): give --layers NAME, or write .npz",
                    names.len(),
                    names.join(", ")
                );
            };
            let (shape, data) = one(t);
            let mut w = file()?;
            w.write_all(&npy::npy(&t.dtype, shape, data)?)?;
            w.flush()?;
            Ok(())
        }
        _ => anyhow::bail!("--out {}: write a .npz or a .npy", path.display()),
    }
}

/// Reads the footprint, writes `--out` if given, and returns the report to print.
pub async fn run(client: &mut Client, args: &ReadArgs) -> anyhow::Result<serde_json::Value> {
    let request = args.request()?;
    if let Some(path) = &args.out
        && !matches!(path.extension().and_then(|e| e.to_str()), Some("npz" | "npy"))
    {
        anyhow::bail!("--out {}: write a .npz or a .npy", path.display());
    }
    let b = client.read_footprint(request).await?;
    if let Some(path) = &args.out {
        write(&b, path)?;
    }
    Ok(report(&b, args.out.as_deref()))
}
