//! Map-space warping against GDAL 3.6's `gdal.Warp`, on the committed fixtures in
//! `tests/fixtures/warp/` (written by `tools/gen_warp_fixtures.py`: a few COGs from GDAL's COG
//! driver, a STAC ItemCollection and per-case oracles). Every case of `cases.json` goes through
//! `cogfeed_server::dataset::map::mosaic::command::warp` and is compared with the tolerance rules of the shared
//! corpus' `check_warp.py`:
//! - nearest and mode are `exact`: 100 % of the samples equal for kind native, 99.9 % otherwise;
//! - bilinear, cubic and average are `approx`: at least 99.5 % of the samples within
//!   max(1, 0.2 % of the oracle's dynamic range over valid pixels) and none off by more than 5 %
//!   of that range (a pixel filled in one output and valid in the other exceeds it).
//!
//! Expect-error cases must fail with a message that names what is wrong. No GDAL at test time.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::path::{Path, PathBuf};

use common::{Npy, read_npy};

use cogfeed_server::dataset::map::mosaic::command::{WarpOutput, WarpRequest, warp};
use cogfeed_server::storage::StoreOptions;
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/warp")
}

fn cases() -> Vec<Value> {
    let text = std::fs::read_to_string(dir().join("cases.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn request(case: &Value) -> WarpRequest {
    let b: Vec<f64> = case["bounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    WarpRequest {
        items: dir().join("items.json").to_string_lossy().into_owned(),
        ids: strings(&case["ids"]),
        assets: strings(&case["assets"]),
        crs: case["crs"].as_str().unwrap().to_string(),
        bounds: [b[0], b[1], b[2], b[3]],
        resolution: case["resolution"].as_f64().unwrap(),
        resampling: case["resampling"].as_str().unwrap().to_string(),
        nodata: case["nodata"].as_f64().unwrap(),
    }
}

/// Little-endian samples of numpy type `descr` as f64.
fn samples(descr: &str, data: &[u8]) -> Vec<f64> {
    macro_rules! le {
        ($t:ty) => {
            data.chunks_exact(std::mem::size_of::<$t>())
                .map(|c| <$t>::from_le_bytes(c.try_into().unwrap()) as f64)
                .collect()
        };
    }
    match descr {
        "|u1" | "<u1" => data.iter().map(|&v| v as f64).collect(),
        "|i1" | "<i1" => data.iter().map(|&v| v as i8 as f64).collect(),
        "<u2" => le!(u16),
        "<i2" => le!(i16),
        "<u4" => le!(u32),
        "<i4" => le!(i32),
        "<f4" => le!(f32),
        "<f8" => le!(f64),
        other => panic!("unexpected dtype {other}"),
    }
}

/// numpy's type string of a STAC / cogfeed dtype name.
fn npy_descr(dtype: &str) -> &'static str {
    cogfeed_tiff::DType::from_name(dtype).unwrap().npy_descr()
}

/// `check_warp.py`'s verdict for one case: Ok(detail) or Err(detail).
fn compare(case: &Value, got: &WarpOutput, exp: &Npy) -> Result<String, String> {
    let dtype = case["dtype"].as_str().unwrap();
    if got.dtype.name() != dtype || npy_descr(dtype) != exp.descr {
        return Err(format!(
            "dtype {} (oracle {}, case {dtype})",
            got.dtype.name(),
            exp.descr
        ));
    }
    if got.shape.as_slice() != exp.shape.as_slice() {
        return Err(format!("shape {:?} != expected {:?}", got.shape, exp.shape));
    }
    let vals = samples(npy_descr(dtype), &got.data);
    let expected = samples(&exp.descr, &exp.data);
    if vals.len() != expected.len() {
        return Err(format!("{} samples, {} expected", vals.len(), expected.len()));
    }
    let nodata = case["nodata"].as_f64().unwrap();
    let n = expected.len();
    let (mut equal, mut fill_mismatch, mut max_diff) = (0usize, 0usize, 0f64);
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut first_diff = None;
    for (i, (&g, &e)) in vals.iter().zip(&expected).enumerate() {
        if g == e {
            equal += 1;
        } else if first_diff.is_none() {
            first_diff = Some((i, g, e));
        }
        max_diff = max_diff.max((g - e).abs());
        if (g == nodata) != (e == nodata) {
            fill_mismatch += 1;
        }
        if e != nodata {
            lo = lo.min(e);
            hi = hi.max(e);
        }
    }
    let at = |i: usize| {
        let (h, w) = (exp.shape[1], exp.shape[2]);
        (i / (h * w), (i / w) % h, i % w)
    };
    let mut detail = format!(
        "exact={:.3}% max|diff|={max_diff} fill-mismatch={fill_mismatch}",
        100.0 * equal as f64 / n.max(1) as f64
    );
    let tol = &case["tolerance"];
    let resampling = case["resampling"].as_str().unwrap();
    let exact = matches!(resampling, "nearest" | "mode");
    assert_eq!(tol["mode"].as_str().unwrap(), if exact { "exact" } else { "approx" });
    if exact {
        let need = if case["kind"] == "native" { 1.0 } else { 0.999 };
        assert_eq!(tol["min_frac_exact"].as_f64().unwrap(), need, "{}", case["id"]);
        if (equal as f64) < need * n as f64 - 1e-9 * n as f64 {
            let (i, g, e) = first_diff.unwrap();
            detail.push_str(&format!(
                " (need {:.1}% exact; first diff at (band,row,col)={:?} got {g} expected {e})",
                100.0 * need,
                at(i)
            ));
            return Err(detail);
        }
        return Ok(detail);
    }
    // The rule of check_warp.py, recomputed from the oracle (and checked against cases.json).
    let range = if hi >= lo { hi - lo } else { 0.0 };
    let within_tol = (0.002 * range).max(1.0);
    let max_abs = 0.05 * range;
    assert!(
        (tol["within"].as_f64().unwrap() - within_tol).abs() < 1e-5,
        "{}",
        case["id"]
    );
    assert!(
        (tol["max_abs"].as_f64().unwrap() - max_abs).abs() < 1e-5,
        "{}",
        case["id"]
    );
    let within = vals
        .iter()
        .zip(&expected)
        .filter(|(g, e)| (*g - *e).abs() <= within_tol)
        .count();
    detail.push_str(&format!(
        " within({within_tol})={:.3}%",
        100.0 * within as f64 / n.max(1) as f64
    ));
    let mut ok = true;
    if (within as f64) < 0.995 * n as f64 - 1e-9 * n as f64 {
        detail.push_str(&format!(" (need 99.5% within {within_tol})"));
        ok = false;
    }
    if max_diff > max_abs {
        let (i, g, e) = vals
            .iter()
            .zip(&expected)
            .enumerate()
            .find(|(_, (g, e))| (*g - *e).abs() > max_abs)
            .map(|(i, (g, e))| (i, *g, *e))
            .unwrap();
        detail.push_str(&format!(
            " (limit max|diff| {max_abs}; first at (band,row,col)={:?} got {g} expected {e})",
            at(i)
        ));
        ok = false;
    }
    if ok { Ok(detail) } else { Err(detail) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_matches_gdal() {
    let store = StoreOptions::default();
    let (mut failed, mut kinds) = (Vec::new(), std::collections::BTreeSet::new());
    let mut resamplings = std::collections::BTreeSet::new();
    for case in cases().iter().filter(|c| c.get("expect").is_none()) {
        let id = case["id"].as_str().unwrap();
        kinds.insert(case["kind"].as_str().unwrap().to_string());
        resamplings.insert(case["resampling"].as_str().unwrap().to_string());
        let exp = read_npy(&dir().join(case["oracle"].as_str().unwrap()));
        let verdict = match warp(&request(case), &store).await {
            Ok(got) => compare(case, &got, &exp),
            Err(e) => Err(format!("error: {e}")),
        };
        match verdict {
            Ok(detail) => println!(
                "PASS {id:<16} {:<10} {:<8} {detail}",
                case["kind"].as_str().unwrap(),
                case["resampling"].as_str().unwrap()
            ),
            Err(detail) => {
                println!(
                    "FAIL {id:<16} {:<10} {:<8} {detail}",
                    case["kind"].as_str().unwrap(),
                    case["resampling"].as_str().unwrap()
                );
                failed.push(format!("{id}: {detail}"));
            }
        }
    }
    // The fixture covers what it claims to.
    for k in [
        "native",
        "upsample",
        "downsample",
        "reproject",
        "mosaic",
        "edge",
        "labels",
        "subpixel",
    ] {
        assert!(kinds.contains(k), "no {k} case");
    }
    for r in ["nearest", "bilinear", "cubic", "average", "mode"] {
        assert!(resamplings.contains(r), "no {r} case");
    }
    assert!(
        failed.is_empty(),
        "{} case(s) failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// Every expect-error case of cases.json: an Err whose message names the item, asset, CRS or value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_cases_name_what_is_wrong() {
    let store = StoreOptions::default();
    let errors: Vec<Value> = cases().into_iter().filter(|c| c.get("expect").is_some()).collect();
    assert!(errors.len() >= 4);
    for case in &errors {
        let id = case["id"].as_str().unwrap();
        let e = match warp(&request(case), &store).await {
            Ok(out) => panic!("{id}: expected an error, got {:?} {}", out.shape, out.dtype.name()),
            Err(e) => e,
        };
        let msg = e.to_string();
        assert!(!msg.contains('\n'), "{id}: multi-line message {msg:?}");
        for needle in strings(&case["message_contains"]) {
            assert!(msg.contains(&needle), "{id}: {msg:?} does not name {needle:?}");
        }
    }
}

/// The four error kinds the command must refuse, written out (independent of cases.json).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals() {
    let store = StoreOptions::default();
    let base = WarpRequest {
        items: dir().join("items.json").to_string_lossy().into_owned(),
        ids: vec!["S2A_32TQS_20240603".into()],
        assets: vec!["B04".into()],
        crs: "EPSG:32632".into(),
        bounds: [728500.0, 5159000.0, 728820.0, 5159320.0],
        resolution: 10.0,
        resampling: "nearest".into(),
        nodata: 0.0,
    };
    // The base request works: the refusals below are about the one field changed.
    let ok = warp(&base, &store).await.unwrap();
    assert_eq!(ok.shape, [1, 32, 32]);
    assert_eq!(ok.data.len(), 32 * 32 * 2);

    let cases: Vec<(WarpRequest, Vec<&str>)> = vec![
        (
            WarpRequest {
                assets: vec!["B04".into(), "B10".into()],
                ..base.clone()
            },
            vec!["S2A_32TQS_20240603", "B10"],
        ),
        (
            WarpRequest {
                crs: "EPSG:999999".into(),
                ..base.clone()
            },
            vec!["EPSG:999999"],
        ),
        (
            WarpRequest {
                ids: vec!["S2A_32TQS_20240603".into(), "S2A_32TQS_20991231".into()],
                ..base.clone()
            },
            vec!["S2A_32TQS_20991231"],
        ),
        (
            WarpRequest {
                nodata: 65536.0,
                ..base.clone()
            },
            vec!["65536", "uint16"],
        ),
        (
            WarpRequest {
                nodata: 0.5,
                ..base.clone()
            },
            vec!["0.5", "uint16"],
        ),
        (
            WarpRequest {
                resampling: "lanczos".into(),
                ..base.clone()
            },
            vec!["lanczos"],
        ),
    ];
    for (req, needles) in cases {
        let msg = match warp(&req, &store).await {
            Ok(out) => panic!("{req:?}: expected an error, got {:?}", out.shape),
            Err(e) => e.to_string(),
        };
        for needle in needles {
            assert!(msg.contains(needle), "{msg:?} does not name {needle:?}");
        }
    }
}

/// The comparison is not vacuous: a wrong priority (ids reversed) fails every mosaic case, and an
/// output grid moved by one pixel fails the native cases (`check_warp.py --simulate-bug order|shift`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_warps_fail_the_comparison() {
    let store = StoreOptions::default();
    let mut checked = 0;
    for case in cases().iter().filter(|c| c.get("expect").is_none()) {
        let kind = case["kind"].as_str().unwrap();
        let mut req = request(case);
        match kind {
            "mosaic" => req.ids.reverse(),
            "native" => {
                req.bounds[0] += req.resolution;
                req.bounds[2] += req.resolution;
            }
            _ => continue,
        }
        let exp = read_npy(&dir().join(case["oracle"].as_str().unwrap()));
        let got = warp(&req, &store).await.unwrap();
        let verdict = compare(case, &got, &exp);
        assert!(verdict.is_err(), "{} ({kind}, broken) passed: {verdict:?}", case["id"]);
        checked += 1;
    }
    assert!(checked >= 5, "{checked}");
}
