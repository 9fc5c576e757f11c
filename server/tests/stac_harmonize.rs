//! Sentinel-2 harmonisation (`harmonize`) through the daemon, on the time-series demo with
//! its Sentinel-2 Items given processing baselines as Earth Search and Planetary Computer
//! publish them (`s2:processing_baseline` "02.14" ... "05.10", `processing:baseline`,
//! `earthsearch:boa_offset_applied`): against the same dataset without it, every step
//! whose Items carry BOA_ADD_OFFSET is 1000 lower (clamped), the others are unchanged,
//! nodata stays nodata, `s2-l2a-new` adds instead, `SampleInfo.harmonized_offset` says
//! what each step got, a flag contradicting its baseline is counted once per Item, and a
//! date mosaicking Items of both baselines shifts each Item's pixels by its own.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

use std::collections::HashMap;
use std::path::Path;

use cogfeed_client::{Batch, pb};
use cogfeed_server::app::App;
use cogfeed_server::config::Config;
use futures::StreamExt;
use proptest as _;
use sha2 as _;

/// A Sentinel-2 date of the demo, the properties set on its Items (both tiles), and what
/// `s2-l2a` / `s2-l2a-new` add to them.
type Baseline = (&'static str, &'static [(&'static str, &'static str)], i32, i32);

const BASELINES: [Baseline; 5] = [
    // Old baseline, a provider flag that contradicts it: the baseline wins.
    (
        "2024-04-18",
        &[
            ("s2:processing_baseline", "03.01"),
            ("earthsearch:boa_offset_applied", "true"),
        ],
        0,
        1000,
    ),
    // Old baseline under the processing extension's key.
    ("2024-05-08", &[("processing:baseline", "02.14")], 0, 1000),
    // New baseline: the pixels carry the offset.
    ("2024-05-28", &[("s2:processing_baseline", "05.10")], -1000, 0),
    // New baseline, the provider removed the offset already.
    (
        "2024-06-17",
        &[
            ("s2:processing_baseline", "05.10"),
            ("earthsearch:boa_offset_applied", "true"),
        ],
        0,
        1000,
    ),
    // No baseline: the datetime (after 2022-01-25) says new.
    ("2024-07-07", &[], -1000, 0),
];

/// The Item of tile 33TUM on 2024-05-28, given baseline 03.01 by `set_baselines(_, true)`:
/// its date then mosaics Items of both baselines where the tiles overlap.
const MIXED_OLD: &str = "S2B_33TUM_20240528_SERIES";

/// Sets the baselines of `BASELINES` on the demo's Sentinel-2 Items (with `mixed`,
/// `MIXED_OLD` gets 03.01).
fn set_baselines(items: &Path, mixed: bool) {
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(items).unwrap()).unwrap();
    let mut set = 0;
    for f in doc["features"].as_array_mut().unwrap() {
        if f["collection"] != "sentinel-2-l2a-series" {
            continue;
        }
        let day = f["properties"]["datetime"].as_str().unwrap()[..10].to_string();
        let (_, props, _, _) = BASELINES.iter().find(|b| b.0 == day).unwrap();
        let p = f["properties"].as_object_mut().unwrap();
        for (k, v) in props.iter() {
            let value = if *v == "true" {
                serde_json::Value::Bool(true)
            } else {
                (*v).into()
            };
            p.insert((*k).to_string(), value);
        }
        if mixed && f["id"] == MIXED_OLD {
            f["properties"]["s2:processing_baseline"] = "03.01".into();
        }
        set += 1;
    }
    assert_eq!(set, 10, "two tiles of five dates");
    std::fs::write(items, serde_json::to_vec(&doc).unwrap()).unwrap();
}

fn config(dir: &Path) -> Config {
    let items = cogfeed_server::demo::series::write_series_demo(&dir.join("series")).unwrap();
    set_baselines(&items, false);
    let mut c = Config::demo(dir);
    let plain = Config::demo_series(&items);
    let harmonized = |name: &str, how: &str| {
        let mut d = plain.clone();
        d.name = name.into();
        d.layers[0].harmonize = Some(how.into());
        d
    };
    c.datasets = vec![
        harmonized("old-scale", "s2-l2a"),
        harmonized("new-scale", "s2-l2a-new"),
        plain,
    ];
    c.cache.index_dir = Some(dir.join("index"));
    c
}

async fn start(config: Config) -> (String, App, tokio::sync::oneshot::Sender<()>) {
    let app = App::build(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = app.clone();
    tokio::spawn(async move {
        server
            .serve(listener, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    (addr, app, tx)
}

async fn collect(addr: &str, dataset: &str) -> Vec<Batch> {
    collect_n(addr, dataset, 24).await
}

async fn collect_n(addr: &str, dataset: &str, n: u64) -> Vec<Batch> {
    let r = pb::StreamBatchesRequest {
        dataset: dataset.into(),
        job: "harmonize-test".into(),
        sampler: pb::Sampler::Random as i32,
        patch_size: 64,
        batch_size: 8,
        seed: 5,
        world_size: 1,
        samples_per_epoch: n,
        layers: vec!["s2".into()],
        ..Default::default()
    };
    let mut client = cogfeed_client::Client::connect(addr).await.unwrap();
    let stream = client.stream(r).await.unwrap();
    stream.map(|b| b.unwrap()).collect().await
}

/// Every sample of `batches` by (drawn Item, bounds): its info and its s2 values.
fn by_place(batches: &[Batch]) -> HashMap<String, (pb::SampleInfo, Vec<u16>)> {
    let mut out = HashMap::new();
    for b in batches {
        let t = b.layer("s2").unwrap();
        let per = t.data.len() / b.samples.len();
        for (i, m) in b.samples.iter().enumerate() {
            let values = t.data[i * per..(i + 1) * per]
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            out.insert(format!("{} {:?}", m.drawn, m.bounds), (m.clone(), values));
        }
    }
    out
}

fn offsets<'a>(m: &'a pb::SampleInfo, layer: &str) -> &'a [i32] {
    &m.harmonized_offset.iter().find(|o| o.layer == layer).unwrap().offsets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_date_lands_on_one_scale_by_its_items_baseline() {
    let tmp = tempfile::tempdir().unwrap();
    let (addr, app, _stop) = start(config(tmp.path())).await;
    let plain = by_place(&collect(&addr, "demo-series").await);
    assert_eq!(plain.len(), 24);
    let (mut shifted, mut nodata, mut kept) = (0usize, 0usize, 0usize);
    let mut seen = std::collections::BTreeSet::new();
    for (dataset, old_scale) in [("old-scale", true), ("new-scale", false)] {
        let got = by_place(&collect(&addr, dataset).await);
        assert_eq!(got.len(), plain.len(), "{dataset}: the same draws");
        for (place, (m, values)) in &got {
            let (p, reference) = &plain[place];
            assert!(p.harmonized_offset.is_empty(), "no harmonize, no offsets");
            let days = &m.datetimes.iter().find(|d| d.layer == "s2").unwrap().dates;
            assert_eq!(days, &p.datetimes.iter().find(|d| d.layer == "s2").unwrap().dates);
            let steps = offsets(m, "s2");
            assert_eq!(steps.len(), 3);
            let step_len = values.len() / 3;
            for (t, day) in days.iter().enumerate() {
                let expected_shift = match BASELINES.iter().find(|b| b.0 == day) {
                    Some((_, _, to_old, to_new)) => {
                        if old_scale {
                            *to_old
                        } else {
                            *to_new
                        }
                    }
                    None => 0, // a missing step
                };
                assert_eq!(steps[t], expected_shift, "{dataset} {place} step {t} ({day})");
                seen.insert((dataset, expected_shift));
                let range = t * step_len..(t + 1) * step_len;
                for (&h, &u) in values[range.clone()].iter().zip(&reference[range]) {
                    if u == 0 {
                        // Nodata stays nodata.
                        assert_eq!(h, 0, "{dataset} {place} step {t}");
                        nodata += 1;
                    } else if expected_shift < 0 {
                        // max(v, 1000) - 1000; an interpolated valid value that lands on
                        // nodata (0) moves one step away, as every bilinear integer does.
                        assert_eq!(h, u.max(1001) - 1000, "{dataset} {place} step {t} ({day})");
                        shifted += 1;
                    } else if expected_shift > 0 {
                        // u = 1 may be a value under 0.5 moved off nodata.
                        let ok = h == u + 1000 || (u == 1 && h == 1000);
                        assert!(ok, "{dataset} {place} step {t} ({day}): {u} -> {h}");
                        shifted += 1;
                    } else {
                        assert_eq!(h, u, "{dataset} {place} step {t} ({day})");
                        kept += 1;
                    }
                }
            }
        }
    }
    // Every kind of step came up, and shifted, nodata and untouched pixels were checked
    // (the demo's reflectances are all above 1000: the clamp is a unit test of
    // `harmonize`).
    for k in [
        ("old-scale", -1000),
        ("old-scale", 0),
        ("new-scale", 1000),
        ("new-scale", 0),
    ] {
        assert!(seen.contains(&k), "{k:?} never drawn: {seen:?}");
    }
    assert!(shifted > 0 && nodata > 0 && kept > 0, "{shifted} {nodata} {kept}");
    // The two Items of 2024-04-18 (flag true on baseline 03.01), once each per dataset.
    let text = app.metrics.render();
    for dataset in ["old-scale", "new-scale"] {
        let line = format!("cogfeed_harmonize_disagreements_total{{dataset=\"{dataset}\"}} 2");
        assert!(text.contains(&line), "{line} in\n{}", metric_lines(&text));
    }
    assert!(!text.contains("cogfeed_harmonize_disagreements_total{dataset=\"demo-series\"}"));
}

fn metric_lines(text: &str) -> String {
    text.lines()
        .filter(|l| l.contains("harmonize"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_harmonize_is_refused_at_start_up() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config(tmp.path());
    c.datasets[0].layers[0].harmonize = Some("landsat".into());
    let e = cogfeed_server::dataset::map::rules::check_config(&c)
        .unwrap_err()
        .to_string();
    assert!(e.contains("harmonize \"landsat\"") && e.contains("s2-l2a-new"), "{e}");
    assert!(App::build(c).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mosaic_of_both_baselines_shifts_each_item_by_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let items = cogfeed_server::demo::series::write_series_demo(&tmp.path().join("series")).unwrap();
    set_baselines(&items, true);
    let mut c = Config::demo(tmp.path());
    let mut d = Config::demo_series(&items);
    d.name = "old-scale".into();
    d.layers[0].harmonize = Some("s2-l2a".into());
    c.datasets = vec![d];
    let (addr, _app, _stop) = start(c).await;
    let items = items.to_string_lossy().into_owned();
    let (mut mixed, mut shifted, mut kept) = (0usize, 0usize, 0usize);
    for (m, values) in by_place(&collect_n(&addr, "old-scale", 48).await).into_values() {
        let days = &m.datetimes.iter().find(|d| d.layer == "s2").unwrap().dates;
        let Some(t) = days.iter().position(|d| d == "2024-05-28") else {
            continue;
        };
        // The step's Items in priority order: one of baseline 05.10, one of 03.01.
        let ids: Vec<&String> = m
            .items
            .iter()
            .filter(|id| id.starts_with("S2B") && id.contains("20240528"))
            .collect();
        if ids.len() < 2 {
            continue;
        }
        mixed += 1;
        // Each Item alone, unharmonised (`cogfeed warp`), then the mosaic by hand: the
        // first Item with data wins the pixel, shifted by its own baseline.
        let mut alone = Vec::new();
        for id in &ids {
            let w = cogfeed_server::dataset::map::mosaic::command::warp(
                &cogfeed_server::dataset::map::mosaic::command::WarpRequest {
                    items: items.clone(),
                    ids: vec![(*id).clone()],
                    assets: ["B02", "B03", "B04", "B08"].iter().map(|s| s.to_string()).collect(),
                    crs: m.crs.clone(),
                    bounds: [m.bounds[0], m.bounds[1], m.bounds[2], m.bounds[3]],
                    resolution: 10.0,
                    resampling: "bilinear".into(),
                    nodata: 0.0,
                },
                &cogfeed_server::storage::StoreOptions::default(),
            )
            .await
            .unwrap();
            let v: Vec<u16> = w
                .data
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            alone.push((id.as_str() != MIXED_OLD, v));
        }
        let step_len = values.len() / 3;
        let step = &values[t * step_len..(t + 1) * step_len];
        // A pixel with data in some band of an Item is that Item's (band-major planes).
        let plane = step_len / 4;
        for p in 0..plane {
            let winner = alone.iter().find(|(_, v)| (0..4).any(|b| v[b * plane + p] != 0));
            for b in 0..4 {
                let i = b * plane + p;
                let expected = match winner {
                    None => 0,
                    Some((true, v)) => {
                        shifted += 1;
                        if v[i] == 0 { 0 } else { v[i].max(1001) - 1000 }
                    }
                    Some((false, v)) => {
                        kept += 1;
                        v[i]
                    }
                };
                assert_eq!(step[i], expected, "{} step {t} pixel {p} band {b}", m.drawn);
            }
        }
        // The step reports its first Item's shift in priority order.
        let first_new = ids[0].as_str() != MIXED_OLD;
        assert_eq!(offsets(&m, "s2")[t], if first_new { -1000 } else { 0 });
    }
    assert!(
        mixed > 0 && shifted > 0 && kept > 0,
        "{mixed} mixed steps, {shifted} shifted, {kept} kept"
    );
}
