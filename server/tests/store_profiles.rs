//! `[datasets.store]` against a real S3-compatible server (s3s-fs, installed by `.ci/test`):
//! a requester-pays dataset's requests carry `x-amz-request-payer: requester` and are
//! signed, an anonymous dataset's requests carry no signature at all, a dataset without
//! settings is signed as before, and all three serve the same bytes. What reaches the
//! server is read off the wire by a recording proxy between the daemon and s3s-fs.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::sync::{Arc, Mutex};

use cogfeed_client::{Client, pb};
use cogfeed_server::app::App;
use cogfeed_server::config::{Config, DatasetConfig, DatasetStoreConfig};
use common::proxy::{fetch_once, read_head};
use common::servers::{S3_KEY, S3_SECRET, s3_store, start_s3, start_s3_anonymous, upload};
use futures::StreamExt;

/// A proxy that forwards each request (one per connection) and keeps its head.
struct RecordingProxy {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

impl RecordingProxy {
    async fn start(upstream: u16) -> Self {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads: Arc<Mutex<Vec<String>>> = Arc::default();
        let recorded = heads.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let Some(text) = read_head(&mut client).await else {
                        return;
                    };
                    recorded.lock().unwrap().push(text.to_ascii_lowercase());
                    if let Some(response) = fetch_once(upstream, &text).await {
                        let _ = client.write_all(&response).await;
                    }
                });
            }
        });
        Self { port, heads }
    }

    /// The recorded heads of requests for `bucket`.
    fn heads_for(&self, bucket: &str) -> Vec<String> {
        let target = format!(" /{bucket}/");
        self.heads
            .lock()
            .unwrap()
            .iter()
            .filter(|h| h.lines().next().is_some_and(|l| l.contains(&target)))
            .cloned()
            .collect()
    }
}

async fn stream(addr: &str, dataset: &str) -> Vec<Vec<u8>> {
    let r = pb::StreamBatchesRequest {
        dataset: dataset.into(),
        sampler: pb::Sampler::Random as i32,
        patch_size: 128,
        batch_size: 4,
        seed: 5,
        samples_per_epoch: 16,
        world_size: 1,
        ..Default::default()
    };
    Client::connect(addr)
        .await
        .unwrap()
        .stream(r)
        .await
        .unwrap()
        .map(|b| b.unwrap().image.data.to_vec())
        .collect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requester_pays_and_anonymous_requests_reach_the_server_as_configured() {
    let root = tempfile::tempdir().unwrap();
    let buckets = ["payer", "public", "plain"];
    for b in buckets {
        std::fs::create_dir_all(root.path().join(b)).unwrap();
    }
    let (s3_port, _s3) = start_s3(root.path());
    // A server that checks signatures refuses unsigned requests: the public bucket is
    // served (from the same files) by a second s3s-fs that takes anonymous ones.
    let (open_port, _open) = start_s3_anonymous(root.path());
    let dir = tempfile::tempdir().unwrap();
    let scenes = cogfeed_server::demo::write_demo(dir.path()).unwrap();
    let names: Vec<String> = scenes[..2]
        .iter()
        .map(|s| s.file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    for b in buckets {
        let store = s3_store(s3_port, b);
        for (scene, name) in scenes.iter().zip(&names) {
            upload(&store, name, scene).await;
        }
    }
    let proxy = RecordingProxy::start(s3_port).await;
    let open_proxy = RecordingProxy::start(open_port).await;
    let mut config = Config::demo(dir.path());
    config.store.s3_endpoint = Some(format!("http://127.0.0.1:{}", proxy.port));
    config.store.s3_access_key_id = Some(S3_KEY.into());
    config.store.s3_secret_access_key = Some(S3_SECRET.into());
    let template = DatasetConfig {
        labels: None,
        ..config.datasets[0].clone()
    };
    let dataset = |bucket: &str, store: Option<DatasetStoreConfig>| DatasetConfig {
        name: bucket.into(),
        scenes: names.iter().map(|n| format!("s3://{bucket}/{n}")).collect(),
        store,
        ..template.clone()
    };
    config.datasets = vec![
        dataset(
            "payer",
            Some(DatasetStoreConfig {
                request_payer: true,
                ..Default::default()
            }),
        ),
        dataset(
            "public",
            Some(DatasetStoreConfig {
                anonymous: true,
                endpoint: Some(format!("http://127.0.0.1:{}", open_proxy.port)),
                ..Default::default()
            }),
        ),
        dataset("plain", None),
    ];
    let app = App::build(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = app.clone();
    tokio::spawn(async move { server.serve(listener, std::future::pending()).await });

    let plain = stream(&addr, "plain").await;
    assert_eq!(plain.len(), 4);
    assert_eq!(
        stream(&addr, "payer").await,
        plain,
        "requester-pays serves the same bytes"
    );
    assert_eq!(stream(&addr, "public").await, plain, "anonymous serves the same bytes");

    let payer = proxy.heads_for("payer");
    assert!(!payer.is_empty());
    for h in &payer {
        assert!(h.contains("\r\nx-amz-request-payer: requester\r\n"), "{h}");
        assert!(h.contains("\r\nauthorization: aws4-hmac-sha256 "), "signed: {h}");
    }
    let public = open_proxy.heads_for("public");
    assert!(!public.is_empty());
    assert!(
        proxy.heads_for("public").is_empty(),
        "the dataset's endpoint, not the daemon's"
    );
    for h in &public {
        assert!(!h.contains("\r\nauthorization:"), "unsigned: {h}");
        assert!(!h.contains("x-amz-request-payer"), "{h}");
    }
    let signed = proxy.heads_for("plain");
    assert!(!signed.is_empty());
    for h in &signed {
        assert!(h.contains("\r\nauthorization: aws4-hmac-sha256 "), "{h}");
        assert!(!h.contains("x-amz-request-payer"), "{h}");
    }
}

/// Two datasets that ask different things of one bucket are refused at start-up, and a
/// credential variable that is not set is named (its value never is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_or_unset_store_settings_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    cogfeed_server::demo::write_demo(dir.path()).unwrap();
    let mut config = Config::demo(dir.path());
    let base = DatasetConfig {
        labels: None,
        ..config.datasets[0].clone()
    };
    config.datasets = vec![
        DatasetConfig {
            name: "a".into(),
            scenes: vec!["s3://shared/x.tif".into()],
            store: Some(DatasetStoreConfig {
                anonymous: true,
                ..Default::default()
            }),
            ..base.clone()
        },
        DatasetConfig {
            name: "b".into(),
            scenes: vec!["s3://shared/y.tif".into()],
            store: Some(DatasetStoreConfig {
                request_payer: true,
                ..Default::default()
            }),
            ..base.clone()
        },
    ];
    let e = App::build(config.clone()).await.unwrap_err().to_string();
    assert!(e.contains("datasets a and b read s3://shared"), "{e}");
    config.datasets.truncate(1);
    config.datasets[0].store = Some(DatasetStoreConfig {
        access_key_id_env: Some("COGFEED_TEST_UNSET_KEY_ID".into()),
        secret_access_key_env: Some("COGFEED_TEST_UNSET_SECRET".into()),
        ..Default::default()
    });
    let e = App::build(config).await.unwrap_err().to_string();
    assert!(e.contains("COGFEED_TEST_UNSET_KEY_ID") && e.contains("not set"), "{e}");
}

/// The examples of "Reading public archives" (docs), pointed at real Earth Search, USGS
/// Landsat and Planetary Computer Items: they parse and validate, and every asset href,
/// rewritten, lands on a store with the page's settings. No network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_public_archive_examples_put_every_asset_on_its_configured_store() {
    use cogfeed_server::storage::Location;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("../docs/src/guide/public-archives.md")).unwrap();
    let blocks: Vec<&str> = page
        .split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    assert_eq!(blocks.len(), 3, "the page's examples");
    let fixtures = root.join("tests/fixtures/stac");
    let items = [
        (
            "s2-earth-search",
            "sentinel-s2-l2a-cogs__S2B_13SCV_20200630_0_L2A.json",
            "s3://sentinel-cogs/",
        ),
        (
            "landsat-c2l2-sr",
            "landsat-c2l2-sr__LC08_L2SP_028030_20200114_20200824_02_T1_SR.json",
            "s3://usgs-landsat/",
        ),
        (
            "s2-planetary-computer",
            "sentinel-2-l2a__S2B_MSIL2A_20240825T173909_R098_T13TDE_20240825T215747.json",
            "az://sentinel2-l2/",
        ),
    ];
    for (block, (name, item, bucket)) in blocks.iter().zip(items) {
        let doc = fixtures.join(item);
        let text = block
            .lines()
            .map(|l| match l.strip_prefix("stac = ") {
                Some(_) => format!("stac = {:?}", doc.display().to_string()),
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        let config = Config::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        config.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut config = config;
        assert_eq!(config.datasets[0].name, name);
        if config.datasets[0].store.as_ref().unwrap().access_key_id_env.is_some() {
            // Without the variables the start is refused, naming the first; then variables
            // every process has stand in for them.
            let e = cogfeed_server::dataset::store_rules::store_rules(&config.datasets)
                .unwrap_err()
                .to_string();
            assert!(e.contains("LANDSAT_AWS_ACCESS_KEY_ID") && e.contains("not set"), "{e}");
            let s = config.datasets[0].store.as_mut().unwrap();
            s.access_key_id_env = Some("PATH".into());
            s.secret_access_key_env = Some("PATH".into());
        }
        let c = &config.datasets[0];
        let store = c.store.clone().unwrap();
        let rules = cogfeed_server::dataset::store_rules::store_rules(&config.datasets).unwrap();
        let rewrite = cogfeed_stac::HrefRewrite::new(c.href_rewrite.clone());
        let parsed =
            cogfeed_server::dataset::map::load_items(&doc.display().to_string(), &rewrite, &Default::default())
                .await
                .unwrap();
        let mut checked = 0;
        for a in c.layers[0].assets.iter().map(|k| parsed[0].asset(k).unwrap()) {
            assert!(a.href.starts_with(bucket), "{name}: {}", a.href);
            let profile = rules
                .profile(&Location::parse(&a.href).unwrap())
                .expect("a configured store");
            assert_eq!(profile.config, store, "{name}: {}", a.href);
            checked += 1;
        }
        assert_eq!(checked, 3);
    }
}
