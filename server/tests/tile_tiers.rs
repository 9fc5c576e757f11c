//! The tiers below the decoded cache, end to end with the real daemon binary: a restarted
//! daemon with a warm disk tier serves a dataset it has seen without fetching any tile
//! from the store, byte for byte; torn and damaged entries are detected and fetched
//! again, never served; a replaced object (new ETag) never gets its old tiles; the
//! compressed tier turns decoded-cache misses into decodes without GETs.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use cogfeed_client::{Client, pb};
use common::scrape::{scrape, sum};
use common::servers::{Proc, free_port, wait_port};
use futures::StreamExt;

struct Daemon {
    addr: String,
    metrics_port: u16,
    _proc: Proc,
}

/// `cogfeed serve` over the demo scenes in `data`, with the given `[cache]` lines.
fn serve(data: &Path, work: &Path, cache: &str) -> Daemon {
    let (port, metrics_port) = (free_port(), free_port());
    let config = format!(
        r#"
[server]
listen = "127.0.0.1:{port}"
metrics_listen = "127.0.0.1:{metrics_port}"
[cache]
{cache}
[[datasets]]
name = "demo"
prefix = "{data}/"
labels = "{data}/labels/{{stem}}.tif"
"#,
        data = data.display()
    );
    let cfg = work.join(format!("cogfeed-{port}.toml"));
    std::fs::write(&cfg, config).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_cogfeed"))
        .args(["serve", "--config", cfg.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap();
    let proc = Proc(child);
    wait_port(port);
    wait_port(metrics_port);
    Daemon {
        addr: format!("127.0.0.1:{port}"),
        metrics_port,
        _proc: proc,
    }
}

impl Daemon {
    async fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        sum(&scrape(self.metrics_port).await, name, labels)
    }

    async fn loaded_from(&self, source: &str) -> f64 {
        let label = format!("source=\"{source}\"");
        self.metric("cogfeed_tiles_loaded_total", &[&label]).await
    }

    /// Every batch of one whole grid epoch (every image and label tile), as bytes.
    async fn epoch(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut client = Client::connect(&self.addr).await.unwrap();
        let r = pb::StreamBatchesRequest {
            dataset: "demo".into(),
            sampler: pb::Sampler::Grid as i32,
            patch_size: 256,
            stride: 256,
            batch_size: 8,
            seed: 3,
            labels: true,
            world_size: 1,
            ..Default::default()
        };
        client
            .stream(r)
            .await
            .unwrap()
            .map(|b| {
                let b = b.unwrap();
                (b.image.data.to_vec(), b.label.unwrap().data.to_vec())
            })
            .collect()
            .await
    }

    /// Waits until the disk tier's size stops changing (its background writes are done).
    async fn disk_settled(&self) -> f64 {
        let mut last = -1.0;
        for _ in 0..200 {
            let now = self.metric("cogfeed_cache_tier_size_bytes", &["tier=\"disk\""]).await;
            if now > 0.0 && now == last {
                return now;
            }
            last = now;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the disk tier never settled (last size {last})");
    }
}

fn entries(disk: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for sub in std::fs::read_dir(disk.join("tiles-v1")).unwrap().flatten() {
        if sub.file_name().len() == 2 {
            out.extend(std::fs::read_dir(sub.path()).unwrap().flatten().map(|f| f.path()));
        }
    }
    out.sort();
    out
}

fn demo_data() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    cogfeed_server::demo::write_demo(dir.path()).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_serves_what_it_has_seen_from_disk_and_never_a_torn_entry() {
    let data = demo_data();
    let work = tempfile::tempdir().unwrap();
    let disk = work.path().join("tiles");
    let cache = format!(
        "capacity_bytes = 1048576\ncompressed_bytes = 0\ndisk_dir = \"{}\"\ndisk_bytes = 1073741824",
        disk.display()
    );

    let first = serve(data.path(), work.path(), &cache);
    let reference = first.epoch().await;
    assert_eq!(reference.len(), 8, "4 scenes of 16 tiles, 8 per batch");
    let fetched = first.loaded_from("store").await;
    assert!(
        fetched >= 128.0,
        "every image and label tile came from the store: {fetched}"
    );
    first.disk_settled().await;
    let written = entries(&disk).len();
    assert!(written >= 128, "{written} entries on disk");
    drop(first);

    // A restart: every tile comes from the disk, none from the store, byte for byte.
    let second = serve(data.path(), work.path(), &cache);
    assert!(second.epoch().await == reference, "a restart changed the batches");
    assert_eq!(second.loaded_from("store").await, 0.0, "a tile was fetched again");
    assert!(second.loaded_from("disk").await >= 128.0);
    assert!(second.metric("cogfeed_cache_tier_hits_total", &["tier=\"disk\""]).await >= 128.0);
    drop(second);

    // A torn entry (a crash mid-write that still reached its name) and a damaged one are
    // detected, deleted and fetched again; the batches do not change.
    let files = entries(&disk);
    let torn = std::fs::read(&files[0]).unwrap();
    std::fs::write(&files[0], &torn[..torn.len() / 3]).unwrap();
    let mut damaged = std::fs::read(&files[1]).unwrap();
    let at = damaged.len() - 7;
    damaged[at] ^= 0x5a;
    std::fs::write(&files[1], damaged).unwrap();
    std::fs::write(disk.join("tiles-v1/tmp/999-1"), b"a write cut short").unwrap();
    let third = serve(data.path(), work.path(), &cache);
    assert!(third.epoch().await == reference, "a damaged entry changed the batches");
    assert_eq!(
        third.loaded_from("store").await,
        2.0,
        "exactly the two bad entries are fetched"
    );
    let corrupt = third
        .metric(
            "cogfeed_cache_tier_discarded_total",
            &["tier=\"disk\"", "reason=\"corrupt\""],
        )
        .await;
    assert_eq!(corrupt, 2.0);
    assert_eq!(std::fs::read_dir(disk.join("tiles-v1/tmp")).unwrap().count(), 0);
    third.disk_settled().await;
    drop(third);

    // A replaced object has a new ETag: its old tiles are never served again.
    std::fs::copy(data.path().join("scene_01.tif"), data.path().join("scene_00.tif")).unwrap();
    let fourth = serve(data.path(), work.path(), &cache);
    let after = fourth.epoch().await;
    assert!(after != reference, "the replaced scene's old tiles were served");
    assert!(
        fourth.loaded_from("store").await >= 16.0,
        "the new scene's tiles are fetched"
    );
    drop(fourth);
    let plain = serve(data.path(), work.path(), "capacity_bytes = 1048576");
    assert!(
        plain.epoch().await == after,
        "with the disk tier the batches differ from without it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compressed_tier_turns_decoded_misses_into_decodes_without_gets() {
    let data = demo_data();
    let work = tempfile::tempdir().unwrap();
    // Decoded tiles of 256² × 4 bands × u16 are 512 KiB: a 1 MiB decoded cache holds two,
    // while 64 MiB of compressed tiles hold the whole demo.
    let daemon = serve(
        data.path(),
        work.path(),
        "capacity_bytes = 1048576\ncompressed_bytes = 67108864",
    );
    let first = daemon.epoch().await;
    let from_store = daemon.loaded_from("store").await;
    let misses = daemon.metric("cogfeed_cache_misses_total", &[]).await;
    assert!(daemon.epoch().await == first);
    assert_eq!(
        daemon.loaded_from("store").await,
        from_store,
        "the second epoch made GETs"
    );
    // Every decoded-cache miss of the second epoch was a decode of bytes the tier held.
    let missed = daemon.metric("cogfeed_cache_misses_total", &[]).await - misses;
    let decoded = daemon.loaded_from("compressed").await;
    assert!(missed >= 32.0, "the decoded cache held the epoch: {missed} misses");
    assert_eq!(decoded, missed, "misses not served by the compressed tier");
    let held = daemon
        .metric("cogfeed_cache_tier_size_bytes", &["tier=\"compressed\""])
        .await;
    assert!(held > 0.0 && held <= 67108864.0, "{held}");
    drop(daemon);

    // Without the tier, every decoded-cache miss is a GET.
    let off = serve(
        data.path(),
        work.path(),
        "capacity_bytes = 1048576\ncompressed_bytes = 0",
    );
    assert!(off.epoch().await == first);
    let (once, misses) = (
        off.loaded_from("store").await,
        off.metric("cogfeed_cache_misses_total", &[]).await,
    );
    assert!(off.epoch().await == first);
    let missed = off.metric("cogfeed_cache_misses_total", &[]).await - misses;
    assert!(missed >= 32.0);
    assert_eq!(off.loaded_from("store").await - once, missed);
}
