//! Golden tests: every committed GDAL fixture (codec x dtype x predictor x interleave x
//! layout) read through the real local object store and through an in-memory reader with a
//! tiny header prefix, full levels, sub-windows and band subsets, against GDAL's pixels.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::sync::Arc;

use cogfeed_server::storage::{StoreOptions, open_url};
use cogfeed_tiff::ifd::ByteOrder;
use cogfeed_tiff::{Cog, MemoryReader, OpenOptions, RangeReader, WindowRequest};
use common::{crop, fixtures, read_npy};
use serde_json::Value;

fn manifest() -> Vec<Value> {
    let text = std::fs::read_to_string(fixtures().join("manifest.json")).unwrap();
    serde_json::from_str::<Vec<Value>>(&text).unwrap()
}

fn descr(dtype: &str) -> &'static str {
    cogfeed_tiff::DType::from_name(dtype).unwrap().npy_descr()
}

/// Largest absolute difference between two arrays of u8 samples (lossy codecs are u8 here).
fn max_u8_diff(a: &[u8], b: &[u8]) -> u8 {
    a.iter().zip(b).map(|(x, y)| x.abs_diff(*y)).max().unwrap_or(0)
}

async fn check_fixture(entry: &Value, cog: &Cog) {
    let name = entry["name"].as_str().unwrap();
    let lossy = entry["lossy"].as_bool().unwrap();
    let levels = entry["levels"].as_u64().unwrap() as usize;
    assert_eq!(cog.header().levels.len(), levels, "{name}: level count");
    for level in 0..levels {
        let expected = read_npy(&fixtures().join(format!("expected/{name}.l{level}.npy")));
        let (bands, h, w) = (expected.shape[0], expected.shape[1], expected.shape[2]);
        let lvl = cog.level(level).unwrap();
        assert_eq!(
            (lvl.bands, lvl.height as usize, lvl.width as usize),
            (bands, h, w),
            "{name} l{level}: shape"
        );
        assert_eq!(lvl.dtype.npy_descr(), expected.descr, "{name}: dtype");
        let es = lvl.dtype.size();
        let all: Vec<usize> = (0..bands).collect();
        let mut windows = vec![((0, 0, w, h), all.clone())];
        if w > 20 && h > 20 {
            windows.push(((3, 5, w - 10, h - 17), all.clone()));
            windows.push(((w - 9, h - 7, 9, 7), all.clone()));
            windows.push(((17, 1, 1, h - 2), all.clone()));
        }
        if bands > 1 {
            windows.push(((1, 2, w / 2, h / 3), vec![bands - 1, 0]));
        }
        for ((c, r, ww, wh), bsel) in windows {
            let req = WindowRequest {
                level,
                col: c as u64,
                row: r as u64,
                width: ww as u64,
                height: wh as u64,
                bands: Some(bsel.clone()),
            };
            let got = cog
                .read_window(&req)
                .await
                .unwrap_or_else(|e| panic!("{name} l{level} {req:?}: {e}"));
            let want = crop(&expected, es, (c, r, ww, wh), &bsel);
            assert_eq!((got.bands, got.height, got.width), (bsel.len(), wh, ww));
            if lossy {
                let d = max_u8_diff(&got.data, &want);
                assert!(d <= 8, "{name} l{level} {req:?}: lossy difference {d}");
            } else {
                assert!(got.data == want, "{name} l{level} {req:?}: pixels differ from GDAL");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_matches_gdal_through_the_local_store() {
    let entries = manifest();
    assert!(entries.len() >= 38, "fixture matrix shrank");
    for entry in &entries {
        let name = entry["name"].as_str().unwrap();
        let path = fixtures().join(format!("tif/{name}.tif"));
        let reader: Arc<dyn RangeReader> = open_url(path.to_str().unwrap(), &StoreOptions::default()).unwrap();
        let cog = Cog::open(reader, OpenOptions::default()).await.unwrap();
        assert_eq!(
            cog.level(0).unwrap().dtype.npy_descr(),
            descr(entry["dtype"].as_str().unwrap())
        );
        let parts: Vec<&str> = name.split('_').collect();
        assert_eq!(cog.header().bigtiff, parts.contains(&"bigtiff"), "{name}: bigtiff");
        assert_eq!(
            cog.header().order == ByteOrder::Big,
            parts.contains(&"be"),
            "{name}: byte order"
        );
        if parts.contains(&"sparse") {
            let l0 = cog.level(0).unwrap();
            let empty = (0..l0.offsets.len()).filter(|&b| l0.block_range(b).is_none()).count();
            assert!(empty > 0, "{name}: GDAL wrote no sparse blocks");
        }
        let geo = &cog.header().geo;
        assert_eq!(geo.epsg, Some(32633), "{name}: epsg");
        let gt: Vec<f64> = entry["geotransform"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(geo.geotransform.map(|g| g.to_vec()), Some(gt), "{name}: geotransform");
        check_fixture(entry, &cog).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_header_prefix_grows_and_reads_the_same() {
    for entry in manifest().iter().filter(|e| e["layout"] == "cog") {
        let name = entry["name"].as_str().unwrap();
        let bytes = std::fs::read(fixtures().join(format!("tif/{name}.tif"))).unwrap();
        let reader = MemoryReader::new(name, bytes);
        let options = OpenOptions {
            prefix_bytes: 64,
            ..Default::default()
        };
        let cog = Cog::open(Arc::new(reader.clone()), options).await.unwrap();
        assert!(
            cog.header_requests() > 1,
            "{name}: a 64-byte prefix cannot hold the header"
        );
        check_fixture(entry, &cog).await;
    }
}

#[tokio::test]
async fn default_prefix_reads_a_cog_header_in_one_request() {
    for entry in manifest().iter().filter(|e| e["layout"] == "cog") {
        let name = entry["name"].as_str().unwrap();
        let bytes = std::fs::read(fixtures().join(format!("tif/{name}.tif"))).unwrap();
        let reader = MemoryReader::new(name, bytes);
        let cog = Cog::open(Arc::new(reader.clone()), OpenOptions::default())
            .await
            .unwrap();
        assert_eq!(cog.header_requests(), 1, "{name}");
        assert_eq!(reader.requests(), 1, "{name}");
        // A whole-level read of a small COG coalesces into few requests.
        let lvl = cog.level(0).unwrap();
        let req = WindowRequest {
            level: 0,
            col: 0,
            row: 0,
            width: lvl.width,
            height: lvl.height,
            bands: None,
        };
        cog.read_window(&req).await.unwrap();
        let blocks = lvl.blocks_per_plane() as u64
            * if lvl.planar == cogfeed_tiff::Planar::Separate {
                lvl.bands as u64
            } else {
                1
            };
        assert!(
            cog.block_requests() < blocks,
            "{name}: {} requests for {blocks} blocks",
            cog.block_requests()
        );
    }
}
