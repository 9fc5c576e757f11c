//! What a catalog controls is bounded before it reaches a batch: Item ids, the number of
//! point attributes and their names travel with every sample, so a dataset whose documents
//! exceed the bounds is refused at start-up with a message naming the document, and the
//! metadata a sample carries is counted in admission (issue: a points file with 20,000
//! columns made one batch a 506 MiB message; 1 MiB Item ids pushed RSS to 3.2 GB).

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

use std::path::Path;

use cogfeed_server::app::App;
use cogfeed_server::config::Config;
use serde_json::{Value, json};

fn series(dir: &Path) -> (Config, std::path::PathBuf) {
    let items = cogfeed_server::demo::series::write_series_demo(&dir.join("series")).unwrap();
    let mut c = Config::demo(dir);
    c.datasets = vec![Config::demo_series(&items)];
    (c, items)
}

async fn start_up_error(config: Config) -> String {
    match App::build(config).await {
        Ok(_) => panic!("the dataset was served"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_point_attributes_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (config, items) = series(dir.path());
    let points = items.parent().unwrap().join("points.geojson");
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&points).unwrap()).unwrap();
    for f in doc["features"].as_array_mut().unwrap() {
        let props = f["properties"].as_object_mut().unwrap();
        for k in 0..2000 {
            props.insert(format!("band_{k:05}"), json!(k as f64));
        }
    }
    std::fs::write(&points, serde_json::to_vec(&doc).unwrap()).unwrap();
    let e = start_up_error(config).await;
    assert!(
        e.contains("points.geojson") && e.contains("numeric attributes (at most 256"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_id_of_a_megabyte_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (config, items) = series(dir.path());
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&items).unwrap()).unwrap();
    let features = doc["features"].as_array_mut().unwrap();
    features[3]["id"] = json!("x".repeat(1 << 20));
    std::fs::write(&items, serde_json::to_vec(&doc).unwrap()).unwrap();
    let e = start_up_error(config).await;
    // Refused while the Item is read, before the id is decoded.
    assert!(
        e.contains("items.json") && e.contains("id is 1048578 bytes of JSON"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_samples_metadata_is_counted_with_its_layers() {
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = series(dir.path());
    let app = App::build(config).await.unwrap();
    let ds = app.catalog.get("demo-series").unwrap();
    let map = ds.map.as_ref().unwrap();
    let meta = map.meta_bytes_per_sample();
    // Item ids of a few Items per step, five dates, the points' id and attributes.
    let longest = map.items.iter().map(|i| i.id.len()).max().unwrap() as u64;
    assert!(meta > 256 + 8 * longest, "{meta}");
    assert!(meta < 64 << 10, "a bound, not a blow-up: {meta}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warp_of_repeated_ids_is_refused_before_anything_is_read() {
    use cogfeed_server::dataset::map::mosaic::command::{WarpRequest, warp};
    let dir = tempfile::tempdir().unwrap();
    let (_, items) = series(dir.path());
    let first =
        cogfeed_server::dataset::map::load_items(&items.to_string_lossy(), &Default::default(), &Default::default())
            .await
            .unwrap()
            .remove(0)
            .id;
    let mut request = WarpRequest {
        items: items.to_string_lossy().into_owned(),
        ids: vec![first.clone(); 5000],
        assets: vec!["B02".into()],
        crs: "EPSG:32632".into(),
        bounds: [0.0, 0.0, 100.0, 100.0],
        resolution: 10.0,
        resampling: "nearest".into(),
        nodata: 0.0,
    };
    let e = warp(&request, &Default::default()).await.unwrap_err().to_string();
    assert!(e.contains("5000 items (at most 1024)"), "{e}");
    request.ids.truncate(2);
    let e = warp(&request, &Default::default()).await.unwrap_err().to_string();
    assert!(e.contains("twice"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_changed_document_is_not_replanned_by_every_stream() {
    let dir = tempfile::tempdir().unwrap();
    let (config, items) = series(dir.path());
    let app = App::build(config).await.unwrap();
    let served = app.catalog.get("demo-series").unwrap().version.clone();
    std::fs::write(&items, b"{ not json").unwrap();
    // The first failing stream's re-open fails and says why; the next ones back off.
    assert!(app.catalog.refresh("demo-series").await.is_err());
    let t = std::time::Instant::now();
    for _ in 0..20 {
        app.catalog.refresh("demo-series").await.unwrap();
    }
    assert!(t.elapsed() < std::time::Duration::from_millis(500), "{:?}", t.elapsed());
    // The served dataset is untouched.
    assert_eq!(app.catalog.get("demo-series").unwrap().version, served);
}

/// A tile source that counts which objects were asked for (around the real cache).
#[derive(Debug)]
struct Counting {
    cache: cogfeed_server::tiles::TileCache,
    objects: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

#[async_trait::async_trait]
impl cogfeed_server::tiles::TileSource for Counting {
    async fn tile(
        &self,
        object: &cogfeed_server::tiles::TileObject,
        level: usize,
        block: usize,
    ) -> cogfeed_tiff::TiffResult<cogfeed_server::tiles::Tile> {
        self.objects.lock().unwrap().insert(object.url.to_string());
        self.cache.tile(object, level, block).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mosaic_of_many_overlapping_items_reads_only_until_every_pixel_is_filled() {
    use cogfeed_server::dataset::map::mosaic::{AssetSource, MOSAIC_IN_FLIGHT, mosaic};
    let dir = tempfile::tempdir().unwrap();
    let (_, items) = series(dir.path());
    let all =
        cogfeed_server::dataset::map::load_items(&items.to_string_lossy(), &Default::default(), &Default::default())
            .await
            .unwrap();
    let item = all.iter().find(|i| i.assets.contains_key("B02")).unwrap();
    let asset = item.asset("B02").unwrap();
    // 100 Items over the same place (a year of revisits), each its own object.
    let copies = dir.path().join("copies");
    std::fs::create_dir_all(&copies).unwrap();
    let mut sources = Vec::new();
    for k in 0..100 {
        let path = copies.join(format!("b02_{k:03}.tif"));
        std::fs::copy(&asset.href, &path).unwrap();
        let mut a = asset.clone();
        a.href = path.to_string_lossy().into_owned();
        let object = cogfeed_server::tiles::open_object(&a.href, &Default::default(), Default::default())
            .await
            .unwrap();
        sources.push(AssetSource::new(&format!("copy-{k}"), &a, object).unwrap());
    }
    // A footprint well inside the asset's grid: the first Item fills every pixel.
    let t = asset.transform.unwrap();
    let (x0, y0) = (t.c + 20.0 * t.a, t.f + 20.0 * t.e);
    let crs = cogfeed_geo::Crs::parse(&format!("EPSG:{}", asset.epsg.unwrap())).unwrap();
    let footprint = cogfeed_geo::Footprint::new(crs, [x0, y0 - 64.0 * t.a, x0 + 64.0 * t.a, y0], t.a).unwrap();
    let tiles = Counting {
        cache: cogfeed_server::tiles::TileCache::new(256 << 20),
        objects: Default::default(),
    };
    let (m, reads) = mosaic(&tiles, &sources, 1, &footprint, cogfeed_geo::warp::Resampling::Bilinear)
        .await
        .unwrap();
    assert!(m.is_full());
    assert_eq!(reads.len(), 100, "every source is still listed as planned");
    let read = tiles.objects.lock().unwrap().len();
    assert!(
        read <= MOSAIC_IN_FLIGHT + 1,
        "{read} of 100 objects read for a mosaic the first filled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bbox_its_assets_contradict_is_refused_or_replaced_by_the_grid() {
    let dir = tempfile::tempdir().unwrap();
    let (config, items) = series(dir.path());
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&items).unwrap()).unwrap();
    let features = doc["features"].as_array_mut().unwrap();
    let id = features[0]["id"].as_str().unwrap().to_string();
    let good = features[0]["bbox"].clone();
    // The bbox in the assets' projected units (UTM metres), as a broken catalog writes it.
    features[0]["bbox"] = json!([600000.0, 5000000.0, 610000.0, 5010000.0]);
    std::fs::write(&items, serde_json::to_vec(&doc).unwrap()).unwrap();
    let e = start_up_error(config.clone()).await;
    assert!(e.contains(&id) && e.contains("projected units"), "{e}");
    // Skip: served, placed by its grid, as with the right bbox.
    let mut skip = config;
    skip.datasets[0].on_bad_object = cogfeed_server::config::OnBadObject::Skip;
    let app = App::build(skip).await.unwrap();
    let ds = app.catalog.get("demo-series").unwrap();
    let placed = ds.map.as_ref().unwrap().item_boxes().find(|(i, _)| *i == id).unwrap().1;
    let want: Vec<f64> = serde_json::from_value(good).unwrap();
    for (a, b) in placed.iter().zip(&want) {
        assert!((a - b).abs() < 0.01, "{placed:?} against the catalog's own {want:?}");
    }
}

/// Samples of `demo-series` whose `s2` steps are not all dates, of `n` random draws.
async fn short_series(config: Config, n: u64) -> (usize, usize) {
    use cogfeed_client::pb;
    let d = {
        let app = App::build(config).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move { app.serve(listener, std::future::pending()).await });
        addr
    };
    let r = pb::StreamBatchesRequest {
        dataset: "demo-series".into(),
        job: "series".into(),
        sampler: pb::Sampler::Random as i32,
        patch_size: 32,
        batch_size: 8,
        seed: 4,
        world_size: 1,
        samples_per_epoch: n,
        layers: vec!["s2".into()],
        ..Default::default()
    };
    use futures::StreamExt;
    let mut client = cogfeed_client::Client::connect(&d).await.unwrap();
    let batches: Vec<_> = client.stream(r).await.unwrap().map(|b| b.unwrap()).collect().await;
    let (mut short, mut all) = (0, 0);
    for b in &batches {
        let mask = &b.time_masks.iter().find(|(n, _)| n == "s2").unwrap().1;
        let t = mask.shape[1];
        for s in mask.data.chunks(t) {
            all += 1;
            short += usize::from(s.contains(&0));
        }
    }
    (short, all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_full_series_redraws_samples_with_a_missing_date() {
    let dir = tempfile::tempdir().unwrap();
    let (mut config, _) = series(dir.path());
    config.datasets[0].layers[0].time_steps = Some(5);
    let (short, all) = short_series(config.clone(), 64).await;
    assert!(
        short > 0 && all == 64,
        "the archive has draws with a missing date ({short} of {all})"
    );
    config.datasets[0].sampling.as_mut().unwrap().require_full_series = true;
    config.datasets[0].sampling.as_mut().unwrap().max_attempts = Some(256);
    let (short, all) = short_series(config, 64).await;
    assert_eq!((short, all), (0, 64), "every kept sample fills its 5 steps");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_item_is_named_in_one_pass_and_skip_serves_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (config, items) = series(dir.path());
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&items).unwrap()).unwrap();
    let mut broken = Vec::new();
    for f in doc["features"].as_array_mut().unwrap() {
        if broken.len() < 2 && f["assets"].get("B02").is_some() {
            f["assets"]["B02"]["href"] = json!(format!("gone_{}.tif", broken.len()));
            broken.push(f["id"].as_str().unwrap().to_string());
        }
    }
    std::fs::write(&items, serde_json::to_vec(&doc).unwrap()).unwrap();
    let e = start_up_error(config.clone()).await;
    assert!(
        e.contains("2 of ") && broken.iter().all(|id| e.contains(id.as_str())),
        "{e}"
    );
    let mut skip = config;
    skip.datasets[0].on_bad_object = cogfeed_server::config::OnBadObject::Skip;
    let app = App::build(skip).await.unwrap();
    let ds = app.catalog.get("demo-series").unwrap();
    assert!(!ds.scenes.is_empty(), "the rest is served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asset_hrefs_are_confined_to_the_catalogs_store() {
    let dir = tempfile::tempdir().unwrap();
    let (config, items) = series(dir.path());
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&items).unwrap()).unwrap();
    let mut escaped = Vec::new();
    for (f, href) in doc["features"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .filter(|f| f["assets"].get("B02").is_some())
        .zip([
            "/etc/passwd",
            "../../../../etc/hostname",
            "http://169.254.169.254/latest/meta-data",
        ])
    {
        f["assets"]["B02"]["href"] = json!(href);
        escaped.push(f["id"].as_str().unwrap().to_string());
    }
    std::fs::write(&items, serde_json::to_vec(&doc).unwrap()).unwrap();
    let e = start_up_error(config.clone()).await;
    assert!(
        e.contains("3 Item(s) with an asset outside the allowed prefixes")
            && escaped.iter().all(|id| e.contains(id.as_str())),
        "{e}"
    );
    // Skip serves the rest; naming the prefixes explicitly lets nothing else in either.
    let mut skip = config.clone();
    skip.datasets[0].on_bad_object = cogfeed_server::config::OnBadObject::Skip;
    let app = App::build(skip).await.unwrap();
    let ds = app.catalog.get("demo-series").unwrap();
    let map = ds.map.as_ref().unwrap();
    assert!(map.items.iter().all(|i| !escaped.contains(&i.id)));
    let mut listed = config;
    listed.datasets[0].allowed_prefixes = Some(vec![format!("{}/", items.parent().unwrap().display())]);
    assert!(start_up_error(listed).await.contains("3 Item(s)"));
}

/// One Item of the series demo made 32 MiB three ways (a geometry of millions of vertices,
/// a nested property, an asset's unread extra field), and one with a million scalar
/// properties: `cogfeed stac` reads each under a 320 MiB address-space limit (before: a
/// JSON tree of the whole document, 0.7 to 1.7 GB RSS for 50 MiB, aborting under such a
/// limit), the million properties refused naming the Item.
#[test]
fn a_document_of_one_huge_item_is_read_within_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let (_, items) = series(dir.path());
    let doc: Value = serde_json::from_slice(&std::fs::read(&items).unwrap()).unwrap();
    let mut item = doc["features"][0].clone();
    let key = item["assets"].as_object().unwrap().keys().next().unwrap().clone();
    // Placeholders spliced with the bloat as text (building it as a `Value` is slow).
    item["geometry"] = json!("@geometry@");
    item["properties"]["s2:history"] = json!("@nested@");
    item["assets"][&key]["file:values"] = json!("@asset@");
    item["properties"]["k"] = json!("@scalars@");
    let text = serde_json::to_string(&json!({"type": "FeatureCollection", "features": [item.clone()]})).unwrap();
    let n = 32usize << 20;
    let bloats = [
        (
            "geometry",
            format!(
                "{{\"type\":\"Polygon\",\"coordinates\":[[{}[0,0]]]}}",
                "[11.123456,46.123456],".repeat(n / 22)
            ),
        ),
        ("nested", format!("[{}[1]]", "[1,2],".repeat(n / 6))),
        ("asset", format!("[{}0.5]", "0.5,".repeat(n / 4))),
        (
            "scalars",
            format!(
                "0{}",
                (0..1_000_000).map(|k| format!(",\"k{k}\":{k}")).collect::<String>()
            ),
        ),
    ];
    for (what, bloat) in bloats {
        let mut doc = text.clone();
        for other in ["geometry", "nested", "asset", "scalars"] {
            let placeholder = format!("\"@{other}@\"");
            doc = doc.replace(&placeholder, if other == what { &bloat } else { "null" });
        }
        let path = dir.path().join(format!("{what}.json"));
        std::fs::write(&path, doc).unwrap();
        let out = std::process::Command::new("prlimit")
            .arg(format!("--as={}", 320u64 << 20))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_cogfeed"))
            .arg("stac")
            .arg(&path)
            .output()
            .expect("prlimit (util-linux) runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if what == "scalars" {
            assert!(!out.status.success(), "{what}: {stdout}");
            assert!(
                stderr.contains("scalars.json") && stderr.contains("more than 4096 properties"),
                "{what}: {stderr}"
            );
        } else {
            assert!(out.status.success(), "{what}: {} {stderr}", out.status);
            assert!(
                stdout.starts_with("1 items") && stdout.contains(item["id"].as_str().unwrap()),
                "{what}: {stdout}"
            );
        }
    }
}
