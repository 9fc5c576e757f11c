//! `ReadFootprint` through the daemon: footprints taken from streamed samples' metadata read
//! back byte for byte (every layer, time masks and `SampleInfo`), in request order whatever
//! the batch; footprints of their own (another CRS, another resolution); refusals: bad
//! input, scene datasets, scopes, sizes over the limits and memory the daemon cannot admit.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::path::Path;

use cogfeed_client::{Batch, Client, ClientError, ConnectOptions, pb};
use cogfeed_server::config::{Config, TokenConfig};
use common::inproc::{collect, start};
use sha2::{Digest, Sha256};

fn stac_config(dir: &Path) -> Config {
    cogfeed_server::demo::write_demo(dir).unwrap();
    cogfeed_server::demo::stac::write_stac_demo(&dir.join("stac")).unwrap();
    let mut c = Config::demo_default(dir);
    c.datasets.retain(|d| d.name == "demo-stac" || d.name == "demo");
    c
}

fn series_config(dir: &Path) -> Config {
    let items = cogfeed_server::demo::series::write_series_demo(&dir.join("series")).unwrap();
    let mut c = Config::demo(dir);
    c.datasets = vec![Config::demo_series(&items)];
    c
}

fn stream(dataset: &str, sampler: pb::Sampler, patch: u32, batch: u32, n: u64) -> pb::StreamBatchesRequest {
    pb::StreamBatchesRequest {
        dataset: dataset.into(),
        job: "footprint-test".into(),
        sampler: sampler as i32,
        patch_size: patch,
        batch_size: batch,
        seed: 5,
        world_size: 1,
        samples_per_epoch: n,
        ..Default::default()
    }
}

/// The footprint of a streamed sample, as its metadata names it.
fn footprint_of(m: &pb::SampleInfo, with_item: bool) -> pb::Footprint {
    pb::Footprint {
        crs: m.crs.clone(),
        bounds: m.bounds.clone(),
        resolution: 0.0,
        datetime: m.datetime.clone(),
        item: if with_item { m.drawn.clone() } else { String::new() },
    }
}

/// Sample `i`'s bytes of a `[B, ...]` tensor.
fn slice(t: &cogfeed_client::Tensor, i: usize) -> &[u8] {
    let per = t.data.len() / t.shape[0];
    &t.data[i * per..(i + 1) * per]
}

/// Every (batch, sample) of `batches`, flattened.
fn samples(batches: &[Batch]) -> Vec<(&Batch, usize)> {
    batches
        .iter()
        .flat_map(|b| (0..b.samples.len()).map(move |i| (b, i)))
        .collect()
}

/// Checks that sample `j` of `read` is sample `i` of `streamed`: every layer's bytes and
/// shape, every time mask, the metadata.
fn assert_same(read: &Batch, j: usize, streamed: &Batch, i: usize) {
    assert_eq!(read.layers.len(), streamed.layers.len());
    for ((name, a), (other, b)) in read.layers.iter().zip(&streamed.layers) {
        assert_eq!(name, other);
        assert_eq!(a.dtype, b.dtype, "layer {name}");
        assert_eq!(a.shape[1..], b.shape[1..], "layer {name}");
        assert!(slice(a, j) == slice(b, i), "layer {name} of sample {i} differs");
    }
    assert_eq!(read.time_masks.len(), streamed.time_masks.len());
    for ((name, a), (_, b)) in read.time_masks.iter().zip(&streamed.time_masks) {
        assert_eq!(slice(a, j), slice(b, i), "time mask {name}");
    }
    assert_eq!(read.samples[j], streamed.samples[i]);
}

/// The status of a call that must fail.
fn code(r: Result<Batch, ClientError>) -> (tonic::Code, String) {
    match r {
        Err(ClientError::Status(s)) => (s.code(), s.message().to_string()),
        Err(other) => panic!("not a status: {other}"),
        Ok(b) => panic!("a batch of {} samples instead of an error", b.samples.len()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streamed_footprints_read_back_byte_for_byte_in_request_order() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(stac_config(dir.path())).await;
    let mut client = Client::connect(&d.addr).await.unwrap();
    for (sampler, patch) in [(pb::Sampler::Random, 32), (pb::Sampler::Grid, 96)] {
        let batches = collect(&d.addr, stream("demo-stac", sampler, patch, 4, 12)).await;
        let all = samples(&batches);
        assert!(all.len() >= 8, "{} samples", all.len());
        // One call, reversed: the batch keeps request order.
        let footprints: Vec<pb::Footprint> = all
            .iter()
            .rev()
            .map(|(b, i)| footprint_of(&b.samples[*i], true))
            .collect();
        let read = client
            .read_footprint(pb::ReadFootprintRequest {
                dataset: "demo-stac".into(),
                layers: Vec::new(),
                footprints,
            })
            .await
            .unwrap();
        assert_eq!(read.samples.len(), all.len());
        assert_eq!(read.image.shape[0], all.len());
        for (j, (b, i)) in all.iter().rev().enumerate() {
            assert_same(&read, j, b, *i);
        }
        // One footprint at a time, without naming the Item: the same bytes and metadata.
        for (b, i) in all.iter().take(4) {
            let read = client
                .read_footprint(pb::ReadFootprintRequest {
                    dataset: "demo-stac".into(),
                    layers: Vec::new(),
                    footprints: vec![footprint_of(&b.samples[*i], false)],
                })
                .await
                .unwrap();
            assert_same(&read, 0, b, *i);
        }
    }
    // Grid edges are padded, and said to be.
    let grid = collect(&d.addr, stream("demo-stac", pb::Sampler::Grid, 96, 4, 0)).await;
    assert!(grid.iter().flat_map(|b| &b.samples).any(|m| m.padded));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn time_series_footprints_read_back_with_masks_valid_fraction_and_split() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(series_config(dir.path())).await;
    let batches = collect(&d.addr, stream("demo-series", pb::Sampler::Random, 32, 4, 8)).await;
    let all = samples(&batches);
    assert_eq!(all.len(), 8);
    assert!(!batches[0].time_masks.is_empty());
    let mut client = Client::connect(&d.addr).await.unwrap();
    let read = client
        .read_footprint(pb::ReadFootprintRequest {
            dataset: "demo-series".into(),
            layers: Vec::new(),
            footprints: all.iter().map(|(b, i)| footprint_of(&b.samples[*i], true)).collect(),
        })
        .await
        .unwrap();
    for (j, (b, i)) in all.iter().enumerate() {
        assert!(b.samples[*i].valid_fraction.is_some());
        assert_same(&read, j, b, *i);
    }
    // A subset of layers, in the order asked.
    let names: Vec<String> = batches[0].layers.iter().rev().take(2).map(|(n, _)| n.clone()).collect();
    let (b, i) = all[3];
    let read = client
        .read_footprint(pb::ReadFootprintRequest {
            dataset: "demo-series".into(),
            layers: names.clone(),
            footprints: vec![footprint_of(&b.samples[i], true)],
        })
        .await
        .unwrap();
    let got: Vec<&String> = read.layers.iter().map(|(n, _)| n).collect();
    assert_eq!(got, names.iter().collect::<Vec<_>>());
    for (name, t) in &read.layers {
        assert!(slice(t, 0) == slice(b.layer(name).unwrap(), i), "layer {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn footprints_of_their_own_and_other_resolutions() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(stac_config(dir.path())).await;
    let batches = collect(&d.addr, stream("demo-stac", pb::Sampler::Random, 32, 2, 2)).await;
    let m = batches[0].samples[0].clone();
    let mut client = Client::connect(&d.addr).await.unwrap();
    // Twice the pixel size: half the pixels across, every layer.
    let mut coarse = footprint_of(&m, false);
    coarse.resolution = m.resolution * 2.0;
    let read = client
        .read_footprint(pb::ReadFootprintRequest {
            dataset: "demo-stac".into(),
            layers: Vec::new(),
            footprints: vec![coarse],
        })
        .await
        .unwrap();
    for ((name, a), (_, b)) in read.layers.iter().zip(&batches[0].layers) {
        assert_eq!(a.shape[2] * 2, b.shape[2], "layer {name}");
        assert_eq!(a.shape[3] * 2, b.shape[3], "layer {name}");
    }
    assert_eq!(read.samples[0].resolution, m.resolution * 2.0);
    // The same place in lon/lat (no reference grid there): a footprint of its own, warped
    // from every Item it meets.
    let (lon, lat) = {
        let utm = cogfeed_geo::Crs::parse(&m.crs).unwrap();
        let wgs = cogfeed_geo::Crs::from_epsg(4326).unwrap();
        let (mut xs, mut ys) = (
            vec![(m.bounds[0] + m.bounds[2]) / 2.0],
            vec![(m.bounds[1] + m.bounds[3]) / 2.0],
        );
        cogfeed_geo::Transformer::new(&utm, &wgs).transform(&mut xs, &mut ys);
        (xs[0], ys[0])
    };
    // Its resolution is in the CRS's units (degrees here).
    let read = client
        .read_footprint(pb::ReadFootprintRequest {
            dataset: "demo-stac".into(),
            layers: Vec::new(),
            footprints: vec![pb::Footprint {
                crs: "EPSG:4326".into(),
                bounds: vec![lon - 0.001, lat - 0.001, lon + 0.001, lat + 0.001],
                resolution: 0.0001,
                ..Default::default()
            }],
        })
        .await
        .unwrap();
    assert_eq!(read.image.shape[2..], [20, 20]);
    let s = &read.samples[0];
    assert_eq!(s.crs, "EPSG:4326");
    assert_eq!(s.drawn, "");
    assert!(!s.items.is_empty(), "{s:?}");
    assert_eq!(read.image.shape[0], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_footprints_are_refused_with_clear_messages() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = stac_config(dir.path());
    c.limits.max_batch_size = 64;
    let d = start(c).await;
    let batches = collect(&d.addr, stream("demo-stac", pb::Sampler::Random, 32, 2, 2)).await;
    let m = batches[0].samples[0].clone();
    let good = footprint_of(&m, false);
    let mut client = Client::connect(&d.addr).await.unwrap();
    let ask = |dataset: &str, layers: Vec<String>, footprints: Vec<pb::Footprint>| pb::ReadFootprintRequest {
        dataset: dataset.into(),
        layers,
        footprints,
    };
    let with = |f: &dyn Fn(&mut pb::Footprint)| {
        let mut g = good.clone();
        f(&mut g);
        g
    };
    let (w, h) = (m.bounds[2] - m.bounds[0], m.bounds[3] - m.bounds[1]);
    let cases: Vec<(pb::ReadFootprintRequest, tonic::Code, &str)> = vec![
        (
            ask("demo-stac", vec![], vec![]),
            tonic::Code::InvalidArgument,
            "no footprints",
        ),
        (
            ask("nope", vec![], vec![good.clone()]),
            tonic::Code::NotFound,
            "not found",
        ),
        (
            ask("demo", vec![], vec![good.clone()]),
            tonic::Code::FailedPrecondition,
            "not a map-space",
        ),
        (
            ask("demo-stac", vec!["nir".into()], vec![good.clone()]),
            tonic::Code::InvalidArgument,
            "no layer \"nir\"",
        ),
        (
            ask("demo-stac", vec!["image".into(), "image".into()], vec![good.clone()]),
            tonic::Code::InvalidArgument,
            "requested twice",
        ),
        (
            ask("demo-stac", vec![], vec![with(&|f| f.bounds.truncate(3))]),
            tonic::Code::InvalidArgument,
            "footprint 0: 3 bounds",
        ),
        (
            ask("demo-stac", vec![], vec![with(&|f| f.bounds.swap(0, 2))]),
            tonic::Code::InvalidArgument,
            "minx < maxx",
        ),
        (
            ask("demo-stac", vec![], vec![with(&|f| f.bounds[1] = f64::NAN)]),
            tonic::Code::InvalidArgument,
            "not finite",
        ),
        (
            ask("demo-stac", vec![], vec![with(&|f| f.crs = "EPSG:99999999".into())]),
            tonic::Code::InvalidArgument,
            "unknown crs",
        ),
        (
            ask("demo-stac", vec![], vec![with(&|f| f.crs = String::new())]),
            tonic::Code::InvalidArgument,
            "no crs",
        ),
        (
            ask("demo-stac", vec![], vec![with(&|f| f.resolution = -1.0)]),
            tonic::Code::InvalidArgument,
            "not a positive number",
        ),
        (
            ask("demo-stac", vec![], vec![with(&|f| f.datetime = "yesterday".into())]),
            tonic::Code::InvalidArgument,
            "not RFC 3339",
        ),
        (
            ask(
                "demo-stac",
                vec![],
                vec![good.clone(), with(&|f| f.item = "no-such-item".into())],
            ),
            tonic::Code::NotFound,
            "footprint 1: no drawable item",
        ),
        // Absurd sizes: refused on the request's numbers, before anything is allocated.
        (
            ask("demo-stac", vec![], vec![with(&|f| f.bounds[2] = f.bounds[0] + 1e12)]),
            tonic::Code::InvalidArgument,
            "limits.max_patch_size",
        ),
        (
            ask("demo-stac", vec![], vec![with(&|f| f.resolution = 1e-9)]),
            tonic::Code::InvalidArgument,
            "limits.max_patch_size",
        ),
        (
            ask("demo-stac", vec![], vec![good.clone(); 65]),
            tonic::Code::InvalidArgument,
            "limits.max_batch_size",
        ),
        // Far from every Item.
        (
            ask(
                "demo-stac",
                vec![],
                vec![with(&|f| {
                    f.bounds = vec![1e6 - w, -1e6, 1e6, -1e6 + h];
                })],
            ),
            tonic::Code::InvalidArgument,
            "meet no item",
        ),
        // One call, one shape.
        (
            ask("demo-stac", vec![], vec![good.clone(), with(&|f| f.bounds[2] += w)]),
            tonic::Code::InvalidArgument,
            "footprint 1: layer image",
        ),
    ];
    let root = dir.path().to_string_lossy().to_string();
    for (r, want, text) in cases {
        let (got, msg) = code(client.read_footprint(r.clone()).await);
        assert_eq!(got, want, "{msg}");
        assert!(msg.contains(text), "{msg:?} does not say {text:?}");
        assert!(!msg.contains(&root), "{msg:?} leaks a path");
    }
    // The daemon is still serving.
    client
        .read("demo-stac", &good.crs, good.bounds.clone().try_into().unwrap(), &[])
        .await
        .unwrap();
}

fn sha(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scopes_and_memory_admission_apply() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = stac_config(dir.path());
    c.auth.required = true;
    c.auth.tokens = vec![
        TokenConfig {
            sha256: sha("scenes-only"),
            datasets: vec!["demo".into()],
            name: Some("scenes".into()),
            max_streams: None,
            requests_per_second: None,
        },
        TokenConfig {
            sha256: sha("all"),
            datasets: vec!["*".into()],
            name: Some("all".into()),
            max_streams: None,
            requests_per_second: None,
        },
    ];
    // Room for a small read, not for a large one.
    c.limits.memory_budget_bytes = Some(24 << 20);
    c.limits.memory_per_caller_bytes = Some(24 << 20);
    c.limits.admission_wait_secs = 0.2;
    c.limits.max_patch_size = 1024;
    c.limits.max_batch_bytes = 1 << 30;
    let d = start(c).await;
    let connect = |token: Option<&'static str>| {
        let addr = d.addr.clone();
        async move {
            let options = ConnectOptions {
                token: token.map(str::to_string),
                ..Default::default()
            };
            Client::connect_with(&addr, options).await.unwrap()
        }
    };
    let mut all = connect(Some("all")).await;
    let r = stream("demo-stac", pb::Sampler::Random, 32, 1, 1);
    let m = {
        let mut s = all.stream(r).await.unwrap();
        use futures::StreamExt;
        s.next().await.unwrap().unwrap().samples[0].clone()
    };
    let bounds: [f64; 4] = m.bounds.clone().try_into().unwrap();
    all.read("demo-stac", &m.crs, bounds, &[]).await.unwrap();
    let (got, msg) = code(
        connect(Some("scenes-only"))
            .await
            .read("demo-stac", &m.crs, bounds, &[])
            .await,
    );
    assert_eq!(got, tonic::Code::PermissionDenied, "{msg}");
    let (got, _) = code(connect(None).await.read("demo-stac", &m.crs, bounds, &[]).await);
    assert_eq!(got, tonic::Code::Unauthenticated);
    // 16 footprints of 1000 x 1000 pixels: within the message limits, over the memory.
    let side = 1000.0 * m.resolution;
    let big = pb::Footprint {
        crs: m.crs.clone(),
        bounds: vec![bounds[0], bounds[3] - side, bounds[0] + side, bounds[3]],
        ..Default::default()
    };
    let (got, msg) = code(
        all.read_footprint(pb::ReadFootprintRequest {
            dataset: "demo-stac".into(),
            layers: vec!["image".into()],
            footprints: vec![big; 16],
        })
        .await,
    );
    assert_eq!(got, tonic::Code::ResourceExhausted, "{msg}");
    // Nothing was kept: the small read still fits.
    all.read("demo-stac", &m.crs, bounds, &[]).await.unwrap();
}
