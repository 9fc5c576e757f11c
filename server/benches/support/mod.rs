//! Shared bench plumbing: the GDAL helper script, bench data, medians, and a counting HTTP
//! range server (so cogfeed and GDAL are measured against the same endpoint).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Debian's interpreter, which has GDAL's Python bindings.
pub const GDAL_PYTHON: &str = "/usr/bin/python3";

/// Path of the GDAL helper script.
pub fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/gdal_helper.py")
}

/// True when GDAL's Python bindings are installed.
pub fn gdal_available() -> bool {
    Command::new(GDAL_PYTHON)
        .args(["-c", "from osgeo import gdal"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Directory for generated bench data (kept between runs).
pub fn data_dir() -> PathBuf {
    let dir = std::env::var_os("COGFEED_BENCH_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("cogfeed-bench"));
    std::fs::create_dir_all(&dir).expect("bench data directory");
    dir
}

/// A 4-band uint16 COG with 512 px tiles in `codec`, written by GDAL once.
pub fn bench_cog(codec: &str, size: u64) -> PathBuf {
    let path = data_dir().join(format!("bench_{}_{size}.tif", codec.to_lowercase()));
    if !path.exists() {
        let status = Command::new(GDAL_PYTHON)
            .arg(helper())
            .args(["make", path.to_str().expect("utf-8 path"), codec, &size.to_string()])
            .status()
            .expect("run gdal helper");
        assert!(status.success(), "gdal could not write {codec}");
    }
    path
}

/// Median of the samples.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A minimal HTTP/1.1 file server with Range support that counts the requests it answers.
pub struct RangeServer {
    pub port: u16,
    pub requests: Arc<AtomicU64>,
}

impl RangeServer {
    /// Serves files under `root` on 127.0.0.1 from a background thread.
    pub fn start(root: &Path) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let requests = Arc::new(AtomicU64::new(0));
        let counter = requests.clone();
        let root = root.to_path_buf();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let root = root.clone();
                let counter = counter.clone();
                std::thread::spawn(move || serve(stream, &root, &counter));
            }
        });
        Self { port, requests }
    }

    /// Requests answered so far.
    pub fn count(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

fn serve(stream: std::net::TcpStream, root: &Path, counter: &AtomicU64) {
    use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("/").to_string();
        let mut range: Option<(u64, Option<u64>)> = None;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some(v) = h.to_ascii_lowercase().strip_prefix("range: bytes=") {
                let (a, b) = v.split_once('-').unwrap_or((v, ""));
                range = Some((a.parse().unwrap_or(0), b.parse().ok()));
            }
        }
        counter.fetch_add(1, Ordering::SeqCst);
        let path = root.join(target.trim_start_matches('/').split('?').next().unwrap_or(""));
        let Ok(mut file) = std::fs::File::open(&path) else {
            let _ = out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
            continue;
        };
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let (start, end, status) = match range {
            Some((a, b)) => (a, b.unwrap_or(size - 1).min(size - 1), "206 Partial Content"),
            None => (0, size.saturating_sub(1), "200 OK"),
        };
        let len = end + 1 - start;
        let mut head = format!(
            "HTTP/1.1 {status}\r\nAccept-Ranges: bytes\r\nContent-Length: {len}\r\nLast-Modified: Mon, 30 Nov 2026 00:00:00 GMT\r\nETag: \"{size}\"\r\n"
        );
        if range.is_some() {
            head.push_str(&format!("Content-Range: bytes {start}-{end}/{size}\r\n"));
        }
        head.push_str("\r\n");
        if out.write_all(head.as_bytes()).is_err() {
            return;
        }
        if method != "HEAD" {
            let mut buf = vec![0u8; len as usize];
            if file.seek(SeekFrom::Start(start)).is_err() || file.read_exact(&mut buf).is_err() {
                return;
            }
            if out.write_all(&buf).is_err() {
                return;
            }
        }
    }
}
