//! Bad input gets a clear error and never a panic: missing objects, garbage, truncated and
//! mutated files, hostile sizes, unsupported codecs, bad requests; plus the CLI contract
//! (exit 1, one line naming the object and the problem).

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::process::Command;
use std::sync::Arc;

use cogfeed_server::storage::{StoreOptions, open_url};
use cogfeed_server::{Error, ErrorCode};
use cogfeed_tiff::{Cog, MemoryReader, OpenOptions, TiffError, WindowRequest};
use common::fixtures;
use proptest::prelude::*;

const FIXTURE: &str = "zstd_uint16_p2_pixel_cog_4b";

fn fixture_bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(format!("tif/{name}.tif"))).unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Opens `bytes` and reads every level whole; returns the first error.
async fn open_and_read_all(bytes: Vec<u8>) -> Result<(), TiffError> {
    let cog = Cog::open(
        Arc::new(MemoryReader::new("mem://x.tif", bytes)),
        OpenOptions::default(),
    )
    .await?;
    for level in 0..cog.header().levels.len() {
        let l = cog.level(level)?;
        let req = WindowRequest {
            level,
            col: 0,
            row: 0,
            width: l.width.min(512),
            height: l.height.min(512),
            bands: None,
        };
        cog.read_window(&req).await?;
    }
    Ok(())
}

/// Rewrites the value of the first IFD entry with `tag` (classic little-endian TIFF, SHORT/LONG).
fn patch_tag(bytes: &mut [u8], tag: u16, value: u32) {
    let ifd = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    let n = u16::from_le_bytes([bytes[ifd], bytes[ifd + 1]]) as usize;
    for i in 0..n {
        let e = ifd + 2 + i * 12;
        if u16::from_le_bytes([bytes[e], bytes[e + 1]]) == tag {
            let typ = u16::from_le_bytes([bytes[e + 2], bytes[e + 3]]);
            if typ == 3 {
                bytes[e + 8..e + 10].copy_from_slice(&(value as u16).to_le_bytes());
            } else {
                bytes[e + 8..e + 12].copy_from_slice(&value.to_le_bytes());
            }
            return;
        }
    }
    panic!("tag {tag} not found");
}

#[test]
fn missing_object_is_not_found() {
    let rt = runtime();
    let path = fixtures().join("tif/does-not-exist.tif");
    let url = path.to_str().unwrap();
    let reader = open_url(url, &StoreOptions::default()).unwrap();
    let err = rt.block_on(Cog::open(reader, OpenOptions::default())).unwrap_err();
    let err = Error::tiff(url, err);
    assert_eq!(err.code(), ErrorCode::NotFound);
    assert!(err.to_string().contains("does-not-exist.tif"), "{err}");
}

#[test]
fn garbage_and_truncation_are_clean_errors() {
    let rt = runtime();
    let good = fixture_bytes(FIXTURE);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("text", b"hello, this is not a tiff at all".to_vec()),
        ("header only", good[..8].to_vec()),
        ("half", good[..good.len() / 2].to_vec()),
        // GDAL COGs end with a 4-byte tile trailer: cut into the last tile itself.
        ("last tile cut", good[..good.len() - 16].to_vec()),
    ];
    for (what, bytes) in cases {
        let err = rt.block_on(open_and_read_all(bytes)).expect_err(what);
        let err = Error::tiff("mem://x.tif", err);
        assert!(
            matches!(err.code(), ErrorCode::DataLoss),
            "{what}: {err} ({:?})",
            err.code()
        );
        assert!(err.to_string().ends_with("in mem://x.tif"), "{what}: {err}");
    }
}

#[test]
fn unsupported_compression_is_named() {
    let rt = runtime();
    let mut bytes = fixture_bytes(FIXTURE);
    patch_tag(&mut bytes, 259, 34712);
    let err = Error::tiff("s3://b/x.tif", rt.block_on(open_and_read_all(bytes)).unwrap_err());
    assert_eq!(
        err.to_string(),
        "unsupported compression 34712 (JPEG2000) in s3://b/x.tif"
    );
    assert_eq!(err.code(), ErrorCode::FailedPrecondition);
}

#[test]
fn hostile_tile_size_is_refused_before_allocating() {
    let rt = runtime();
    let mut bytes = fixture_bytes(FIXTURE);
    patch_tag(&mut bytes, 322, 1 << 20); // TileWidth
    patch_tag(&mut bytes, 323, 1 << 20); // TileLength
    let err = rt.block_on(open_and_read_all(bytes)).unwrap_err();
    assert!(matches!(err, TiffError::TooLarge(_) | TiffError::Malformed(_)), "{err}");
    let mut bytes = fixture_bytes(FIXTURE);
    patch_tag(&mut bytes, 256, 1_000_000); // ImageWidth: 10^12 pixels
    patch_tag(&mut bytes, 257, 1_000_000);
    let err = rt.block_on(open_and_read_all(bytes)).unwrap_err();
    assert!(matches!(err, TiffError::TooLarge(_) | TiffError::Malformed(_)), "{err}");
}

#[test]
fn corrupt_tile_names_the_tile() {
    let rt = runtime();
    let name = "deflate_uint16_p2_pixel_cog_4b";
    let mut bytes = fixture_bytes(name);
    let reader = MemoryReader::new("x", bytes.clone());
    let cog = rt
        .block_on(Cog::open(Arc::new(reader), OpenOptions::default()))
        .unwrap();
    let range = cog.level(0).unwrap().block_range(1).unwrap();
    for b in &mut bytes[range.start as usize + 2..range.end as usize] {
        *b ^= 0x5A;
    }
    let err = rt.block_on(open_and_read_all(bytes)).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, TiffError::CorruptBlock { index: 1, level: 0, .. }),
        "{text}"
    );
    assert!(text.contains("tile 1"), "{text}");
}

#[test]
fn bad_requests_are_invalid_arguments() {
    let rt = runtime();
    let cog = rt
        .block_on(Cog::open(
            Arc::new(MemoryReader::new("x", fixture_bytes(FIXTURE))),
            OpenOptions::default(),
        ))
        .unwrap();
    let base = WindowRequest {
        level: 0,
        col: 0,
        row: 0,
        width: 10,
        height: 10,
        bands: None,
    };
    let bad = [
        WindowRequest {
            level: 9,
            ..base.clone()
        },
        WindowRequest {
            width: 0,
            ..base.clone()
        },
        WindowRequest {
            col: 70,
            ..base.clone()
        },
        WindowRequest {
            col: u64::MAX,
            ..base.clone()
        },
        WindowRequest {
            bands: Some(vec![4]),
            ..base.clone()
        },
        WindowRequest {
            bands: Some(vec![]),
            ..base.clone()
        },
    ];
    for req in bad {
        let err = Error::tiff("x", rt.block_on(cog.read_window(&req)).unwrap_err());
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{req:?}: {err}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let rt = runtime();
        let _ = rt.block_on(open_and_read_all(bytes));
    }

    #[test]
    fn tiff_like_random_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..1024), big in any::<bool>()) {
        let mut bytes = if big { b"MM\0*\0\0\0\x08".to_vec() } else { b"II*\0\x08\0\0\0".to_vec() };
        bytes.extend(body);
        let rt = runtime();
        let _ = rt.block_on(open_and_read_all(bytes));
    }

    #[test]
    fn mutated_fixtures_never_panic(fixture in 0usize..6, flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..12)) {
        let names = [FIXTURE, "lzw_uint8_p2_band_strip_3b", "jpeg_uint8_p1_pixel_cog_3b",
                     "lerc_zstd_uint16_p1_pixel_cog_4b", "webp_uint8_p1_pixel_cog_3b", "packbits_uint16_p1_band_strip_2b"];
        let mut bytes = fixture_bytes(names[fixture]);
        // Mutate the header region most of the time, where structure lives.
        let hot = bytes.len().min(4096);
        for (i, v) in flips {
            let at = i.index(hot);
            bytes[at] = v;
        }
        let rt = runtime();
        let _ = rt.block_on(open_and_read_all(bytes));
    }
}

#[test]
fn cli_reads_and_fails_with_one_line() {
    let exe = env!("CARGO_BIN_EXE_cogfeed");
    let tif = fixtures().join(format!("tif/{FIXTURE}.tif"));
    let out = std::env::temp_dir().join(format!("cogfeed-cli-{}.npy", std::process::id()));
    let ok = Command::new(exe)
        .args([
            "read",
            tif.to_str().unwrap(),
            "--window",
            "1,2,30,20",
            "--bands",
            "4,1",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let npy = common::read_npy(&out);
    assert_eq!((npy.descr.as_str(), npy.shape.clone()), ("<u2", vec![2, 20, 30]));
    let _ = std::fs::remove_file(&out);

    let inspect = Command::new(exe)
        .args(["inspect", tif.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(inspect.status.success());
    let v: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(v["compression"], "ZSTD");
    assert_eq!(v["predictor"], 2);
    assert_eq!(v["bands"], 4);
    assert_eq!(v["dtype"], "uint16");
    assert_eq!(v["epsg"], 32633);
    assert_eq!(v["layout"], "tiled");
    assert_eq!(v["overviews"].as_array().unwrap().len(), 2);

    let missing = fixtures().join("tif/nope.tif");
    let bad = Command::new(exe)
        .args(["read", missing.to_str().unwrap(), "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not found") && stderr.contains("nope.tif"), "{stderr}");

    let bad_window = Command::new(exe)
        .args(["read", tif.to_str().unwrap(), "--window", "0,0,9999,1", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(bad_window.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad_window.stderr).contains("outside"));
}
