//! Transforms points with `cogfeed_geo::Transformer` (proj4rs), for comparing it with
//! GDAL/PROJ: `tools/proj_accuracy.py` drives it.
//!
//!     proj_accuracy SRC DST [--bench-secs S] < points.txt > transformed.txt
//!
//! SRC and DST are CRSs as `cogfeed warp --crs` takes them (`EPSG:32633`, `4326`). Reads one point
//! per line, `x y` (easting / longitude first, degrees for geographic CRSs), and writes the
//! transformed points in the same form, with Rust's shortest round-trip formatting (`NaN` where a
//! point is outside the domain of either CRS). With `--bench-secs S` (default 0.5; 0 turns it off)
//! it then transforms the whole batch again and again, on this one thread, for at least S seconds,
//! and writes one JSON line to stderr: `{"points": n, "seconds": t, "points_per_sec": r}`. The timed
//! loop copies the input into the buffers first (as a caller that keeps its points would), and
//! that copy is included.

use std::io::{BufRead, BufWriter, Write};
use std::time::{Duration, Instant};

use cogfeed_geo::{Crs, Transformer};

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("proj_accuracy: {msg}");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut positional = Vec::new();
    let mut bench_secs = 0.5;
    let mut i = 0;
    while i < args.len() {
        if args[i] == "--bench-secs" {
            bench_secs = args
                .get(i + 1)
                .and_then(|s| s.parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s >= 0.0)
                .unwrap_or_else(|| fail("--bench-secs takes a number of seconds"));
            i += 2;
        } else {
            positional.push(args[i].clone());
            i += 1;
        }
    }
    let [src, dst] = positional.as_slice() else {
        fail("usage: proj_accuracy SRC DST [--bench-secs S] < points")
    };
    let src = Crs::parse(src).unwrap_or_else(|e| fail(e));
    let dst = Crs::parse(dst).unwrap_or_else(|e| fail(e));
    let transformer = Transformer::new(&src, &dst);

    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for (n, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.unwrap_or_else(|e| fail(e));
        let mut parts = line.split_whitespace();
        let (Some(x), Some(y)) = (parts.next(), parts.next()) else {
            if line.trim().is_empty() {
                continue;
            }
            fail(format!("line {}: expected `x y`", n + 1))
        };
        let parse = |s: &str| {
            s.parse::<f64>()
                .unwrap_or_else(|_| fail(format!("line {}: {s:?} is not a number", n + 1)))
        };
        xs.push(parse(x));
        ys.push(parse(y));
    }

    let (mut ox, mut oy) = (xs.clone(), ys.clone());
    transformer.transform(&mut ox, &mut oy);
    let mut out = BufWriter::new(std::io::stdout().lock());
    for (x, y) in ox.iter().zip(&oy) {
        writeln!(out, "{x:?} {y:?}").unwrap_or_else(|e| fail(e));
    }
    out.flush().unwrap_or_else(|e| fail(e));

    if bench_secs > 0.0 && !xs.is_empty() {
        let budget = Duration::from_secs_f64(bench_secs);
        let (mut rounds, start) = (0u64, Instant::now());
        while start.elapsed() < budget {
            ox.copy_from_slice(&xs);
            oy.copy_from_slice(&ys);
            transformer.transform(std::hint::black_box(&mut ox), std::hint::black_box(&mut oy));
            rounds += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        let points = rounds * xs.len() as u64;
        eprintln!(
            "{{\"points\": {points}, \"seconds\": {secs:.6}, \"points_per_sec\": {:.1}}}",
            points as f64 / secs
        );
    }
}
