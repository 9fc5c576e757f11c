//! The Rust `Stitcher` over a real grid stream with overlap: for every blend, the written
//! COG (read back with the project's reader; GDAL's COG validator too when Debian's
//! python3-gdal is there) equals a reference accumulated over the whole scene in the test,
//! with the scene's geotransform and overviews.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::sync::Arc;

use cogfeed_client::pb;
use cogfeed_client::stitch::{Blend, StitchOptions, Stitcher, grid_steps};
use cogfeed_server::config::Config;
use cogfeed_tiff::source::MemoryReader;
use cogfeed_tiff::window::WindowRequest;
use cogfeed_tiff::{Cog, OpenOptions};

use common::inproc::{collect, demo_dir, start};

const P: usize = 256;
const S: u32 = 192;

/// A made-up model: channel 0 is band 1, channel 1 depends on where the window is (so the
/// blend decides what a pixel gets).
fn predict(b: &cogfeed_client::Batch) -> (Vec<f32>, [usize; 4]) {
    let n = b.windows.len();
    let image = b.image.values::<u16>().unwrap();
    let c = b.image.shape[1];
    let mut out = Vec::with_capacity(n * 2 * P * P);
    for (s, w) in b.windows.iter().enumerate() {
        let band1 = &image[s * c * P * P..s * c * P * P + P * P];
        out.extend(band1.iter().map(|&v| v as f32));
        let offset = (w.col + 3 * w.row) as f32 / 100.0;
        out.extend(
            band1
                .iter()
                .enumerate()
                .map(|(i, &v)| v as f32 * 0.5 + offset + (i % P) as f32 * 0.01),
        );
    }
    (out, [n, 2, P, P])
}

/// The blend over the whole scene, computed directly.
fn reference(batches: &[cogfeed_client::Batch], scene: u32, size: usize, blend: Blend) -> Vec<f32> {
    let mut sum = vec![0f64; 2 * size * size];
    let mut wsum = vec![0f64; size * size];
    let mut best = vec![(f64::MAX, u64::MAX, u64::MAX); size * size];
    let wt = |i: usize| match blend {
        Blend::Cosine => (std::f64::consts::PI * (i as f64 + 0.5) / P as f64).sin().powi(2),
        _ => 1.0,
    };
    for b in batches {
        let (preds, _) = predict(b);
        for (s, w) in b.windows.iter().enumerate() {
            if w.scene != scene {
                continue;
            }
            for i in 0..P {
                for j in 0..P {
                    let (y, x) = (w.row as usize + i, w.col as usize + j);
                    if y >= size || x >= size {
                        continue;
                    }
                    let px = y * size + x;
                    let v = |k: usize| preds[((s * 2 + k) * P + i) * P + j] as f64;
                    if blend == Blend::Center {
                        let c = (P as f64 - 1.0) / 2.0;
                        let d = (i as f64 - c).abs().max((j as f64 - c).abs());
                        let key = (d, w.row, w.col);
                        if key < best[px] {
                            best[px] = key;
                            sum[px * 2] = v(0);
                            sum[px * 2 + 1] = v(1);
                            wsum[px] = 1.0;
                        }
                    } else {
                        let ww = wt(i) * wt(j);
                        sum[px * 2] += ww * v(0);
                        sum[px * 2 + 1] += ww * v(1);
                        wsum[px] += ww;
                    }
                }
            }
        }
    }
    (0..2 * size * size)
        .map(|i| {
            let w = wsum[i / 2];
            if w == 0.0 {
                f32::NAN
            } else if blend == Blend::Center {
                sum[i] as f32
            } else {
                (sum[i] / w) as f32
            }
        })
        .collect()
}

async fn read(path: &std::path::Path, level: usize) -> (Cog, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap();
    let cog = Cog::open(Arc::new(MemoryReader::new("stitched", bytes)), OpenOptions::default())
        .await
        .unwrap();
    let l = cog.level(level).unwrap();
    let r = cog
        .read_window(&WindowRequest {
            level,
            col: 0,
            row: 0,
            width: l.width,
            height: l.height,
            bands: None,
        })
        .await
        .unwrap();
    // The reader gives [C, H, W]; the stitcher's reference is pixel-interleaved.
    let planar: Vec<f32> = r
        .data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let plane = r.height * r.width;
    let values = (0..plane * r.bands)
        .map(|i| planar[(i % r.bands) * plane + i / r.bands])
        .collect();
    (cog, values)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_blend_matches_a_whole_scene_reference_and_writes_a_cog() {
    let d = start(Config::demo(demo_dir())).await;
    let mut client = cogfeed_client::Client::connect(&d.addr).await.unwrap();
    let info: pb::DatasetInfo = client.describe("demo").await.unwrap();
    let size = info.scenes[0].levels[0].width as usize;
    // Batches of 7 do not divide the epoch: the grid's last, smaller batch must arrive too.
    let request = pb::StreamBatchesRequest {
        dataset: "demo".into(),
        job: "stitch".into(),
        sampler: pb::Sampler::Grid as i32,
        patch_size: P as u32,
        stride: S,
        batch_size: 7,
        world_size: 1,
        dtype: "native".into(),
        ..Default::default()
    };
    let batches = collect(&d.addr, request).await;
    let per_scene = grid_steps(size as u64, P as u64, S as u64).pow(2);
    let windows: usize = batches.iter().map(|b| b.windows.len()).sum();
    assert_eq!(
        windows as u64,
        per_scene * info.scenes.len() as u64,
        "no window dropped"
    );
    let dir = tempfile::tempdir().unwrap();
    for blend in [Blend::Mean, Blend::Cosine, Blend::Center] {
        let out = dir.path().join(format!("{blend:?}-{{scene}}.tif"));
        let opts = StitchOptions {
            blend,
            patch_size: P as u32,
            stride: S,
            ..Default::default()
        };
        let mut st = Stitcher::new(&info, out.to_str().unwrap(), opts).unwrap();
        for b in &batches {
            let (preds, shape) = predict(b);
            st.add(&b.windows, &preds, shape).unwrap();
        }
        let tiles = (size / 256).pow(2);
        assert!(
            st.peak_tiles_in_memory < tiles * info.scenes.len() / 2,
            "{}",
            st.peak_tiles_in_memory
        );
        let incomplete = st.incomplete_tiles;
        let written = st.finish().unwrap();
        assert_eq!(written.len(), info.scenes.len());
        assert_eq!(incomplete, 0);
        let path = dir.path().join(format!("{blend:?}-scene_00.tif"));
        let (cog, got) = read(&path, 0).await;
        let want = reference(&batches, 0, size, blend);
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g.is_nan() && w.is_nan()) || (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                "{blend:?}: value {i} is {g}, the reference {w}"
            );
        }
        let h = cog.header();
        assert_eq!(
            h.geo.geotransform.map(|g| g.to_vec()),
            Some(info.scenes[0].geotransform.clone())
        );
        assert_eq!(h.geo.epsg, Some(32633));
        assert_eq!(h.levels.len(), 3, "1024 px in 256 px tiles: overviews of 512 and 256");
        // Overview 1: the 2 x 2 mean of full resolution.
        let (_, ovr) = read(&path, 1).await;
        let (y, x) = (100, 300);
        let mean = [0, 1]
            .iter()
            .flat_map(|dy| [0, 1].map(|dx| got[((2 * y + dy) * size + 2 * x + dx) * 2] as f64));
        let mean = mean.sum::<f64>() / 4.0;
        assert!((ovr[(y * size / 2 + x) * 2] as f64 - mean).abs() < 1e-3);
        gdal_says_cog(&path);
    }
}

/// GDAL's own COG validator, when Debian's python3-gdal is installed.
fn gdal_says_cog(path: &std::path::Path) {
    let script = "/usr/lib/python3/dist-packages/osgeo_utils/samples/validate_cloud_optimized_geotiff.py";
    if !std::path::Path::new(script).exists() {
        assert!(
            std::env::var("COGFEED_REQUIRE_GDAL").as_deref() != Ok("1"),
            "COGFEED_REQUIRE_GDAL=1 but {script} is missing: install python3-gdal"
        );
        eprintln!("GDAL's COG validator is not installed: skipped");
        return;
    }
    let out = std::process::Command::new("/usr/bin/python3")
        .arg(script)
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("is a valid cloud optimized GeoTIFF"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
