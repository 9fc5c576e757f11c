//! The status page against a running daemon: datasets, footprints and a live stream in the
//! HTML, previews as PNG, the metrics token (bearer or Basic), nothing the API would not
//! show, and the page loaded in a real headless Chromium (DOM and screenshot).
//!
//! Chromium is Debian's `chromium`; without it the browser part is skipped, unless
//! `COGFEED_REQUIRE_BROWSER=1` (CI) makes that a failure. `COGFEED_SCREENSHOT_DIR` keeps
//! the screenshot and a preview there (the README's pictures).

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use base64::Engine;
use futures::StreamExt;
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use cogfeed_client::{Client, pb};
use cogfeed_server::app::App;
use cogfeed_server::config::Config;

struct Reply {
    status: u16,
    head: String,
    body: Vec<u8>,
}

async fn get(addr: SocketAddr, path: &str, authorization: Option<&str>) -> Reply {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let status = head[9..12].parse().unwrap();
    let mut body = out[split + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    Reply { status, head, body }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&b[..line]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[line + 2..line + 2 + n]);
        b = &b[line + 2 + n + 2..];
    }
}

/// Width and height from a PNG's IHDR.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
    (w, h)
}

struct Running {
    grpc: String,
    http: SocketAddr,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start(token: Option<&str>) -> Running {
    start_with(token, |_| {}).await
}

async fn start_with(token: Option<&str>, adjust: impl FnOnce(&mut Config)) -> Running {
    let dir = tempfile::tempdir().unwrap();
    cogfeed_server::demo::write_demo(dir.path()).unwrap();
    cogfeed_server::demo::stac::write_stac_demo(&dir.path().join("stac")).unwrap();
    cogfeed_server::demo::series::write_series_demo(&dir.path().join("series")).unwrap();
    let mut config = Config::demo_default(dir.path());
    if let Some(t) = token {
        config.auth.metrics_token_sha256 = Some(hex::encode(sha2::Sha256::digest(t.as_bytes())));
    }
    adjust(&mut config);
    let app = App::build(config).await.unwrap();
    let grpc_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let grpc = grpc_listener.local_addr().unwrap().to_string();
    let http = http_listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let metrics = app.clone();
    tokio::spawn(async move { metrics.serve_metrics(http_listener, std::future::pending()).await });
    tokio::spawn(async move {
        app.serve(grpc_listener, async {
            let _ = rx.await;
        })
        .await
        .unwrap()
    });
    Running {
        grpc,
        http,
        _dir: dir,
        _stop: tx,
    }
}

/// A stream that outlasts the test: 8 MiB batches, far more than HTTP/2 buffers hold, so it
/// stays open while nobody reads.
fn request(dataset: &str, job: &str) -> pb::StreamBatchesRequest {
    pb::StreamBatchesRequest {
        dataset: dataset.into(),
        job: job.into(),
        sampler: pb::Sampler::Random as i32,
        patch_size: 256,
        batch_size: 16,
        samples_per_epoch: 100_000,
        world_size: 2,
        rank: 1,
        dtype: "native".into(),
        ..Default::default()
    }
}

fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser"].into_iter().find(|b| {
        Command::new(b)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        assert!(
            std::env::var("COGFEED_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "COGFEED_REQUIRE_BROWSER=1 but no chromium: install Debian's chromium"
        );
        eprintln!("skipping the browser part: no chromium on this machine");
    }
    found
}

/// Runs headless Chromium on `url` with `args`; returns stdout.
fn browse(bin: &str, profile: &Path, url: &str, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_datasets_footprints_and_live_streams_in_a_real_browser() {
    let d = start(None).await;
    let page = get(d.http, "/", None).await;
    assert_eq!(page.status, 200);
    assert!(page.head.contains("text/html"));
    let html = String::from_utf8(page.body).unwrap();
    assert!(html.contains(r#"data-name="demo""#) && html.contains(r#"data-name="demo-stac""#));
    assert!(html.contains("No stream is open."));
    // Four demo scenes and two STAC reference grids, plus three Item bboxes.
    assert!(html.matches(r#"class="footprint""#).count() >= 9, "{html}");
    // Names only: never the data directory the URLs point into.
    assert!(!html.contains(d._dir.path().to_str().unwrap()));
    assert!(!html.contains("file://"));

    // A stream that stays open while the page is read.
    let mut client = Client::connect(&d.grpc).await.unwrap();
    let mut stream = Box::pin(client.stream(request("demo", "train-unet")).await.unwrap());
    let first = stream.next().await.unwrap().unwrap();
    assert!(first.cursor > 0);
    let html = String::from_utf8(get(d.http, "/", None).await.body).unwrap();
    assert!(
        html.contains(r#"<tr class="stream" data-dataset="demo" data-job="train-unet">"#),
        "{html}"
    );
    assert!(html.contains("1/2"), "rank/world shown");

    let png = get(d.http, "/preview.png?dataset=demo-stac&seed=3", None).await;
    assert_eq!(png.status, 200, "{}", String::from_utf8_lossy(&png.body));
    let (w, h) = png_size(&png.body);
    assert!(w > 300 && h > 300, "{w}x{h}");
    let demo = get(d.http, "/preview.png?dataset=demo", None).await;
    assert_eq!(demo.status, 200);
    assert_eq!(get(d.http, "/preview.png?dataset=nope", None).await.status, 404);
    // A flood of previews: two are drawn at a time, the rest refused at once (429), and the
    // daemon keeps serving.
    let flood: Vec<_> = (0..8)
        .map(|i| {
            tokio::spawn(async move {
                get(d.http, &format!("/preview.png?dataset=demo&seed={i}"), None)
                    .await
                    .status
            })
        })
        .collect();
    let mut codes = Vec::new();
    for f in flood {
        codes.push(f.await.unwrap());
    }
    assert!(codes.iter().all(|c| *c == 200 || *c == 429), "{codes:?}");
    assert!(codes.contains(&200), "{codes:?}");
    assert_eq!(get(d.http, "/", None).await.status, 200);
    assert_eq!(get(d.http, "/preview.png", None).await.status, 400);

    if let Some(bin) = chromium() {
        let profile = tempfile::tempdir().unwrap();
        let url = format!("http://{}/?preview=demo-stac", d.http);
        let dom = browse(bin, profile.path(), &url, &["--dump-dom"]);
        assert!(dom.contains(r#"src="/preview.png?dataset=demo-stac""#));
        assert!(
            dom.contains(r#"data-name="demo-stac""#) && dom.contains(r#"data-job="train-unet""#),
            "{dom}"
        );
        assert!(dom.contains("<svg") && dom.contains("footprint"));
        let shots = std::env::var("COGFEED_SCREENSHOT_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|_| profile.path().to_path_buf());
        std::fs::create_dir_all(&shots).unwrap();
        let shot = shots.join("status-page.png");
        browse(
            bin,
            profile.path(),
            &url,
            &[&format!("--screenshot={}", shot.display()), "--window-size=1100,1700"],
        );
        let bytes = std::fs::read(&shot).unwrap();
        assert_eq!(png_size(&bytes), (1100, 1700));
        assert!(
            bytes.len() > 20_000,
            "a blank screenshot is tiny: {} bytes",
            bytes.len()
        );
        std::fs::write(shots.join("preview-demo-stac.png"), &png.body).unwrap();
    }
    drop(stream);
    // The entry goes with its stream.
    let mut gone = false;
    for _ in 0..50 {
        let html = String::from_utf8(get(d.http, "/", None).await.body).unwrap();
        if !html.contains("train-unet") {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(gone, "a closed stream left the page");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_pictures_need_the_metrics_token() {
    let d = start(Some("ops-secret")).await;
    let basic = |up: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(up));
    for path in ["/", "/preview.png?dataset=demo"] {
        let r = get(d.http, path, None).await;
        assert_eq!(r.status, 401, "{path}");
        assert!(r.head.contains("Basic realm"), "{}", r.head);
        assert_eq!(get(d.http, path, Some("Bearer wrong")).await.status, 401);
        assert_eq!(get(d.http, path, Some(&basic("ops:wrong"))).await.status, 401);
        assert_eq!(
            get(d.http, path, Some(&basic("anyone:ops-secret"))).await.status,
            200,
            "{path}"
        );
        assert_eq!(get(d.http, path, Some("Bearer ops-secret")).await.status, 200, "{path}");
    }
    // The token is never echoed into the page.
    let html = get(d.http, "/", Some("Bearer ops-secret")).await.body;
    assert!(!String::from_utf8(html).unwrap().contains("ops-secret"));
}

fn sha(t: &str) -> String {
    hex::encode(sha2::Sha256::digest(t.as_bytes()))
}

/// Tokens required: `alpha` reads `demo` only.
fn secured(c: &mut Config) {
    c.auth.required = true;
    c.auth.tokens = vec![cogfeed_server::config::TokenConfig {
        sha256: sha("alpha"),
        datasets: vec!["demo".into()],
        name: Some("alpha".into()),
        max_streams: None,
        requests_per_second: None,
    }];
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previews_are_data_and_honour_dataset_scopes() {
    let d = start_with(Some("ops-secret"), secured).await;
    let basic = |up: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(up));
    let demo = "/preview.png?dataset=demo";
    let series = "/preview.png?dataset=demo-series";
    // A data token previews what it may read, as Bearer or as the Basic password.
    let ok = get(d.http, demo, Some("Bearer alpha")).await;
    assert_eq!(ok.status, 200);
    png_size(&ok.body);
    assert_eq!(get(d.http, demo, Some(&basic("me:alpha"))).await.status, 200);
    let denied = get(d.http, series, Some("Bearer alpha")).await;
    assert_eq!(denied.status, 403, "{}", String::from_utf8_lossy(&denied.body));
    // The metrics token sees the page but, with tokens required, previews nothing unless
    // auth.metrics_datasets says so.
    assert_eq!(get(d.http, "/", Some("Bearer ops-secret")).await.status, 200);
    assert_eq!(get(d.http, demo, Some("Bearer ops-secret")).await.status, 403);
    assert_eq!(get(d.http, demo, None).await.status, 401);
    assert_eq!(get(d.http, "/", Some("Bearer alpha")).await.status, 401);
    assert_eq!(get(d.http, "/metrics", None).await.status, 401);
    let scoped = start_with(Some("ops-secret"), |c| {
        secured(c);
        c.auth.metrics_datasets = Some(vec!["demo-series".into()]);
    })
    .await;
    assert_eq!(get(scoped.http, series, Some("Bearer ops-secret")).await.status, 200);
    assert_eq!(get(scoped.http, demo, Some("Bearer ops-secret")).await.status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_required_without_a_metrics_token_close_the_listener() {
    let d = start_with(None, secured).await;
    for (path, auth) in [
        ("/", None),
        ("/", Some("Bearer alpha")),
        ("/preview.png?dataset=demo", None),
        ("/preview.png?dataset=demo", Some("Bearer alpha")),
        ("/metrics", None),
    ] {
        let r = get(d.http, path, auth).await;
        assert_eq!(r.status, 403, "{path} {auth:?}");
        assert!(
            String::from_utf8_lossy(&r.body).contains("auth.metrics_token_sha256"),
            "{path}: says why"
        );
    }
    // The probes still answer.
    assert_eq!(get(d.http, "/healthz", None).await.status, 200);
}

/// Waits until the daemon serves: `serve` runs on a task of its own, and until it starts
/// `/readyz` answers 503 "starting" (on two busy cores that can take a moment).
async fn until_serving(http: SocketAddr) {
    for _ in 0..200 {
        if !get(http, "/readyz", None).await.body.starts_with(b"starting") {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the daemon did not start serving within 10 s");
}

/// One dataset whose STAC document is missing: the others serve, it is unready on
/// `/readyz`, the page, `/metrics` and to gRPC, and it joins once the document appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dataset_that_fails_to_open_is_unready_and_the_others_serve() {
    let moved = std::sync::Mutex::new(None);
    let d = start_with(None, |c| {
        let ds = c.datasets.iter_mut().find(|d| d.name == "demo-stac").unwrap();
        let doc = std::path::PathBuf::from(ds.stac.clone().unwrap());
        let aside = doc.with_extension("json.aside");
        std::fs::rename(&doc, &aside).unwrap();
        *moved.lock().unwrap() = Some((doc, aside));
    })
    .await;
    let (doc, aside) = moved.lock().unwrap().take().unwrap();
    until_serving(d.http).await;
    let ready = get(d.http, "/readyz", None).await;
    let body = String::from_utf8_lossy(&ready.body).into_owned();
    assert_eq!(ready.status, 200, "the daemon serves the others: {body}");
    assert!(body.contains("1 of 3 configured datasets unready"), "{body}");
    assert_eq!(get(d.http, "/readyz?dataset=demo", None).await.status, 200);
    assert_eq!(get(d.http, "/readyz?dataset=demo-stac", None).await.status, 503);
    assert_eq!(get(d.http, "/readyz?dataset=no-such", None).await.status, 503);
    let page = String::from_utf8(get(d.http, "/", None).await.body).unwrap();
    assert!(
        page.contains("dataset unready\" data-name=\"demo-stac\""),
        "the page lists it"
    );
    assert!(!page.contains(&doc.display().to_string()), "and no path");
    let metrics = String::from_utf8(get(d.http, "/metrics", None).await.body).unwrap();
    assert!(metrics.contains("cogfeed_datasets_unready 1"));
    let mut client = Client::connect(&d.grpc).await.unwrap();
    assert!(client.describe("demo").await.is_ok(), "the others serve");
    let Err(cogfeed_client::ClientError::Status(s)) = client.describe("demo-stac").await else {
        panic!("an unready dataset is an error");
    };
    assert_eq!(s.code(), tonic::Code::Unavailable, "{}", s.message());
    assert!(
        s.message().starts_with("dataset demo-stac is not ready"),
        "{}",
        s.message()
    );
    assert!(!s.message().contains(&doc.display().to_string()), "{}", s.message());
    // The document comes back: the next retry (2 s after the first failure) opens it.
    std::fs::rename(&aside, &doc).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while client.describe("demo-stac").await.is_err() {
        assert!(std::time::Instant::now() < deadline, "never retried");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(
        String::from_utf8(get(d.http, "/readyz", None).await.body).unwrap(),
        "ready\n"
    );
    let metrics = String::from_utf8(get(d.http, "/metrics", None).await.body).unwrap();
    assert!(metrics.contains("cogfeed_datasets_unready 0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_all_datasets_and_a_config_where_none_opens_refuse_to_start() {
    let dir = tempfile::tempdir().unwrap();
    cogfeed_server::demo::write_demo(dir.path()).unwrap();
    let mut config = Config::demo_default(dir.path());
    for d in &mut config.datasets {
        if d.name == "demo-stac" {
            d.stac = Some(dir.path().join("missing.json").display().to_string());
        }
    }
    config.server.require_all_datasets = true;
    let e = App::build(config.clone()).await.unwrap_err().to_string();
    assert!(e.contains("missing.json") || e.contains("demo-stac"), "{e}");
    // Every dataset broken: nothing would serve, so start-up fails naming each.
    config.server.require_all_datasets = false;
    for d in &mut config.datasets {
        if d.stac.is_some() {
            d.stac = Some(dir.path().join("missing.json").display().to_string());
        } else {
            d.scenes = vec![dir.path().join("gone.tif").display().to_string()];
            d.prefix = None;
            d.manifest = None;
        }
    }
    let e = App::build(config).await.unwrap_err().to_string();
    assert!(e.contains("no dataset could be opened"), "{e}");
}
