//! A fleet of three daemons (real processes, static peer list) over a real S3-compatible
//! server: each tile is fetched from the store once fleet-wide, batches are byte-identical
//! to a single daemon's, and a replica killed mid-epoch costs no stream anything: its
//! clients resume on another replica, nothing lost or repeated, and the peer metrics show
//! the traffic and the dead peer.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use cogfeed_client::{Batch, Client, pb};
use common::scrape::{scrape, sum};
use common::servers::{Proc, S3_KEY, S3_SECRET, free_port, s3_store, start_s3, upload, wait_port};
use futures::StreamExt;
use sha2::{Digest, Sha256};

struct Replica {
    addr: String,
    metrics_port: u16,
    proc: Option<Proc>,
    _dir: tempfile::TempDir,
}

impl Replica {
    fn kill(&mut self) {
        self.proc = None;
    }
}

/// The map-space demo (`demo-stac`) read from `s3://fleet/stac/`, as TOML.
const STAC_DATASET: &str = r#"
[[datasets]]
name = "demo-stac"
stac = "s3://fleet/stac/items.json"
crs = "native"
[[datasets.layers]]
name = "image"
assets = ["B02", "B03", "B04", "B08"]
resolution = 10.0
resampling = "bilinear"
[[datasets.layers]]
name = "swir"
assets = ["B11"]
resolution = 20.0
resampling = "bilinear"
[[datasets.layers]]
name = "label"
assets = ["classes"]
resolution = 10.0
resampling = "mode"
nodata = 255.0
"#;

/// Starts `cogfeed serve` for the `fleet` bucket; `cluster` = (self, peers) or none.
fn start(s3_port: u16, grpc_port: u16, cluster: Option<&[String]>) -> Replica {
    start_with(s3_port, grpc_port, cluster, "")
}

/// [`start`] with more datasets (TOML) after `demo`.
fn start_with(s3_port: u16, grpc_port: u16, cluster: Option<&[String]>, more: &str) -> Replica {
    let dir = tempfile::tempdir().unwrap();
    let metrics_port = free_port();
    let addr = format!("127.0.0.1:{grpc_port}");
    let cluster_text = match cluster {
        Some(peers) => format!(
            "[cluster]\nself = \"{addr}\"\npeers = [{}]\npeer_timeout_ms = 10000\n",
            peers.iter().map(|p| format!("\"{p}\"")).collect::<Vec<_>>().join(", ")
        ),
        None => String::new(),
    };
    let config = format!(
        "[server]\nlisten = \"{addr}\"\nmetrics_listen = \"127.0.0.1:{metrics_port}\"\n\
         [cache]\ncapacity_bytes = 268435456\n{cluster_text}\
         [[datasets]]\nname = \"demo\"\nprefix = \"s3://fleet/\"\nlabels = \"s3://fleet/labels/{{stem}}.tif\"\n{more}"
    );
    let file = dir.path().join("cogfeed.toml");
    std::fs::write(&file, config).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_cogfeed"))
        .args(["serve", "--config"])
        .arg(&file)
        .envs([
            ("AWS_ENDPOINT", format!("http://127.0.0.1:{s3_port}")),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", S3_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", S3_SECRET.into()),
            ("AWS_REGION", "us-east-1".into()),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let proc = Proc(child);
    wait_port(grpc_port);
    wait_port(metrics_port);
    Replica {
        addr,
        metrics_port,
        proc: Some(proc),
        _dir: dir,
    }
}

/// The `fleet` bucket with the demo dataset.
async fn s3_with_demo() -> (u16, Proc, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("fleet")).unwrap();
    let (port, proc) = start_s3(root.path());
    let data = tempfile::tempdir().unwrap();
    let scenes = cogfeed_server::demo::write_demo(data.path()).unwrap();
    let store = s3_store(port, "fleet");
    for scene in &scenes {
        let name = scene.file_name().unwrap().to_str().unwrap();
        upload(&store, name, scene).await;
        upload(
            &store,
            &format!("labels/{name}"),
            &data.path().join("labels").join(name),
        )
        .await;
    }
    (port, proc, root)
}

/// The `fleet` bucket with the demo dataset and, under `stac/`, the map-space demo.
async fn s3_with_demo_and_stac() -> (u16, Proc, tempfile::TempDir) {
    let (port, proc, root) = s3_with_demo().await;
    let local = tempfile::tempdir().unwrap();
    let dir = local.path().join("stac");
    cogfeed_server::demo::stac::write_stac_demo(&dir).unwrap();
    let store = s3_store(port, "fleet");
    let mut pending = vec![dir.clone()];
    while let Some(d) = pending.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let rel = path.strip_prefix(&dir).unwrap().to_str().unwrap().to_string();
                upload(&store, &format!("stac/{rel}"), &path).await;
            }
        }
    }
    (port, proc, root)
}

/// Random unaligned windows: each job (seed) its own.
fn request(seed: u64, rank: u32, world: u32) -> pb::StreamBatchesRequest {
    pb::StreamBatchesRequest {
        dataset: "demo".into(),
        job: format!("job{seed}"),
        sampler: pb::Sampler::Random as i32,
        patch_size: 200,
        batch_size: 4,
        samples_per_epoch: 48,
        seed,
        rank,
        world_size: world,
        labels: true,
        ..Default::default()
    }
}

/// Random map-space footprints over every layer of `demo-stac`: each job (seed) its own.
fn stac_request(seed: u64) -> pb::StreamBatchesRequest {
    pb::StreamBatchesRequest {
        dataset: "demo-stac".into(),
        job: format!("stac{seed}"),
        patch_size: 64,
        samples_per_epoch: 32,
        labels: false,
        ..request(seed, 0, 1)
    }
}

/// A grid of 128 px windows: every window once per epoch (256 of them).
fn grid(rank: u32, world: u32) -> pb::StreamBatchesRequest {
    pb::StreamBatchesRequest {
        sampler: pb::Sampler::Grid as i32,
        patch_size: 128,
        stride: 128,
        ..request(7, rank, world)
    }
}

fn digest(b: &Batch) -> String {
    let mut h = Sha256::new();
    h.update(&b.image.data);
    if let Some(l) = &b.label {
        h.update(&l.data);
    }
    for (name, t) in &b.layers {
        h.update(name.as_bytes());
        h.update(&t.data);
    }
    hex::encode(h.finalize())
}

async fn run_job(addr: &str, r: pb::StreamBatchesRequest) -> Vec<String> {
    let mut c = Client::connect(addr).await.unwrap();
    c.stream(r).await.unwrap().map(|b| digest(&b.unwrap())).collect().await
}

/// Four jobs spread over `addrs` (job j on replica j mod n), each job's batch digests;
/// job j streams `make(j + 1)`.
async fn four_jobs(addrs: &[String], make: fn(u64) -> pb::StreamBatchesRequest) -> Vec<Vec<String>> {
    let jobs = (0..4u64).map(|j| {
        let addr = addrs[j as usize % addrs.len()].clone();
        tokio::spawn(async move { run_job(&addr, make(j + 1)).await })
    });
    futures::future::join_all(jobs)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect()
}

fn ports(n: usize) -> (Vec<u16>, Vec<String>) {
    let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let addrs = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    (ports, addrs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_fetches_each_tile_once_and_serves_the_same_bytes() {
    let (s3_port, _s3, _root) = s3_with_demo().await;
    // One daemon: the reference bytes and the number of distinct tiles the jobs touch.
    let single = start(s3_port, free_port(), None);
    let alone = four_jobs(std::slice::from_ref(&single.addr), |seed| request(seed, 0, 1)).await;
    let distinct = sum(
        &scrape(single.metrics_port).await,
        "cogfeed_tiles_loaded_total",
        &["store"],
    );
    assert!(distinct > 0.0);
    drop(single);

    let (ports, addrs) = ports(3);
    let fleet: Vec<Replica> = ports.iter().map(|p| start(s3_port, *p, Some(&addrs))).collect();
    let together = four_jobs(&addrs, |seed| request(seed, 0, 1)).await;
    assert_eq!(together, alone, "a fleet changed the bytes");
    let mut store_loads = 0.0;
    let mut served = 0.0;
    for r in &fleet {
        let text = scrape(r.metrics_port).await;
        store_loads += sum(&text, "cogfeed_tiles_loaded_total", &["store"]);
        served += sum(
            &text,
            "cogfeed_peer_requests_total",
            &["direction=\"in\"", "result=\"ok\""],
        );
        // Every replica owns a share of the tiles.
        assert!(sum(&text, "cogfeed_tiles_loaded_total", &["store"]) > 0.0);
    }
    assert_eq!(store_loads, distinct, "tiles fetched from the store fleet-wide");
    assert!(served > 0.0, "no tile crossed between replicas");
}

/// Store bytes and tile loads from the store, summed over `replicas`.
async fn store_reads(replicas: &[&Replica]) -> (f64, f64) {
    let (mut bytes, mut loads) = (0.0, 0.0);
    for r in replicas {
        let text = scrape(r.metrics_port).await;
        bytes += sum(&text, "cogfeed_store_bytes_total", &[]);
        loads += sum(&text, "cogfeed_tiles_loaded_total", &["store"]);
    }
    (bytes, loads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_shares_map_space_tiles_as_it_shares_scene_tiles() {
    let (s3_port, _s3, _root) = s3_with_demo_and_stac().await;
    // Store reads of the jobs alone (start-up reads every replica's catalog).
    let single = start_with(s3_port, free_port(), None, STAC_DATASET);
    let (started, _) = store_reads(&[&single]).await;
    let alone = four_jobs(std::slice::from_ref(&single.addr), stac_request).await;
    let (bytes_alone, distinct) = store_reads(&[&single]).await;
    let bytes_alone = bytes_alone - started;
    assert!(distinct > 0.0 && bytes_alone > 0.0);
    drop(single);

    let (ports, addrs) = ports(3);
    let fleet: Vec<Replica> = ports
        .iter()
        .map(|p| start_with(s3_port, *p, Some(&addrs), STAC_DATASET))
        .collect();
    let replicas: Vec<&Replica> = fleet.iter().collect();
    let (started, _) = store_reads(&replicas).await;
    let together = four_jobs(&addrs, stac_request).await;
    assert_eq!(together, alone, "a fleet changed the map-space bytes");
    let (bytes, loads) = store_reads(&replicas).await;
    let bytes = bytes - started;
    eprintln!("store bytes of the jobs: one daemon {bytes_alone}, three replicas {bytes}");
    assert_eq!(loads, distinct, "map-space tiles fetched from the store fleet-wide");
    // Bytes: each replica opens the headers it reads (a 32 KiB prefix per asset, about
    // half of this small demo's bytes); tiles cross the fleet once. Three replicas read
    // less than three daemons alone would.
    assert!(
        bytes < 2.5 * bytes_alone,
        "the fleet read {bytes} store bytes, one daemon {bytes_alone}"
    );
    let mut served = 0.0;
    for r in &fleet {
        let text = scrape(r.metrics_port).await;
        served += sum(
            &text,
            "cogfeed_peer_requests_total",
            &["direction=\"in\"", "result=\"ok\""],
        );
        assert_eq!(
            sum(&text, "cogfeed_peer_requests_total", &["result=\"not_found\""]),
            0.0,
            "a replica refused a peer's map-space tile"
        );
    }
    assert!(served > 0.0, "no map-space tile crossed between replicas");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_a_replica_mid_epoch_loses_and_repeats_nothing() {
    let (s3_port, _s3, _root) = s3_with_demo().await;
    let (ports, addrs) = ports(3);
    let mut fleet: Vec<Replica> = ports.iter().map(|p| start(s3_port, *p, Some(&addrs))).collect();
    let list = addrs.join(",");
    let client = Client::connect(&list).await.unwrap();
    assert_eq!(client.replicas().len(), 3);
    // The epoch as one daemon would deal it (rank r of 3 starts on replica r).
    let expected: BTreeSet<(u32, u64, u64)> = {
        let mut all = BTreeSet::new();
        let mut c = Client::connect(&addrs[0]).await.unwrap();
        for rank in 0..3 {
            let mut s = c.stream(grid(rank, 3)).await.unwrap();
            while let Some(b) = s.next().await {
                for w in b.unwrap().windows {
                    assert!(all.insert((w.scene, w.col, w.row)));
                }
            }
        }
        all
    };
    let mut streams: Vec<_> = (0..3)
        .map(|rank| Box::pin(client.stream_resumable(grid(rank, 3), Duration::from_secs(30))))
        .collect();
    let mut seen = Vec::new();
    // Rank 1 (on replica 1) gets a few batches, then replica 1 dies.
    for _ in 0..3 {
        for w in streams[1].next().await.unwrap().unwrap().windows {
            seen.push((w.scene, w.col, w.row));
        }
    }
    fleet[1].kill();
    let rest = futures::future::join_all(streams.iter_mut().map(|s| async move {
        let mut out = Vec::new();
        while let Some(b) = s.next().await {
            for w in b.unwrap().windows {
                out.push((w.scene, w.col, w.row));
            }
        }
        out
    }))
    .await;
    seen.extend(rest.into_iter().flatten());
    let unique: BTreeSet<_> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "samples repeated");
    assert_eq!(unique, expected, "samples lost");
    // The survivors saw the dead peer and kept serving; replica 0 served its peers.
    let dead = &addrs[1];
    let mut marked = 0;
    for r in [&fleet[0], &fleet[2]] {
        let text = scrape(r.metrics_port).await;
        if sum(&text, "cogfeed_peer_up", &[&format!("peer=\"{dead}\"")]) == 0.0 {
            marked += 1;
        }
        assert!(
            sum(
                &text,
                "cogfeed_peer_requests_total",
                &["direction=\"out\"", "result=\"ok\""]
            ) > 0.0
        );
    }
    assert!(marked >= 1, "no survivor noticed the dead replica");
}

/// The board of `d`'s tile cache (every daemon here evicts by the plan, the default).
fn board_of(d: &common::inproc::Daemon) -> std::sync::Arc<cogfeed_server::tiles::board::PlanBoard> {
    cogfeed_server::tiles::TileSource::board(&d.app.cache).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streams_plan_reaches_the_owners_of_its_tiles_and_leaves_with_it() {
    use cogfeed_server::cluster::Cluster;
    use cogfeed_server::cluster::plans::FleetPlanRelay;
    use cogfeed_server::tiles::TileKey;
    use cogfeed_server::tiles::board::{PlanRelay, tile_id};

    // The owner: a daemon in this process; the relaying replica: a cluster handle naming
    // an address nobody serves as itself.
    let owner = common::inproc::start(cogfeed_server::config::Config::demo(common::inproc::demo_dir())).await;
    let me = format!("127.0.0.1:{}", free_port());
    let cluster = Cluster::new(
        &cogfeed_server::config::ClusterConfig {
            self_addr: me.clone(),
            peers: vec![me.clone(), owner.addr.clone()],
            peers_dns: None,
            refresh_secs: 5.0,
            peer_timeout_ms: 5000,
            peer_cooldown_secs: 60.0,
            near_cache_bytes: None,
            peer_token: None,
        },
        None,
    )
    .unwrap();
    let url: std::sync::Arc<str> = std::sync::Arc::from("s3://bucket/a.tif");
    let version: std::sync::Arc<str> = std::sync::Arc::from("etag-1");
    let keys: Vec<TileKey> = (0..64).map(|b| TileKey::new(&url, &version, 0, b)).collect();
    let (theirs, mine): (Vec<TileKey>, Vec<TileKey>) = keys
        .iter()
        .cloned()
        .partition(|k| cluster.owner(k) == cogfeed_server::cluster::Owner::Peer(owner.addr.clone()));
    assert!(
        !theirs.is_empty() && !mine.is_empty(),
        "rendezvous split 64 tiles one way"
    );
    let board = board_of(&owner);
    let ids = |ks: &[TileKey]| ks.iter().map(tile_id).collect::<Vec<_>>();
    let distances = |ks: &[TileKey]| board.distances(ids(ks).into_iter());

    let relay = FleetPlanRelay::new(cluster.clone());
    // Sample 0 reads every tile; sample 40 reads the owner's first tile again.
    relay.publish(0, &keys);
    relay.publish(40, &theirs[..1]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while distances(&theirs).iter().any(Option::is_none) {
        assert!(std::time::Instant::now() < deadline, "the owner never saw the plan");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Only the tiles it owns reach the owner's board.
    assert!(distances(&mine).iter().all(Option::is_none));
    assert!(distances(&theirs).iter().all(|d| *d == Some(0)));
    // The consumer moves past sample 0 (relayed every few samples): the owner's first tile
    // is next needed 40 - 16 samples ahead, the others by no plan.
    relay.advance(16);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while distances(&theirs[..1]) != vec![Some(24)] {
        assert!(
            std::time::Instant::now() < deadline,
            "the cursor never reached the owner"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(distances(&theirs[1..]).iter().all(Option::is_none));
    // The stream ends: its plan leaves the owner's board.
    drop(relay);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while board.entries() > 0 {
        assert!(std::time::Instant::now() < deadline, "a closed stream's plan stayed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
