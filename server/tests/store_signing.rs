//! Planetary Computer signing against Azurite, which checks every SAS signature and expiry,
//! behind a local stand-in of the token API (`tests/support/pc_token_api.py`: Planetary
//! Computer cannot be reached from here) whose tokens live 2 s and which answers a 429, an
//! already-expired token and a 2 s stall: a stream that runs across several token lifetimes
//! delivers every batch, identical to the same files read locally, and no token shows in
//! an error.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use cogfeed_client::{Client, pb};
use cogfeed_server::app::App;
use cogfeed_server::config::{Config, DatasetConfig, DatasetStoreConfig, Sign};
use common::servers::{AZURITE_KEY, Proc, free_port, start_azurite, upload, wait_port};
use futures::StreamExt;
use object_store::ObjectStore;

fn request(dataset: &str) -> pb::StreamBatchesRequest {
    pb::StreamBatchesRequest {
        dataset: dataset.into(),
        sampler: pb::Sampler::Random as i32,
        patch_size: 256,
        batch_size: 4,
        seed: 9,
        samples_per_epoch: 120,
        world_size: 1,
        // Little read-ahead: the store is read at the consumer's pace, across token lifetimes.
        prefetch: 1,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_outlives_its_sas_tokens_and_delivers_every_batch() {
    let (az_port, _az) = start_azurite(&["pcdata"]);
    let dir = tempfile::tempdir().unwrap();
    // 2048² scenes: 64 tiles each, so a small cache keeps missing and the stream keeps
    // reading the store while tokens expire.
    let scenes = cogfeed_server::demo::write_scenes(dir.path(), 4, 2048).unwrap();
    let names: Vec<String> = scenes
        .iter()
        .map(|s| s.file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    let writer: Arc<dyn ObjectStore> = Arc::new(
        object_store::azure::MicrosoftAzureBuilder::new()
            .with_account("devstoreaccount1")
            .with_access_key(AZURITE_KEY)
            .with_endpoint(format!("http://127.0.0.1:{az_port}/devstoreaccount1"))
            .with_allow_http(true)
            .with_container_name("pcdata")
            .build()
            .unwrap(),
    );
    for (scene, name) in scenes.iter().zip(&names) {
        upload(&writer, name, scene).await;
    }
    let token_port = free_port();
    let log = dir.path().join("tokens.log");
    let _api = Proc(
        Command::new("python3")
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/pc_token_api.py"))
            .args([&token_port.to_string(), "2"])
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_port(token_port);

    let mut config = Config::demo(dir.path());
    // A cache of a few tiles: the stream keeps reading the store while tokens expire.
    config.cache.capacity_bytes = 1 << 20;
    config.limits.stream_queue_batches = 1;
    let local = DatasetConfig {
        name: "local".into(),
        labels: None,
        ..config.datasets[0].clone()
    };
    let signed = DatasetConfig {
        name: "pc".into(),
        scenes: names.iter().map(|n| format!("az://pcdata/{n}")).collect(),
        store: Some(DatasetStoreConfig {
            sign: Sign::PlanetaryComputer,
            sas_api: Some(format!("http://127.0.0.1:{token_port}/api/sas/v1")),
            account: Some("devstoreaccount1".into()),
            endpoint: Some(format!("http://127.0.0.1:{az_port}/devstoreaccount1")),
            ..Default::default()
        }),
        ..local.clone()
    };
    config.datasets = vec![local, signed];
    let app = App::build(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = app.clone();
    tokio::spawn(async move { server.serve(listener, std::future::pending()).await });

    let expected: Vec<Vec<u8>> = Client::connect(&addr)
        .await
        .unwrap()
        .stream(request("local"))
        .await
        .unwrap()
        .map(|b| b.unwrap().image.data.to_vec())
        .collect()
        .await;
    assert_eq!(expected.len(), 30);
    // A slow consumer: 30 batches over about 12 s, three token lifetimes.
    let started = std::time::Instant::now();
    let mut stream = Client::connect(&addr)
        .await
        .unwrap()
        .stream(request("pc"))
        .await
        .unwrap();
    let mut got = Vec::new();
    let (mut last_requests, mut last_read) = (0.0, Duration::ZERO);
    while let Some(b) = stream.next().await {
        let b = b.unwrap_or_else(|e| panic!("batch {} failed: {e}", got.len()));
        let requests: f64 = app
            .metrics
            .render()
            .lines()
            .filter(|l| l.starts_with("cogfeed_store_requests_total{") && l.contains("store=\"azure\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if requests > last_requests {
            last_requests = requests;
            last_read = started.elapsed();
        }
        got.push(b.image.data.to_vec());
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let elapsed = started.elapsed();
    assert!(got == expected, "signed batches differ from local ones");
    let timeline = std::fs::read_to_string(&log).unwrap();
    eprintln!(
        "stream of {} batches over {:.1} s, store read until {:.1} s ({last_requests} requests); token API (n, s, status, expiry):\n{timeline}",
        got.len(),
        elapsed.as_secs_f64(),
        last_read.as_secs_f64()
    );
    let answers: Vec<Vec<&str>> = timeline.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(answers[0][2], "429", "the first ask was throttled: {timeline}");
    // The expired answer (3) and the stalled one (4) were both asked for and got past.
    assert!(
        answers.len() >= 4,
        "tokens refreshed while the store was read: {timeline}"
    );
    // Tokens are fetched only when requests need them: the store was read across more
    // than two lifetimes, each refresh one fetch (no storm of refetches).
    let times: Vec<f64> = answers
        .iter()
        .filter(|a| a[2] == "200")
        .map(|a| a[1].parse().unwrap())
        .collect();
    assert!(times[times.len() - 1] - times[0] > 4.0, "{timeline}");
    assert!(answers.len() <= 12, "one fetch per refresh: {timeline}");
}
