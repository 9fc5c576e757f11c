//! The store rate governor against a throttling store: a proxy in front of s3s-fs answers
//! 503 SlowDown to requests for one bucket above a fixed rate, as S3 does above its
//! per-prefix limit. The daemon's request rate to that bucket converges near the limit, no
//! request fails for it (with the default 5 retries; without the governor the stream
//! fails), and a dataset on another bucket read at the same time is never paced.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cogfeed_client::{Client, pb};
use cogfeed_server::app::App;
use cogfeed_server::config::{Config, DatasetConfig};
use common::proxy::{fetch_once, read_head};
use common::servers::{S3_KEY, S3_SECRET, s3_store, start_s3, upload};
use futures::StreamExt;

/// Requests per second the throttled bucket takes.
const LIMIT: f64 = 20.0;

/// Forwards requests (one per connection); those for `/hot/` above `LIMIT` per second (a
/// token bucket of 5) get 503 SlowDown.
struct ThrottlingProxy {
    port: u16,
    forwarded_hot: Arc<AtomicU64>,
    throttled: Arc<AtomicU64>,
    forwarded_cool: Arc<AtomicU64>,
}

impl ThrottlingProxy {
    async fn start(upstream: u16) -> Self {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (hot, throttled, cool) = (
            Arc::<AtomicU64>::default(),
            Arc::<AtomicU64>::default(),
            Arc::<AtomicU64>::default(),
        );
        let bucket = Arc::new(Mutex::new((5.0f64, Instant::now())));
        let (h, t, c) = (hot.clone(), throttled.clone(), cool.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let (h, t, c, bucket) = (h.clone(), t.clone(), c.clone(), bucket.clone());
                tokio::spawn(async move {
                    let Some(text) = read_head(&mut client).await else {
                        return;
                    };
                    let is_hot = text.lines().next().is_some_and(|l| l.contains(" /hot/"));
                    if is_hot {
                        let allowed = {
                            let mut b = bucket.lock().unwrap();
                            let now = Instant::now();
                            b.0 = (b.0 + now.duration_since(b.1).as_secs_f64() * LIMIT).min(5.0);
                            b.1 = now;
                            let ok = b.0 >= 1.0;
                            if ok {
                                b.0 -= 1.0;
                            }
                            ok
                        };
                        if !allowed {
                            t.fetch_add(1, Ordering::SeqCst);
                            let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
                            let answer = format!(
                                "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                                body.len()
                            );
                            let _ = client.write_all(answer.as_bytes()).await;
                            return;
                        }
                        h.fetch_add(1, Ordering::SeqCst);
                    } else {
                        c.fetch_add(1, Ordering::SeqCst);
                    }
                    if let Some(response) = fetch_once(upstream, &text).await {
                        let _ = client.write_all(&response).await;
                    }
                });
            }
        });
        Self {
            port,
            forwarded_hot: hot,
            throttled,
            forwarded_cool: cool,
        }
    }
}

fn metric(app: &App, key: &str) -> f64 {
    app.metrics
        .render()
        .lines()
        .find(|l| l.starts_with(&format!("{key} ")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

async fn stream(
    addr: &str,
    dataset: &str,
    samples: u64,
) -> Vec<Result<cogfeed_client::Batch, cogfeed_client::ClientError>> {
    let r = pb::StreamBatchesRequest {
        dataset: dataset.into(),
        sampler: pb::Sampler::Random as i32,
        patch_size: 256,
        batch_size: 4,
        seed: 3,
        samples_per_epoch: samples,
        world_size: 1,
        ..Default::default()
    };
    Client::connect(addr)
        .await
        .unwrap()
        .stream(r)
        .await
        .unwrap()
        .collect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_bucket_is_read_near_its_rate_and_no_request_fails() {
    let root = tempfile::tempdir().unwrap();
    for b in ["hot", "cool"] {
        std::fs::create_dir_all(root.path().join(b)).unwrap();
    }
    let (s3_port, _s3) = start_s3(root.path());
    let dir = tempfile::tempdir().unwrap();
    // 2048² scenes: 64 tiles each, so random samples keep missing the small cache.
    let scenes = cogfeed_server::demo::write_scenes(dir.path(), 4, 2048).unwrap();
    let names: Vec<String> = scenes
        .iter()
        .map(|s| s.file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    for b in ["hot", "cool"] {
        let store = s3_store(s3_port, b);
        for (scene, name) in scenes.iter().zip(&names) {
            upload(&store, name, scene).await;
        }
    }
    let proxy = ThrottlingProxy::start(s3_port).await;
    let mut config = Config::demo(dir.path());
    // A cache of a few tiles: nearly every tile a sample needs is a GET.
    config.cache.capacity_bytes = 1 << 20;
    config.store.s3_endpoint = Some(format!("http://127.0.0.1:{}", proxy.port));
    config.store.s3_access_key_id = Some(S3_KEY.into());
    config.store.s3_secret_access_key = Some(S3_SECRET.into());
    let template = DatasetConfig {
        labels: None,
        ..config.datasets[0].clone()
    };
    config.datasets = ["hot", "cool"]
        .iter()
        .map(|b| DatasetConfig {
            name: b.to_string(),
            scenes: names.iter().map(|n| format!("s3://{b}/{n}")).collect(),
            ..template.clone()
        })
        .collect();
    let app = App::build(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = app.clone();
    tokio::spawn(async move { server.serve(listener, std::future::pending()).await });

    let hot_before = proxy.forwarded_hot.load(Ordering::SeqCst);
    let started = Instant::now();
    let (hot, cool) = tokio::join!(stream(&addr, "hot", 160), stream(&addr, "cool", 160));
    let elapsed = started.elapsed().as_secs_f64();
    let failed = hot.iter().filter(|b| b.is_err()).count();
    if let Some(Err(e)) = hot.iter().find(|b| b.is_err()) {
        panic!("{failed} of {} hot batches failed: {e}", hot.len());
    }
    assert_eq!(hot.len(), 40);
    assert!(cool.len() == 40 && cool.iter().all(|b| b.is_ok()));
    let forwarded = (proxy.forwarded_hot.load(Ordering::SeqCst) - hot_before) as f64;
    let throttled = proxy.throttled.load(Ordering::SeqCst);
    let achieved = forwarded / elapsed;
    let rate = metric(&app, "cogfeed_store_rate_limit_per_second{bucket=\"hot\",store=\"s3\"}");
    eprintln!(
        "limit {LIMIT}/s: {forwarded} hot GETs in {elapsed:.1} s = {achieved:.1}/s, {throttled} answered 503, governor at {rate:.1}/s, {} cool GETs",
        proxy.forwarded_cool.load(Ordering::SeqCst)
    );
    assert!(forwarded > 80.0, "enough requests to converge: {forwarded}");
    // Far from the floor, near the limit. The same binary measured 8.9-15.3/s on one
    // 2-core VM within an hour (the demand is bursty, and slower it is burstier): the
    // bound is clear of a collapse, not of that noise.
    assert!(achieved > 0.3 * LIMIT, "{achieved:.1}/s against a limit of {LIMIT}");
    assert!(
        rate > 0.3 * LIMIT && rate < 3.0 * LIMIT,
        "the governor settled at {rate}"
    );
    assert_eq!(
        metric(&app, "cogfeed_store_throttled_total{bucket=\"hot\",store=\"s3\"}"),
        throttled as f64
    );
    // The other bucket is never paced.
    assert_eq!(
        metric(
            &app,
            "cogfeed_store_rate_limit_per_second{bucket=\"cool\",store=\"s3\"}"
        ),
        3500.0
    );
    assert_eq!(
        metric(
            &app,
            "cogfeed_store_rate_wait_seconds_total{bucket=\"cool\",store=\"s3\"}"
        ),
        0.0
    );
    assert_eq!(
        metric(&app, "cogfeed_store_throttled_total{bucket=\"cool\",store=\"s3\"}"),
        0.0
    );
}
