//! `cogfeed-client`: list and describe datasets, stream batches (optionally as JSON lines
//! with tensor hashes), read one footprint of a map-space dataset, benchmark a stream,
//! preview batches as pictures and stitch a grid stream back into a COG.

mod cli;

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use futures::StreamExt;
use sha2::{Digest, Sha256};

use cogfeed_client::{Client, pb};

/// Batches are tens of megabytes: glibc would map and unmap each one (page faults on every
/// copy); mimalloc reuses the memory.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "cogfeed-client", version, about = "Client for the cogfeed batch server")]
struct Cli {
    /// Server address (host:port or http://host:port).
    #[arg(long, global = true, env = "COGFEED_SERVER", default_value = "127.0.0.1:50051")]
    server: String,
    /// Bearer token for servers that require one.
    #[arg(long, global = true, env = "COGFEED_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// PEM CA bundle to verify the server's certificate (turns TLS on).
    #[arg(long, global = true, env = "COGFEED_CA")]
    ca: Option<std::path::PathBuf>,
    /// PEM client certificate, for servers that require mTLS (with --key).
    #[arg(long, global = true, env = "COGFEED_CERT")]
    cert: Option<std::path::PathBuf>,
    /// PEM client key (with --cert).
    #[arg(long, global = true, env = "COGFEED_KEY")]
    key: Option<std::path::PathBuf>,
    /// Server name expected in its certificate (default: the host of --server).
    #[arg(long, global = true)]
    tls_domain: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List datasets.
    Datasets,
    /// Describe one dataset as JSON.
    Describe { name: String },
    /// Stream batches.
    Stream {
        #[command(flatten)]
        sel: Selection,
        /// One JSON line per batch: epoch, index, cursor, shape, sha256 of the tensors, windows.
        #[arg(long)]
        jsonl: bool,
    },
    /// Measure a stream: MB/s, batches/s, time to first batch, wait per batch.
    Bench {
        #[command(flatten)]
        sel: Selection,
        /// Stop after this many seconds.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Simulated training step: milliseconds of "compute" after each batch (the report's
        /// stall_fraction is then the share of time the loop waited for data).
        #[arg(long, default_value_t = 0.0)]
        step_ms: f64,
    },
    /// Draw batches as PNG grids: composite, class overlay with legend, captions.
    Preview {
        #[command(flatten)]
        sel: Selection,
        /// Output PNG (several batches: NAME-000.png, NAME-001.png, ...).
        #[arg(long)]
        out: std::path::PathBuf,
        /// Bands of the composite: asset names or 1-based channels (1 or 3; default
        /// B04,B03,B02 when present, else the first three).
        #[arg(long, value_delimiter = ',')]
        rgb: Vec<String>,
        /// Layer of the composite (default: the first).
        #[arg(long)]
        layer: Option<String>,
        /// Layer drawn as classes (default: `label` when present; "" for none).
        #[arg(long)]
        classes: Option<String>,
        /// Stretch percentiles, low,high.
        #[arg(long, value_delimiter = ',', allow_negative_numbers = true, default_value = "2,98")]
        percentiles: Vec<f64>,
    },
    /// Read one footprint of a map-space dataset (ReadFootprint): a JSON report of what came
    /// back, the tensors to .npz or .npy with --out.
    Read(cli::read::ReadArgs),
    /// Stitch a grid stream's layer back into a COG per scene (the identity model).
    Stitch {
        #[command(flatten)]
        sel: Selection,
        /// Output COG; `{scene}` is replaced by the scene's name (needed for several scenes).
        #[arg(long)]
        out: String,
        /// Layer to stitch (map-space datasets; `image` otherwise).
        #[arg(long, default_value = "image")]
        layer: String,
        /// mean, cosine or center.
        #[arg(long, default_value = "cosine")]
        blend: String,
        /// Output tile side (a multiple of 16).
        #[arg(long, default_value_t = 256)]
        tile_size: u64,
    },
}

#[derive(Args, Clone)]
struct Selection {
    /// The dataset (or give --mixture).
    #[arg(long, default_value = "")]
    dataset: String,
    /// Map-space datasets mixed in one stream, by weight: NAME=WEIGHT,NAME=WEIGHT.
    #[arg(long, value_delimiter = ',')]
    mixture: Vec<String>,
    /// aligned, random, grid, points (datasets with points) or balanced (datasets with
    /// [datasets.balance]).
    #[arg(long, default_value = "random")]
    sampler: String,
    #[arg(long, default_value_t = 256)]
    patch_size: u32,
    #[arg(long, default_value_t = 0)]
    stride: u32,
    #[arg(long, default_value_t = 0)]
    level: u32,
    #[arg(long, default_value_t = 16)]
    batch_size: u32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long, default_value_t = 0)]
    epoch: u64,
    #[arg(long, default_value_t = 0)]
    rank: u32,
    #[arg(long, default_value_t = 1)]
    world_size: u32,
    #[arg(long, default_value_t = 0)]
    cursor: u64,
    /// Resuming: the dataset version the cursor was taken on (refused if it changed).
    #[arg(long, default_value = "")]
    dataset_version: String,
    /// Stop after this many batches (0 = the whole epoch).
    #[arg(long, default_value_t = 0)]
    max_batches: u64,
    /// Include label tensors.
    #[arg(long)]
    labels: bool,
    /// native, float32, float16, bfloat16, uint8, uint16.
    #[arg(long, default_value = "native")]
    dtype: String,
    /// 1-based bands, comma separated.
    #[arg(long, value_delimiter = ',')]
    bands: Vec<u32>,
    #[arg(long)]
    normalize: bool,
    #[arg(long)]
    augment: bool,
    #[arg(long, default_value_t = 0)]
    samples_per_epoch: u64,
    #[arg(long, default_value_t = 0)]
    prefetch: u32,
    /// Job name (metrics).
    #[arg(long, default_value = "cli")]
    job: String,
    /// A corrupt tile or missing object: fail or skip its sample (default: the dataset's).
    #[arg(long, default_value = "")]
    on_corrupt: String,
    /// Map-space datasets: layers to stream, comma separated (default: all).
    #[arg(long, value_delimiter = ',')]
    layers: Vec<String>,
    /// Map-space datasets with a [datasets.split]: only footprints wholly in this split.
    #[arg(long, default_value = "")]
    split: String,
    /// Epoch order: random (the sampler's own) or local (samples sharing source tiles
    /// served close together); default: the dataset's.
    #[arg(long, default_value = "")]
    order: String,
    /// --order local: groups served side by side (0: the dataset's, else from the cache).
    #[arg(long, default_value_t = 0)]
    open_blocks: u32,
    /// --order local: times each group is opened per epoch (0: the dataset's, else 1).
    #[arg(long, default_value_t = 0)]
    visits: u32,
}

impl Selection {
    fn request(&self) -> anyhow::Result<pb::StreamBatchesRequest> {
        let sampler = match self.sampler.as_str() {
            "aligned" => pb::Sampler::Aligned,
            "random" => pb::Sampler::Random,
            "grid" => pb::Sampler::Grid,
            "points" => pb::Sampler::Points,
            "balanced" => pb::Sampler::Balanced,
            other => anyhow::bail!("unknown sampler {other:?} (aligned, random, grid, points, balanced)"),
        };
        let mut mixture = Vec::with_capacity(self.mixture.len());
        for part in &self.mixture {
            let (name, weight) = part
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("--mixture {part:?}: expected NAME=WEIGHT"))?;
            let weight: f64 = weight
                .parse()
                .map_err(|_| anyhow::anyhow!("--mixture {part:?}: {weight:?} is not a number"))?;
            mixture.push(pb::MixturePart {
                dataset: name.to_string(),
                weight,
            });
        }
        if self.dataset.is_empty() == mixture.is_empty() {
            anyhow::bail!("give --dataset or --mixture");
        }
        Ok(pb::StreamBatchesRequest {
            dataset: self.dataset.clone(),
            job: self.job.clone(),
            sampler: sampler as i32,
            patch_size: self.patch_size,
            stride: self.stride,
            level: self.level,
            batch_size: self.batch_size,
            seed: self.seed,
            epoch: self.epoch,
            rank: self.rank,
            world_size: self.world_size,
            cursor: self.cursor,
            dataset_version: self.dataset_version.clone(),
            max_batches: self.max_batches,
            bands: self.bands.clone(),
            labels: self.labels,
            dtype: self.dtype.clone(),
            normalize: self.normalize,
            augment: self.augment,
            samples_per_epoch: self.samples_per_epoch,
            prefetch: self.prefetch,
            on_corrupt: self.on_corrupt.clone(),
            layers: self.layers.clone(),
            split: self.split.clone(),
            mixture,
            order: self.order.clone(),
            open_blocks: self.open_blocks,
            visits: self.visits,
        })
    }
}

fn sha256(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// CPU seconds this process has used (user + system), from /proc.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let options = cogfeed_client::ConnectOptions {
        token: cli.token.clone(),
        ca: cli.ca.clone(),
        cert: cli.cert.clone(),
        key: cli.key.clone(),
        domain: cli.tls_domain.clone(),
    };
    let mut client = Client::connect_with(&cli.server, options).await?;
    match cli.command {
        Command::Datasets => {
            for d in client.datasets().await? {
                println!(
                    "{}\t{} scenes\tlabels={}\tversion={}",
                    d.name, d.scenes, d.labels, d.version
                );
            }
        }
        Command::Describe { name } => {
            let d = client.describe(&name).await?;
            let scenes: Vec<serde_json::Value> = d
                .scenes
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "index": s.index, "name": s.name, "has_label": s.has_label,
                        "geotransform": s.geotransform, "crs": s.crs,
                        "levels": s.levels.iter().map(|l| serde_json::json!({
                            "width": l.width, "height": l.height, "block": [l.block_width, l.block_height]})).collect::<Vec<_>>(),
                    })
                })
                .collect();
            let v = serde_json::json!({
                "name": d.name, "version": d.version, "bands": d.bands, "dtype": d.dtype,
                "labels": d.labels, "label_dtype": d.label_dtype, "fill": d.fill,
                "mean": d.mean, "std": d.std, "scenes": scenes, "crs": d.crs,
                "layers": d.layers.iter().map(|l| serde_json::json!({
                    "name": l.name, "assets": l.assets, "resolution": l.resolution,
                    "resampling": l.resampling, "dtype": l.dtype, "bands": l.bands, "nodata": l.nodata,
                })).collect::<Vec<_>>(),
                "balance_layer": d.balance_layer,
                "balance": d.balance.iter().map(|s| serde_json::json!({
                    "class": s.class_value, "natural": s.natural, "target": s.target, "expected": s.expected,
                })).collect::<Vec<_>>(),
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        Command::Stream { sel, jsonl } => {
            // Survives daemon restarts: reconnects and resumes from the last cursor.
            // Say so on stderr while the daemon cannot be reached (first failure, then every 10 s).
            let last_said = std::sync::Mutex::new(None::<Duration>);
            let say = move |r: &cogfeed_client::Retry<'_>| {
                let mut last = last_said.lock().unwrap_or_else(|p| p.into_inner());
                let due = last.is_none_or(|t| r.failing_for < t || r.failing_for >= t + Duration::from_secs(10));
                if due {
                    *last = Some(r.failing_for);
                    eprintln!(
                        "daemon at {} unavailable ({}); retrying for {:.0} s more",
                        r.address,
                        r.error,
                        r.giving_up_after.saturating_sub(r.failing_for).as_secs_f64()
                    );
                }
            };
            let mut stream = Box::pin(client.stream_resumable_with(sel.request()?, Duration::from_secs(120), say));
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            while let Some(batch) = stream.next().await {
                let b = batch?;
                if jsonl {
                    let windows: Vec<[u64; 6]> = b
                        .windows
                        .iter()
                        .map(|w| {
                            [
                                w.scene as u64,
                                w.col,
                                w.row,
                                w.width as u64,
                                w.height as u64,
                                w.level as u64,
                            ]
                        })
                        .collect();
                    let line = serde_json::json!({
                        "epoch": b.epoch, "index": b.index, "cursor": b.cursor, "dataset_version": b.dataset_version,
                        "shape": b.image.shape,
                        "sha256": sha256(&b.image.data),
                        "label_sha256": b.label.as_ref().map(|l| sha256(&l.data)),
                        "windows": windows,
                        "padded": b.windows.iter().map(|w| w.padded).collect::<Vec<_>>(),
                        "skipped": b.skipped.iter().map(|s| serde_json::json!({
                            "sample": s.sample, "reason": s.reason,
                        })).collect::<Vec<_>>(),
                    });
                    let mut line = line;
                    if !b.layers.is_empty() {
                        let layers: serde_json::Map<String, serde_json::Value> = b
                            .layers
                            .iter()
                            .map(|(name, t)| {
                                (
                                    name.clone(),
                                    serde_json::json!({
                                        "shape": t.shape, "dtype": t.dtype, "sha256": sha256(&t.data),
                                    }),
                                )
                            })
                            .collect();
                        line["layers"] = serde_json::Value::Object(layers);
                        line["samples"] = b.samples.iter().map(cli::read::sample_json).collect();
                        if !b.targets.is_empty() {
                            line["targets"] = b
                                .targets
                                .iter()
                                .map(|(name, t)| {
                                    let v: Vec<f64> = t
                                        .data
                                        .chunks_exact(8)
                                        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or_default()))
                                        .collect();
                                    (name.clone(), serde_json::json!(v))
                                })
                                .collect::<serde_json::Map<_, _>>()
                                .into();
                        }
                        if !b.time_masks.is_empty() {
                            line["time_masks"] = b
                                .time_masks
                                .iter()
                                .map(|(name, t)| (name.clone(), serde_json::json!(t.data.to_vec())))
                                .collect::<serde_json::Map<_, _>>()
                                .into();
                        }
                    }
                    writeln!(out, "{line}")?;
                } else {
                    writeln!(
                        out,
                        "epoch {} batch {}/{} cursor {} image {:?} {}",
                        b.epoch, b.index, b.batches_in_epoch, b.cursor, b.image.shape, b.image.dtype
                    )?;
                }
            }
            out.flush()?;
        }
        Command::Read(args) => {
            let report = cli::read::run(&mut client, &args).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        Command::Bench { sel, duration, step_ms } => bench(&mut client, &sel, duration, step_ms).await?,
        Command::Preview {
            mut sel,
            out,
            rgb,
            layer,
            classes,
            percentiles,
        } => {
            if sel.max_batches == 0 {
                sel.max_batches = 1;
            }
            let [low, high] = percentiles[..] else {
                anyhow::bail!("--percentiles takes two values, low,high (e.g. 2,98)");
            };
            let options = cogfeed_render::batch::Options {
                layer,
                rgb,
                classes,
                percentiles: (low, high),
            };
            for path in cli::preview::run(&mut client, sel.request()?, &options, &out).await? {
                println!("{}", path.display());
            }
        }
        Command::Stitch {
            sel,
            out,
            layer,
            blend,
            tile_size,
        } => {
            let opts = cogfeed_client::stitch::StitchOptions {
                layer,
                blend: blend.parse()?,
                patch_size: sel.patch_size,
                stride: sel.stride,
                level: sel.level,
                tile_size,
            };
            for path in cli::stitch::run(&mut client, sel.request()?, opts, &out).await? {
                println!("{}", path.display());
            }
        }
    }
    Ok(())
}

async fn bench(client: &mut Client, sel: &Selection, duration: f64, step_ms: f64) -> anyhow::Result<()> {
    let step = Duration::from_secs_f64(step_ms.max(0.0) / 1e3);
    // Time the loop waited for a batch, after the first one arrived.
    let mut data_wait = 0.0f64;
    let cpu0 = cpu_seconds().unwrap_or(0.0);
    let start = Instant::now();
    let limit = Duration::from_secs_f64(duration);
    let (mut bytes, mut batches, mut samples) = (0u64, 0u64, 0u64);
    let mut first: Option<Duration> = None;
    let mut waits = Vec::new();
    let mut last = Instant::now();
    let bar = cli::progress::bar((sel.max_batches > 0).then_some(sel.max_batches), "batches");
    // A reader task streams epoch after epoch into a small queue: with --step-ms it holds 2
    // batches, as a training loop's loader prefetches while the step computes.
    let (tx, mut rx) = tokio::sync::mpsc::channel(if step.is_zero() { 1 } else { 2 });
    let mut request = sel.request()?;
    let mut reader_client = client.clone();
    let max_batches = sel.max_batches;
    let reader = tokio::spawn(async move {
        let mut sent = 0u64;
        loop {
            let mut stream = match reader_client.stream(request.clone()).await {
                Ok(s) => Box::pin(s),
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            while let Some(b) = stream.next().await {
                if tx.send(b).await.is_err() {
                    return;
                }
                sent += 1;
            }
            if max_batches > 0 && sent >= max_batches {
                return;
            }
            request.epoch += 1;
            request.cursor = 0;
        }
    });
    loop {
        let asked = Instant::now();
        let next = rx.recv().await;
        if first.is_some() {
            data_wait += asked.elapsed().as_secs_f64();
        }
        let b = match next {
            Some(b) => b?,
            None => break,
        };
        let now = Instant::now();
        waits.push(now.duration_since(last).as_secs_f64());
        last = now;
        first.get_or_insert_with(|| start.elapsed());
        // Map-space batches: every layer (the first is `image` itself).
        bytes += if b.layers.is_empty() {
            b.image.data.len() as u64 + b.label.as_ref().map_or(0, |l| l.data.len() as u64)
        } else {
            b.layers.iter().map(|(_, t)| t.data.len() as u64).sum()
        };
        batches += 1;
        samples += b.windows.len() as u64;
        bar.inc(1);
        bar.set_message(format!(
            "{:.0} MB/s",
            bytes as f64 / start.elapsed().as_secs_f64() / 1e6
        ));
        if start.elapsed() >= limit || (sel.max_batches > 0 && batches >= sel.max_batches) {
            break;
        }
        if !step.is_zero() {
            tokio::time::sleep(step).await;
        }
    }
    reader.abort();
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds().unwrap_or(0.0) - cpu0;
    waits.sort_by(f64::total_cmp);
    let report = serde_json::json!({
        "batches": batches,
        "samples": samples,
        "bytes": bytes,
        "seconds": secs,
        "mb_per_s": bytes as f64 / secs / 1e6,
        "batches_per_s": batches as f64 / secs,
        "first_batch_s": first.map(|d| d.as_secs_f64()),
        "wait_p50_ms": percentile(&waits, 0.5) * 1e3,
        "wait_p99_ms": percentile(&waits, 0.99) * 1e3,
        "client_cpu_s_per_gb": if bytes > 0 { cpu / (bytes as f64 / 1e9) } else { 0.0 },
        "step_ms": step_ms,
        "data_wait_s": data_wait,
        "stall_fraction": first.map_or(0.0, |f| data_wait / (secs - f.as_secs_f64()).max(1e-9)),
    });
    println!("{report}");
    Ok(())
}

/// Transparent huge pages off for this process (`COGFEED_HUGE_PAGES=1` keeps them): mimalloc
/// asks for them, and every first touch of a 2 MiB page of a fresh message buffer makes the
/// kernel zero all of it (the daemon's `huge_pages` module has the measurement).
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if !std::env::var("COGFEED_HUGE_PAGES").is_ok_and(|v| v == "1") {
        let _ = rustix::thread::disable_transparent_huge_pages(true);
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    disable_transparent_huge_pages();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)).context("cogfeed-client") {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {:#}", e.root_cause());
            std::process::ExitCode::FAILURE
        }
    }
}
