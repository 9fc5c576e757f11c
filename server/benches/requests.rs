//! Range requests per window read, cogfeed vs GDAL's `/vsicurl/`, against the same counting
//! HTTP server and the same COG, each window from a fresh open (header included).
//!
//! `cargo bench --bench requests`

#![allow(clippy::unwrap_used)]

#[path = "support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use cogfeed_server::storage::{StoreOptions, open_url};
use cogfeed_tiff::{Cog, OpenOptions, WindowRequest};

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !support::gdal_available() {
        println!("requests bench skipped: GDAL's Python bindings are not installed (apt-get install python3-gdal)");
        return;
    }
    let size = 4096;
    let path = support::bench_cog("DEFLATE", size);
    let file = path.file_name().unwrap().to_str().unwrap().to_string();
    let server = support::RangeServer::start(&support::data_dir());
    let url = format!("http://127.0.0.1:{}/{file}", server.port);
    // (col, row, width, height, level, what)
    let windows: Vec<(u64, u64, u64, u64, usize, &str)> = vec![
        (0, 0, 512, 512, 0, "one tile, aligned"),
        (700, 300, 512, 512, 0, "512 px crop, unaligned (4 tiles)"),
        (1100, 1100, 64, 64, 0, "64 px crop inside one tile"),
        (0, 0, 1024, 1024, 0, "2x2 tiles, aligned"),
        (100, 100, 2000, 2000, 0, "2000 px crop (25 tiles)"),
        (0, 0, 2048, 2048, 1, "whole overview level 1"),
    ];
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut ours = Vec::new();
    for &(col, row, width, height, level, _) in &windows {
        let before = server.count();
        rt.block_on(async {
            let reader = open_url(&url, &StoreOptions::default()).unwrap();
            let cog = Cog::open(reader, OpenOptions::default()).await.unwrap();
            let req = WindowRequest {
                level,
                col,
                row,
                width,
                height,
                bands: None,
            };
            cog.read_window(&req).await.unwrap();
        });
        ours.push(server.count() - before);
    }
    let specs: Vec<String> = windows
        .iter()
        .map(|(c, r, w, h, l, _)| format!("{c},{r},{w},{h},{l}"))
        .collect();
    let mut gdal = Command::new(support::GDAL_PYTHON)
        .arg(support::helper())
        .arg("windows")
        .arg(&url)
        .args(&specs)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = gdal.stdin.take().unwrap();
    let mut stdout = BufReader::new(gdal.stdout.take().unwrap());
    let mut theirs = Vec::new();
    for _ in &windows {
        let before = server.count();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "done", "gdal helper failed");
        theirs.push(server.count() - before);
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }
    drop(stdin);
    let _ = gdal.wait();
    println!("HTTP requests per window read ({size}x{size} 4-band uint16 DEFLATE COG, 512 px tiles, fresh open each)");
    println!("| window | cogfeed | GDAL /vsicurl/ |");
    println!("|---|---:|---:|");
    for (i, w) in windows.iter().enumerate() {
        println!("| {} | {} | {} |", w.5, ours[i], theirs[i]);
    }
    let (a, b): (u64, u64) = (ours.iter().sum(), theirs.iter().sum());
    println!("| total | {a} | {b} |");
}
