//! The embedded map-space demo: a small Sentinel-2-like STAC archive written by the daemon
//! itself (no GDAL, no network). Two tiles in neighbouring UTM zones (32N and 33N) that
//! overlap across the zone boundary at 12°E, one COG per band: B02, B03, B04, B08 at 10 m
//! and B11 at 20 m (uint16, nodata 0, each tile with a nodata wedge along the edge facing
//! its neighbour), plus a land-cover label raster in EPSG:4326 (uint8 classes 1–6, 255 =
//! not labelled). The ground is one function of longitude and latitude, so both zones see
//! the same fields and a mosaic is seamless; each tile has its own gain, so a wrong
//! priority is visible.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::demo::{Georef, write_georeferenced};
use cogfeed_geo::{Crs, Transformer};

/// Pixels across a 10 m band of one tile.
pub const TILE_PX: u32 = 512;

struct Tile {
    id: &'static str,
    epsg: u16,
    x0: f64,
    y0: f64,
    gain: f64,
    /// The wedge lies along the east (true) or west edge.
    wedge_east: bool,
}

const TILES: [Tile; 2] = [
    Tile {
        id: "S2A_32TQS_20240603_DEMO",
        epsg: 32632,
        x0: 725_000.0,
        y0: 5_157_000.0,
        gain: 1.0,
        wedge_east: true,
    },
    Tile {
        id: "S2A_33TUM_20240603_DEMO",
        epsg: 32633,
        x0: 269_000.0,
        y0: 5_157_500.0,
        gain: 1.04,
        wedge_east: false,
    },
];

const BANDS: [(&str, f64, f64); 5] = [
    ("B02", 10.0, 0.06),
    ("B03", 10.0, 0.09),
    ("B04", 10.0, 0.08),
    ("B08", 10.0, 0.30),
    ("B11", 20.0, 0.20),
];

/// Land-cover class (1–6) of a point.
pub fn class_at(lon: f64, lat: f64) -> u8 {
    let fx = ((lon - 11.9) / 0.004).floor() as i64;
    let fy = ((lat - 46.4) / 0.003).floor() as i64;
    let river = ((lat - 46.5 - 0.01 * ((lon - 12.0) * 60.0).sin()).abs() < 0.0012) as u8;
    if river == 1 {
        return 6;
    }
    (((fx * 7 + fy * 13).rem_euclid(5)) + 1) as u8
}

/// Reflectance-like value of a band at a point.
pub fn reflectance(lon: f64, lat: f64, base: f64, band: usize) -> f64 {
    let class = class_at(lon, lat) as f64;
    let terrain = 0.5 + 0.5 * ((lon * 300.0).sin() * (lat * 410.0).cos());
    let field = 0.6 + 0.1 * class + 0.05 * band as f64;
    (base * field * (0.8 + 0.4 * terrain)).clamp(0.0, 1.0)
}

/// Writes the archive into `dir` (kept if already there) and returns its `items.json`.
pub fn write_stac_demo(dir: &Path) -> std::io::Result<PathBuf> {
    let items_path = dir.join("items.json");
    if items_path.exists() {
        return Ok(items_path);
    }
    std::fs::create_dir_all(dir.join("tiff"))?;
    let wgs = Crs::from_epsg(4326).map_err(std::io::Error::other)?;
    let mut features = Vec::new();
    for t in &TILES {
        let crs = Crs::from_epsg(t.epsg as u32).map_err(std::io::Error::other)?;
        let to_lonlat = Transformer::new(&crs, &wgs);
        let mut assets = serde_json::Map::new();
        for (bi, (name, res, base)) in BANDS.iter().enumerate() {
            let n = (TILE_PX as f64 * 10.0 / res) as u32;
            let (mut xs, mut ys) = (
                Vec::with_capacity((n * n) as usize),
                Vec::with_capacity((n * n) as usize),
            );
            for r in 0..n {
                for c in 0..n {
                    xs.push(t.x0 + (c as f64 + 0.5) * res);
                    ys.push(t.y0 - (r as f64 + 0.5) * res);
                }
            }
            to_lonlat.transform(&mut xs, &mut ys);
            let mut data = Vec::with_capacity((n * n * 2) as usize);
            for (i, (&lon, &lat)) in xs.iter().zip(ys.iter()).enumerate() {
                let (r, c) = (i as u32 / n, i as u32 % n);
                // The wedge: a triangle along the edge facing the neighbour.
                let edge = if t.wedge_east { n - 1 - c } else { c };
                let wedge = (edge as f64) < (n as f64 * 0.08) * (1.0 + r as f64 / n as f64);
                let v = if wedge || !lon.is_finite() {
                    0u16
                } else {
                    (1000.0 + 10000.0 * reflectance(lon, lat, *base, bi) * t.gain)
                        .round()
                        .clamp(1.0, 65535.0) as u16
                };
                data.extend_from_slice(&v.to_le_bytes());
            }
            let file = format!("tiff/{}_{name}.tif", t.id);
            let georef = Georef {
                epsg: t.epsg,
                x0: t.x0,
                y0: t.y0,
                pixel: *res,
                pixel_y: None,
                nodata: Some(0.0),
            };
            write_georeferenced(&dir.join(&file), n, n, 16, data, &georef)?;
            assets.insert(
                name.to_string(),
                json!({
                    "href": file,
                    "type": "image/tiff; application=geotiff; profile=cloud-optimized",
                    "roles": ["data"],
                    "proj:epsg": t.epsg,
                    "proj:shape": [n, n],
                    "proj:transform": [res, 0.0, t.x0, 0.0, -res, t.y0],
                    "raster:bands": [{"data_type": "uint16", "nodata": 0, "spatial_resolution": res}],
                }),
            );
        }
        let extent = TILE_PX as f64 * 10.0;
        let mut cx = vec![t.x0, t.x0 + extent, t.x0, t.x0 + extent];
        let mut cy = vec![t.y0, t.y0, t.y0 - extent, t.y0 - extent];
        to_lonlat.transform(&mut cx, &mut cy);
        let bbox = [
            cx.iter().cloned().fold(f64::INFINITY, f64::min),
            cy.iter().cloned().fold(f64::INFINITY, f64::min),
            cx.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
            cy.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
        ];
        features.push(json!({
            "type": "Feature", "stac_version": "1.0.0", "id": t.id, "collection": "sentinel-2-l2a-demo",
            "bbox": bbox,
            "geometry": {"type": "Polygon", "coordinates": [[[bbox[0], bbox[1]], [bbox[2], bbox[1]], [bbox[2], bbox[3]], [bbox[0], bbox[3]], [bbox[0], bbox[1]]]]},
            "properties": {"datetime": "2024-06-03T10:18:21Z", "eo:cloud_cover": 3.5, "proj:epsg": t.epsg},
            "assets": assets,
        }));
    }
    // Labels: EPSG:4326, 0.0001°, over parts of both tiles.
    let (lon0, lat1, step, w, h) = (11.965, 46.53, 0.0001, 700u32, 500u32);
    let mut data = Vec::with_capacity((w * h) as usize);
    for r in 0..h {
        for c in 0..w {
            let lon = lon0 + (c as f64 + 0.5) * step;
            let lat = lat1 - (r as f64 + 0.5) * step;
            let inside = ((c as f64 / w as f64 - 0.5).powi(2) + (r as f64 / h as f64 - 0.5).powi(2)) < 0.2;
            data.push(if inside { class_at(lon, lat) } else { 255 });
        }
    }
    let file = "tiff/LC_DEMO_2024_classes.tif";
    let georef = Georef {
        epsg: 4326,
        x0: lon0,
        y0: lat1,
        pixel: step,
        pixel_y: None,
        nodata: Some(255.0),
    };
    write_georeferenced(&dir.join(file), w, h, 8, data, &georef)?;
    let bbox = [lon0, lat1 - h as f64 * step, lon0 + w as f64 * step, lat1];
    features.push(json!({
        "type": "Feature", "stac_version": "1.0.0", "id": "LC_DEMO_2024", "collection": "landcover-demo",
        "bbox": bbox, "geometry": null,
        "properties": {"datetime": null, "start_datetime": "2024-01-01T00:00:00Z", "end_datetime": "2024-12-31T23:59:59Z"},
        "assets": {"classes": {
            "href": file, "roles": ["data"], "proj:code": "EPSG:4326", "proj:shape": [h, w],
            "proj:transform": [step, 0.0, lon0, 0.0, -step, lat1],
            "raster:bands": [{"data_type": "uint8", "nodata": 255}],
        }},
    }));
    let doc = json!({"type": "FeatureCollection", "features": features});
    let tmp = dir.join("items.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&doc).map_err(std::io::Error::other)?)?;
    std::fs::rename(&tmp, &items_path)?;
    Ok(items_path)
}
