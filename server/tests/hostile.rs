//! A hostile tenant and bad data, end to end against the daemon in-process: requests that
//! would exhaust memory, clients that lock others out (non-reading streams, floods of
//! calls and idle connections), corrupt tiles skipped deterministically, start-up checks
//! that name every bad object, and client strings that must not reach logs or errors raw.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cogfeed_client::{Client, ClientError, pb};
use cogfeed_proto::v1::feed_client::FeedClient;
use cogfeed_server::app::App;
use cogfeed_server::config::{Config, OnBadObject, OnCorrupt};
use common::inproc::{demo_dir, start};
use futures::StreamExt;
use sha2::{Digest, Sha256};

fn request(batch: u32) -> pb::StreamBatchesRequest {
    pb::StreamBatchesRequest {
        dataset: "demo".into(),
        job: "hostile".into(),
        sampler: pb::Sampler::Aligned as i32,
        patch_size: 256,
        batch_size: batch,
        seed: 3,
        world_size: 1,
        ..Default::default()
    }
}

/// A raw client whose connection comes from `local` (a loopback address of its own).
async fn raw_client(addr: &str, local: &str) -> FeedClient<tonic::transport::Channel> {
    let ip: IpAddr = local.parse().unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .local_address(Some(ip))
        .connect()
        .await
        .unwrap();
    FeedClient::new(channel)
        .max_decoding_message_size(1 << 30)
        .max_encoding_message_size(1 << 30)
}

fn code(e: &ClientError) -> tonic::Code {
    match e {
        ClientError::Status(s) => s.code(),
        other => panic!("not a status: {other}"),
    }
}

/// A copy of demo scene 0 with full-resolution tile 5 corrupted.
async fn broken_scene(dir: &Path) -> PathBuf {
    let src = demo_dir().join("scene_00.tif");
    let dst = dir.join("broken.tif");
    let mut bytes = std::fs::read(&src).unwrap();
    let cog = cogfeed_tiff::Cog::open(
        std::sync::Arc::new(cogfeed_tiff::MemoryReader::new("x", bytes.clone())),
        Default::default(),
    )
    .await
    .unwrap();
    let range = cog.level(0).unwrap().block_range(5).unwrap();
    for b in &mut bytes[range.start as usize..range.end as usize] {
        *b = 0x55;
    }
    std::fs::write(&dst, &bytes).unwrap();
    dst
}

fn digests(batches: &[cogfeed_client::Batch]) -> Vec<String> {
    batches
        .iter()
        .map(|b| hex::encode(Sha256::digest(&b.image.data)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_tiles_are_skipped_the_same_way_every_run_and_named_without_paths() {
    let dir = tempfile::tempdir().unwrap();
    let broken = broken_scene(dir.path()).await;
    let mut config = Config::demo(demo_dir());
    config.datasets[0].scenes = vec![
        broken.to_string_lossy().into_owned(),
        demo_dir().join("scene_01.tif").to_string_lossy().into_owned(),
    ];
    config.datasets[0].labels = None;
    config.datasets[0].on_corrupt = OnCorrupt::Skip;
    let d = start(config).await;
    let mut client = Client::connect(&d.addr).await.unwrap();
    let run = |client: &mut Client| {
        let mut c = client.clone();
        async move {
            let stream = c.stream(request(4)).await.unwrap();
            stream.map(|b| b.unwrap()).collect::<Vec<_>>().await
        }
    };
    let first = run(&mut client).await;
    let second = run(&mut client).await;
    assert_eq!(first.len(), 8, "every batch is sent (32 windows in batches of 4)");
    let skipped: Vec<_> = first.iter().flat_map(|b| b.skipped.clone()).collect();
    assert_eq!(skipped.len(), 1, "one window holds tile 5: {skipped:?}");
    assert_eq!(skipped[0].reason, "corrupt");
    let w = skipped[0].window.as_ref().unwrap();
    assert_eq!((w.scene, w.col, w.row), (0, 256, 256), "tile 5 of a 4x4 grid");
    let short: Vec<_> = first.iter().filter(|b| b.windows.len() == 3).collect();
    assert_eq!(short.len(), 1);
    assert_eq!(short[0].image.shape[0], 3, "the batch holds the samples that were read");
    assert_eq!(
        digests(&first),
        digests(&second),
        "a skip is a pure function of the data"
    );
    let text = d.app.metrics.render();
    assert!(
        text.contains("cogfeed_samples_skipped_total{dataset=\"demo\",reason=\"corrupt\"} 2"),
        "two runs, one skip each"
    );
    // Resuming past the corrupt sample works, and `fail` is still there per request.
    let mut resumed = request(4);
    resumed.cursor = 16;
    let rest: Vec<_> = client.stream(resumed).await.unwrap().collect().await;
    assert!(rest.iter().all(|b| b.is_ok()));
    let mut fail = request(4);
    fail.on_corrupt = "fail".into();
    let items: Vec<_> = client.stream(fail).await.unwrap().collect().await;
    let error = items.into_iter().find_map(|b| b.err()).unwrap();
    let ClientError::Status(s) = error else { panic!() };
    assert_eq!(s.code(), tonic::Code::DataLoss);
    assert!(
        s.message().contains("broken.tif") && s.message().contains("tile 5"),
        "{}",
        s.message()
    );
    let server_dir = dir.path().to_string_lossy().into_owned();
    assert!(
        !s.message().contains(&server_dir),
        "a server path leaked: {}",
        s.message()
    );
    let mut bad = request(4);
    bad.on_corrupt = "ignore".into();
    assert_eq!(
        code(&client.count(bad).await.unwrap_err()),
        tonic::Code::InvalidArgument
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_names_every_bad_object_and_can_serve_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    cogfeed_server::demo::write_scenes(root, 4, 512).unwrap();
    // Scene 1 cut short: its last tiles lie past the end of the file.
    let s1 = root.join("scene_01.tif");
    let len = std::fs::metadata(&s1).unwrap().len();
    let bytes = std::fs::read(&s1).unwrap();
    std::fs::write(&s1, &bytes[..(len as usize * 2 / 3)]).unwrap();
    // Scene 2's label is uint16 while the others are uint8.
    cogfeed_server::demo::write_band(&root.join("labels/scene_02.tif"), 512, 16, vec![1u8; 512 * 512 * 2]).unwrap();
    // Scene 3 has no label at all.
    std::fs::remove_file(root.join("labels/scene_03.tif")).unwrap();
    let mut config = Config::demo(root);
    config.datasets[0].scenes = (0..4)
        .map(|s| root.join(format!("scene_{s:02}.tif")).to_string_lossy().into_owned())
        .collect();
    let e = App::build(config.clone()).await.unwrap_err().to_string();
    for needle in [
        "scene_01.tif",
        "truncated",
        "labels/scene_02.tif",
        "uint16",
        "labels/scene_03.tif",
        "3 of 4",
    ] {
        assert!(e.contains(needle), "{needle:?} missing from: {e}");
    }
    config.datasets[0].on_bad_object = OnBadObject::Skip;
    let d = start(config).await;
    let mut client = Client::connect(&d.addr).await.unwrap();
    let info = client.describe("demo").await.unwrap();
    assert_eq!(info.scenes.len(), 1);
    assert_eq!(info.scenes[0].name, "scene_00.tif");
    let mut r = request(2);
    r.labels = true;
    let batches: Vec<_> = client.stream(r).await.unwrap().collect().await;
    assert_eq!(batches.len(), 2);
    for b in batches {
        let b = b.unwrap();
        let label = b.label.unwrap();
        assert_eq!(label.data.len(), label.shape.iter().product::<usize>(), "uint8 labels");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_with_fewer_levels_than_their_scene_are_refused_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    cogfeed_server::demo::write_scenes(root, 1, 512).unwrap();
    let mut config = Config::demo(root);
    config.datasets[0].scenes = vec![root.join("scene_00.tif").to_string_lossy().into_owned()];
    let lcog = cogfeed_tiff::Cog::open(
        std::sync::Arc::new(cogfeed_tiff::MemoryReader::new(
            "l",
            std::fs::read(root.join("labels/scene_00.tif")).unwrap(),
        )),
        Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(lcog.header().levels.len(), 2);
    // A label without its overview: the same file with the IFD chain cut after the first
    // IFD (next-IFD offset = 0).
    let mut bytes = std::fs::read(root.join("labels/scene_00.tif")).unwrap();
    let first_ifd = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    let entries = u16::from_le_bytes(bytes[first_ifd..first_ifd + 2].try_into().unwrap()) as usize;
    let next = first_ifd + 2 + entries * 12;
    bytes[next..next + 4].copy_from_slice(&[0, 0, 0, 0]);
    std::fs::create_dir_all(root.join("one")).unwrap();
    std::fs::write(root.join("one/scene_00.tif"), &bytes).unwrap();
    config.datasets[0].labels = Some(root.join("one/{stem}.tif").to_string_lossy().into_owned());
    let e = App::build(config).await.unwrap_err().to_string();
    assert!(e.contains("overview levels") && e.contains("one/scene_00.tif"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_sizes_and_strings_get_clear_errors() {
    let mut config = Config::demo(demo_dir());
    config.datasets[0].bands = Some(vec![1, 2, 3]);
    config.datasets[0].mean = Some(vec![30000.0; 3]);
    config.datasets[0].std = Some(vec![12000.0; 3]);
    let d = start(config).await;
    let mut client = Client::connect(&d.addr).await.unwrap();
    let read = |bands: Vec<u32>, size: u32| pb::ReadWindowRequest {
        dataset: "demo".into(),
        scene: 0,
        width: size,
        height: size,
        bands,
        ..Default::default()
    };
    // Forty copies of band 1: refused before anything is read.
    let e = client.read_window(read(vec![1; 40], 1024)).await.unwrap_err();
    assert_eq!(code(&e), tonic::Code::InvalidArgument, "{e}");
    // Band 4 exists in the file but the dataset serves 1..=3.
    let e = client.read_window(read(vec![4], 256)).await.unwrap_err();
    assert!(e.to_string().contains("not served"), "{e}");
    let mut r = request(2);
    r.bands = vec![1, 4];
    assert_eq!(code(&client.count(r).await.unwrap_err()), tonic::Code::InvalidArgument);
    let mut r = request(2);
    r.bands = vec![2, 2];
    assert_eq!(code(&client.count(r).await.unwrap_err()), tonic::Code::InvalidArgument);
    // A job name of 900 KB, one with a newline, one with ANSI escapes.
    for job in ["j".repeat(900_000), "a\nforged line".into(), "\u{1b}[31mred".into()] {
        let mut r = request(2);
        r.job = job;
        let e = client.stream(r).await.err().unwrap();
        assert_eq!(code(&e), tonic::Code::InvalidArgument);
        assert!(
            e.to_string().len() < 400,
            "the error echoes at most a bounded, escaped name"
        );
    }
    // A 900 KB dataset name: NOT_FOUND with a bounded message.
    let mut r = request(2);
    r.dataset = "d".repeat(900_000);
    let e = client.count(r).await.unwrap_err();
    assert_eq!(code(&e), tonic::Code::NotFound);
    assert!(e.to_string().len() < 400);
    // /metrics did not grow with any of it.
    assert!(d.app.metrics.render().len() < 200_000);
    // A legitimate window still reads.
    let (image, _) = client.read_window(read(vec![1, 3], 300)).await.unwrap();
    assert_eq!(image.shape, vec![2, 300, 300]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_is_admitted_against_one_budget() {
    let mut config = Config::demo(demo_dir());
    config.limits.memory_budget_bytes = Some(64 << 20);
    config.limits.memory_per_caller_bytes = Some(64 << 20);
    config.limits.admission_wait_secs = 0.5;
    let d = start(config).await;
    let mut client = Client::connect(&d.addr).await.unwrap();
    // One batch of 64 x 4 x 256 x 256 x 2 = 32 MiB: its stream would hold 8 of them.
    let mut big = request(64);
    big.sampler = pb::Sampler::Random as i32;
    big.samples_per_epoch = 640;
    let e = client.stream(big.clone()).await.err().unwrap();
    assert_eq!(code(&e), tonic::Code::ResourceExhausted, "{e}");
    assert!(
        e.to_string().contains("320.0 MiB") && e.to_string().contains("limits.memory_"),
        "{e}"
    );
    // Small streams that never read: admitted until the budget is spent, then refused
    // after the admission wait; never an abort.
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..16 {
        let mut c = client.clone();
        match c.stream(request(4)).await {
            Ok(s) => held.push(s),
            Err(e) => {
                assert_eq!(code(&e), tonic::Code::ResourceExhausted, "{e}");
                refused += 1;
            }
        }
    }
    assert!(
        refused > 0 && !held.is_empty(),
        "{} held, {refused} refused",
        held.len()
    );
    let reserved = d.app.memory.total_bytes() - d.app.memory.available_bytes();
    assert!(reserved <= 64 << 20);
    // Closing them returns the memory.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    while d.app.memory.available_bytes() < d.app.memory.total_bytes() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(d.app.memory.available_bytes(), d.app.memory.total_bytes());
    // A window that fits the budget reads.
    let (image, _) = client
        .read_window(pb::ReadWindowRequest {
            dataset: "demo".into(),
            width: 1024,
            height: 1024,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(image.data.len(), 4 * 1024 * 1024 * 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_lock_the_others_out() {
    let mut config = Config::demo(demo_dir());
    config.limits.stall_timeout_secs = 2.0;
    config.limits.requests_per_second = 20;
    config.limits.memory_budget_bytes = Some(256 << 20);
    config.limits.memory_per_caller_bytes = Some(64 << 20);
    config.limits.admission_wait_secs = 0.2;
    let d = start(config).await;
    // A flooder at 127.0.0.2: 256 tiny non-reading streams on one connection.
    let flooder = raw_client(&d.addr, "127.0.0.2").await;
    let mut opened = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..256 {
        let mut f = flooder.clone();
        tasks.push(tokio::spawn(async move {
            let mut r = request(4);
            r.sampler = pb::Sampler::Random as i32;
            r.samples_per_epoch = 100_000;
            tokio::time::timeout(Duration::from_secs(1), f.stream_batches(r)).await
        }));
    }
    for t in tasks {
        if let Ok(Ok(s)) = t.await.unwrap() {
            opened.push(s);
        }
    }
    assert!(
        !opened.is_empty() && opened.len() <= 3,
        "the flooder got {} streams of 24 MiB (its memory share is 64 MiB)",
        opened.len()
    );
    assert!(
        d.app
            .metrics
            .render()
            .contains("cogfeed_admission_refused_total{limit=\"caller_memory\"}")
    );
    // And floods calls, spending its own rate allowance.
    let mut f = flooder.clone();
    let mut throttled = 0;
    for _ in 0..100 {
        if let Err(s) = f.list_datasets(pb::ListDatasetsRequest {}).await
            && s.code() == tonic::Code::ResourceExhausted
        {
            throttled += 1;
        }
    }
    assert!(throttled > 0, "the flood was not throttled");
    // Another client at 127.0.0.3 streams normally meanwhile, and reads a 16 MiB window:
    // the flooder cannot have spent the daemon's memory.
    let mut other = raw_client(&d.addr, "127.0.0.3").await;
    let mut s = other.stream_batches(request(2)).await.unwrap().into_inner();
    let mut got = 0;
    while let Some(b) = s.message().await.unwrap() {
        assert_eq!(b.windows.len(), 2);
        got += 1;
    }
    assert_eq!(got, 32, "64 aligned windows in batches of 2");
    let w = other
        .read_window(pb::ReadWindowRequest {
            dataset: "demo".into(),
            width: 1024,
            height: 1024,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(w.image.unwrap().data.len(), 8 << 20);
    // The flooder's streams end after the stall timeout: slots and memory come back.
    let deadline = Instant::now() + Duration::from_secs(15);
    while d.app.active_streams() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(d.app.active_streams(), 0, "stalled streams still hold their slots");
    assert!(d.app.metrics.render().contains("cogfeed_stream_stalled_total"));
    drop(opened);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_cannot_keep_clients_out() {
    cogfeed_server::api::connections::raise_fd_limit();
    let mut config = Config::demo(demo_dir());
    config.limits.max_connections = 200;
    config.limits.idle_timeout_secs = 2.0;
    let d = start(config).await;
    // 400 TCP connections that never say anything.
    let mut idle = Vec::new();
    for _ in 0..400 {
        idle.push(tokio::net::TcpStream::connect(&d.addr).await.unwrap());
    }
    // A real client gets in at once: the connection idle longest made room for it.
    let started = Instant::now();
    let mut client = tokio::time::timeout(Duration::from_secs(5), Client::connect(&d.addr))
        .await
        .unwrap()
        .unwrap();
    let batches: Vec<_> = client.stream(request(4)).await.unwrap().collect().await;
    assert_eq!(batches.len(), 16);
    assert!(started.elapsed() < Duration::from_secs(5));
    // After the idle timeout the silent ones are gone.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let text = d.app.metrics.render();
    let open: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix("cogfeed_connections_open "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(open <= 2, "{open} connections still open");
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_are_not_rate_limited_but_clients_are() {
    let mut config = Config::demo(demo_dir());
    config.limits.requests_per_second = 2;
    let d = start(config).await;
    let scene = d.app.catalog.get("demo").unwrap().scenes[0].object.clone().unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", d.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut peer = cogfeed_proto::v1::peer_client::PeerClient::new(channel.clone()).max_decoding_message_size(1 << 30);
    for block in 0..20 {
        let tile = peer
            .get_tile(pb::TileRequest {
                object: scene.url.to_string(),
                version: scene.version.to_string(),
                level: 0,
                block,
            })
            .await
            .unwrap_or_else(|s| panic!("peer call {block} refused: {s}"));
        assert!(!tile.into_inner().data.is_empty());
    }
    // The same caller through the Feed service is held to its 2 calls per second.
    let mut feed = FeedClient::new(channel);
    let mut throttled = 0;
    for _ in 0..20 {
        if let Err(s) = feed.list_datasets(pb::ListDatasetsRequest {}).await {
            assert_eq!(s.code(), tonic::Code::ResourceExhausted);
            throttled += 1;
        }
    }
    assert!(throttled >= 10, "{throttled} of 20 throttled");
}
