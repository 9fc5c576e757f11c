//! Real STAC Items as public catalogs publish them (Planetary Computer, Earth Search v0/v1, USGS),
//! committed in `tests/fixtures/stac/` with their provenance and licences in `SOURCES.json` (copies
//! of the shared `stac/items/` fixtures and `stac/manifest.json`). The imagery is not here, so this
//! checks what can be checked without it: parsing, the asset grids the projection extension
//! describes (CRS, shape, transform) against the Item's own `bbox` and `geometry`, and hrefs after
//! `href_rewrite`.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cogfeed_geo::{Affine, Crs, Transformer};
use cogfeed_stac::{Asset, HrefRewrite, Item, parse_document};
use serde_json::Value;

/// How far (degrees) an asset's grid may reach past the Item's `bbox`, and the `bbox` past the
/// grid: grids are whole pixels and bboxes are rounded by their catalogs. The largest excess among
/// Items whose data fills their grid is 0.024° (a USGS Landsat scene); everything else is < 0.001°.
const BBOX_TOLERANCE_DEG: f64 = 0.05;

/// How far (fraction of the grid's width / height) a vertex of the Item's `geometry` may lie
/// outside its assets' grid. Planetary Computer's Sentinel-2 footprints at 81°N (T46XER, T47XML)
/// have vertices up to 1.1 % of a tile (1.2 km) beyond the tile's grid: the footprint is simplified
/// in lon/lat, where a degree of longitude is 17 km there.
const GEOMETRY_MARGIN: f64 = 0.02;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stac")
}

/// `(file, SOURCES.json entry)` for every committed Item.
fn sources() -> Vec<(PathBuf, Value)> {
    let text = std::fs::read_to_string(dir().join("SOURCES.json")).unwrap();
    let manifest: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert!(manifest.len() >= 18, "{} entries in SOURCES.json", manifest.len());
    manifest
        .into_iter()
        .map(|e| {
            let name = e["file"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
            (dir().join(name), e)
        })
        .collect()
}

fn parse(path: &Path, rewrite: &HrefRewrite) -> Vec<Item> {
    let bytes = std::fs::read(path).unwrap();
    parse_document(path.to_str().unwrap(), &bytes, rewrite).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn one(path: &Path) -> Item {
    let mut items = parse(path, &HrefRewrite::default());
    assert_eq!(items.len(), 1, "{}", path.display());
    items.pop().unwrap()
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// An asset's grid, when the projection extension gives all of it.
fn grid(asset: &Asset) -> Option<(Crs, Affine, u64, u64)> {
    let (epsg, (rows, cols), t) = (asset.epsg?, asset.shape?, asset.transform?);
    let crs = Crs::from_epsg(epsg).unwrap_or_else(|e| panic!("asset {}: EPSG:{epsg} does not resolve: {e}", asset.key));
    Some((crs, t, rows, cols))
}

#[test]
fn every_item_parses_and_matches_its_source() {
    let wanted: BTreeSet<String> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json") && n != "SOURCES.json")
        .collect();
    let listed: BTreeSet<String> = sources()
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(wanted, listed, "SOURCES.json and the committed Items differ");
    for (path, src) in sources() {
        let item = one(&path);
        assert_eq!(item.id, src["id"].as_str().unwrap());
        assert_eq!(item.collection.as_deref(), src["collection"].as_str());
        let bbox = numbers(&src["bbox"]);
        assert_eq!(item.bbox.unwrap().as_slice(), bbox.as_slice(), "{}", item.id);
        assert!(item.datetime.is_some(), "{}: no datetime", item.id);
        let keys: BTreeSet<&String> = item.assets.keys().collect();
        let listed: BTreeSet<&String> = src["assets"].as_object().unwrap().keys().collect();
        assert_eq!(keys, listed, "{}: asset keys", item.id);
        let epsg = src["epsg"].as_u64().unwrap() as u32;
        for (key, a) in &item.assets {
            // Hrefs are absolute URLs: resolving against the document leaves them alone.
            assert_eq!(a.href, a.href_raw, "{} {key}", item.id);
            assert!(a.href.starts_with("https://"), "{} {key}: {}", item.id, a.href);
            if let Some(code) = a.epsg {
                assert_eq!(code, epsg, "{} {key}: EPSG", item.id);
            }
            if let Some(shape) = src["assets"][key].get("proj:shape") {
                let s = numbers(shape);
                assert_eq!(
                    a.shape,
                    Some((s[0] as u64, s[1] as u64)),
                    "{} {key}: proj:shape",
                    item.id
                );
            }
        }
    }
}

/// Where one asset's grid lies, in EPSG:4326 and against the Item's geometry.
struct Placement {
    /// `[minx, miny, maxx, maxy]` of the grid's corners and edge midpoints in EPSG:4326.
    grid_box: [f64; 4],
    /// Largest distance (degrees) the grid box reaches past the Item's bbox.
    past_bbox: f64,
    /// Largest distance (degrees) the Item's bbox reaches past the grid box.
    bbox_past_grid: f64,
    /// Area of the Item's geometry in grid pixels, over the grid's area.
    coverage: f64,
    /// Largest distance of a geometry vertex outside the grid, as a fraction of its size.
    geometry_outside: f64,
}

fn place(item: &Item, geometry: &Value, crs: &Crs, t: &Affine, rows: u64, cols: u64) -> Placement {
    let wgs84 = Crs::from_epsg(4326).unwrap();
    let (c, r) = (cols as f64, rows as f64);
    let pixels = [
        (0.0, 0.0),
        (c, 0.0),
        (0.0, r),
        (c, r),
        (c / 2.0, 0.0),
        (c / 2.0, r),
        (0.0, r / 2.0),
        (c, r / 2.0),
    ];
    let (mut xs, mut ys): (Vec<f64>, Vec<f64>) = pixels.iter().map(|&(col, row)| t.apply(col, row)).unzip();
    Transformer::new(crs, &wgs84).transform(&mut xs, &mut ys);
    assert!(
        xs.iter().chain(&ys).all(|v| v.is_finite()),
        "{}: grid corners do not transform: {xs:?} {ys:?}",
        item.id
    );
    let fold = |v: &[f64], f: fn(f64, f64) -> f64, init: f64| v.iter().copied().fold(init, f);
    let grid_box = [
        fold(&xs, f64::min, f64::INFINITY),
        fold(&ys, f64::min, f64::INFINITY),
        fold(&xs, f64::max, f64::NEG_INFINITY),
        fold(&ys, f64::max, f64::NEG_INFINITY),
    ];
    let b = item.bbox.unwrap();
    let past_bbox = [
        b[0] - grid_box[0],
        b[1] - grid_box[1],
        grid_box[2] - b[2],
        grid_box[3] - b[3],
    ]
    .into_iter()
    .fold(f64::NEG_INFINITY, f64::max);
    let bbox_past_grid = [
        grid_box[0] - b[0],
        grid_box[1] - b[1],
        b[2] - grid_box[2],
        b[3] - grid_box[3],
    ]
    .into_iter()
    .fold(f64::NEG_INFINITY, f64::max);

    // The geometry's rings (from the document: cogfeed does not keep them), moved into
    // the grid's pixels.
    let rings: Vec<&Value> = match geometry["type"].as_str().unwrap() {
        "Polygon" => geometry["coordinates"].as_array().unwrap().iter().collect(),
        "MultiPolygon" => geometry["coordinates"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p.as_array().unwrap())
            .collect(),
        other => panic!("{}: geometry type {other}", item.id),
    };
    let to_pixel = t.inverse().unwrap();
    let back = Transformer::new(&wgs84, crs);
    let (mut area, mut outside) = (0.0, 0.0f64);
    for ring in rings {
        let (mut xs, mut ys): (Vec<f64>, Vec<f64>) = ring
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_f64().unwrap(), p[1].as_f64().unwrap()))
            .unzip();
        back.transform(&mut xs, &mut ys);
        let px: Vec<(f64, f64)> = xs.iter().zip(&ys).map(|(&x, &y)| to_pixel.apply(x, y)).collect();
        assert!(
            px.iter().all(|(a, b)| a.is_finite() && b.is_finite()),
            "{}: geometry",
            item.id
        );
        let mut twice = 0.0;
        for k in 0..px.len() {
            let ((x0, y0), (x1, y1)) = (px[k], px[(k + 1) % px.len()]);
            twice += x0 * y1 - x1 * y0;
            outside = outside.max(-x0 / c).max(x0 / c - 1.0).max(-y0 / r).max(y0 / r - 1.0);
        }
        area += twice.abs() / 2.0;
    }
    Placement {
        grid_box,
        past_bbox,
        bbox_past_grid,
        coverage: area / (r * c),
        geometry_outside: outside,
    }
}

/// Every asset with a full grid (proj:transform + proj:shape + a CRS): the CRS resolves, the grid
/// contains the Item's data (its bbox, its geometry's vertices) and, where the data fills the grid,
/// the grid lies within the Item's bbox.
///
/// Where an Item's data does not fill its grid, catalogs give the bbox of the data, not of the
/// grid, so the grid reaches far past the bbox (up to 3°) and only the first checks apply; the
/// geometry's area (under 95 % of the grid's) says so. In these fixtures that is:
/// - Sentinel-2 tiles at a swath edge: the four T13TDE Items (about 74 % nodata, 0.8° past the
///   bbox), Earth Search v0 13SDV, T46XER / T47XML at 81°N (27 % nodata; at that latitude the
///   missing strip is 2° of longitude) and the polar T52CEB at 75°S (93 % nodata; 3° of longitude
///   of UTM 52S tile past a 1° bbox);
/// - USGS Landsat (landsat-c2l2-sr LC08 028030): the bbox is the WRS scene's, rotated about 12° in
///   a north-up grid, so the grid's corners are 0.14° past it (the Planetary Computer Landsat
///   Items give the grid's bbox instead and pass the strict check);
/// - Sentinel-1 RTC: the same for a rotated swath in a north-up UTM grid.
///
/// The Copernicus DEM tile (EPSG:4326, pixels 0.0028° × 0.00028°) sits at the South Pole with a
/// bbox starting at -180.0014° (the tile is pixel-centred on the antimeridian). Its grid needs no
/// transformation (4326 → 4326 is the identity, so nothing wraps at ±180° or misbehaves at -90°):
/// it passes the strict check exactly. The Landsat scene in EPSG:3031 (polar stereographic) and
/// T52CEB in UTM 52S at 75°S go through proj4rs like any other.
#[test]
fn asset_grids_lie_where_the_item_says() {
    let (mut strict, mut data_bbox, mut grids) = (Vec::new(), Vec::new(), 0);
    for (path, _) in sources() {
        let item = one(&path);
        let source: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let geometry = &source["geometry"];
        let (mut worst, mut coverage, mut n) = (f64::NEG_INFINITY, f64::INFINITY, 0);
        for (key, asset) in &item.assets {
            let Some((crs, t, rows, cols)) = grid(asset) else {
                continue;
            };
            n += 1;
            let p = place(&item, geometry, &crs, &t, rows, cols);
            let what = format!("{} asset {key} ({crs}, {rows}x{cols}, grid {:?})", item.id, p.grid_box);
            assert!(
                p.bbox_past_grid <= BBOX_TOLERANCE_DEG,
                "{what}: the bbox {:?} reaches {:.4}° past the grid",
                item.bbox.unwrap(),
                p.bbox_past_grid
            );
            assert!(
                p.geometry_outside <= GEOMETRY_MARGIN,
                "{what}: a geometry vertex lies {:.2} % of the grid outside it",
                100.0 * p.geometry_outside
            );
            assert!(
                p.coverage > 0.01 && p.coverage < 1.0 + 1e-3,
                "{what}: coverage {}",
                p.coverage
            );
            if p.past_bbox > BBOX_TOLERANCE_DEG {
                assert!(
                    p.coverage < 0.95,
                    "{what}: the grid reaches {:.4}° past the bbox {:?} although the data covers {:.1} % of it",
                    p.past_bbox,
                    item.bbox.unwrap(),
                    100.0 * p.coverage
                );
            }
            worst = worst.max(p.past_bbox);
            coverage = coverage.min(p.coverage);
        }
        grids += n;
        println!(
            "{:<62} {n:>2} grids, grid past bbox {worst:>8.4}°, data covers {:>5.1} % of the grid",
            item.id,
            100.0 * coverage
        );
        if n == 0 {
            continue;
        }
        if worst > BBOX_TOLERANCE_DEG {
            data_bbox.push(item.id.clone());
        } else {
            strict.push(item.id.clone());
        }
    }
    println!("strict: {strict:?}\nbbox of the data only: {data_bbox:?}");
    assert!(grids > 200, "{grids} asset grids checked");
    assert_eq!(strict.len() + data_bbox.len(), 18);
    // The exceptions are the ones the doc comment names, no more.
    assert_eq!(data_bbox.len(), 10, "{data_bbox:?}");
    assert!(strict.iter().any(|id| id.starts_with("Copernicus_DSM")));
}

/// `proj:bbox`, where an Item gives it, is the bounds of the Item's grid (`proj:shape` and
/// `proj:transform` of its properties), and the assets that inherit that grid get it.
#[test]
fn proj_bbox_is_the_grid() {
    let mut seen = 0;
    for (path, _) in sources() {
        let item = one(&path);
        // Array properties are read from the document: an Item keeps only scalars.
        let source: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let props = &source["properties"];
        let Some(pb) = props.get("proj:bbox") else {
            continue;
        };
        let pb = numbers(pb);
        let shape = numbers(&props["proj:shape"]);
        let t = Affine::from_stac(&numbers(&props["proj:transform"])).unwrap();
        let b = t.bounds(shape[1], shape[0]);
        for k in 0..4 {
            assert!(
                (b[k] - pb[k]).abs() < 1e-6 * pb[k].abs().max(1.0),
                "{}: grid bounds {b:?}, proj:bbox {pb:?}",
                item.id
            );
        }
        let inheriting = item
            .assets
            .values()
            .filter(|a| a.transform == Some(t) && a.shape == Some((shape[0] as u64, shape[1] as u64)))
            .count();
        assert!(inheriting > 0, "{}: no asset has the Item's grid", item.id);
        seen += 1;
    }
    assert!(seen >= 2, "{seen}");
}

#[test]
fn href_rewrite_turns_https_into_s3() {
    let generic = HrefRewrite::new([("https://".to_string(), "s3://".to_string())]);
    let bucket = HrefRewrite::new([
        ("https://".to_string(), "s3://".to_string()),
        (
            "https://sentinel-cogs.s3.us-west-2.amazonaws.com/".to_string(),
            "s3://sentinel-cogs/".to_string(),
        ),
    ]);
    let mut rewritten = 0;
    for (path, _) in sources() {
        let plain = one(&path);
        let items = parse(&path, &generic);
        assert_eq!(items.len(), 1);
        for (key, a) in &items[0].assets {
            let raw = &plain.assets[key].href_raw;
            assert_eq!(&a.href_raw, raw, "href_raw keeps what the document says");
            let rest = raw.strip_prefix("https://").unwrap();
            assert_eq!(a.href, format!("s3://{rest}"), "{} {key}", items[0].id);
            rewritten += 1;
        }
        // The longest prefix wins: the Earth Search v0 bucket becomes s3://sentinel-cogs/...
        for (key, a) in &parse(&path, &bucket)[0].assets {
            let raw = &plain.assets[key].href_raw;
            if let Some(rest) = raw.strip_prefix("https://sentinel-cogs.s3.us-west-2.amazonaws.com/") {
                assert_eq!(a.href, format!("s3://sentinel-cogs/{rest}"));
            } else {
                assert_eq!(a.href, format!("s3://{}", raw.strip_prefix("https://").unwrap()));
            }
        }
        // Rewriting is applied to the resolved href and changes nothing else.
        let mut again = parse(&path, &generic).pop().unwrap();
        for a in again.assets.values_mut() {
            a.href = plain.assets[&a.key].href.clone();
        }
        assert_eq!(again, plain);
    }
    assert!(rewritten > 300, "{rewritten} hrefs rewritten");
}

/// The stac-geoparquet file (100 Planetary Computer Sentinel-2 L2A Items, geo metadata
/// 1.1.0): read with arrow-rs, each row the Item it encodes. Expected values were read with
/// pyarrow from the published file.
#[test]
fn stac_geoparquet_rows_are_items() {
    let path = dir().join("100-sentinel-2-items.parquet");
    let bytes = bytes::Bytes::from(std::fs::read(&path).unwrap());
    assert!(cogfeed_stac::is_parquet(&bytes));
    let doc = path.to_string_lossy().into_owned();
    let items = cogfeed_stac::parse_geoparquet(&doc, bytes.clone(), &HrefRewrite::default()).unwrap();
    assert_eq!(items.len(), 100);
    let last = items.last().unwrap();
    assert_eq!(last.id, "S2A_MSIL2A_20240326T174951_R141_T13TDE_20240329T224429");
    assert_eq!(last.datetime.unwrap().to_rfc3339(), "2024-03-26T17:49:51.024+00:00");
    let assets: usize = items.iter().map(|i| i.assets.len()).sum();
    assert_eq!(assets, 2349);
    let scl = items[5].asset("SCL").unwrap();
    assert_eq!(scl.epsg, Some(32613));
    assert_eq!(scl.shape, Some((5490, 5490)));
    assert_eq!(
        scl.transform.unwrap().to_stac(),
        [20.0, 0.0, 399960.0, 0.0, -20.0, 4500000.0]
    );
    // Properties are there for filters: 50 Items have eo:cloud_cover <= 20.
    let t: toml::Table = toml::from_str("\"eo:cloud_cover\" = \"<= 20\"").unwrap();
    let f = cogfeed_stac::ItemFilter::from_table(&t).unwrap();
    assert_eq!(items.iter().filter(|i| f.accepts(i)).count(), 50);
    // bbox from the covering struct; every asset grid lies around it.
    assert!(items.iter().all(|i| i.bbox.is_some()));
    // A file that is not Parquet, or is cut short, is a clear error.
    let cut = bytes.slice(0..bytes.len() / 2);
    let e = cogfeed_stac::parse_geoparquet(&doc, cut, &HrefRewrite::default()).unwrap_err();
    assert!(e.to_string().contains("Parquet"), "{e}");
}
