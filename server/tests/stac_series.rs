//! Space-time samples through the daemon, on the time-series demo (`demo-series`): time
//! layers pick the dates their rule says and equal `cogfeed warp` of each date's Items;
//! valid fractions equal a direct computation over the delivered tensors and respect the
//! minimum; splits hold; streams are deterministic and resume with another world size.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use cogfeed_client::{Batch, pb};
use cogfeed_server::config::Config;
use cogfeed_server::dataset::map::mosaic::command::{WarpRequest, warp};
use cogfeed_server::storage::StoreOptions;
use common::inproc::{collect, start};
use serde_json as _;

const S2_DATES: [&str; 5] = ["2024-04-18", "2024-05-08", "2024-05-28", "2024-06-17", "2024-07-07"];
const INVALID: [u8; 6] = [0, 1, 3, 8, 9, 10];

fn series_config(dir: &Path) -> Config {
    let items = cogfeed_server::demo::series::write_series_demo(&dir.join("series")).unwrap();
    let mut c = Config::demo(dir);
    c.datasets = vec![Config::demo_series(&items)];
    c.cache.index_dir = Some(dir.join("index"));
    c
}

fn request(sampler: pb::Sampler, patch: u32, batch: u32, n: u64) -> pb::StreamBatchesRequest {
    pb::StreamBatchesRequest {
        dataset: "demo-series".into(),
        job: "series-test".into(),
        sampler: sampler as i32,
        patch_size: patch,
        batch_size: batch,
        seed: 11,
        world_size: 1,
        samples_per_epoch: n,
        ..Default::default()
    }
}

fn dates_of<'a>(m: &'a pb::SampleInfo, layer: &str) -> &'a [String] {
    &m.datetimes.iter().find(|d| d.layer == layer).unwrap().dates
}

/// Sample `i`'s slice of a layer tensor.
fn slice<'a>(b: &'a Batch, layer: &str, i: usize) -> &'a [u8] {
    let t = b.layer(layer).unwrap();
    let per = t.data.len() / b.samples.len();
    &t.data[i * per..(i + 1) * per]
}

fn u16s(bytes: &[u8]) -> Vec<u16> {
    bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

/// The valid fraction computed here from the delivered s2 and scl tensors.
fn direct_valid_fraction(s2: &[u8], scl: &[u8], present: &[bool], side: usize) -> f64 {
    let v = u16s(s2);
    let plane = side * side;
    let (mut valid, mut total) = (0usize, 0usize);
    for (t, _) in present.iter().enumerate().filter(|(_, p)| **p) {
        for p in 0..plane {
            let (r, c) = (p / side, p % side);
            let class = scl[(r / 2) * (side / 2) + c / 2];
            let data = (0..4).any(|b| v[t * 4 * plane + b * plane + p] != 0);
            total += 1;
            if data && !INVALID.contains(&class) {
                valid += 1;
            }
        }
    }
    if total == 0 { 0.0 } else { valid as f64 / total as f64 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_layers_valid_fractions_and_splits_hold_for_every_sample() {
    let tmp = tempfile::tempdir().unwrap();
    let d = start(series_config(tmp.path())).await;
    let items = tmp.path().join("series/items.json").to_string_lossy().into_owned();
    let mut r = request(pb::Sampler::Random, 64, 8, 32);
    r.split = "train".into();
    let batches = collect(&d.addr, r).await;
    assert_eq!(batches.len(), 4);
    let (mut padded_steps, mut checked_steps) = (0, 0);
    for b in &batches {
        let n = b.samples.len();
        assert_eq!(n, 8);
        assert_eq!(b.layer("s2").unwrap().shape, vec![n, 3, 4, 64, 64]);
        assert_eq!(b.layer("scl").unwrap().shape, vec![n, 1, 32, 32]);
        assert_eq!(b.layer("s1_asc").unwrap().shape, vec![n, 2, 2, 32, 32]);
        assert_eq!(b.layer("s1_desc").unwrap().shape, vec![n, 2, 2, 32, 32]);
        assert_eq!(b.layer("label").unwrap().shape, vec![n, 1, 64, 64]);
        let mask = &b.time_masks.iter().find(|(l, _)| l == "s2").unwrap().1;
        assert_eq!(mask.shape, vec![n, 3]);
        for (i, m) in b.samples.iter().enumerate() {
            assert_eq!(m.split, "train");
            // latest: the 3 latest S2 dates up to the drawn Item's, oldest first.
            let drawn_day = m.datetime[..10].to_string();
            let upto: Vec<&str> = S2_DATES.iter().copied().filter(|d| *d <= drawn_day.as_str()).collect();
            let mut expected: Vec<String> = vec![String::new(); 3usize.saturating_sub(upto.len())];
            expected.extend(upto[upto.len().saturating_sub(3)..].iter().map(|s| s.to_string()));
            let got = dates_of(m, "s2");
            assert_eq!(got, expected.as_slice(), "sample {i} drawn {}", m.drawn);
            let present: Vec<bool> = got.iter().map(|d| !d.is_empty()).collect();
            assert_eq!(
                &mask.data[i * 3..i * 3 + 3],
                present.iter().map(|&p| u8::from(p)).collect::<Vec<_>>()
            );
            // Sentinel-1: only its own orbit state, oldest first.
            for (layer, tag) in [("s1_asc", "ASC"), ("s1_desc", "DSC")] {
                let days = dates_of(m, layer);
                assert_eq!(days.len(), 2);
                assert!(days.windows(2).all(|w| w[0].is_empty() || w[0] < w[1]));
                let used: Vec<&String> = m.items.iter().filter(|id| id.starts_with("S1A")).collect();
                for day in days.iter().filter(|d| !d.is_empty()) {
                    let compact = day.replace('-', "");
                    assert!(
                        used.iter().any(|id| id.contains(&compact) && id.ends_with(tag)),
                        "{layer} {day} {used:?}"
                    );
                }
            }
            // The valid fraction equals a direct computation and meets the minimum.
            let side = 64;
            let direct = direct_valid_fraction(slice(b, "s2", i), slice(b, "scl", i), &present, side);
            let reported = m.valid_fraction.unwrap();
            assert!((reported - direct).abs() < 1e-12, "sample {i}: {reported} vs {direct}");
            assert!(reported >= 0.5, "sample {i}: {reported}");
            // Each present step is `cogfeed warp` of that date's S2 Items.
            let s2 = slice(b, "s2", i);
            let step_bytes = s2.len() / 3;
            for (t, day) in got.iter().enumerate() {
                let step = &s2[t * step_bytes..(t + 1) * step_bytes];
                if day.is_empty() {
                    padded_steps += 1;
                    assert!(step.iter().all(|&v| v == 0));
                    continue;
                }
                let compact = day.replace('-', "");
                let ids: Vec<String> = m
                    .items
                    .iter()
                    .filter(|id| id.starts_with("S2B") && id.contains(&compact))
                    .cloned()
                    .collect();
                assert!(!ids.is_empty());
                let w = warp(
                    &WarpRequest {
                        items: items.clone(),
                        ids,
                        assets: ["B02", "B03", "B04", "B08"].iter().map(|s| s.to_string()).collect(),
                        crs: m.crs.clone(),
                        bounds: [m.bounds[0], m.bounds[1], m.bounds[2], m.bounds[3]],
                        resolution: 10.0,
                        resampling: "bilinear".into(),
                        nodata: 0.0,
                    },
                    &StoreOptions::default(),
                )
                .await
                .unwrap();
                assert!(w.data == step, "sample {i} step {t} ({day}) differs from cogfeed warp");
                checked_steps += 1;
            }
        }
    }
    assert!(checked_steps > 40, "{checked_steps} steps checked");
    assert!(padded_steps > 0, "no sample drawn early enough to pad its series");
    // Rejections happened and were counted (the demo's clouds and no-data edges).
    let metrics = d.app.metrics.render();
    assert!(
        metrics.contains("cogfeed_rejected_draws_total{reason=\"valid\"}"),
        "no valid-fraction rejection"
    );
    assert!(
        metrics.contains("cogfeed_rejected_draws_total{reason=\"split\"}"),
        "no split rejection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn train_and_val_footprints_never_overlap() {
    let tmp = tempfile::tempdir().unwrap();
    let d = start(series_config(tmp.path())).await;
    let mut footprints = Vec::new();
    for split in ["train", "val"] {
        let mut r = request(pb::Sampler::Random, 48, 16, 64);
        r.split = split.into();
        r.layers = vec!["label".into()];
        for b in collect(&d.addr, r).await {
            for m in &b.samples {
                assert_eq!(m.split, split);
                footprints.push((split, m.crs.clone(), m.bounds.clone()));
            }
        }
    }
    let wgs = cogfeed_geo::Crs::from_epsg(4326).unwrap();
    // Both zones are drawn from, and no train footprint meets a val one (dense points of
    // each carried into the other's CRS).
    assert!(footprints.iter().any(|f| f.1 == "EPSG:32632") && footprints.iter().any(|f| f.1 == "EPSG:32633"));
    let _ = wgs;
    for (sa, ca, ba) in footprints.iter().filter(|f| f.0 == "train") {
        for (_, cb, bb) in footprints.iter().filter(|f| f.0 == "val") {
            let (a, b) = (
                cogfeed_geo::Crs::parse(ca).unwrap(),
                cogfeed_geo::Crs::parse(cb).unwrap(),
            );
            let t = cogfeed_geo::Transformer::new(&a, &b);
            for i in 1..20 {
                for j in 1..20 {
                    let x = ba[0] + (ba[2] - ba[0]) * i as f64 / 20.0;
                    let y = ba[1] + (ba[3] - ba[1]) * j as f64 / 20.0;
                    let (x, y) = t.point(x, y).unwrap();
                    assert!(
                        !(x > bb[0] && x < bb[2] && y > bb[1] && y < bb[3]),
                        "a {sa} footprint {ba:?} ({ca}) overlaps a val one {bb:?} ({cb})"
                    );
                }
            }
        }
    }
    // A grid refuses a split; an unknown split is named in the error.
    let mut client = cogfeed_client::Client::connect(&d.addr).await.unwrap();
    let mut r = request(pb::Sampler::Grid, 64, 8, 0);
    r.split = "val".into();
    let e = match client.stream(r).await {
        Err(e) => e.to_string(),
        Ok(mut s) => {
            use futures::StreamExt;
            s.next().await.unwrap().unwrap_err().to_string()
        }
    };
    assert!(e.contains("grid"), "{e}");
    let mut r = request(pb::Sampler::Random, 64, 8, 8);
    r.split = "holdout".into();
    let e = match client.stream(r).await {
        Err(e) => e.to_string(),
        Ok(mut s) => {
            use futures::StreamExt;
            s.next().await.unwrap().unwrap_err().to_string()
        }
    };
    assert!(e.contains("train, val"), "{e}");
}

fn sample_keys(batches: &[Batch]) -> Vec<(String, Vec<u64>)> {
    batches
        .iter()
        .flat_map(|b| {
            b.samples.iter().enumerate().map(move |(i, m)| {
                let mut h = sha2::Sha256::new();
                use sha2::Digest;
                for (name, _) in &b.layers {
                    h.update(slice(b, name, i));
                }
                (
                    format!("{}{:?}{}", m.drawn, m.bounds, hex::encode(h.finalize())),
                    vec![b.cursor],
                )
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejection_sampling_is_deterministic_and_resumes_with_another_world_size() {
    let tmp = tempfile::tempdir().unwrap();
    let d = start(series_config(tmp.path())).await;
    let mut r = request(pb::Sampler::Random, 32, 4, 32);
    r.split = "train".into();
    let full = collect(&d.addr, r.clone()).await;
    let again = collect(&d.addr, r.clone()).await;
    let keys: Vec<String> = sample_keys(&full).into_iter().map(|k| k.0).collect();
    assert_eq!(keys, sample_keys(&again).into_iter().map(|k| k.0).collect::<Vec<_>>());
    // Stop after 2 batches (cursor 8), resume with two ranks.
    let cursor = full[1].cursor;
    let mut resumed: BTreeSet<String> = keys[..8].iter().cloned().collect();
    for rank in 0..2 {
        let mut rr = r.clone();
        rr.world_size = 2;
        rr.rank = rank;
        rr.cursor = cursor;
        for k in sample_keys(&collect(&d.addr, rr).await) {
            assert!(resumed.insert(k.0), "a sample came twice");
        }
    }
    assert_eq!(resumed, keys.iter().cloned().collect::<BTreeSet<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn points_are_each_sampled_once_centred_with_their_attributes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = start(series_config(tmp.path())).await;
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("series/points.geojson")).unwrap()).unwrap();
    let points: Vec<&serde_json::Value> = doc["features"].as_array().unwrap().iter().collect();
    let mut r = request(pb::Sampler::Points, 32, 8, 0);
    r.layers = vec!["label".into()];
    let batches = collect(&d.addr, r.clone()).await;
    let wgs = cogfeed_geo::Crs::from_epsg(4326).unwrap();
    let mut seen = Vec::new();
    let mut centred = 0;
    for b in &batches {
        let names: Vec<&str> = b.targets.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["biomass", "crop", "irrigated"],
            "numeric attributes, sorted; strings left out"
        );
        for (i, m) in b.samples.iter().enumerate() {
            let p = points.iter().find(|p| p["id"] == m.point_id.as_str()).unwrap();
            seen.push(m.point_id.clone());
            // Targets: the point's attributes, in the sample metadata and the batch tensors.
            let crop = p["properties"]["crop"].as_f64().unwrap();
            assert_eq!(m.targets["crop"], crop);
            assert_eq!(m.targets["biomass"], p["properties"]["biomass"].as_f64().unwrap());
            let t = &b.targets.iter().find(|(n, _)| n == "crop").unwrap().1;
            assert_eq!(f64::from_le_bytes(t.data[i * 8..i * 8 + 8].try_into().unwrap()), crop);
            // The window is centred on the point: it lies in the footprint's centre pixel.
            let c = p["geometry"]["coordinates"].as_array().unwrap();
            let crs = cogfeed_geo::Crs::parse(&m.crs).unwrap();
            let (x, y) = cogfeed_geo::Transformer::new(&wgs, &crs)
                .point(c[0].as_f64().unwrap(), c[1].as_f64().unwrap())
                .unwrap();
            let (cx, cy) = ((m.bounds[0] + m.bounds[2]) / 2.0, (m.bounds[1] + m.bounds[3]) / 2.0);
            if x >= cx && x < cx + 10.0 && y <= cy && y > cy - 10.0 {
                centred += 1;
            } else {
                // No grid holds its whole window: it starts at the grid's edge, the point inside.
                assert!(
                    x > m.bounds[0] && x < m.bounds[2] && y > m.bounds[1] && y < m.bounds[3],
                    "point {} outside its window",
                    m.point_id
                );
            }
        }
    }
    // Every point inside the tiles once (the two outside are left out); the tail of fewer
    // than a batch is dropped.
    seen.sort();
    let before = seen.len();
    seen.dedup();
    assert_eq!(before, seen.len(), "a point came twice");
    // Which points lie in a tile, computed here from the tiles' UTM extents.
    let tiles = [(32632, 727_500.0, 5_157_000.0), (32633, 269_000.0, 5_157_500.0)];
    let inside = points
        .iter()
        .filter(|p| {
            let c = p["geometry"]["coordinates"].as_array().unwrap();
            tiles.iter().any(|&(epsg, x0, y0)| {
                let crs = cogfeed_geo::Crs::from_epsg(epsg).unwrap();
                let (x, y) = cogfeed_geo::Transformer::new(&wgs, &crs)
                    .point(c[0].as_f64().unwrap(), c[1].as_f64().unwrap())
                    .unwrap();
                x >= x0 && x < x0 + 2560.0 && y <= y0 && y > y0 - 2560.0
            })
        })
        .count();
    assert!(inside >= 40, "{inside} points inside the tiles");
    assert_eq!(seen.len(), inside / 8 * 8, "{inside} points inside, whole batches of 8");
    assert!(!seen.iter().any(|id| id == "P058" || id == "P059"));
    assert!(
        centred * 10 >= seen.len() * 9,
        "{centred} of {} windows centred on their point",
        seen.len()
    );
    // Another epoch visits them in another order; a split keeps only its points.
    let mut r1 = r.clone();
    r1.epoch = 1;
    let other: Vec<String> = collect(&d.addr, r1)
        .await
        .iter()
        .flat_map(|b| b.samples.iter().map(|m| m.point_id.clone()))
        .collect();
    let first: Vec<String> = batches
        .iter()
        .flat_map(|b| b.samples.iter().map(|m| m.point_id.clone()))
        .collect();
    assert_ne!(first, other);
    // Resume after 2 batches with two ranks: the rest of the epoch, each point once.
    let mut resumed: Vec<String> = first[..16].to_vec();
    for rank in 0..2 {
        let mut rr = r.clone();
        rr.cursor = batches[1].cursor;
        rr.world_size = 2;
        rr.rank = rank;
        rr.batch_size = 4;
        for b in collect(&d.addr, rr).await {
            resumed.extend(b.samples.iter().map(|m| m.point_id.clone()));
        }
    }
    let mut want = first.clone();
    want.sort();
    resumed.sort();
    assert_eq!(resumed, want, "resumed with another world size");
    let mut rv = r.clone();
    rv.split = "val".into();
    rv.batch_size = 1;
    let val = collect(&d.addr, rv).await;
    assert!(!val.is_empty() && val.len() < inside);
    assert!(val.iter().flat_map(|b| &b.samples).all(|m| m.split == "val"));
}

/// Class shares of the label pixels (255 = unlabelled left out) of every sample.
fn label_shares(batches: &[Batch]) -> std::collections::BTreeMap<i64, f64> {
    let mut counts = std::collections::BTreeMap::<i64, u64>::new();
    for b in batches {
        for &v in &b.layer("label").unwrap().data {
            if v != 255 {
                *counts.entry(i64::from(v)).or_default() += 1;
            }
        }
    }
    let total: u64 = counts.values().sum();
    counts.into_iter().map(|(k, n)| (k, n as f64 / total as f64)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balanced_draws_meet_the_target_shares_and_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let config = series_config(tmp.path());
    let d = start(config.clone()).await;
    let mut client = cogfeed_client::Client::connect(&d.addr).await.unwrap();
    let info = client.describe("demo-series").await.unwrap();
    assert_eq!(info.balance_layer, "label");
    let river = info.balance.iter().find(|s| s.class_value == 6).unwrap();
    assert!(river.natural < 0.15, "the river is rare: {river:?}");
    assert!((river.target - 0.2).abs() < 1e-9);
    assert!((river.expected - 0.2).abs() < 0.02, "{river:?}");
    // One epoch of 32 px windows (the cell size) on the label layer.
    let mut r = request(pb::Sampler::Balanced, 32, 16, 320);
    r.layers = vec!["label".into()];
    let balanced = collect(&d.addr, r.clone()).await;
    let shares = label_shares(&balanced);
    // The daemon counts what it delivered: the achieved proportions, for operators.
    let delivered: u64 = balanced
        .iter()
        .map(|b| b.layer("label").unwrap().data.iter().filter(|&&v| v != 255).count() as u64)
        .sum();
    for s in &info.balance {
        let counted = d
            .app
            .metrics
            .balanced_class_pixels
            .with_label_values(&["demo-series", s.class_value.to_string().as_str()])
            .get();
        let want = shares.get(&s.class_value).copied().unwrap_or(0.0) * delivered as f64;
        assert!(
            (counted as f64 - want).abs() < 0.5,
            "class {}: {counted} counted, {want} delivered",
            s.class_value
        );
    }
    let mut random = r.clone();
    random.sampler = pb::Sampler::Random as i32;
    let natural = label_shares(&collect(&d.addr, random).await);
    eprintln!(
        "class shares: balanced {shares:?}, random {natural:?}, daemon {:?}",
        info.balance
    );
    for s in &info.balance {
        let got = shares.get(&s.class_value).copied().unwrap_or(0.0);
        assert!(
            (got - s.expected).abs() < 0.05,
            "class {}: {got:.3} drawn, {:.3} expected",
            s.class_value,
            s.expected
        );
    }
    assert!(natural.get(&6).copied().unwrap_or(0.0) < 0.15, "{natural:?}");
    // Deterministic, and a resume with another world size gives the rest exactly once.
    let small = {
        let mut s = r.clone();
        s.samples_per_epoch = 32;
        s.batch_size = 4;
        s
    };
    let full = collect(&d.addr, small.clone()).await;
    let keys: Vec<String> = sample_keys(&full).into_iter().map(|k| k.0).collect();
    let again: Vec<String> = sample_keys(&collect(&d.addr, small.clone()).await)
        .into_iter()
        .map(|k| k.0)
        .collect();
    assert_eq!(keys, again);
    let cursor = full[1].cursor;
    let mut resumed: Vec<String> = keys[..8].to_vec();
    for rank in 0..2 {
        let mut rr = small.clone();
        rr.world_size = 2;
        rr.rank = rank;
        rr.cursor = cursor;
        resumed.extend(sample_keys(&collect(&d.addr, rr).await).into_iter().map(|k| k.0));
    }
    resumed.sort();
    let mut want = keys.clone();
    want.sort();
    assert_eq!(resumed, want);
    drop(d);

    // The histograms were kept on disk for this version: a restart reads them back (a
    // doctored copy proves it is the file that is used, not a recount).
    let files: Vec<_> = std::fs::read_dir(tmp.path().join("index"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".classes.json"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let mut index: serde_json::Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    let classes: Vec<i64> = serde_json::from_value(index["classes"].clone()).unwrap();
    let k = classes.len();
    let six = classes.iter().position(|&c| c == 6).unwrap();
    let counts = index["counts"].as_array_mut().unwrap();
    for (i, v) in counts.iter_mut().enumerate() {
        // Every cell keeps only its river count.
        if i % k != six {
            *v = serde_json::json!(0);
        }
    }
    std::fs::write(&files[0], serde_json::to_vec(&index).unwrap()).unwrap();
    let d = start(config).await;
    let mut client = cogfeed_client::Client::connect(&d.addr).await.unwrap();
    let info = client.describe("demo-series").await.unwrap();
    let river = info.balance.iter().find(|s| s.class_value == 6).unwrap();
    assert!(
        (river.natural - 1.0).abs() < 1e-9,
        "read back from the doctored index: {river:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_reads_the_plan_back_until_the_document_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let config = series_config(tmp.path());
    let describe = |config: Config| async move {
        let d = start(config).await;
        let mut client = cogfeed_client::Client::connect(&d.addr).await.unwrap();
        client.describe("demo-series").await.unwrap()
    };
    let first = describe(config.clone()).await;
    let plans: Vec<_> = std::fs::read_dir(tmp.path().join("index"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".plan.json"))
        .collect();
    assert_eq!(plans.len(), 1, "{plans:?}");
    // A restart gives the same dataset from the plan alone.
    let again = describe(config.clone()).await;
    assert_eq!(again, first);
    // Doctor the kept plan: the restart shows it, so it was read back, not replanned.
    let mut plan: serde_json::Value = serde_json::from_slice(&std::fs::read(&plans[0]).unwrap()).unwrap();
    let width = plan["grids"][0]["width"].as_u64().unwrap();
    plan["grids"][0]["width"] = serde_json::json!(width - 7);
    std::fs::write(&plans[0], serde_json::to_vec(&plan).unwrap()).unwrap();
    let doctored = describe(config.clone()).await;
    assert_eq!(doctored.scenes[0].levels[0].width, width - 7);
    assert_eq!(doctored.version, first.version);
    // A changed points file (it is part of the version) is planned again.
    let points = tmp.path().join("series").join("points.geojson");
    let kept = std::fs::read_to_string(&points).unwrap();
    std::fs::write(&points, kept.replacen("\"P000\"", "\"P000x\"", 1)).unwrap();
    let moved = describe(config.clone()).await;
    assert_eq!(moved.scenes[0].levels[0].width, width);
    assert_ne!(moved.version, first.version);
    std::fs::write(&points, &kept).unwrap();
    // A changed document (another ETag) is planned again.
    let doc = tmp.path().join("series").join("items.json");
    let text = std::fs::read_to_string(&doc).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&doc, format!("{text}\n")).unwrap();
    let replanned = describe(config).await;
    assert_eq!(replanned.scenes[0].levels[0].width, width);
    assert_eq!(
        replanned.version, first.version,
        "the same Items and assets: the same version"
    );
}
