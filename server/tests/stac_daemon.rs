//! Map-space (STAC) datasets through the daemon: every layer of every sample equals
//! `cogfeed warp` of the footprint its metadata names; streams are deterministic, resume
//! with another world size, and k concurrent jobs fetch each source tile once.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::path::Path;

use cogfeed_client::{Batch, Client, pb};
use cogfeed_server::config::Config;
use cogfeed_server::dataset::map::mosaic::command::{WarpRequest, warp};
use cogfeed_server::storage::StoreOptions;
use common::inproc::{collect, start};
use common::servers::{S3_KEY, S3_SECRET, start_s3};
use futures::StreamExt;
use sha2::{Digest, Sha256};

fn stac_config(dir: &Path) -> Config {
    cogfeed_server::demo::stac::write_stac_demo(&dir.join("stac")).unwrap();
    let mut c = Config::demo_default(dir);
    c.datasets.retain(|d| d.name == "demo-stac");
    c
}

fn request(sampler: pb::Sampler, patch: u32, batch: u32) -> pb::StreamBatchesRequest {
    pb::StreamBatchesRequest {
        dataset: "demo-stac".into(),
        job: "stac-test".into(),
        sampler: sampler as i32,
        patch_size: patch,
        batch_size: batch,
        seed: 7,
        world_size: 1,
        ..Default::default()
    }
}

fn digest(b: &Batch) -> String {
    let mut h = Sha256::new();
    for (name, t) in &b.layers {
        h.update(name.as_bytes());
        h.update(&t.data);
    }
    hex::encode(h.finalize())
}

type LayerSpec = (String, Vec<String>, f64, String, f64);

async fn layers_of(addr: &str) -> Vec<LayerSpec> {
    let mut client = Client::connect(addr).await.unwrap();
    let info = client.describe("demo-stac").await.unwrap();
    info.layers
        .iter()
        .map(|l| {
            (
                l.name.clone(),
                l.assets.clone(),
                l.resolution,
                l.resampling.clone(),
                l.nodata,
            )
        })
        .collect()
}

/// Checks every layer of every sample against `cogfeed warp` of the footprint its metadata
/// names; returns (samples, samples mosaicked from two S2 items, samples with labels).
async fn check_against_warp(
    batches: &[Batch],
    items: &str,
    layers: &[LayerSpec],
    store: &StoreOptions,
) -> (usize, usize, usize) {
    let (mut samples, mut mosaics, mut labelled) = (0, 0, 0);
    for b in batches {
        let n = b.samples.len();
        for (i, meta) in b.samples.iter().enumerate() {
            samples += 1;
            if meta.items.iter().filter(|id| id.starts_with("S2A")).count() > 1 {
                mosaics += 1;
            }
            if meta.items.iter().any(|id| id.starts_with("LC_")) {
                labelled += 1;
            }
            for (name, assets, res, kernel, nodata) in layers {
                let t = b.layer(name).unwrap();
                let per = t.data.len() / n;
                let got = &t.data[i * per..(i + 1) * per];
                if meta.items.is_empty() {
                    continue;
                }
                let request = WarpRequest {
                    items: items.to_string(),
                    ids: meta.items.clone(),
                    assets: assets.clone(),
                    crs: meta.crs.clone(),
                    bounds: [meta.bounds[0], meta.bounds[1], meta.bounds[2], meta.bounds[3]],
                    resolution: *res,
                    resampling: kernel.clone(),
                    nodata: *nodata,
                };
                match warp(&request, store).await {
                    Ok(o) => assert!(
                        o.data == got,
                        "layer {name} of sample {i} of batch {} differs from cogfeed warp",
                        b.index
                    ),
                    // None of the sample's items has the layer's asset: the layer is all fill.
                    Err(e) => {
                        assert!(e.to_string().contains("no such asset"), "{e}");
                        let fill = (*nodata as u16).to_le_bytes();
                        let es = per / t.shape[1..].iter().product::<usize>();
                        assert!(
                            got.chunks(es).all(|v| v == &fill[..es]),
                            "layer {name} should be all fill"
                        );
                    }
                }
            }
        }
    }
    (samples, mosaics, labelled)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_layer_of_every_sample_is_the_warp_of_its_footprint() {
    let tmp = tempfile::tempdir().unwrap();
    let d = start(stac_config(tmp.path())).await;
    let layers = layers_of(&d.addr).await;
    assert_eq!(
        layers.iter().map(|l| l.0.as_str()).collect::<Vec<_>>(),
        ["image", "swir", "label"]
    );
    // A grid cover of both tiles: footprints in both zones, across the overlap, at the edges.
    let mut r = request(pb::Sampler::Grid, 64, 8);
    r.stride = 128;
    let batches = collect(&d.addr, r).await;
    assert!(!batches.is_empty());
    for b in &batches {
        let n = b.samples.len();
        assert_eq!(b.layer("image").unwrap().shape, vec![n, 4, 64, 64]);
        assert_eq!(b.layer("swir").unwrap().shape, vec![n, 1, 32, 32]);
        assert_eq!(b.layer("label").unwrap().shape, vec![n, 1, 64, 64]);
    }
    let items = tmp.path().join("stac/items.json").to_string_lossy().into_owned();
    let (samples, mosaics, labelled) = check_against_warp(&batches, &items, &layers, &StoreOptions::default()).await;
    assert!(mosaics > 0, "no footprint across the zone overlap ({samples} samples)");
    assert!(labelled > 0, "no footprint over the label raster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_crs_reprojects_every_item_into_it() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = stac_config(tmp.path());
    config.datasets[0].crs = Some("EPSG:32633".into());
    let d = start(config).await;
    let layers = layers_of(&d.addr).await;
    let mut r = request(pb::Sampler::Random, 48, 4);
    r.samples_per_epoch = 24;
    let batches = collect(&d.addr, r).await;
    assert!(batches.iter().flat_map(|b| &b.samples).all(|m| m.crs == "EPSG:32633"));
    // Samples drawn from the zone-32 tile are reprojected (their items name it).
    assert!(
        batches
            .iter()
            .flat_map(|b| &b.samples)
            .any(|m| m.items.iter().any(|i| i.contains("32TQS")))
    );
    let items = tmp.path().join("stac/items.json").to_string_lossy().into_owned();
    check_against_warp(&batches, &items, &layers, &StoreOptions::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_area_of_interest_limits_where_samples_are_drawn() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = stac_config(tmp.path());
    // West of 11.97°E: only the zone-32 tile, and only part of it.
    let aoi = [11.9, 46.45, 11.97, 46.55];
    config.datasets[0].aoi = Some(aoi);
    let d = start(config).await;
    let mut client = Client::connect(&d.addr).await.unwrap();
    let info = client.describe("demo-stac").await.unwrap();
    assert_eq!(info.scenes.len(), 1, "the zone-33 tile does not meet the aoi");
    assert!(info.scenes[0].levels[0].width < 512);
    let mut r = request(pb::Sampler::Grid, 32, 8);
    r.layers = vec!["image".into()];
    let batches = collect(&d.addr, r).await;
    let wgs = cogfeed_geo::Crs::from_epsg(4326).unwrap();
    let utm = cogfeed_geo::Crs::from_epsg(32632).unwrap();
    let to_lonlat = cogfeed_geo::Transformer::new(&utm, &wgs);
    // Every corner of a footprint lies inside the aoi (a grid's padded last windows reach
    // past its edge, as at any grid's edge).
    let inside = |m: &pb::SampleInfo| {
        [(0, 1), (0, 3), (2, 1), (2, 3)].iter().all(|&(x, y)| {
            let (lon, lat) = to_lonlat.point(m.bounds[x], m.bounds[y]).unwrap();
            lon >= aoi[0] - 1e-7 && lon <= aoi[2] + 1e-7 && lat >= aoi[1] - 1e-7 && lat <= aoi[3] + 1e-7
        })
    };
    for m in batches.iter().flat_map(|b| &b.samples) {
        assert_eq!(m.crs, "EPSG:32632");
        assert!(m.padded || inside(m), "{:?} leaves the aoi", m.bounds);
    }
    let mut random = request(pb::Sampler::Random, 32, 8);
    random.layers = vec!["image".into()];
    random.samples_per_epoch = 64;
    let drawn = collect(&d.addr, random).await;
    let drawn: Vec<_> = drawn.iter().flat_map(|b| &b.samples).collect();
    assert_eq!(drawn.len(), 64);
    for m in drawn {
        assert!(inside(m), "a random draw at {:?} leaves the aoi", m.bounds);
    }
    let mut bad = stac_config(tmp.path());
    bad.datasets[0].aoi = Some([0.0, 0.0, 1.0, 1.0]);
    let e = cogfeed_server::app::App::build(bad).await.err().unwrap().to_string();
    assert!(e.contains("aoi"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stac_archive_on_s3_serves_the_same_samples_as_local_files() {
    let root = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    cogfeed_server::demo::stac::write_stac_demo(&local.path().join("stac")).unwrap();
    // The bucket `stac` holds the archive; a second layout keeps one Item JSON per object
    // under `items/`, with hrefs relative to it.
    let bucket = root.path().join("stac");
    std::fs::create_dir_all(bucket.join("items")).unwrap();
    copy_dir(&local.path().join("stac"), &bucket);
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(local.path().join("stac/items.json")).unwrap()).unwrap();
    for f in doc["features"].as_array().unwrap() {
        let mut f = f.clone();
        for (_, a) in f["assets"].as_object_mut().unwrap() {
            let href = a["href"].as_str().unwrap().to_string();
            a["href"] = serde_json::Value::from(format!("../{href}"));
        }
        let id = f["id"].as_str().unwrap().to_string();
        std::fs::write(
            bucket.join("items").join(format!("{id}.json")),
            serde_json::to_vec(&f).unwrap(),
        )
        .unwrap();
    }
    let (port, _s3) = start_s3(root.path());
    let mut store = StoreOptions {
        s3_endpoint: Some(format!("http://127.0.0.1:{port}")),
        s3_access_key_id: Some(S3_KEY.into()),
        s3_secret_access_key: Some(S3_SECRET.into()),
        ..Default::default()
    };
    store.max_retries = 1;
    let mut r = request(pb::Sampler::Grid, 64, 8);
    r.stride = 192;
    let local_daemon = start(stac_config(local.path())).await;
    let expected = collect(&local_daemon.addr, r.clone()).await;
    for stac in ["s3://stac/items.json", "s3://stac/items/"] {
        let mut config = stac_config(local.path());
        config.datasets[0].stac = Some(stac.into());
        config.store.s3_endpoint = store.s3_endpoint.clone();
        config.store.s3_access_key_id = Some(S3_KEY.into());
        config.store.s3_secret_access_key = Some(S3_SECRET.into());
        let d = start(config).await;
        let got = collect(&d.addr, r.clone()).await;
        assert_eq!(got.len(), expected.len());
        for (a, b) in got.iter().zip(&expected) {
            assert_eq!(
                digest(a),
                digest(b),
                "{stac}: batch {} differs from local files",
                a.index
            );
        }
        if stac.ends_with(".json") {
            let layers = layers_of(&d.addr).await;
            check_against_warp(&got[..1], stac, &layers, &store).await;
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stac_streams_are_deterministic_and_resume_with_another_world_size() {
    let tmp = tempfile::tempdir().unwrap();
    let d = start(stac_config(tmp.path())).await;
    let mut r = request(pb::Sampler::Random, 32, 4);
    r.samples_per_epoch = 48;
    let one = collect(&d.addr, r.clone()).await;
    assert_eq!(one.len(), 12);
    let again = collect(&d.addr, r.clone()).await;
    assert_eq!(
        one.iter().map(digest).collect::<Vec<_>>(),
        again.iter().map(digest).collect::<Vec<_>>()
    );
    // Resume after 5 batches (20 samples) with two ranks: together they cover what follows once.
    let mut seen = Vec::new();
    for rank in 0..2 {
        let mut rr = r.clone();
        rr.cursor = one[4].cursor;
        rr.world_size = 2;
        rr.rank = rank;
        for b in collect(&d.addr, rr).await {
            for (i, m) in b.samples.iter().enumerate() {
                let t = b.layer("image").unwrap();
                let per = t.data.len() / b.samples.len();
                seen.push(format!(
                    "{:?} {}",
                    m.bounds,
                    hex::encode(Sha256::digest(&t.data[i * per..(i + 1) * per]))
                ));
            }
        }
    }
    let mut rest = Vec::new();
    for b in &one[5..] {
        for (i, m) in b.samples.iter().enumerate() {
            let t = b.layer("image").unwrap();
            let per = t.data.len() / b.samples.len();
            rest.push(format!(
                "{:?} {}",
                m.bounds,
                hex::encode(Sha256::digest(&t.data[i * per..(i + 1) * per]))
            ));
        }
    }
    // Each rank gets whole global steps of 2 x 4 samples: 28 left, 24 delivered, in plan order.
    assert_eq!(seen.len(), 24);
    rest.truncate(seen.len());
    seen.sort();
    rest.sort();
    assert_eq!(
        seen, rest,
        "two ranks resumed from the cursor must deliver the rest of the epoch once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_stac_jobs_fetch_each_source_tile_once() {
    let tmp = tempfile::tempdir().unwrap();
    let d = start(stac_config(tmp.path())).await;
    let mut r = request(pb::Sampler::Aligned, 256, 2);
    r.layers = vec!["image".into()];
    let solo = collect(&d.addr, r.clone()).await;
    // Whole-tile decodes: a read of a tile's top rows decodes only those rows unless the
    // whole tile is loaded first, which depends on timing (in one job's look-ahead too);
    // the whole tiles an epoch decodes do not.
    let whole = |d: &common::inproc::Daemon| {
        let stats = d.app.cache.stats();
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        load(&stats.misses) - load(&stats.top_rows_decodes)
    };
    let after_one = whole(&d);
    assert!(after_one > 0);
    // A fresh daemon: four jobs at once cost what one did.
    let d4 = start(stac_config(tmp.path())).await;
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (addr, r) = (d4.addr.clone(), r.clone());
            tokio::spawn(async move { collect(&addr, r).await })
        })
        .collect();
    for t in tasks {
        let got = t.await.unwrap();
        assert_eq!(
            got.iter().map(digest).collect::<Vec<_>>(),
            solo.iter().map(digest).collect::<Vec<_>>()
        );
    }
    let four = whole(&d4);
    assert_eq!(four, after_one, "4 jobs must decode each whole source tile once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn map_space_requests_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let d = start(stac_config(tmp.path())).await;
    let mut client = Client::connect(&d.addr).await.unwrap();
    type Change = Box<dyn Fn(&mut pb::StreamBatchesRequest)>;
    let cases: Vec<(Change, &str)> = vec![
        (Box::new(|r| r.layers = vec!["nope".into()]), "no layer"),
        (Box::new(|r| r.bands = vec![1]), "layers, not bands"),
        (Box::new(|r| r.labels = true), "labels are a layer"),
        (Box::new(|r| r.dtype = "float32".into()), "dtype"),
        (Box::new(|r| r.layers = vec!["image".into(), "image".into()]), "twice"),
    ];
    for (change, want) in cases {
        let mut r = request(pb::Sampler::Random, 32, 2);
        change(&mut r);
        let err = match client.stream(r).await {
            Err(e) => e.to_string(),
            Ok(s) => {
                let first: Vec<_> = s.take(1).collect().await;
                format!("{:?}", first[0].as_ref().err())
            }
        };
        assert!(err.contains(want), "{want}: {err}");
    }
    let e = client
        .read_window(pb::ReadWindowRequest {
            dataset: "demo-stac".into(),
            width: 8,
            height: 8,
            ..Default::default()
        })
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("map-space"), "{e}");
}
