//! Eviction by the plan (`[cache] eviction = "plan"`, the default) against `"lru"`, end to
//! end: the daemon in-process on the demo's real COGs, the real Rust client, a tile cache far
//! smaller than what an epoch reads. The plan changes which tiles stay cached, never what a
//! client receives; it decodes fewer tiles than recency on the same stream; open streams'
//! plans show in the metrics and leave the board when the streams end.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::sync::atomic::Ordering;

use cogfeed_client::{Batch, pb};
use cogfeed_server::config::Config;
use cogfeed_server::tiles::TileSource;
use cogfeed_server::tiles::store::Eviction;
use common::inproc::{Daemon, collect, start};
use serde_json as _;

/// The demo-series (a map-space time series over two UTM zones) and the pixel-space demo,
/// with a `capacity`-byte tile cache evicting by `eviction`.
async fn daemon(dir: &std::path::Path, capacity: u64, eviction: Eviction) -> Daemon {
    let mut c = Config::demo_default(dir);
    c.cache.capacity_bytes = capacity;
    c.cache.eviction = eviction;
    c.cache.compressed_bytes = Some(0);
    c.cache.index_dir = Some(dir.join("index"));
    start(c).await
}

fn series_request() -> pb::StreamBatchesRequest {
    pb::StreamBatchesRequest {
        dataset: "demo-series".into(),
        job: "plan-eviction".into(),
        sampler: pb::Sampler::Random as i32,
        patch_size: 32,
        batch_size: 8,
        seed: 5,
        world_size: 1,
        samples_per_epoch: 160,
        prefetch: 2,
        ..Default::default()
    }
}

fn bytes(v: &[Batch]) -> Vec<Vec<u8>> {
    v.iter()
        .flat_map(|b| {
            b.layers
                .iter()
                .map(|(_, t)| t.data.to_vec())
                .chain([b.image.data.to_vec()])
        })
        .collect()
}

fn misses(d: &Daemon) -> u64 {
    d.app.cache.stats().misses.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_keeps_what_the_stream_reads_next_and_changes_no_sample() {
    let dir = tempfile::tempdir().unwrap();
    cogfeed_server::demo::write_demo(dir.path()).unwrap();
    cogfeed_server::demo::stac::write_stac_demo(&dir.path().join("stac")).unwrap();
    cogfeed_server::demo::series::write_series_demo(&dir.path().join("series")).unwrap();
    let mut got = Vec::new();
    for eviction in [Eviction::Plan, Eviction::Lru] {
        let d = daemon(dir.path(), 6 << 20, eviction).await;
        let series = collect(&d.addr, series_request()).await;
        let series_misses = misses(&d);
        let mut scenes = series_request();
        scenes.dataset = "demo".into();
        scenes.patch_size = 64;
        scenes.samples_per_epoch = 320;
        let pixels = collect(&d.addr, scenes).await;
        let text = d.app.metrics.render();
        // Ended streams leave the board (their planners stop with them).
        if let Some(board) = d.app.cache.board() {
            for _ in 0..200 {
                if board.entries() == 0 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert_eq!(board.entries(), 0);
        }
        got.push((
            bytes(&series),
            bytes(&pixels),
            series_misses,
            misses(&d) - series_misses,
            text,
        ));
    }
    let (plan, lru) = (&got[0], &got[1]);
    assert_eq!(plan.0, lru.0, "map-space samples do not depend on eviction");
    assert_eq!(plan.1, lru.1, "pixel samples do not depend on eviction");
    eprintln!(
        "decodes: series plan {} lru {}; demo plan {} lru {}",
        plan.2, lru.2, plan.3, lru.3
    );
    assert!(plan.2 < lru.2, "series: plan {} decodes, lru {}", plan.2, lru.2);
    assert!(plan.3 < lru.3, "demo: plan {} decodes, lru {}", plan.3, lru.3);
    // The plan's evictions are counted apart; every stream has ended, so no use is left.
    let metric = |text: &str, name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(f64::NAN)
    };
    assert!(metric(&plan.4, "cogfeed_cache_evictions_total") > 0.0);
    assert_eq!(metric(&lru.4, "cogfeed_cache_evictions_planned_total"), 0.0);
}
