//! Helpers shared by the integration tests: fixture paths, a minimal `.npy` reader, the
//! daemon in-process, real store servers, proxies and metrics scrapes.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test
#![allow(dead_code)]

pub mod inproc;
pub mod proxy;
pub mod scrape;
pub mod servers;

use std::path::PathBuf;

/// Directory of the committed GDAL fixtures.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A parsed `.npy` file: dtype descr, shape and raw little-endian data.
pub struct Npy {
    pub descr: String,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// Reads a version 1 `.npy` file written by numpy.
pub fn read_npy(path: &std::path::Path) -> Npy {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..6], b"\x93NUMPY", "{} is not npy", path.display());
    let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + hlen]).unwrap();
    let descr = header
        .split("'descr': '")
        .nth(1)
        .unwrap()
        .split('\'')
        .next()
        .unwrap()
        .to_string();
    let shape_text = header.split("'shape': (").nth(1).unwrap().split(')').next().unwrap();
    let shape = shape_text
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().unwrap())
        .collect();
    Npy {
        descr,
        shape,
        data: bytes[10 + hlen..].to_vec(),
    }
}

/// Cuts `window` (col,row,w,h) of `bands` out of a band-major array of `shape`.
pub fn crop(npy: &Npy, es: usize, window: (usize, usize, usize, usize), bands: &[usize]) -> Vec<u8> {
    let (_, h, w) = (npy.shape[0], npy.shape[1], npy.shape[2]);
    let (c0, r0, ww, wh) = window;
    let mut out = Vec::new();
    for &b in bands {
        for r in r0..r0 + wh {
            let start = ((b * h + r) * w + c0) * es;
            out.extend_from_slice(&npy.data[start..start + ww * es]);
        }
    }
    out
}
