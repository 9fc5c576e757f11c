//! Prefetch by the plan, end to end: the real daemon binary reading the demo scenes from a
//! real S3-compatible server (s3s-fs) with a simulated round trip per GET. A stream's plan
//! fetches its tiles' compressed bytes ahead of the reads, so reads decode bytes already in
//! the compressed tier; every tile is still fetched once (a prefetch and a read of one
//! tile make one GET), and the batches are byte for byte those of a daemon that does not
//! prefetch.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::process::{Command, Stdio};

use cogfeed_client::{Client, pb};
use common::scrape::{scrape, sum};
use common::servers::{Proc, S3_KEY, S3_SECRET, free_port, s3_store, start_s3, upload, wait_port};
use futures::StreamExt;

struct Daemon {
    addr: String,
    metrics_port: u16,
    _proc: Proc,
}

/// `cogfeed serve` over `s3://demo/` on the S3 server at `s3_port`, with `cache` lines.
fn serve(work: &std::path::Path, s3_port: u16, cache: &str) -> Daemon {
    let (port, metrics_port) = (free_port(), free_port());
    let config = format!(
        r#"
[server]
listen = "127.0.0.1:{port}"
metrics_listen = "127.0.0.1:{metrics_port}"
[store]
simulated_latency_ms = 25
[cache]
{cache}
[[datasets]]
name = "demo"
prefix = "s3://demo/"
labels = "s3://demo/labels/{{stem}}.tif"
"#
    );
    let cfg = work.join(format!("cogfeed-{port}.toml"));
    std::fs::write(&cfg, config).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_cogfeed"))
        .args(["serve", "--config", cfg.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .env("RUST_LOG", "warn")
        .env("AWS_ENDPOINT", format!("http://127.0.0.1:{s3_port}"))
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", S3_KEY)
        .env("AWS_SECRET_ACCESS_KEY", S3_SECRET)
        .env("AWS_REGION", "us-east-1")
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

    /// Every batch of one random epoch (image and label), as bytes.
    async fn epoch(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut client = Client::connect(&self.addr).await.unwrap();
        let r = pb::StreamBatchesRequest {
            dataset: "demo".into(),
            sampler: pb::Sampler::Random as i32,
            patch_size: 96,
            batch_size: 4,
            samples_per_epoch: 64,
            seed: 7,
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_prefetches_tiles_once_and_changes_no_byte() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("demo")).unwrap();
    let (s3_port, _s3) = start_s3(root.path());
    let work = tempfile::tempdir().unwrap();
    let scenes = cogfeed_server::demo::write_demo(work.path()).unwrap();
    let bucket = s3_store(s3_port, "demo");
    for scene in &scenes {
        let name = scene.file_name().unwrap().to_str().unwrap();
        upload(&bucket, name, scene).await;
        upload(
            &bucket,
            &format!("labels/{name}"),
            &work.path().join("labels").join(name),
        )
        .await;
    }

    // Prefetching off (the default).
    let plain = serve(work.path(), s3_port, "");
    let want = plain.epoch().await;
    assert_eq!(want.len(), 16);
    assert_eq!(plain.metric("cogfeed_prefetched_tiles_total", &[]).await, 0.0);
    let plain_gets = plain.metric("cogfeed_store_requests_total", &["op=\"get\""]).await;

    // A prefetch area: the stream's plan prefetches.
    let ahead = serve(work.path(), s3_port, "plan_prefetch_bytes = 67108864");
    assert!(ahead.epoch().await == want, "prefetching changed the batches");
    let prefetched = ahead.metric("cogfeed_prefetched_tiles_total", &[]).await;
    let from_tier = ahead
        .metric("cogfeed_tiles_loaded_total", &["source=\"prefetched\""])
        .await;
    let from_store = ahead.metric("cogfeed_tiles_loaded_total", &["source=\"store\""]).await;
    let gets = ahead.metric("cogfeed_store_requests_total", &["op=\"get\""]).await;
    assert!(prefetched > 0.0, "nothing prefetched");
    // Reads took prefetched bytes: decodes without a GET of their own.
    assert!(
        from_tier > 0.0,
        "no read found its tile prefetched ({from_store} from the store)"
    );
    // Each tile fetched once: as many GETs as without prefetching.
    assert_eq!(
        gets, plain_gets,
        "{prefetched} prefetched, {from_tier} read from the tier"
    );
    assert!(ahead.metric("cogfeed_prefetched_bytes_total", &[]).await > 0.0);
}
