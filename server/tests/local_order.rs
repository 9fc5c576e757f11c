//! Locality-ordered epochs end to end (`order = "local"`): the daemon in-process, the real
//! Rust client. The same samples as the sampler's own order (grid, aligned), served block
//! by block; ranks, cursor and resume unchanged; the dataset's default and the request's
//! override; clear refusals; map-space time layers and mixtures.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::collections::HashSet;

use cogfeed_client::{Batch, Client, pb};
use cogfeed_server::config::{Config, SamplingConfig};
use common::inproc::{Daemon, collect, demo_dir, start};
use serde_json as _;

async fn demo() -> Daemon {
    start(Config::demo(demo_dir())).await
}

fn request(sampler: pb::Sampler, order: &str, open_blocks: u32) -> pb::StreamBatchesRequest {
    pb::StreamBatchesRequest {
        dataset: "demo".into(),
        job: "local-order".into(),
        sampler: sampler as i32,
        patch_size: 64,
        stride: 64,
        batch_size: 16,
        seed: 7,
        world_size: 1,
        order: order.into(),
        open_blocks,
        ..Default::default()
    }
}

type Key = (u32, u64, u64);

fn windows(batches: &[Batch]) -> Vec<Key> {
    batches
        .iter()
        .flat_map(|b| b.windows.iter().map(|w| (w.scene, w.col, w.row)))
        .collect()
}

/// Distinct 256² tiles (the demo's blocks) the windows of each batch start in.
fn blocks_per_batch(batches: &[Batch]) -> Vec<usize> {
    batches
        .iter()
        .map(|b| {
            b.windows
                .iter()
                .map(|w| (w.scene, w.col / 256, w.row / 256))
                .collect::<HashSet<_>>()
                .len()
        })
        .collect()
}

fn mean(v: &[usize]) -> f64 {
    v.iter().sum::<usize>() as f64 / v.len().max(1) as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grid_and_aligned_serve_the_same_samples_block_by_block() {
    let d = demo().await;
    for (sampler, patch) in [(pb::Sampler::Grid, 64), (pb::Sampler::Aligned, 256)] {
        let mut plain = request(sampler, "", 0);
        plain.patch_size = patch;
        plain.stride = patch;
        let mut local = request(sampler, "local", 2);
        local.patch_size = patch;
        local.stride = patch;
        let (a, b) = (collect(&d.addr, plain).await, collect(&d.addr, local.clone()).await);
        let (mut wa, mut wb) = (windows(&a), windows(&b));
        assert_ne!(wa, wb, "{sampler:?}: the local order is another order");
        wa.sort_unstable();
        wb.sort_unstable();
        assert_eq!(wa, wb, "{sampler:?}: the same multiset of windows");
        assert_eq!(windows(&b), windows(&collect(&d.addr, local).await), "deterministic");
        if sampler == pb::Sampler::Grid {
            // 16 windows of 64² per 256² tile; 2 lanes of 8 rounds a batch: at most 2
            // groups per lane (the grid's own order is row-major: 4 tiles a batch too).
            let local = blocks_per_batch(&b);
            assert!(local.iter().all(|&n| n <= 4), "{local:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_and_a_resume_with_another_world_size_keep_the_local_epoch() {
    let d = demo().await;
    let whole = collect(&d.addr, request(pb::Sampler::Grid, "local", 3)).await;
    assert_eq!(whole.len(), 16 * 4 * 16 / 16);
    let resumed = {
        let mut r = request(pb::Sampler::Grid, "local", 3);
        r.cursor = whole[9].cursor;
        collect(&d.addr, r).await
    };
    assert_eq!(windows(&resumed), windows(&whole[10..]), "a resume is the suffix");
    let mut seen: Vec<Key> = Vec::new();
    let mut cursor = 0;
    for rank in 0..2 {
        let mut r = request(pb::Sampler::Grid, "local", 3);
        r.world_size = 2;
        r.rank = rank;
        r.max_batches = 5;
        let got = collect(&d.addr, r).await;
        cursor = got.last().unwrap().cursor;
        seen.extend(windows(&got));
    }
    assert_eq!(cursor, 160);
    let mut rest = request(pb::Sampler::Grid, "local", 3);
    rest.cursor = cursor;
    seen.extend(windows(&collect(&d.addr, rest).await));
    let n = seen.len();
    // The two ranks' first 10 batches are the whole epoch's first 10.
    let first: HashSet<Key> = windows(&whole[..10]).into_iter().collect();
    assert!(seen[..160].iter().all(|w| first.contains(w)));
    seen.sort_unstable();
    seen.dedup();
    assert_eq!((seen.len(), n), (1024, 1024), "nothing repeated or lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_in_a_local_order_draws_as_many_samples_from_fewer_tiles() {
    let d = demo().await;
    let mut plain = request(pb::Sampler::Random, "", 0);
    plain.samples_per_epoch = 320;
    let mut local = request(pb::Sampler::Random, "local", 2);
    local.samples_per_epoch = 320;
    let a = collect(&d.addr, plain).await;
    let b = collect(&d.addr, local.clone()).await;
    assert_eq!((a.len(), b.len()), (20, 20));
    assert_eq!(windows(&b), windows(&collect(&d.addr, local.clone()).await));
    assert!(
        windows(&b)
            .iter()
            .all(|&(s, c, r)| s < 4 && c + 64 <= 1024 && r + 64 <= 1024)
    );
    let (spread, near) = (mean(&blocks_per_batch(&a)), mean(&blocks_per_batch(&b)));
    // 320 draws over 64 tiles: ~5 a group, so each of the 2 lanes crosses ~2.6 groups in
    // its 8 samples of a batch; the plan's own draws land in ~14 tiles a batch.
    assert!(near < 6.0 && spread > 2.0 * near, "{spread} vs {near}");
    let mut other_epoch = local;
    other_epoch.epoch = 1;
    assert_ne!(windows(&b), windows(&collect(&d.addr, other_epoch).await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dataset_default_applies_and_a_request_overrides_it() {
    let plain = demo().await;
    let mut config = Config::demo(demo_dir());
    config.datasets[0].sampling = Some(SamplingConfig {
        order: Some("local".into()),
        open_blocks: Some(2),
        ..Default::default()
    });
    let local = start(config).await;
    let by_default = collect(&local.addr, request(pb::Sampler::Grid, "", 0)).await;
    let asked = collect(&plain.addr, request(pb::Sampler::Grid, "local", 2)).await;
    assert_eq!(
        windows(&by_default),
        windows(&asked),
        "the dataset's order is the request's"
    );
    assert_ne!(
        by_default[0].dataset_version, asked[0].dataset_version,
        "the configured order is part of the dataset's version"
    );
    let random = collect(&local.addr, request(pb::Sampler::Grid, "random", 0)).await;
    let own = collect(&plain.addr, request(pb::Sampler::Grid, "", 0)).await;
    assert_eq!(windows(&random), windows(&own), "order = random is the plan's own");
    let wider = collect(&local.addr, request(pb::Sampler::Grid, "", 4)).await;
    let asked = collect(&plain.addr, request(pb::Sampler::Grid, "local", 4)).await;
    assert_eq!(
        windows(&wider),
        windows(&asked),
        "the request's dial over the dataset's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_orders_get_clear_statuses() {
    let d = demo().await;
    let mut client = Client::connect(&d.addr).await.unwrap();
    let mut visits = request(pb::Sampler::Grid, "local", 2);
    visits.visits = 65;
    let cases = [
        (request(pb::Sampler::Grid, "blocked", 0), "random, local"),
        (request(pb::Sampler::Grid, "", 2), "apply to order = \"local\""),
        (request(pb::Sampler::Grid, "random", 2), "apply to order = \"local\""),
        (request(pb::Sampler::Grid, "local", 5000), "open_blocks 5000"),
        (visits, "visits 65"),
    ];
    for (r, want) in cases {
        let status = match client.stream(r).await {
            Err(cogfeed_client::ClientError::Status(s)) => s,
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("accepted"),
        };
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{}", status.message());
        assert!(status.message().contains(want), "{} lacks {want}", status.message());
    }
    // The daemon still serves.
    assert_eq!(collect(&d.addr, request(pb::Sampler::Grid, "local", 2)).await.len(), 64);
    // A config with a bad order is refused at start-up, naming the key.
    let mut config = Config::demo(demo_dir());
    config.datasets[0].sampling = Some(SamplingConfig {
        open_blocks: Some(3),
        ..Default::default()
    });
    let e = cogfeed_server::app::App::build(config).await.err().unwrap().to_string();
    assert!(e.contains("open_blocks and visits need order = \"local\""), "{e}");
}

/// A map-space time series and a mixture in a local order: every sample delivered, the
/// same on a second run, each mixture part in its own local order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_layers_and_mixtures_serve_a_local_order() {
    let dir = tempfile::tempdir().unwrap();
    cogfeed_server::demo::stac::write_stac_demo(&dir.path().join("stac")).unwrap();
    cogfeed_server::demo::series::write_series_demo(&dir.path().join("series")).unwrap();
    let mut c = Config::demo_default(dir.path());
    c.datasets.retain(|d| d.name != "demo");
    c.cache.index_dir = Some(dir.path().join("index"));
    let d = start(c).await;
    let series = pb::StreamBatchesRequest {
        dataset: "demo-series".into(),
        job: "local-order".into(),
        sampler: pb::Sampler::Random as i32,
        patch_size: 32,
        batch_size: 4,
        seed: 3,
        world_size: 1,
        samples_per_epoch: 24,
        order: "local".into(),
        open_blocks: 2,
        visits: 2,
        ..Default::default()
    };
    let a = collect(&d.addr, series.clone()).await;
    assert_eq!(a.iter().map(|b| b.samples.len()).sum::<usize>(), 24);
    let b = collect(&d.addr, series).await;
    let bytes = |v: &[Batch]| -> Vec<Vec<u8>> {
        v.iter()
            .flat_map(|b| b.layers.iter().map(|(_, t)| t.data.to_vec()))
            .collect()
    };
    assert_eq!(bytes(&a), bytes(&b), "a local order is deterministic");
    let mixture = pb::StreamBatchesRequest {
        dataset: String::new(),
        layers: vec!["label".into()],
        mixture: vec![
            pb::MixturePart {
                dataset: "demo-stac".into(),
                weight: 1.0,
            },
            pb::MixturePart {
                dataset: "demo-series".into(),
                weight: 1.0,
            },
        ],
        samples_per_epoch: 16,
        ..map_request()
    };
    let got = collect(&d.addr, mixture).await;
    let parts: Vec<&str> = got
        .iter()
        .flat_map(|b| b.samples.iter().map(|s| s.dataset.as_str()))
        .collect();
    assert_eq!(parts.len(), 16);
    assert_eq!(parts.iter().filter(|p| **p == "demo-stac").count(), 8);
}

fn map_request() -> pb::StreamBatchesRequest {
    pb::StreamBatchesRequest {
        job: "local-order".into(),
        sampler: pb::Sampler::Random as i32,
        patch_size: 32,
        batch_size: 4,
        seed: 3,
        world_size: 1,
        order: "local".into(),
        open_blocks: 2,
        ..Default::default()
    }
}
