//! The `cogfeed` command: inspect and read COGs (and, with the daemon, serve them).
//! The only place that uses `anyhow`; every failure ends as one line on stderr and exit 1.

use std::io::BufWriter;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

use cogfeed_server::app::App;
use cogfeed_server::config::Config;
use cogfeed_server::npy::write_npy;
use cogfeed_server::storage::{StoreOptions, open_url};
use cogfeed_server::{Error, inspect};
use cogfeed_tiff::{Cog, OpenOptions, RangeReader, WindowRequest};

/// mimalloc keeps freed block buffers for reuse; glibc returns large ones to the kernel, and
/// the page faults of re-mapping them cost ~30% of decode time (measured with perf).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "cogfeed", version, about = "Cloud-Optimized GeoTIFF reader and batch server")]
struct Cli {
    /// Log format on stderr (filter with RUST_LOG, e.g. `info,cogfeed_server=debug`).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Pretty)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Pretty,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Serve training batches over gRPC. Without --config: the embedded demo dataset.
    Serve {
        /// TOML configuration file.
        #[arg(long, env = "COGFEED_CONFIG")]
        config: Option<std::path::PathBuf>,
        /// gRPC listen address (overrides the file).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Metrics listen address (overrides the file).
        #[arg(long)]
        metrics_listen: Option<std::net::SocketAddr>,
        /// Where the embedded demo dataset is written (without --config).
        #[arg(long, env = "COGFEED_DATA_DIR")]
        data_dir: Option<std::path::PathBuf>,
    },
    /// Serve endless prebuilt batches of one shape (no data, no pipeline): what the gRPC
    /// transport alone carries to `cogfeed-client bench` on this machine and network.
    ServeSynthetic {
        /// gRPC listen address.
        #[arg(long, default_value = "127.0.0.1:50052")]
        listen: std::net::SocketAddr,
        #[arg(long, default_value_t = 32)]
        batch_size: usize,
        #[arg(long, default_value_t = 4)]
        bands: usize,
        #[arg(long, default_value_t = 256)]
        patch_size: usize,
        /// Bytes per image sample (2: uint16).
        #[arg(long, default_value_t = 2)]
        sample_bytes: usize,
        /// Add a uint8 label tensor per batch.
        #[arg(long)]
        label: bool,
    },
    /// Parse and validate a configuration file without opening any dataset.
    CheckConfig {
        /// TOML configuration file.
        file: std::path::PathBuf,
        /// Print the effective configuration (defaults filled in, secrets redacted) as TOML.
        #[arg(long)]
        dump: bool,
    },
    /// Write the demo dataset (tiled COGs with labels) into DIR.
    DemoData {
        /// Target directory.
        dir: std::path::PathBuf,
        /// Number of scenes.
        #[arg(long, default_value_t = cogfeed_server::demo::SCENES)]
        scenes: usize,
        /// Scene width and height in pixels.
        #[arg(long, default_value_t = cogfeed_server::demo::SCENE_SIZE)]
        size: u32,
    },
    /// Write the time-series demo archive (STAC Items, Sentinel-2/1-like COGs, points) into
    /// DIR, optionally larger than the embedded one (benchmarks).
    DemoSeries {
        /// Target directory.
        dir: std::path::PathBuf,
        /// Sentinel-2 dates per tile.
        #[arg(long, default_value_t = 5)]
        s2_dates: usize,
        /// Bands per Sentinel-2 date (1-10).
        #[arg(long, default_value_t = 4)]
        s2_bands: usize,
        /// Sentinel-1 dates per tile.
        #[arg(long, default_value_t = 4)]
        s1_dates: usize,
    },
    /// Print a file's layout, codec, overviews and georeferencing as JSON.
    Inspect {
        /// s3://, az://, gs://, http(s)://, file:// URL or a local path.
        url: String,
        /// Bytes fetched by the first header request.
        #[arg(long, default_value_t = 32 * 1024)]
        prefix_bytes: u64,
    },
    /// Read a window into a .npy file of shape (bands, height, width), native dtype.
    Read {
        /// s3://, az://, gs://, http(s)://, file:// URL or a local path.
        url: String,
        /// Overview level: 0 = full resolution, 1 = largest overview.
        #[arg(long, default_value_t = 0)]
        level: usize,
        /// COL,ROW,WIDTH,HEIGHT in pixels of the level (default: the whole level).
        #[arg(long)]
        window: Option<String>,
        /// 1-based bands, comma separated (default: all).
        #[arg(long)]
        bands: Option<String>,
        /// Output .npy file.
        #[arg(long)]
        out: std::path::PathBuf,
        /// Bytes fetched by the first header request.
        #[arg(long, default_value_t = 32 * 1024)]
        prefix_bytes: u64,
        /// Print range-request counts to stderr.
        #[arg(long)]
        stats: bool,
    },
    /// Warp one footprint from STAC Items into a .npy of shape (bands, H, W): per asset,
    /// every item resampled onto the grid, the first item with a valid pixel winning it.
    Warp {
        /// STAC ItemCollection / Item / newline-delimited Items (path or URL).
        #[arg(long)]
        items: String,
        /// Item ids in priority order, comma separated.
        #[arg(long)]
        ids: String,
        /// Asset keys, comma separated; output bands follow this order.
        #[arg(long)]
        assets: String,
        /// Output CRS, EPSG:<code>.
        #[arg(long, allow_hyphen_values = true)]
        crs: String,
        /// MINX,MINY,MAXX,MAXY in the output CRS (x = easting or longitude first).
        #[arg(long, allow_hyphen_values = true)]
        bounds: String,
        /// Square pixel size in CRS units.
        #[arg(long, allow_hyphen_values = true)]
        resolution: f64,
        /// nearest, bilinear, cubic, average or mode.
        #[arg(long, default_value = "nearest")]
        resampling: String,
        /// Value for pixels no item fills.
        #[arg(long, allow_hyphen_values = true, default_value_t = 0.0)]
        nodata: f64,
        /// Output .npy file.
        #[arg(long)]
        out: std::path::PathBuf,
        /// Print, per asset and item, the overview level and source window read (JSON, stderr).
        #[arg(long)]
        explain: bool,
    },
    /// Print what cogfeed understands of a STAC document: items, time, bbox and, per asset,
    /// href (resolved), CRS, shape and transform.
    Stac {
        /// STAC ItemCollection / Item / newline-delimited Items (path or URL).
        url: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn parse_list(text: &str, what: &str, n: usize) -> anyhow::Result<Vec<u64>> {
    let values: Vec<u64> = text
        .split(',')
        .map(|v| v.trim().parse::<u64>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("invalid {what} {text:?}"))?;
    if n > 0 && values.len() != n {
        bail!("invalid {what} {text:?}: expected {n} comma-separated numbers");
    }
    Ok(values)
}

async fn open(url: &str, prefix_bytes: u64) -> anyhow::Result<Cog> {
    let reader: Arc<dyn RangeReader> = open_url(url, &StoreOptions::default())?;
    let options = OpenOptions {
        prefix_bytes: prefix_bytes.max(16),
        ..Default::default()
    };
    Ok(Cog::open(reader, options).await.map_err(|e| Error::tiff(url, e))?)
}

fn default_data_dir() -> std::path::PathBuf {
    match std::env::var_os("HOME") {
        Some(home) => std::path::PathBuf::from(home).join(".local/share/cogfeed/demo"),
        None => std::path::PathBuf::from("cogfeed-demo"),
    }
}

async fn serve(
    config: Option<std::path::PathBuf>,
    listen: Option<std::net::SocketAddr>,
    metrics_listen: Option<std::net::SocketAddr>,
    data_dir: Option<std::path::PathBuf>,
) -> anyhow::Result<()> {
    let mut cfg = match config {
        Some(path) => Config::load(&path)?,
        None => {
            let dir = data_dir.unwrap_or_else(default_data_dir);
            cogfeed_server::demo::write_demo(&dir)
                .with_context(|| format!("cannot write demo data to {}", dir.display()))?;
            cogfeed_server::demo::stac::write_stac_demo(&dir.join("stac"))
                .with_context(|| format!("cannot write the STAC demo to {}", dir.join("stac").display()))?;
            cogfeed_server::demo::series::write_series_demo(&dir.join("series"))
                .with_context(|| format!("cannot write the time-series demo to {}", dir.join("series").display()))?;
            eprintln!(
                "no --config: serving the demo dataset in {} (local files, no credentials)",
                dir.display()
            );
            Config::demo_default(&dir)
        }
    };
    if let Some(a) = listen {
        cfg.server.listen = a;
    }
    if let Some(a) = metrics_listen {
        cfg.server.metrics_listen = a;
    }
    let listener = tokio::net::TcpListener::bind(cfg.server.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.server.listen))?;
    let metrics_listener = tokio::net::TcpListener::bind(cfg.server.metrics_listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.server.metrics_listen))?;
    let addr = listener.local_addr()?;
    let metrics_addr = metrics_listener.local_addr()?;
    if let Some(n) = cogfeed_server::api::connections::raise_fd_limit() {
        tracing::debug!(open_files = n, "file descriptor limit");
    }
    let app = App::build(cfg).await?;
    for d in app.catalog.all() {
        eprintln!("dataset {}: {} scenes, version {}", d.name, d.scenes.len(), d.version);
    }
    for (name, u) in app.catalog.unready() {
        eprintln!("dataset {name}: UNREADY, {} (retried in the background)", u.reason);
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let metrics_app = app.clone();
    let mut metrics_stop = stop_rx.clone();
    let metrics_task = tokio::spawn(async move {
        metrics_app
            .serve_metrics(metrics_listener, async move {
                let _ = metrics_stop.changed().await;
            })
            .await
    });
    let (auth, tls) = (&app.config.auth, &app.config.tls);
    if !auth.required {
        let exposure = if addr.ip().is_loopback() {
            "local processes"
        } else {
            "ANY HOST THAT CAN REACH THIS ADDRESS"
        };
        eprintln!(
            "WARNING: authentication is OFF: {exposure} can read every dataset without a token \
             (set [auth] required = true with [[auth.tokens]])"
        );
        tracing::warn!(listen = %addr, "authentication is off");
    }
    if tls.is_none() && !addr.ip().is_loopback() {
        eprintln!("WARNING: gRPC without TLS on {addr}: tokens and data cross the network in clear ([tls])");
    }
    eprintln!("metrics on http://{metrics_addr}/metrics");
    let scheme = if tls.is_some() { "https" } else { "http" };
    eprintln!("grpc listening on {scheme}://{addr}");
    let shutdown = async move {
        wait_for_signal().await;
        eprintln!("shutting down");
        let _ = stop_tx.send(true);
    };
    app.serve(listener, shutdown).await?;
    let _ = metrics_task.await;
    Ok(())
}

/// Writes `text` and a newline to stdout. A reader that went away (`cogfeed inspect x |
/// head`) is not an error: the output simply ends there.
fn print_out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// SIGINT or SIGTERM.
async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve {
            config,
            listen,
            metrics_listen,
            data_dir,
        } => serve(config, listen, metrics_listen, data_dir).await?,
        Command::ServeSynthetic {
            listen,
            batch_size,
            bands,
            patch_size,
            sample_bytes,
            label,
        } => {
            use cogfeed_server::api::synthetic::{SyntheticFeed, SyntheticShape};
            let bytes = batch_size
                .checked_mul(bands)
                .and_then(|n| n.checked_mul(patch_size))
                .and_then(|n| n.checked_mul(patch_size))
                .and_then(|n| n.checked_mul(sample_bytes))
                .filter(|&n| n <= cogfeed_server::api::MAX_MESSAGE_BYTES / 2)
                .context("batch too large (at most 512 MiB)")?;
            let feed = SyntheticFeed::new(SyntheticShape {
                batch_size,
                bands,
                patch_size,
                sample_bytes,
                label,
            });
            tracing::info!(%listen, bytes, "serving synthetic batches");
            cogfeed_server::app::grpc_transport()
                .add_service(feed.server())
                .serve(listen)
                .await
                .context("synthetic feed")?;
        }
        Command::CheckConfig { file, dump } => {
            let cfg = Config::load(&file)?;
            cogfeed_server::dataset::check_config(&cfg)?;
            if dump {
                print_out(toml::to_string(&cfg)?.trim_end())?;
            } else {
                print_out(&format!("{}: ok, {} datasets", file.display(), cfg.datasets.len()))?;
            }
        }
        Command::DemoData { dir, scenes, size } => {
            let paths = cogfeed_server::demo::write_scenes(&dir, scenes, size)?;
            print_out(&format!(
                "wrote {} scenes with labels to {}",
                paths.len(),
                dir.display()
            ))?;
        }
        Command::DemoSeries {
            dir,
            s2_dates,
            s2_bands,
            s1_dates,
        } => {
            let shape = cogfeed_server::demo::series::SeriesShape {
                s2_dates,
                s2_bands,
                s1_dates,
            };
            let items = cogfeed_server::demo::series::write_series(&dir, shape)?;
            print_out(&format!("wrote {}", items.display()))?;
        }
        Command::Inspect { url, prefix_bytes } => {
            let cog = open(&url, prefix_bytes).await?;
            let text = serde_json::to_string_pretty(&inspect::report(&cog))?;
            print_out(&text)?;
        }
        Command::Read {
            url,
            level,
            window,
            bands,
            out,
            prefix_bytes,
            stats,
        } => {
            let cog = open(&url, prefix_bytes).await?;
            let lvl = cog.level(level).map_err(|e| Error::tiff(&url, e))?;
            let (col, row, width, height) = match window {
                Some(w) => {
                    let v = parse_list(&w, "window", 4)?;
                    (v[0], v[1], v[2], v[3])
                }
                None => (0, 0, lvl.width, lvl.height),
            };
            let bands = match bands {
                Some(b) => {
                    let v = parse_list(&b, "band list", 0)?;
                    if v.contains(&0) {
                        bail!("invalid band list {b:?}: bands are 1-based");
                    }
                    Some(v.into_iter().map(|b| b as usize - 1).collect())
                }
                None => None,
            };
            let req = WindowRequest {
                level,
                col,
                row,
                width,
                height,
                bands,
            };
            let raster = cog.read_window(&req).await.map_err(|e| Error::tiff(&url, e))?;
            let file = std::fs::File::create(&out).with_context(|| format!("cannot create {}", out.display()))?;
            write_npy(
                BufWriter::new(file),
                raster.dtype,
                &[raster.bands, raster.height, raster.width],
                &raster.data,
            )
            .with_context(|| format!("cannot write {}", out.display()))?;
            if stats {
                eprintln!(
                    "{{\"header_requests\": {}, \"block_requests\": {}}}",
                    cog.header_requests(),
                    cog.block_requests()
                );
            }
        }
        Command::Warp {
            items,
            ids,
            assets,
            crs,
            bounds,
            resolution,
            resampling,
            nodata,
            out,
            explain,
        } => {
            let req = cogfeed_server::dataset::map::mosaic::command::WarpRequest {
                items,
                ids: split_list(&ids),
                assets: split_list(&assets),
                crs,
                bounds: parse_bounds(&bounds)?,
                resolution,
                resampling,
                nodata,
            };
            let result = cogfeed_server::dataset::map::mosaic::command::warp(&req, &StoreOptions::default()).await?;
            let file = std::fs::File::create(&out).with_context(|| format!("cannot create {}", out.display()))?;
            write_npy(BufWriter::new(file), result.dtype, &result.shape, &result.data)
                .with_context(|| format!("cannot write {}", out.display()))?;
            if explain {
                let reads: Vec<serde_json::Value> = result
                    .reads
                    .iter()
                    .flat_map(|(asset, rs)| {
                        rs.iter().map(move |r| {
                            serde_json::json!({"asset": asset, "item": r.item, "level": r.level,
                                "window": r.window.map(|w| [w.col, w.row, w.width, w.height]),
                                "scale": r.window.map(|w| [w.x_scale, w.y_scale])})
                        })
                    })
                    .collect();
                eprintln!("{}", serde_json::to_string(&reads)?);
            }
        }
        Command::Stac { url, json } => {
            let items = cogfeed_server::dataset::map::load_items(
                &url,
                &cogfeed_stac::HrefRewrite::default(),
                &StoreOptions::default(),
            )
            .await?;
            let text = if json {
                serde_json::to_string_pretty(&cogfeed_stac::describe(&items))?
            } else {
                cogfeed_stac::describe_text(&items)
            };
            print_out(&text)?;
        }
    }
    Ok(())
}

fn parse_bounds(text: &str) -> anyhow::Result<[f64; 4]> {
    let v: Vec<f64> = text
        .split(',')
        .map(|p| p.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("invalid --bounds {text:?}"))?;
    match v.as_slice() {
        [a, b, c, d] => Ok([*a, *b, *c, *d]),
        _ => bail!("invalid --bounds {text:?}: expected minx,miny,maxx,maxy"),
    }
}

fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a terminal: log files and collectors get plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        // Every line is scrubbed of URL credentials and signed-URL query values.
        .with_writer(|| cogfeed_server::redact::LogWriter);
    match cli.log_format {
        LogFormat::Pretty => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    if let Err(e) = cogfeed_server::huge_pages::disable_transparent_huge_pages() {
        tracing::warn!("transparent huge pages stay on ({e}): fresh buffers cost more to fault in");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(cli));
    // Tasks still running (streams of clients that never read) do not hold the exit up.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, with every cause: `cannot listen on 127.0.0.1:50051: address in use`.
            eprintln!("error: {}", cogfeed_server::redact::secrets(&format!("{e:#}")));
            std::process::ExitCode::FAILURE
        }
    }
}
