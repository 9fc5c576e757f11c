//! Decode throughput per core, cogfeed vs GDAL, on the same realistic COG in the same run.
//!
//! For each codec, a 4-band uint16 COG with 512 px tiles (GDAL-written, spatially
//! correlated content) is decoded whole: every tile decompressed, un-predicted and pasted
//! into a band-major raster, on one thread. GDAL does the same with `GDAL_NUM_THREADS=1`
//! (`Dataset.ReadRaster`). Prints decoded MB/s (medians) and the ratio.
//!
//! `cargo bench --bench decode` (size: `COGFEED_BENCH_SIZE`, default 2048 px).

#![allow(clippy::unwrap_used)]

#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::Instant;

use cogfeed_tiff::{Cog, MemoryReader, OpenOptions, Raster, WindowRequest, decode, window};

const REPEATS: usize = 7;

// The same allocator as the `cogfeed` binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !support::gdal_available() {
        println!("decode bench skipped: GDAL's Python bindings are not installed (apt-get install python3-gdal)");
        return;
    }
    let size: u64 = std::env::var("COGFEED_BENCH_SIZE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2048);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("decode of a {size}x{size} 4-band uint16 COG, 512 px tiles, one core, median of {REPEATS}");
    println!("| codec | stored MB | cogfeed MB/s | GDAL MB/s | ratio |");
    println!("|---|---:|---:|---:|---:|");
    let only = std::env::var("COGFEED_BENCH_CODECS").unwrap_or_default();
    for codec in ["NONE", "DEFLATE", "ZSTD", "LZW", "LERC_ZSTD", "LERC_DEFLATE", "LERC"] {
        if !only.is_empty() && !only.split(',').any(|c| c.eq_ignore_ascii_case(codec)) {
            continue;
        }
        let path = support::bench_cog(codec, size);
        let bytes = std::fs::read(&path).unwrap();
        let stored_mb = bytes.len() as f64 / 1e6;
        let cog = rt
            .block_on(Cog::open(
                Arc::new(MemoryReader::new("bench", bytes)),
                OpenOptions::default(),
            ))
            .unwrap();
        let level = cog.level(0).unwrap().clone();
        let blocks: Vec<usize> = (0..level.offsets.len()).collect();
        let raw = rt.block_on(cog.fetch_blocks(0, &blocks)).unwrap();
        let req = WindowRequest {
            level: 0,
            col: 0,
            row: 0,
            width: level.width,
            height: level.height,
            bands: None,
        };
        let all: Vec<usize> = (0..level.bands).collect();
        let decoded_bytes = (level.width * level.height * level.bands as u64 * level.dtype.size() as u64) as f64;
        let mut ours = Vec::new();
        for _ in 0..REPEATS {
            let t = Instant::now();
            let mut out = Raster {
                dtype: level.dtype,
                bands: level.bands,
                height: level.height as usize,
                width: level.width as usize,
                data: vec![0u8; decoded_bytes as usize],
            };
            for (&b, data) in blocks.iter().zip(&raw) {
                let block = decode::decode_block(&level, 0, b, data).unwrap();
                window::paste(&level, b, &block, &req, &all, &mut out);
            }
            std::hint::black_box(&out);
            ours.push(t.elapsed().as_secs_f64());
        }
        let gdal = std::process::Command::new(support::GDAL_PYTHON)
            .arg(support::helper())
            .args(["decode", path.to_str().unwrap(), &REPEATS.to_string()])
            .env("GDAL_NUM_THREADS", "1")
            .output()
            .unwrap();
        let gdal_s: f64 = String::from_utf8_lossy(&gdal.stdout).trim().parse().unwrap();
        let ours_mbs = decoded_bytes / support::median(ours) / 1e6;
        let gdal_mbs = decoded_bytes / gdal_s / 1e6;
        println!(
            "| {codec} | {stored_mb:.1} | {ours_mbs:.0} | {gdal_mbs:.0} | {:.2}x |",
            ours_mbs / gdal_mbs
        );
    }
}
