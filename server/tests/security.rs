//! Security end to end: bearer tokens and dataset scopes, per-token / per-job / call-rate
//! limits under concurrency, TLS and mTLS handshakes with the Rust client (certificates
//! made by rcgen), certificate reload, the metrics token, absurd requests and secrets kept
//! out of errors and config dumps.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use common::inproc::{demo_dir, start};
use std::path::{Path, PathBuf};

use cogfeed_client::{Client, ClientError, ConnectOptions, pb};
use cogfeed_server::app::App;
use cogfeed_server::config::{Config, TlsConfig, TokenConfig};
use futures::StreamExt;
use sha2::{Digest, Sha256};

fn sha(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

const ALPHA: &str = "alpha-7f3c9b1e-token";
const ROOT: &str = "root-0d4e88aa-token";

/// The demo dataset twice ("demo" and "other"), tokens ALPHA (demo only, 2 streams,
/// 5 calls/s) and ROOT (everything).
fn secured() -> Config {
    let mut c = Config::demo(demo_dir());
    let mut other = c.datasets[0].clone();
    other.name = "other".into();
    c.datasets.push(other);
    c.auth.required = true;
    c.auth.tokens = vec![
        TokenConfig {
            sha256: sha(ALPHA),
            datasets: vec!["demo".into()],
            name: Some("alpha".into()),
            max_streams: Some(2),
            requests_per_second: Some(5),
        },
        TokenConfig {
            sha256: sha(ROOT),
            datasets: vec!["*".into()],
            name: Some("root".into()),
            max_streams: None,
            requests_per_second: None,
        },
    ];
    c.auth.metrics_token_sha256 = Some(sha("scrape-me"));
    c
}

async fn client(addr: &str, token: Option<&str>) -> Client {
    let options = ConnectOptions {
        token: token.map(str::to_string),
        ..Default::default()
    };
    Client::connect_with(addr, options).await.unwrap()
}

fn code(e: ClientError) -> (tonic::Code, String) {
    match e {
        ClientError::Status(s) => (s.code(), s.message().to_string()),
        other => panic!("not a status: {other}"),
    }
}

fn request(dataset: &str, job: &str) -> pb::StreamBatchesRequest {
    pb::StreamBatchesRequest {
        dataset: dataset.into(),
        job: job.into(),
        sampler: pb::Sampler::Aligned as i32,
        patch_size: 256,
        batch_size: 2,
        world_size: 1,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_decide_who_reads_what() {
    let d = start(secured()).await;
    // No token, a wrong token: UNAUTHENTICATED on every call.
    for token in [None, Some("wrong-token")] {
        let mut c = client(&d.addr, token).await;
        let (c1, m1) = code(c.datasets().await.unwrap_err());
        assert_eq!(c1, tonic::Code::Unauthenticated, "{m1}");
        let (c2, _) = code(c.describe("demo").await.unwrap_err());
        assert_eq!(c2, tonic::Code::Unauthenticated);
        let Err(e) = c.stream(request("demo", "t")).await else {
            panic!("stream without a valid token")
        };
        assert_eq!(code(e).0, tonic::Code::Unauthenticated);
    }
    // ALPHA sees and reads only demo.
    let mut alpha = client(&d.addr, Some(ALPHA)).await;
    let names: Vec<String> = alpha.datasets().await.unwrap().into_iter().map(|d| d.name).collect();
    assert_eq!(names, vec!["demo".to_string()]);
    alpha.describe("demo").await.unwrap();
    let (c, msg) = code(alpha.describe("other").await.unwrap_err());
    assert_eq!(c, tonic::Code::PermissionDenied, "{msg}");
    assert!(msg.contains("alpha") && msg.contains("other"), "{msg}");
    assert!(!msg.contains(ALPHA), "the token leaked into an error: {msg}");
    let Err(e) = alpha.stream(request("other", "t")).await else {
        panic!("stream outside the token's datasets")
    };
    assert_eq!(code(e).0, tonic::Code::PermissionDenied);
    let (c, _) = code(
        alpha
            .read_window(pb::ReadWindowRequest {
                dataset: "other".into(),
                width: 8,
                height: 8,
                ..Default::default()
            })
            .await
            .unwrap_err(),
    );
    assert_eq!(c, tonic::Code::PermissionDenied);
    // Not even existence leaks: an unknown dataset is denied, not "not found".
    let (c, _) = code(alpha.describe("s3://bucket/secret.tif").await.unwrap_err());
    assert_eq!(c, tonic::Code::PermissionDenied);
    let want = alpha.count(request("demo", "t")).await.unwrap().batches;
    let n = alpha.stream(request("demo", "t")).await.unwrap().count().await;
    assert_eq!(n as u64, want);
    // ROOT reads both.
    let mut root = client(&d.addr, Some(ROOT)).await;
    assert_eq!(root.datasets().await.unwrap().len(), 2);
    root.describe("other").await.unwrap();
    // Neither token appears in the metrics.
    let text = d.app.metrics.render();
    assert!(!text.contains(ALPHA) && !text.contains(ROOT));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_under_concurrency() {
    let mut config = secured();
    config.limits.max_streams_per_job = 3;
    let d = start(config).await;
    // ALPHA: 2 concurrent streams.
    let alpha = client(&d.addr, Some(ALPHA)).await;
    let mut root = client(&d.addr, Some(ROOT)).await;
    // Open streams concurrently: exactly 2 get in.
    let attempts = futures::future::join_all((0..5).map(|i| {
        let mut c = alpha.clone();
        async move { c.stream(request("demo", &format!("j{i}"))).await }
    }))
    .await;
    let (open, refused): (Vec<_>, Vec<_>) = attempts.into_iter().partition(|r| r.is_ok());
    assert_eq!(open.len(), 2, "per-token stream limit");
    for r in refused {
        let Err(e) = r else { unreachable!() };
        let (c, msg) = code(e);
        assert_eq!(c, tonic::Code::ResourceExhausted, "{msg}");
        assert!(msg.contains("alpha") && msg.contains("limit 2"), "{msg}");
    }
    drop(open);
    // Per job: 3 streams of job "train", whoever opens them.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(root.stream(request("demo", "train")).await.unwrap());
    }
    let Err(e) = root.stream(request("demo", "train")).await else {
        panic!("a 4th stream of one job got in")
    };
    let (c, msg) = code(e);
    assert_eq!(c, tonic::Code::ResourceExhausted);
    assert!(msg.contains("train"), "{msg}");
    let other_job = root.stream(request("demo", "eval")).await.unwrap();
    drop((held, other_job));
    // Call rate: ALPHA has 5/s with bursts of 10; 40 calls at once cannot all pass, and
    // ROOT is not slowed down by ALPHA's limit.
    let results = futures::future::join_all((0..40).map(|_| {
        let mut c = alpha.clone();
        async move { c.datasets().await }
    }))
    .await;
    let limited: Vec<String> = results
        .into_iter()
        .filter_map(|r| r.err())
        .map(|e| {
            let (c, m) = code(e);
            assert_eq!(c, tonic::Code::ResourceExhausted, "{m}");
            m
        })
        .collect();
    assert!(limited.len() >= 20, "only {} of 40 calls limited", limited.len());
    assert!(limited[0].contains("rate"), "{}", limited[0]);
    root.datasets().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_requests_are_refused_before_any_work() {
    let d = start(Config::demo(demo_dir())).await;
    let mut c = client(&d.addr, None).await;
    let absurd = [
        pb::StreamBatchesRequest {
            batch_size: u32::MAX,
            ..request("demo", "x")
        },
        pb::StreamBatchesRequest {
            patch_size: u32::MAX,
            ..request("demo", "x")
        },
        pb::StreamBatchesRequest {
            batch_size: 4096,
            patch_size: 4096,
            ..request("demo", "x")
        },
        pb::StreamBatchesRequest {
            level: u32::MAX,
            ..request("demo", "x")
        },
        pb::StreamBatchesRequest {
            bands: vec![u32::MAX],
            ..request("demo", "x")
        },
        pb::StreamBatchesRequest {
            dataset: "../../etc/passwd".into(),
            ..request("demo", "x")
        },
    ];
    for r in absurd {
        let Err(e) = c.stream(r.clone()).await else {
            panic!("accepted: {r:?}")
        };
        let (code, msg) = code(e);
        assert!(
            matches!(
                code,
                tonic::Code::InvalidArgument | tonic::Code::ResourceExhausted | tonic::Code::NotFound
            ),
            "{r:?}: {code:?} {msg}"
        );
    }
    for (col, row, w, h, level) in [
        (u64::MAX, 0, 8, 8, 0),
        (0, u64::MAX - 4, 8, 8, 0),
        (0, 0, u32::MAX, u32::MAX, 0),
        (0, 0, 8, 8, u32::MAX),
    ] {
        let r = pb::ReadWindowRequest {
            dataset: "demo".into(),
            col,
            row,
            width: w,
            height: h,
            level,
            ..Default::default()
        };
        let (code, msg) = code(c.read_window(r).await.unwrap_err());
        assert_eq!(code, tonic::Code::InvalidArgument, "{msg}");
    }
    // The daemon is still fine.
    assert_eq!(c.datasets().await.unwrap().len(), 1);
}

/// A CA and a certificate it signed for `localhost` / 127.0.0.1, plus a client certificate.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn make_pki(dir: &Path, tag: &str) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("cogfeed test CA {tag}"));
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&server_key, &ca)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(vec!["trainer".to_string()]).unwrap();
    client_params.distinguished_name.push(DnType::CommonName, "trainer");
    let client = client_params.signed_by(&client_key, &ca).unwrap();
    let write = |name: &str, text: String| {
        let p = dir.join(format!("{tag}-{name}"));
        std::fs::write(&p, text).unwrap();
        p
    };
    Pki {
        ca: write("ca.pem", ca.pem()),
        cert: write("server.pem", server.pem()),
        key: write("server-key.pem", server_key.serialize_pem()),
        client_cert: write("client.pem", client.pem()),
        client_key: write("client-key.pem", client_key.serialize_pem()),
    }
}

fn tls_options(ca: Option<&Path>, client: Option<(&Path, &Path)>) -> ConnectOptions {
    ConnectOptions {
        ca: ca.map(Path::to_path_buf),
        cert: client.map(|c| c.0.to_path_buf()),
        key: client.map(|c| c.1.to_path_buf()),
        domain: Some("localhost".into()),
        ..Default::default()
    }
}

async fn try_list(addr: &str, options: ConnectOptions) -> Result<usize, ClientError> {
    let mut c = Client::connect_with(addr, options).await?;
    Ok(c.datasets().await?.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_mtls_handshakes() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "a");
    // TLS, no client certificates.
    let mut config = Config::demo(demo_dir());
    config.tls = Some(TlsConfig {
        cert: pki.cert.clone(),
        key: pki.key.clone(),
        client_ca: None,
    });
    let d = start(config).await;
    assert_eq!(try_list(&d.addr, tls_options(Some(&pki.ca), None)).await.unwrap(), 1);
    // Without our CA the server's certificate is not trusted: a clear error.
    let https = format!("https://{}", d.addr);
    let err = try_list(&https, tls_options(None, None)).await.unwrap_err().to_string();
    assert!(
        err.contains("invalid peer certificate") && err.contains("UnknownIssuer"),
        "{err}"
    );
    // Plain HTTP/2 to a TLS port fails too, and the daemon keeps serving.
    assert!(try_list(&d.addr, ConnectOptions::default()).await.is_err());
    // A stream over TLS delivers the same bytes as without.
    let mut tls_client = Client::connect_with(&d.addr, tls_options(Some(&pki.ca), None))
        .await
        .unwrap();
    let over_tls: Vec<_> = tls_client
        .stream(request("demo", "t"))
        .await
        .unwrap()
        .map(|b| b.unwrap().image.data)
        .collect()
        .await;
    let plain = start(Config::demo(demo_dir())).await;
    let mut plain_client = Client::connect(&plain.addr).await.unwrap();
    let over_plain: Vec<_> = plain_client
        .stream(request("demo", "t"))
        .await
        .unwrap()
        .map(|b| b.unwrap().image.data)
        .collect()
        .await;
    assert_eq!(over_tls, over_plain);

    // Reload: new files from another CA replace the old ones; new connections use them.
    let next = make_pki(dir.path(), "b");
    std::fs::copy(&next.cert, &pki.cert).unwrap();
    std::fs::copy(&next.key, &pki.key).unwrap();
    assert!(d.app.tls.as_ref().unwrap().reload_if_changed());
    assert_eq!(try_list(&d.addr, tls_options(Some(&next.ca), None)).await.unwrap(), 1);
    assert!(try_list(&d.addr, tls_options(Some(&pki.ca), None)).await.is_err());
    // Broken files are refused and the current certificate stays.
    std::fs::write(&pki.cert, "not a certificate").unwrap();
    assert!(!d.app.tls.as_ref().unwrap().reload());
    assert_eq!(try_list(&d.addr, tls_options(Some(&next.ca), None)).await.unwrap(), 1);

    // mTLS: a client certificate signed by the client CA is required.
    let mut config = Config::demo(demo_dir());
    let m = make_pki(dir.path(), "m");
    config.tls = Some(TlsConfig {
        cert: m.cert.clone(),
        key: m.key.clone(),
        client_ca: Some(m.ca.clone()),
    });
    let d = start(config).await;
    let with_cert = tls_options(Some(&m.ca), Some((&m.client_cert, &m.client_key)));
    assert_eq!(try_list(&d.addr, with_cert).await.unwrap(), 1);
    let without = try_list(&d.addr, tls_options(Some(&m.ca), None))
        .await
        .unwrap_err()
        .to_string();
    assert!(without.contains("CertificateRequired"), "{without}");
    // A certificate from another CA is refused as well.
    let foreign = tls_options(Some(&m.ca), Some((&next.client_cert, &next.client_key)));
    assert!(try_list(&d.addr, foreign).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_files_that_do_not_load_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "x");
    let mut config = Config::demo(demo_dir());
    config.tls = Some(TlsConfig {
        cert: pki.cert.clone(),
        key: pki.client_key.clone(), // the wrong key
        client_ca: None,
    });
    let err = App::build(config).await.unwrap_err().to_string();
    assert!(err.contains("key does not fit"), "{err}");
    let mut config = Config::demo(demo_dir());
    config.tls = Some(TlsConfig {
        cert: dir.path().join("missing.pem"),
        key: pki.key.clone(),
        client_ca: None,
    });
    let err = App::build(config).await.unwrap_err().to_string();
    assert!(err.contains("missing.pem"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_endpoint_can_require_a_token() {
    let app = App::build(secured()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = app.clone();
    tokio::spawn(async move { server.serve_metrics(listener, std::future::pending()).await });
    let get = |token: Option<&'static str>| async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let req = format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    };
    assert!(get(None).await.starts_with("HTTP/1.1 401"));
    assert!(get(Some(ROOT)).await.starts_with("HTTP/1.1 401"));
    let ok = get(Some("scrape-me")).await;
    assert!(ok.starts_with("HTTP/1.1 200") && ok.contains("cogfeed_"), "{ok}");
}

#[test]
fn secrets_stay_out_of_debug_output_and_config_dumps() {
    let text = r#"
        [store]
        s3_secret_access_key = "wJalrXUtnFEMI-very-secret"
        [auth]
        required = true
        [[auth.tokens]]
        sha256 = "8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4"
        datasets = ["*"]
        [[datasets]]
        name = "d"
        scenes = ["s3://b/x.tif"]
    "#;
    let config = Config::parse(text).unwrap();
    let debug = format!("{config:?}");
    assert!(!debug.contains("very-secret"), "{debug}");
    let dump = toml::to_string(&config).unwrap();
    assert!(!dump.contains("very-secret") && dump.contains("<redacted>"), "{dump}");
    // And the CLI's dump.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(&file, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cogfeed"))
        .args(["check-config", "--dump"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        !stdout.contains("very-secret") && stdout.contains("s3_secret_access_key"),
        "{stdout}"
    );
}

#[test]
fn auth_config_mistakes_are_named() {
    let base = "[[datasets]]\nname = \"d\"\nscenes = [\"/x.tif\"]\n";
    for (extra, want) in [
        ("[auth]\nrequired = true\n", "lets nobody in"),
        (
            "[[auth.tokens]]\nsha256 = \"my-plain-token\"\ndatasets = [\"d\"]\n",
            "never the token",
        ),
        (
            "[[auth.tokens]]\nsha256 = \"8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4\"\ndatasets = [\"nope\"]\n",
            "unknown dataset",
        ),
        ("[tls]\ncert = \"a.pem\"\n", "key"),
    ] {
        let err = Config::parse(&format!("{base}{extra}")).unwrap_err().to_string();
        assert!(err.contains(want), "{extra}: {err}");
    }
}

#[test]
fn logs_and_errors_print_urls_without_their_credentials() {
    // An object that cannot be read: the start-up log and the final error both quote it.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        r#"
        [server]
        listen = "127.0.0.1:0"
        metrics_listen = "127.0.0.1:0"
        [[datasets]]
        name = "d"
        scenes = ["http://alice:hunter2@127.0.0.1:9/b/x.tif?sv=1&sig=S3CR3T&X-Amz-Credential=AKIAXYZ"]
        "#,
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cogfeed"))
        .args(["serve", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("127.0.0.1:9/b/x.tif"),
        "the object is still named: {stderr}"
    );
    for secret in ["hunter2", "alice", "S3CR3T", "AKIAXYZ"] {
        assert!(!stderr.contains(secret), "{secret} in the log: {stderr}");
    }
}
