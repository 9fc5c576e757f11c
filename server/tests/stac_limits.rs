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
    assert!(e.contains("items.json") && e.contains("id of 1048576 bytes"), "{e}");
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
