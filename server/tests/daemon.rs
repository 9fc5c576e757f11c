//! The daemon end to end: started in-process on 127.0.0.1:0 over the demo dataset, talked to
//! with the real Rust client. Determinism, ranks, resume, labels, concurrency,
//! single-flight, cancellation and error statuses.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use common::inproc::{Daemon, collect, demo_dir, start};
use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use cogfeed_client::{Batch, Client, pb};
use cogfeed_server::app::App;
use cogfeed_server::config::Config;
use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

async fn demo() -> Daemon {
    start(Config::demo(demo_dir())).await
}

fn request(sampler: pb::Sampler, batch: u32) -> pb::StreamBatchesRequest {
    pb::StreamBatchesRequest {
        dataset: "demo".into(),
        job: "test".into(),
        sampler: sampler as i32,
        patch_size: 256,
        batch_size: batch,
        seed: 42,
        world_size: 1,
        ..Default::default()
    }
}

fn digest(batches: &[Batch]) -> Vec<String> {
    batches
        .iter()
        .map(|b| {
            let mut h = Sha256::new();
            h.update(&b.image.data);
            if let Some(l) = &b.label {
                h.update(&l.data);
            }
            hex::encode(h.finalize())
        })
        .collect()
}

type Key = (u32, u64, u64);

fn windows(batches: &[Batch]) -> Vec<Key> {
    batches
        .iter()
        .flat_map(|b| b.windows.iter().map(|w| (w.scene, w.col, w.row)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_deterministic_across_runs_cache_states_and_prefetch() {
    let mut r = request(pb::Sampler::Random, 4);
    r.samples_per_epoch = 40;
    r.labels = true;
    r.augment = true;
    r.dtype = "float32".into();
    r.normalize = true;
    let cold = demo().await;
    let first = collect(&cold.addr, r.clone()).await;
    assert_eq!(first.len(), 10);
    assert_eq!(first[0].image.shape, vec![4, 4, 256, 256]);
    assert_eq!(first[0].image.dtype, "float32");
    assert_eq!(first[0].label.as_ref().unwrap().shape, vec![4, 256, 256]);
    let warm = collect(&cold.addr, r.clone()).await;
    assert_eq!(digest(&first), digest(&warm), "warm cache changed the bytes");
    let other = demo().await;
    let mut serial = r.clone();
    serial.prefetch = 1;
    assert_eq!(
        digest(&first),
        digest(&collect(&other.addr, serial).await),
        "prefetch 1 changed the bytes"
    );
    let mut wide = r.clone();
    wide.prefetch = 64;
    assert_eq!(
        digest(&first),
        digest(&collect(&other.addr, wide).await),
        "prefetch 64 changed the bytes"
    );
    let mut next_epoch = r.clone();
    next_epoch.epoch = 1;
    assert_ne!(
        digest(&first),
        digest(&collect(&other.addr, next_epoch).await),
        "epochs must differ"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_ranks_make_one_epoch_with_equal_counts() {
    let d = demo().await;
    let whole = collect(&d.addr, request(pb::Sampler::Aligned, 3)).await;
    // 4 scenes x 16 aligned windows = 64 samples; 3 x 2 = 6 per step → 10 steps, tail of 4 dropped.
    let mut per_rank = Vec::new();
    for rank in 0..2 {
        let mut r = request(pb::Sampler::Aligned, 3);
        r.world_size = 2;
        r.rank = rank;
        per_rank.push(collect(&d.addr, r).await);
    }
    assert_eq!(per_rank[0].len(), per_rank[1].len(), "ranks get equal batch counts");
    assert_eq!(per_rank[0].len(), 10);
    let mut union: Vec<Key> = per_rank.iter().flat_map(|b| windows(b)).collect();
    let n = union.len();
    union.sort();
    union.dedup();
    assert_eq!(union.len(), n, "a sample was served twice");
    assert_eq!(n, 60);
    let epoch: BTreeSet<Key> = windows(&whole).into_iter().collect();
    assert!(union.iter().all(|w| epoch.contains(w) || whole.len() * 3 < 64));
    let all: HashSet<Key> = (0..4u32)
        .flat_map(|s| (0..4u64).flat_map(move |y| (0..4u64).map(move |x| (s, x * 256, y * 256))))
        .collect();
    assert!(
        union.iter().all(|w| all.contains(w)),
        "aligned windows sit on the tile grid"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_from_a_cursor_is_the_suffix_also_with_another_world_size() {
    let d = demo().await;
    let full = collect(&d.addr, request(pb::Sampler::Aligned, 4)).await;
    assert_eq!(full.len(), 16);
    let mut resumed = request(pb::Sampler::Aligned, 4);
    resumed.cursor = full[5].cursor;
    let tail = collect(&d.addr, resumed).await;
    assert_eq!(digest(&tail), digest(&full[6..]), "resume is not the suffix");
    assert_eq!(tail[0].index, 0);

    // Two ranks run three steps, then the job resumes on one rank from their cursor.
    let mut seen: Vec<Key> = Vec::new();
    let mut cursor = 0;
    for rank in 0..2 {
        let mut r = request(pb::Sampler::Aligned, 4);
        r.world_size = 2;
        r.rank = rank;
        r.max_batches = 3;
        let got = collect(&d.addr, r).await;
        cursor = got.last().unwrap().cursor;
        seen.extend(windows(&got));
    }
    assert_eq!(cursor, 24);
    let mut rest = request(pb::Sampler::Aligned, 4);
    rest.cursor = cursor;
    seen.extend(windows(&collect(&d.addr, rest).await));
    let n = seen.len();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), n, "nothing repeated across the world-size change");
    assert_eq!(n, 64, "nothing lost across the world-size change");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_stay_aligned_with_images_under_augmentation() {
    let d = demo().await;
    for sampler in [pb::Sampler::Random, pb::Sampler::Grid] {
        let mut r = request(sampler, 4);
        r.patch_size = 200;
        r.stride = 300;
        r.samples_per_epoch = 24;
        r.labels = true;
        r.augment = true;
        let batches = collect(&d.addr, r).await;
        assert!(!batches.is_empty());
        let mut padded = 0;
        for b in &batches {
            let img = b.image.values::<u16>().unwrap();
            let lab = &b.label.as_ref().unwrap().data;
            let (c, p) = (b.image.shape[1], b.image.shape[2]);
            for (s, w) in b.windows.iter().enumerate() {
                padded += w.padded as usize;
                for i in 0..p * p {
                    let band1 = img[s * c * p * p + i];
                    let label = lab[s * p * p + i];
                    // Padding is 0 in both image and label, which label_of maps to 0 too.
                    assert_eq!(
                        label,
                        cogfeed_server::demo::label_of(band1),
                        "{sampler:?} window {w:?} pixel {i}"
                    );
                }
            }
        }
        if sampler == pb::Sampler::Grid {
            assert!(padded > 0, "grid edges must be padded");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_concurrent_streams_from_three_jobs_get_their_own_bytes() {
    let d = demo().await;
    let make = |i: u32| {
        let mut r = request(
            if i.is_multiple_of(2) {
                pb::Sampler::Random
            } else {
                pb::Sampler::Aligned
            },
            2,
        );
        r.job = format!("job{}", i % 3);
        r.seed = (i % 3) as u64;
        r.samples_per_epoch = 16;
        r.max_batches = 6;
        r.world_size = 2;
        r.rank = i % 2;
        r
    };
    let mut solo = Vec::new();
    for i in 0..16 {
        solo.push(digest(&collect(&d.addr, make(i)).await));
    }
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let addr = d.addr.clone();
            tokio::spawn(async move { digest(&collect(&addr, make(i)).await) })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap(), solo[i], "stream {i} changed under concurrency");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_streams_fetch_each_tile_once() {
    let d = demo().await;
    let gets = "op=\"get\",result=\"ok\",store=\"file\"";
    let before = metric(&d.app, "cogfeed_store_requests_total", gets);
    let mut r = request(pb::Sampler::Aligned, 4);
    r.labels = true;
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (addr, r) = (d.addr.clone(), r.clone());
            tokio::spawn(async move { collect(&addr, r).await.len() })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), 16);
    }
    // 64 aligned windows of one 256 px tile each, plus one label tile each.
    assert_eq!(
        metric(&d.app, "cogfeed_store_requests_total", gets) - before,
        128.0,
        "tile GETs must equal distinct tiles"
    );
    let stats = d.app.cache.stats();
    let misses = stats.misses.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(misses, 128);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_stream_is_freed() {
    let d = demo().await;
    let mut client = Client::connect(&d.addr).await.unwrap();
    let mut r = request(pb::Sampler::Random, 8);
    r.samples_per_epoch = 1_000_000;
    let mut stream = client.stream(r).await.unwrap();
    stream.next().await.unwrap().unwrap();
    assert_eq!(d.app.active_streams(), 1);
    drop(stream);
    drop(client);
    for _ in 0..100 {
        if d.app.active_streams() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the stream was not freed after the client went away");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_statuses() {
    let d = demo().await;
    let mut client = Client::connect(&d.addr).await.unwrap();
    let cases: Vec<(pb::StreamBatchesRequest, tonic::Code, &str)> = vec![
        (
            pb::StreamBatchesRequest {
                dataset: "nope".into(),
                ..request(pb::Sampler::Random, 2)
            },
            tonic::Code::NotFound,
            "nope",
        ),
        (
            pb::StreamBatchesRequest {
                patch_size: 2048,
                ..request(pb::Sampler::Random, 2)
            },
            tonic::Code::InvalidArgument,
            "larger than scene",
        ),
        (
            pb::StreamBatchesRequest {
                batch_size: 0,
                ..request(pb::Sampler::Random, 2)
            },
            tonic::Code::InvalidArgument,
            "batch_size",
        ),
        (
            pb::StreamBatchesRequest {
                rank: 2,
                world_size: 2,
                ..request(pb::Sampler::Random, 2)
            },
            tonic::Code::InvalidArgument,
            "rank",
        ),
        (
            pb::StreamBatchesRequest {
                dtype: "float128".into(),
                ..request(pb::Sampler::Random, 2)
            },
            tonic::Code::InvalidArgument,
            "dtype",
        ),
        (
            pb::StreamBatchesRequest {
                patch_size: 100,
                ..request(pb::Sampler::Aligned, 2)
            },
            tonic::Code::InvalidArgument,
            "multiple of",
        ),
        (
            pb::StreamBatchesRequest {
                level: 5,
                ..request(pb::Sampler::Random, 2)
            },
            tonic::Code::InvalidArgument,
            "level",
        ),
        (
            pb::StreamBatchesRequest {
                bands: vec![9],
                ..request(pb::Sampler::Random, 2)
            },
            tonic::Code::InvalidArgument,
            "band 9",
        ),
        (
            pb::StreamBatchesRequest {
                cursor: 1 << 40,
                ..request(pb::Sampler::Aligned, 2)
            },
            tonic::Code::InvalidArgument,
            "cursor",
        ),
    ];
    for (r, code, text) in cases {
        let err = match client.stream(r.clone()).await {
            Err(cogfeed_client::ClientError::Status(s)) => s,
            Err(other) => panic!("{r:?}: unexpected error {other}"),
            Ok(_) => panic!("{r:?}: accepted"),
        };
        assert_eq!(err.code(), code, "{r:?}: {}", err.message());
        assert!(err.message().contains(text), "{:?} lacks {text:?}", err.message());
    }
    let describe = client.describe("missing").await.unwrap_err();
    assert!(matches!(describe, cogfeed_client::ClientError::Status(s) if s.code() == tonic::Code::NotFound));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_tile_ends_the_stream_with_data_loss_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = demo_dir().join("scene_00.tif");
    let dst = dir.path().join("broken.tif");
    let mut bytes = std::fs::read(&src).unwrap();
    // Corrupt the full-resolution tile 5 (the header tells where it is).
    let rt = cogfeed_tiff::Cog::open(
        std::sync::Arc::new(cogfeed_tiff::MemoryReader::new("x", bytes.clone())),
        Default::default(),
    )
    .await
    .unwrap();
    let range = rt.level(0).unwrap().block_range(5).unwrap();
    for b in &mut bytes[range.start as usize + 4..range.end as usize] {
        *b = 0x55;
    }
    std::fs::write(&dst, &bytes).unwrap();
    let mut config = Config::demo(demo_dir());
    config.datasets[0].scenes = vec![dst.to_string_lossy().into_owned()];
    config.datasets[0].labels = None;
    let d = start(config).await;
    let mut client = Client::connect(&d.addr).await.unwrap();
    let mut r = request(pb::Sampler::Aligned, 1);
    r.prefetch = 1;
    let mut stream = client.stream(r).await.unwrap();
    let mut error = None;
    while let Some(item) = stream.next().await {
        if let Err(e) = item {
            error = Some(e);
            break;
        }
    }
    let Some(cogfeed_client::ClientError::Status(s)) = error else {
        panic!("the corrupt tile went unnoticed");
    };
    assert_eq!(s.code(), tonic::Code::DataLoss, "{}", s.message());
    assert!(
        s.message().contains("broken.tif") && s.message().contains("tile 5"),
        "{}",
        s.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_describe_and_read_window() {
    let d = demo().await;
    let mut client = Client::connect(&d.addr).await.unwrap();
    let list = client.datasets().await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(
        (list[0].name.as_str(), list[0].scenes, list[0].labels),
        ("demo", 4, true)
    );
    let info = client.describe("demo").await.unwrap();
    assert_eq!(info.version, list[0].version);
    assert_eq!(info.bands, vec![1, 2, 3, 4]);
    assert_eq!(info.dtype, "uint16");
    assert_eq!(info.scenes[0].levels.len(), 2);
    assert_eq!(info.scenes[0].levels[0].block_width, 256);
    let (image, label) = client
        .read_window(pb::ReadWindowRequest {
            dataset: "demo".into(),
            scene: 2,
            col: 100,
            row: 200,
            width: 300,
            height: 50,
            bands: vec![1],
            labels: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(image.shape, vec![1, 50, 300]);
    let px = image.values::<u16>().unwrap();
    let lab = label.unwrap();
    assert!(
        px.iter()
            .zip(lab.data.iter())
            .all(|(&v, &l)| cogfeed_server::demo::label_of(v) == l)
    );
}

fn metric(app: &App, name: &str, labels: &str) -> f64 {
    let text = app.metrics.render();
    let key = if labels.is_empty() {
        name.to_string()
    } else {
        format!("{name}{{{labels}}}")
    };
    text.lines()
        .find(|l| l.starts_with(&format!("{key} ")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_was_sent_and_cached() {
    let d = demo().await;
    let mut r = request(pb::Sampler::Aligned, 4);
    r.job = "metrics-job".into();
    r.max_batches = 5;
    let first = collect(&d.addr, r.clone()).await;
    let sent: usize = first.iter().map(|b| b.image.data.len()).sum();
    let labels = "dataset=\"demo\",job=\"metrics-job\"";
    assert_eq!(metric(&d.app, "cogfeed_stream_batches_total", labels), 5.0);
    assert_eq!(metric(&d.app, "cogfeed_stream_patches_total", labels), 20.0);
    assert_eq!(metric(&d.app, "cogfeed_stream_sent_bytes_total", labels), sent as f64);
    assert_eq!(metric(&d.app, "cogfeed_cache_misses_total", ""), 20.0);
    assert_eq!(
        metric(&d.app, "cogfeed_decode_duration_seconds_count", "codec=\"DEFLATE\""),
        20.0
    );
    assert!(
        metric(
            &d.app,
            "cogfeed_store_requests_total",
            "op=\"get\",result=\"ok\",store=\"file\""
        ) >= 20.0
    );
    let hits_before = metric(&d.app, "cogfeed_cache_hits_total", "");
    collect(&d.addr, r).await;
    assert_eq!(
        metric(&d.app, "cogfeed_cache_hits_total", "") - hits_before,
        20.0,
        "a warm pass hits the cache"
    );
    assert_eq!(metric(&d.app, "cogfeed_stream_batches_total", labels), 10.0);
    assert_eq!(metric(&d.app, "cogfeed_stream_active", labels), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_raises_queue_depth_and_a_slow_store_starves() {
    let d = demo().await;
    let mut client = Client::connect(&d.addr).await.unwrap();
    let mut r = request(pb::Sampler::Random, 16);
    r.job = "slow".into();
    r.samples_per_epoch = 100_000;
    let mut stream = client.stream(r).await.unwrap();
    stream.next().await.unwrap().unwrap();
    let labels = "dataset=\"demo\",job=\"slow\"";
    let mut depth = 0.0;
    for _ in 0..100 {
        depth = metric(&d.app, "cogfeed_stream_queue_depth_batches", labels);
        if depth >= 4.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The queue holds 4; one more may be ready and waiting to enter it.
    assert!(
        depth >= 4.0,
        "a client that stops reading fills its queue, depth {depth}"
    );
    drop(stream);
    drop(client);
    for _ in 0..100 {
        if metric(&d.app, "cogfeed_stream_queue_depth_batches", labels) == 0.0 && d.app.active_streams() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        metric(&d.app, "cogfeed_stream_queue_depth_batches", labels),
        0.0,
        "a closed stream releases its queue"
    );

    let mut slow_store = Config::demo(demo_dir());
    slow_store.store.simulated_latency_ms = 30;
    let s = start(slow_store).await;
    let mut r = request(pb::Sampler::Aligned, 4);
    r.job = "starved".into();
    r.max_batches = 4;
    r.prefetch = 1;
    collect(&s.addr, r).await;
    let starved = metric(
        &s.app,
        "cogfeed_stream_starved_seconds_total",
        "dataset=\"demo\",job=\"starved\"",
    );
    assert!(
        starved > 0.2,
        "16 serial loads of 2 x 30 ms each must show as starvation, got {starved}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_serves_health_and_exposition() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let d = demo().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = d.app.clone();
    tokio::spawn(async move { app.serve_metrics(listener, std::future::pending()).await });
    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }
    // Ready once the gRPC server runs (start() has served for a while by now).
    for _ in 0..50 {
        if get(addr, "/readyz").await.starts_with("HTTP/1.1 200") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
    assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
    let body = get(addr, "/metrics").await;
    assert!(body.contains("text/plain"), "{body}");
    for name in [
        "cogfeed_cache_capacity_bytes",
        "cogfeed_ready 1",
        "process_resident_memory_bytes",
    ] {
        assert!(body.contains(name), "{name} missing");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_streams_with_unavailable_and_their_cursor() {
    let app = App::build(Config::demo(demo_dir())).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = oneshot::channel::<()>();
    let server = tokio::spawn(app.clone().serve_with_drain(
        listener,
        async {
            let _ = rx.await;
        },
        Duration::from_secs(5),
    ));
    let mut client = Client::connect(&addr).await.unwrap();
    let mut r = request(pb::Sampler::Random, 2);
    r.samples_per_epoch = 1_000_000;
    r.prefetch = 1;
    let mut stream = client.stream(r).await.unwrap();
    let mut last = 0;
    for _ in 0..3 {
        last = stream.next().await.unwrap().unwrap().cursor;
    }
    let t = std::time::Instant::now();
    tx.send(()).unwrap();
    let mut ended = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(b) => last = b.cursor,
            Err(e) => {
                ended = Some(e);
                break;
            }
        }
    }
    let Some(cogfeed_client::ClientError::Status(s)) = ended else {
        panic!("the stream did not end with a status");
    };
    assert_eq!(s.code(), tonic::Code::Unavailable, "{}", s.message());
    assert!(
        s.message().contains(&format!("cursor {last}")),
        "{} (last cursor {last})",
        s.message()
    );
    server.await.unwrap().unwrap();
    assert!(t.elapsed() < Duration::from_secs(6), "shutdown exceeded its bound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_resumes_across_a_daemon_restart() {
    let whole = collect(&demo().await.addr, request(pb::Sampler::Aligned, 2)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let first = App::build(Config::demo(demo_dir())).await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(first.serve_with_drain(
        listener,
        async {
            let _ = stopped.await;
        },
        Duration::from_secs(2),
    ));
    let client = Client::connect(&addr.to_string()).await.unwrap();
    let mut r = request(pb::Sampler::Aligned, 2);
    r.prefetch = 1;
    let mut stream = Box::pin(client.stream_resumable(r, Duration::from_secs(30)));
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(stream.next().await.unwrap().unwrap());
    }
    // Restart: the old daemon ends the stream, a new one comes up on the same port.
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    let second = App::build(Config::demo(demo_dir())).await.unwrap();
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(second.serve(listener, std::future::pending()));
    while let Some(b) = stream.next().await {
        got.push(b.unwrap());
    }
    assert_eq!(windows(&got), windows(&whole), "nothing lost, nothing repeated");
    assert_eq!(
        got.iter().map(|b| b.index).collect::<Vec<_>>(),
        (0..whole.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(digest(&got), digest(&whole));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_on_a_changed_dataset_is_refused_naming_both_versions() {
    let d = demo().await;
    let first = collect(&d.addr, request(pb::Sampler::Aligned, 4)).await;
    let version = first[0].dataset_version.clone();
    assert_eq!(version.len(), 16, "batches carry the dataset version");
    assert!(first.iter().all(|b| b.dataset_version == version));
    // The same archive with one scene fewer: another plan, another version.
    let dir = tempfile::tempdir().unwrap();
    let scenes = cogfeed_server::demo::write_demo(dir.path()).unwrap();
    std::fs::remove_file(&scenes[0]).unwrap();
    let mut config = Config::demo(dir.path());
    config.datasets[0].on_bad_object = cogfeed_server::config::OnBadObject::Skip;
    let changed = start(config).await;
    let mut resume = request(pb::Sampler::Aligned, 4);
    resume.cursor = first[1].cursor;
    resume.dataset_version = version.clone();
    let mut client = Client::connect(&changed.addr).await.unwrap();
    let err = match client.stream(resume.clone()).await {
        Err(e) => e,
        Ok(mut s) => s.next().await.unwrap().unwrap_err(),
    };
    let text = err.to_string();
    assert!(
        text.contains("FailedPrecondition") || text.contains("failed precondition") || text.contains("changed"),
        "{text}"
    );
    assert!(text.contains(&version), "names the cursor's version: {text}");
    // On the unchanged daemon the same resume is the suffix; cursor 0 never checks.
    let tail = collect(&d.addr, resume.clone()).await;
    assert_eq!(digest(&tail), digest(&first[2..]));
    resume.cursor = 0;
    assert!(!collect(&changed.addr, resume).await.is_empty());
}

/// The Rust client measures how long its consumer waited for each batch and reports it
/// at the next stream open, as the Python loader does, so the dashboard's trainer-side
/// panel has data whichever client trains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_reports_its_data_wait_at_each_stream_open() {
    let d = demo().await;
    let client = Client::connect(&d.addr).await.unwrap();
    let mut r = request(pb::Sampler::Random, 8);
    r.job = "wait-job".into();
    r.max_batches = 4;
    let first: Vec<_> = client
        .stream_resumable(r.clone(), Duration::from_secs(5))
        .collect()
        .await;
    assert!(first.len() == 4 && first.iter().all(|b| b.is_ok()));
    let waited = client.data_wait_seconds();
    assert!(waited > 0.0, "a cold first batch is waited for");
    let labels = "dataset=\"demo\",job=\"wait-job\"";
    let metric_name = "cogfeed_client_data_wait_seconds_total";
    assert_eq!(
        metric(&d.app, metric_name, labels),
        0.0,
        "nothing to report at the first open"
    );
    let second: Vec<_> = client.stream_resumable(r, Duration::from_secs(5)).collect().await;
    assert_eq!(second.len(), 4);
    let reported = metric(&d.app, metric_name, labels);
    assert!((reported - waited).abs() < 1e-5, "reported {reported}, waited {waited}");
    assert!(client.data_wait_seconds() >= waited);
}
