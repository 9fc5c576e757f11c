//! Mixture streams: one stream drawing from several map-space datasets in proportion to
//! weights, each part's samples in its own order, resumable by one cursor.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use cogfeed_client::{Batch, pb};
use cogfeed_server::config::Config;
use common::inproc::{collect, start};
use serde_json as _;

fn config(dir: &Path) -> Config {
    let stac = cogfeed_server::demo::stac::write_stac_demo(&dir.join("stac")).unwrap();
    let series = cogfeed_server::demo::series::write_series_demo(&dir.join("series")).unwrap();
    let mut c = Config::demo_default(dir);
    c.datasets.retain(|d| d.name != "demo");
    c.cache.index_dir = Some(dir.join("index"));
    assert_eq!(stac, dir.join("stac").join("items.json"));
    assert_eq!(series, dir.join("series").join("items.json"));
    c
}

fn mixture(parts: &[(&str, f64)], n: u64) -> pb::StreamBatchesRequest {
    pb::StreamBatchesRequest {
        job: "mixture-test".into(),
        sampler: pb::Sampler::Random as i32,
        patch_size: 32,
        batch_size: 4,
        seed: 3,
        world_size: 1,
        samples_per_epoch: n,
        layers: vec!["label".into()],
        mixture: parts
            .iter()
            .map(|(d, w)| pb::MixturePart {
                dataset: d.to_string(),
                weight: *w,
            })
            .collect(),
        ..Default::default()
    }
}

/// (dataset, drawn item, bounds, label bytes) of every sample, in stream order.
fn samples(batches: &[Batch]) -> Vec<(String, String, String, Vec<u8>)> {
    batches
        .iter()
        .flat_map(|b| {
            let t = b.layer("label").unwrap();
            let per = t.data.len() / b.samples.len();
            b.samples.iter().enumerate().map(move |(i, m)| {
                (
                    m.dataset.clone(),
                    m.drawn.clone(),
                    format!("{:?}", m.bounds),
                    t.data[i * per..(i + 1) * per].to_vec(),
                )
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixture_deals_by_weight_keeps_each_parts_order_and_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = start(config(tmp.path())).await;
    let r = mixture(&[("demo-stac", 3.0), ("demo-series", 1.0)], 48);
    let mixed = samples(&collect(&d.addr, r.clone()).await);
    assert_eq!(mixed.len(), 48);
    // The parts report their stage timings like any stream.
    let warps = d
        .app
        .metrics
        .stage_seconds
        .with_label_values(&["warp"])
        .get_sample_count();
    assert!(warps >= 48, "{warps} warp timings");
    // 3 : 1 exactly, every 4 samples.
    for chunk in mixed.chunks(4) {
        let stac = chunk.iter().filter(|s| s.0 == "demo-stac").count();
        assert_eq!(
            (stac, chunk.len() - stac),
            (3, 1),
            "{:?}",
            chunk.iter().map(|s| &s.0).collect::<Vec<_>>()
        );
    }
    // Each part's samples are that dataset's own stream, in order.
    for (name, count) in [("demo-stac", 36u64), ("demo-series", 12)] {
        let mut alone = r.clone();
        alone.mixture.clear();
        alone.dataset = name.into();
        alone.samples_per_epoch = count;
        let own: Vec<_> = samples(&collect(&d.addr, alone).await)
            .into_iter()
            .map(|s| (s.1, s.2, s.3))
            .collect();
        let part: Vec<_> = mixed
            .iter()
            .filter(|s| s.0 == name)
            .map(|s| (s.1.clone(), s.2.clone(), s.3.clone()))
            .collect();
        let brief = |v: &[(String, String, Vec<u8>)]| v.iter().map(|s| format!("{} {}", s.0, s.1)).collect::<Vec<_>>();
        assert_eq!(brief(&part), brief(&own), "{name}");
        assert!(part == own, "{name}: same windows, different pixels");
    }
    // Deterministic, and a resume with another world size gives the rest exactly once.
    assert_eq!(samples(&collect(&d.addr, r.clone()).await), mixed);
    let mut seen: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    let key = |s: &(String, String, String, Vec<u8>)| (s.0.clone(), s.1.clone(), s.2.clone());
    for s in &mixed[..8] {
        *seen.entry(key(s)).or_default() += 1;
    }
    for rank in 0..2 {
        let mut rr = r.clone();
        rr.cursor = 8;
        rr.world_size = 2;
        rr.rank = rank;
        for s in samples(&collect(&d.addr, rr).await) {
            *seen.entry(key(&s)).or_default() += 1;
        }
    }
    let mut want: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for s in &mixed {
        *want.entry(key(s)).or_default() += 1;
    }
    assert_eq!(seen, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_mixtures_are_refused_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let d = start(config(tmp.path())).await;
    let mut client = cogfeed_client::Client::connect(&d.addr).await.unwrap();
    let refused = |r: pb::StreamBatchesRequest| {
        let mut c = client.clone();
        async move {
            match c.stream(r).await {
                Ok(_) => panic!("accepted"),
                Err(e) => e.to_string(),
            }
        }
    };
    let mut both = mixture(&[("demo-stac", 1.0)], 8);
    both.dataset = "demo-stac".into();
    assert!(refused(both).await.contains("either dataset or mixture"));
    let mut all_layers = mixture(&[("demo-stac", 1.0), ("demo-series", 1.0)], 8);
    all_layers.layers.clear();
    assert!(refused(all_layers).await.contains("different layers"));
    assert!(refused(mixture(&[("demo-stac", 0.0)], 8)).await.contains("positive"));
    assert!(
        refused(mixture(&[("demo-stac", 1.0), ("demo-stac", 2.0)], 8))
            .await
            .contains("twice")
    );
    assert!(refused(mixture(&[("nope", 1.0)], 8)).await.contains("nope"));
    let mut grid = mixture(&[("demo-stac", 1.0)], 8);
    grid.sampler = pb::Sampler::Grid as i32;
    assert!(refused(grid).await.contains("random, aligned or balanced"));
    // Counting agrees with what a stream sends.
    let r = mixture(&[("demo-stac", 1.0), ("demo-series", 1.0)], 20);
    let count = client.count(r.clone()).await.unwrap();
    assert_eq!(count.batches, collect(&d.addr, r).await.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_weights_keep_their_ratio() {
    let tmp = tempfile::tempdir().unwrap();
    let d = start(config(tmp.path())).await;
    // 1.5e308 + 0.5e308 overflows to infinity: the ratio must survive it.
    let r = mixture(&[("demo-stac", 1.5e308), ("demo-series", 0.5e308)], 16);
    let mixed = samples(&collect(&d.addr, r).await);
    let stac = mixed.iter().filter(|s| s.0 == "demo-stac").count();
    assert_eq!((stac, mixed.len() - stac), (12, 4), "3 : 1");
}
