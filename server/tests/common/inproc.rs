//! The daemon in-process on 127.0.0.1:0 over the demo dataset written once per test binary.

use std::path::Path;
use std::sync::OnceLock;

use cogfeed_server::app::App;
use cogfeed_server::config::Config;
use tokio::sync::oneshot;

/// Demo data written once for the whole test binary.
pub fn demo_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        cogfeed_server::demo::write_demo(dir.path()).unwrap();
        dir
    })
    .path()
}

/// A running daemon; dropping it stops the server.
pub struct Daemon {
    pub addr: String,
    pub app: App,
    pub _stop: oneshot::Sender<()>,
}

pub async fn start(config: Config) -> Daemon {
    let app = App::build(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = oneshot::channel();
    let server = app.clone();
    tokio::spawn(async move {
        server
            .serve(listener, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    Daemon { addr, app, _stop: tx }
}

/// Every batch of stream `r` from the daemon at `addr` (panics on an error).
pub async fn collect(addr: &str, r: cogfeed_client::pb::StreamBatchesRequest) -> Vec<cogfeed_client::Batch> {
    use futures::StreamExt;
    let mut client = cogfeed_client::Client::connect(addr).await.unwrap();
    let stream = client.stream(r).await.unwrap();
    stream.map(|b| b.unwrap()).collect().await
}
