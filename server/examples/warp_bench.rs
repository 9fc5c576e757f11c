//! CPU cost of map-space warping, for comparing with GDAL's `gdal.Warp`:
//! `client/bench/warp_bench.py` drives it.
//!
//!     warp_bench --write-demo DIR
//!     warp_bench CASES.json [--min-secs S] [--max-iterations N] [--concurrency K[,K...]] [--out OUT.bin]
//!
//! `--write-demo DIR` writes the embedded Sentinel-2-like STAC archive (`demo_stac`) into DIR
//! and prints the path of its `items.json`.
//!
//! Otherwise CASES.json is a JSON list of cases, each as `cogfeed warp` takes them plus a group:
//! `{"group", "items", "ids", "assets", "crs", "bounds", "resolution", "resampling", "nodata"}`.
//! Every Item document is read once and every asset opened once (header read); one tile cache is
//! shared by all cases, and one untimed pass over every case fills it (as GDAL's block cache is
//! warm after a first pass), so the timed loop is planning, reading decoded tiles from the cache,
//! the kernel, the mosaic and the conversion to the output type: what `cogfeed warp` does per
//! footprint, less opening files. Then, group by group, the group's cases run again and again on
//! a tokio current-thread runtime (the warp itself runs on rayon's pool: set
//! `RAYON_NUM_THREADS=1` for one worker) until at least S seconds of wall time (default 2) or N
//! passes (default 1000). With `--concurrency K` (default 1) the group's cases run K at a time
//! (`join_all`), as the daemon assembles a batch's samples: the rayon worker then finds queued work
//! instead of being woken for every footprint (each footprint hands work to the pool twice: tile
//! assembly, then the warp); several values (`1,16`) measure each in turn, into `per_concurrency`
//! (`per_group` is the first). CPU time is the whole process's (utime + stime from /proc/self/stat,
//! so every thread counts). One JSON document goes to stdout:
//!
//!     {"cases": n, "cpu_s": t, "wall_s": t, "per_group": {GROUP: {"cases", "iterations",
//!      "samples", "cpu_s", "wall_s", "samples_per_cpu_s", "samples_per_wall_s"}},
//!      "per_concurrency": {K: {GROUP: {...}}}, "cases_out": [...]}
//!
//! where samples are output samples (bands × width × height per case, summed over passes).
//! With `--out OUT.bin`, the outputs of the warm-up pass are written back to back (each case's
//! little-endian samples, `(bands, H, W)`), and `cases_out` lists per case its dtype, shape and
//! byte offset, so the caller can check the timed work against GDAL's.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use cogfeed_geo::warp::Resampling;
use cogfeed_geo::{Crs, Footprint};
use cogfeed_server::dataset::map::mosaic::{AssetSource, mosaic};
use cogfeed_server::storage::StoreOptions;
use cogfeed_server::tiles::TileCache;
use cogfeed_stac::{HrefRewrite, Item};
use cogfeed_tiff::{DType, OpenOptions};
use serde::Deserialize;
use serde_json::json;

// The daemon's allocator, so the timed path allocates as `cogfeed serve` does.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Enough for every tile of the demo archive many times over.
const CACHE_BYTES: u64 = 1 << 30;

#[derive(Debug, Clone, Deserialize)]
struct Case {
    #[serde(default)]
    group: Option<String>,
    items: String,
    ids: Vec<String>,
    assets: Vec<String>,
    crs: String,
    bounds: [f64; 4],
    resolution: f64,
    resampling: String,
    nodata: f64,
}

/// One case, ready to run: per asset the opened sources (priority order).
struct Prepared {
    group: String,
    footprint: Footprint,
    resampling: Resampling,
    nodata: f64,
    per_asset: Vec<Vec<AssetSource>>,
    dtype: DType,
}

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("warp_bench: {msg}");
    std::process::exit(2)
}

/// Process CPU time (user + system, every thread, live or exited), in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_else(|e| fail(format!("/proc/self/stat: {e}")));
    // The command name (field 2) is in parentheses and may hold spaces: split after it.
    let rest = &stat[stat.rfind(')').unwrap_or_else(|| fail("odd /proc/self/stat")) + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 counting from field 3.
    let tick = |i: usize| fields.get(i).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    // USER_HZ is 100 on every Linux this runs on.
    (tick(11) + tick(12)) / 100.0
}

async fn prepare(cases: &[Case]) -> Vec<Prepared> {
    let store = StoreOptions::default();
    let mut docs: HashMap<String, Vec<Item>> = HashMap::new();
    let mut opened: HashMap<(String, String, String), AssetSource> = HashMap::new();
    let mut out = Vec::with_capacity(cases.len());
    for (n, c) in cases.iter().enumerate() {
        let bad = |m: String| -> ! { fail(format!("case {n}: {m}")) };
        if !docs.contains_key(&c.items) {
            let all = cogfeed_server::dataset::map::load_items(&c.items, &HrefRewrite::default(), &store)
                .await
                .unwrap_or_else(|e| bad(e.to_string()));
            docs.insert(c.items.clone(), all);
        }
        let all = &docs[&c.items];
        let mut per_asset = Vec::with_capacity(c.assets.len());
        for key in &c.assets {
            let mut sources = Vec::new();
            for id in &c.ids {
                let item = all
                    .iter()
                    .find(|it| &it.id == id)
                    .unwrap_or_else(|| bad(format!("no item {id:?}")));
                if !item.assets.contains_key(key) {
                    continue;
                }
                let k = (c.items.clone(), id.clone(), key.clone());
                if !opened.contains_key(&k) {
                    let asset = item.asset(key).unwrap_or_else(|e| bad(e.to_string()));
                    let object = cogfeed_server::tiles::open_object(&asset.href, &store, OpenOptions::default())
                        .await
                        .unwrap_or_else(|e| bad(e.to_string()));
                    let src = AssetSource::new(id, asset, object).unwrap_or_else(|e| bad(e.to_string()));
                    opened.insert(k.clone(), src);
                }
                sources.push(opened[&k].clone());
            }
            if sources.is_empty() {
                bad(format!("no item holds asset {key}"));
            }
            per_asset.push(sources);
        }
        let crs = Crs::parse(&c.crs).unwrap_or_else(|e| bad(e.to_string()));
        let footprint = Footprint::new(crs, c.bounds, c.resolution).unwrap_or_else(|e| bad(e.to_string()));
        let resampling = Resampling::parse(&c.resampling).unwrap_or_else(|| bad(format!("kernel {:?}", c.resampling)));
        let dtype = per_asset[0][0].dtype;
        out.push(Prepared {
            group: c.group.clone().unwrap_or_else(|| c.resampling.clone()),
            footprint,
            resampling,
            nodata: c.nodata,
            per_asset,
            dtype,
        });
    }
    out
}

/// Runs one case: every asset's mosaic, converted to the output type. Returns the bytes and
/// the number of output samples.
async fn run_case(cache: &TileCache, p: &Prepared) -> (Vec<u8>, usize) {
    let mut data = Vec::new();
    let mut bands = 0;
    for sources in &p.per_asset {
        let (m, _) = mosaic(cache, sources, sources[0].bands, &p.footprint, p.resampling)
            .await
            .unwrap_or_else(|e| fail(e));
        bands += m.bands;
        data.extend_from_slice(&m.to_bytes(p.dtype, p.nodata, p.resampling != Resampling::Nearest));
    }
    let samples = bands * p.footprint.width() as usize * p.footprint.height() as usize;
    (data, samples)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--write-demo") {
        let dir = args.get(1).unwrap_or_else(|| fail("--write-demo DIR"));
        let path = cogfeed_server::demo::stac::write_stac_demo(Path::new(dir)).unwrap_or_else(|e| fail(e));
        println!("{}", path.display());
        return;
    }
    let (mut cases_path, mut min_secs, mut max_iter, mut out_path) = (None, 2.0f64, 1000usize, None);
    let mut concurrency = vec![1usize];
    let mut i = 0;
    while i < args.len() {
        let value = || {
            args.get(i + 1)
                .cloned()
                .unwrap_or_else(|| fail(format!("{} takes a value", args[i])))
        };
        match args[i].as_str() {
            "--min-secs" => {
                min_secs = value().parse().unwrap_or_else(|_| fail("--min-secs takes seconds"));
                i += 2;
            }
            "--max-iterations" => {
                max_iter = value()
                    .parse()
                    .unwrap_or_else(|_| fail("--max-iterations takes a count"));
                i += 2;
            }
            "--concurrency" => {
                concurrency = value()
                    .split(',')
                    .map(|k| k.trim().parse().ok().filter(|k| *k > 0))
                    .collect::<Option<Vec<usize>>>()
                    .unwrap_or_else(|| fail("--concurrency takes counts, e.g. 1,16"));
                i += 2;
            }
            "--out" => {
                out_path = Some(value());
                i += 2;
            }
            a if !a.starts_with("--") && cases_path.is_none() => {
                cases_path = Some(a.to_string());
                i += 1;
            }
            a => fail(format!("unexpected argument {a:?}")),
        }
    }
    let cases_path = cases_path.unwrap_or_else(|| {
        fail("usage: warp_bench CASES.json [--min-secs S] [--max-iterations N] [--concurrency K[,K...]] [--out OUT.bin] | --write-demo DIR")
    });
    let text = std::fs::read_to_string(&cases_path).unwrap_or_else(|e| fail(format!("{cases_path}: {e}")));
    let cases: Vec<Case> = serde_json::from_str(&text).unwrap_or_else(|e| fail(format!("{cases_path}: {e}")));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(e));
    let report = rt.block_on(async move {
        let prepared = prepare(&cases).await;
        let cache = TileCache::new(CACHE_BYTES);
        // Warm-up: every case once (fills the tile cache); its outputs are the ones checked.
        let mut blob = Vec::new();
        let mut cases_out = Vec::with_capacity(prepared.len());
        for p in &prepared {
            let (data, samples) = run_case(&cache, p).await;
            let (w, h) = (p.footprint.width() as usize, p.footprint.height() as usize);
            cases_out.push(json!({
                "dtype": p.dtype.name(), "shape": [samples / (w * h).max(1), h, w],
                "offset": blob.len(), "bytes": data.len(),
            }));
            blob.extend_from_slice(&data);
        }
        if let Some(path) = &out_path {
            std::fs::write(path, &blob).unwrap_or_else(|e| fail(format!("{path}: {e}")));
        }
        let mut groups: Vec<String> = Vec::new();
        for p in &prepared {
            if !groups.contains(&p.group) {
                groups.push(p.group.clone());
            }
        }
        let mut per_concurrency = serde_json::Map::new();
        let (cpu0, wall0) = (cpu_seconds(), Instant::now());
        for &k in &concurrency {
            let mut per_group = serde_json::Map::new();
            for g in &groups {
                let mine: Vec<&Prepared> = prepared.iter().filter(|p| &p.group == g).collect();
                let (c0, t0) = (cpu_seconds(), Instant::now());
                let (mut iterations, mut samples, mut sink) = (0usize, 0usize, 0u64);
                while iterations < max_iter && (iterations == 0 || t0.elapsed().as_secs_f64() < min_secs) {
                    for chunk in mine.chunks(k) {
                        let done = futures::future::join_all(chunk.iter().map(|p| run_case(&cache, p))).await;
                        for (data, n) in done {
                            sink = sink.wrapping_add(data.len() as u64 + data.first().copied().unwrap_or(0) as u64);
                            samples += n;
                        }
                    }
                    iterations += 1;
                }
                let (cpu, wall) = (cpu_seconds() - c0, t0.elapsed().as_secs_f64());
                std::hint::black_box(sink);
                per_group.insert(
                    g.clone(),
                    json!({
                        "cases": mine.len(), "iterations": iterations, "samples": samples,
                        "cpu_s": cpu, "wall_s": wall,
                        "samples_per_cpu_s": samples as f64 / cpu.max(1e-9),
                        "samples_per_wall_s": samples as f64 / wall.max(1e-9),
                    }),
                );
            }
            per_concurrency.insert(k.to_string(), serde_json::Value::Object(per_group));
        }
        json!({
            "cases": prepared.len(),
            "cpu_s": cpu_seconds() - cpu0,
            "wall_s": wall0.elapsed().as_secs_f64(),
            "rayon_threads": rayon::current_num_threads(),
            "per_group": per_concurrency[&concurrency[0].to_string()].clone(),
            "per_concurrency": per_concurrency,
            "cases_out": cases_out,
        })
    });
    println!("{}", serde_json::to_string(&report).unwrap_or_else(|e| fail(e)));
}
