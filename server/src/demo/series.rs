//! The embedded time-series demo: a small multi-sensor STAC archive written by the daemon
//! itself, shaped like the published crop-type workload (Sentinel-2 dates with a scene
//! classification layer, Sentinel-1 ascending and descending passes, labels in another
//! CRS), in miniature.
//!
//! Two tiles in neighbouring UTM zones (32N, 33N) overlapping across 12°E, as in
//! `demo_stac`. Per tile:
//! - Sentinel-2-like Items on 5 dates: B02, B03, B04, B08 at 10 m (uint16, nodata 0) and
//!   SCL at 20 m (uint8 classes: 4 vegetation, 5 bare, 6 water, 8/9 cloud, 3 shadow,
//!   0 no data). Each date has its own clouds (brighter bands under them) and some dates a
//!   no-data edge where the orbit ends, so valid fractions vary;
//! - Sentinel-1-like Items on 4 dates, `sat:orbit_state` ascending or descending: vv, vh at
//!   20 m (uint16 scaled dB, nodata 0).
//!
//! plus the land-cover label raster of `demo_stac` in EPSG:4326, and `points.geojson`: 60
//! field-survey points (lon/lat) with a `biomass`, a `crop` class and an `irrigated` flag,
//! two of them outside both tiles.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::demo::stac::{class_at, reflectance};
use crate::demo::{Georef, write_georeferenced};
use crate::rng;
use cogfeed_geo::{Crs, Transformer};

/// Pixels across a 10 m band of one tile.
pub const SERIES_PX: u32 = 256;

const TILES: [(&str, u16, f64, f64); 2] = [
    ("32TQS", 32632, 727_500.0, 5_157_000.0),
    ("33TUM", 32633, 269_000.0, 5_157_500.0),
];

/// Sentinel-2 dates: (day, clouds, no-data edge as a fraction of the width).
const S2_DATES: [(&str, usize, f64); 5] = [
    ("2024-04-18", 1, 0.0),
    ("2024-05-08", 4, 0.0),
    ("2024-05-28", 0, 0.45),
    ("2024-06-17", 2, 0.0),
    ("2024-07-07", 6, 0.2),
];

/// Sentinel-1 dates and orbit states.
const S1_DATES: [(&str, &str); 4] = [
    ("2024-04-20", "ascending"),
    ("2024-05-02", "descending"),
    ("2024-05-26", "ascending"),
    ("2024-06-07", "descending"),
];

const S2_BANDS: [(&str, f64); 10] = [
    ("B02", 0.06),
    ("B03", 0.09),
    ("B04", 0.08),
    ("B08", 0.30),
    ("B05", 0.12),
    ("B06", 0.20),
    ("B07", 0.25),
    ("B8A", 0.32),
    ("B11", 0.20),
    ("B12", 0.12),
];

/// How much the archive holds (the default is the embedded demo; benchmarks ask for the
/// published workload's 16 dates x 10 bands).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesShape {
    /// Sentinel-2 dates per tile: the 5 above, then one every 10 days.
    pub s2_dates: usize,
    /// Bands per Sentinel-2 date (at most 10), all at 10 m: B02, B03, B04, B08, then B05,
    /// B06, B07, B8A, B11, B12.
    pub s2_bands: usize,
    /// Sentinel-1 dates per tile: the 4 above, then one every 6 days, orbits alternating.
    pub s1_dates: usize,
}

impl Default for SeriesShape {
    fn default() -> Self {
        Self {
            s2_dates: S2_DATES.len(),
            s2_bands: 4,
            s1_dates: S1_DATES.len(),
        }
    }
}

fn s2_dates(n: usize) -> Vec<(String, usize, f64)> {
    let first = chrono::NaiveDate::from_ymd_opt(2024, 7, 17).unwrap_or_default();
    (0..n)
        .map(|k| match S2_DATES.get(k) {
            Some(&(d, c, e)) => (d.to_string(), c, e),
            None => (
                (first + chrono::Duration::days(10 * (k - S2_DATES.len()) as i64)).to_string(),
                k % 5,
                0.0,
            ),
        })
        .collect()
}

fn s1_dates(n: usize) -> Vec<(String, &'static str)> {
    let first = chrono::NaiveDate::from_ymd_opt(2024, 6, 13).unwrap_or_default();
    (0..n)
        .map(|k| match S1_DATES.get(k) {
            Some(&(d, o)) => (d.to_string(), o),
            None => (
                (first + chrono::Duration::days(6 * (k - S1_DATES.len()) as i64)).to_string(),
                if k % 2 == 0 { "ascending" } else { "descending" },
            ),
        })
        .collect()
}

/// Map coordinates of pixel centres of an `n` × `n` grid at `res`, and their lon/lat.
fn centres(x0: f64, y0: f64, res: f64, n: u32, to_lonlat: &Transformer) -> (Vec<f64>, Vec<f64>) {
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for r in 0..n {
        for c in 0..n {
            xs.push(x0 + (c as f64 + 0.5) * res);
            ys.push(y0 - (r as f64 + 0.5) * res);
        }
    }
    to_lonlat.transform(&mut xs, &mut ys);
    (xs, ys)
}

/// Cloud cover of a point on one date: 0 none, 1 cloud edge (SCL 8), 2 cloud (SCL 9),
/// 3 shadow (SCL 3). Clouds are discs in lon/lat, so both zones see the same ones.
fn cloud(lon: f64, lat: f64, date: usize, clouds: usize) -> u8 {
    let mut out = 0;
    for k in 0..clouds {
        let mut r = rng::Rng::new(rng::key(&[date as u64, k as u64, 0xC1]));
        let (cx, cy) = (11.95 + 0.1 * r.unit(), 46.47 + 0.06 * r.unit());
        let radius = 0.004 + 0.008 * r.unit();
        let d = ((lon - cx) * 0.69).hypot(lat - cy);
        if d < radius * 0.7 {
            return 2;
        }
        if d < radius {
            out = 1;
        } else if out == 0 && ((lon - cx - 0.006) * 0.69).hypot(lat - cy + 0.004) < radius * 0.8 {
            out = 3;
        }
    }
    out
}

fn write_u8(path: &Path, n: u32, data: Vec<u8>, georef: &Georef) -> std::io::Result<()> {
    write_georeferenced(path, n, n, 8, data, georef)
}

fn bbox_of(x0: f64, y0: f64, extent: f64, to_lonlat: &Transformer) -> [f64; 4] {
    let mut cx = vec![x0, x0 + extent, x0, x0 + extent];
    let mut cy = vec![y0, y0, y0 - extent, y0 - extent];
    to_lonlat.transform(&mut cx, &mut cy);
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    [min(&cx), min(&cy), max(&cx), max(&cy)]
}

/// A STAC asset of a single-band `n` × `n` COG at `res` on a grid from (`x0`, `y0`).
struct AssetGrid {
    epsg: u16,
    n: u32,
    res: f64,
    x0: f64,
    y0: f64,
}

fn asset(file: &str, g: &AssetGrid, dtype: &str, nodata: u32) -> serde_json::Value {
    json!({
        "href": file,
        "type": "image/tiff; application=geotiff; profile=cloud-optimized",
        "roles": ["data"],
        "proj:epsg": g.epsg,
        "proj:shape": [g.n, g.n],
        "proj:transform": [g.res, 0.0, g.x0, 0.0, -g.res, g.y0],
        "raster:bands": [{"data_type": dtype, "nodata": nodata, "spatial_resolution": g.res}],
    })
}

fn feature(
    id: &str,
    collection: &str,
    bbox: [f64; 4],
    properties: serde_json::Value,
    assets: serde_json::Map<String, serde_json::Value>,
) -> serde_json::Value {
    json!({
        "type": "Feature", "stac_version": "1.0.0", "id": id, "collection": collection, "bbox": bbox,
        "geometry": {"type": "Polygon", "coordinates": [[[bbox[0], bbox[1]], [bbox[2], bbox[1]], [bbox[2], bbox[3]], [bbox[0], bbox[3]], [bbox[0], bbox[1]]]]},
        "properties": properties, "assets": assets,
    })
}

/// Writes `points.geojson` into `dir`: a jittered lattice over both tiles, plus two
/// points outside them.
fn write_points(dir: &Path) -> std::io::Result<()> {
    let mut points = Vec::new();
    for k in 0..60u64 {
        let mut r = rng::Rng::new(rng::key(&[k, 0x50]));
        let (lon, lat) = if k >= 58 {
            (11.5 + 0.1 * k as f64 - 5.8, 47.5)
        } else {
            (11.967 + 0.053 * r.unit(), 46.506 + 0.024 * r.unit())
        };
        let crop = class_at(lon, lat);
        points.push(json!({
            "type": "Feature", "id": format!("P{k:03}"),
            "geometry": {"type": "Point", "coordinates": [lon, lat]},
            "properties": {"biomass": ((crop as f64 * 1.5 + r.unit()) * 100.0).round() / 100.0,
                           "crop": crop, "irrigated": k % 3 == 0, "surveyor": "demo"},
        }));
    }
    let tmp = dir.join("points.geojson.tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(&json!({"type": "FeatureCollection", "features": points}))
            .map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(&tmp, dir.join("points.geojson"))
}

/// Writes the archive into `dir` (kept if already there) and returns its `items.json`.
pub fn write_series_demo(dir: &Path) -> std::io::Result<PathBuf> {
    write_series(dir, SeriesShape::default())
}

/// [`write_series_demo`] with another shape.
pub fn write_series(dir: &Path, shape: SeriesShape) -> std::io::Result<PathBuf> {
    if shape.s2_bands == 0 || shape.s2_bands > S2_BANDS.len() || shape.s2_dates == 0 || shape.s1_dates == 0 {
        return Err(std::io::Error::other("1..=10 bands, at least one date of each sensor"));
    }
    let items_path = dir.join("items.json");
    std::fs::create_dir_all(dir.join("tiff"))?;
    if !dir.join("points.geojson").exists() {
        write_points(dir)?;
    }
    if items_path.exists() {
        return Ok(items_path);
    }
    let wgs = Crs::from_epsg(4326).map_err(std::io::Error::other)?;
    let mut features = Vec::new();
    let extent = SERIES_PX as f64 * 10.0;
    for (ti, &(tile, epsg, x0, y0)) in TILES.iter().enumerate() {
        let crs = Crs::from_epsg(epsg as u32).map_err(std::io::Error::other)?;
        let to_lonlat = Transformer::new(&crs, &wgs);
        let bbox = bbox_of(x0, y0, extent, &to_lonlat);
        let n10 = SERIES_PX;
        let n20 = SERIES_PX / 2;
        let (lon10, lat10) = centres(x0, y0, 10.0, n10, &to_lonlat);
        let (lon20, lat20) = centres(x0, y0, 20.0, n20, &to_lonlat);
        let georef = |res: f64| Georef {
            epsg,
            x0,
            y0,
            pixel: res,
            pixel_y: None,
            nodata: Some(0.0),
        };
        // The no-data edge: columns past (1 − edge) of the width, west tile east side and
        // the other way round, slanted.
        let outside = |c: u32, r: u32, n: u32, edge: f64| -> bool {
            if edge == 0.0 {
                return false;
            }
            let from = if ti == 0 { n - 1 - c } else { c } as f64;
            from < edge * n as f64 * (0.6 + 0.8 * r as f64 / n as f64)
        };
        for (di, (day, clouds, edge)) in s2_dates(shape.s2_dates).into_iter().enumerate() {
            let id = format!("S2B_{tile}_{}_SERIES", day.replace('-', ""));
            let mut assets = serde_json::Map::new();
            let mut cloudy = 0usize;
            for (bi, &(name, base)) in S2_BANDS[..shape.s2_bands].iter().enumerate() {
                let mut data = Vec::with_capacity((n10 * n10 * 2) as usize);
                for (i, (&lon, &lat)) in lon10.iter().zip(&lat10).enumerate() {
                    let (r, c) = (i as u32 / n10, i as u32 % n10);
                    let v = if outside(c, r, n10, edge) {
                        0u16
                    } else {
                        let season = 0.85 + 0.1 * di as f64 + 0.03 * ti as f64;
                        let mut x = reflectance(lon, lat, base, bi) * season;
                        match cloud(lon, lat, di, clouds) {
                            2 => x = 0.75 + 0.05 * bi as f64,
                            1 => x = 0.5 * x + 0.3,
                            3 => x *= 0.4,
                            _ => {}
                        }
                        (1000.0 + 10000.0 * x).round().clamp(1.0, 65535.0) as u16
                    };
                    data.extend_from_slice(&v.to_le_bytes());
                }
                let file = format!("tiff/{id}_{name}.tif");
                write_georeferenced(&dir.join(&file), n10, n10, 16, data, &georef(10.0))?;
                assets.insert(
                    name.into(),
                    asset(
                        &file,
                        &AssetGrid {
                            epsg,
                            n: n10,
                            res: 10.0,
                            x0,
                            y0,
                        },
                        "uint16",
                        0,
                    ),
                );
            }
            let mut scl = Vec::with_capacity((n20 * n20) as usize);
            for (i, (&lon, &lat)) in lon20.iter().zip(&lat20).enumerate() {
                let (r, c) = (i as u32 / n20, i as u32 % n20);
                let v = if outside(c, r, n20, edge) {
                    0
                } else {
                    match cloud(lon, lat, di, clouds) {
                        2 => 9,
                        1 => 8,
                        3 => 3,
                        _ => match class_at(lon, lat) {
                            6 => 6,
                            1 | 2 => 5,
                            _ => 4,
                        },
                    }
                };
                cloudy += usize::from(matches!(v, 3 | 8 | 9));
                scl.push(v);
            }
            let file = format!("tiff/{id}_SCL.tif");
            write_u8(&dir.join(&file), n20, scl, &georef(20.0))?;
            assets.insert(
                "SCL".into(),
                asset(
                    &file,
                    &AssetGrid {
                        epsg,
                        n: n20,
                        res: 20.0,
                        x0,
                        y0,
                    },
                    "uint8",
                    0,
                ),
            );
            let cover = 100.0 * cloudy as f64 / (n20 * n20) as f64;
            features.push(feature(
                &id,
                "sentinel-2-l2a-series",
                bbox,
                json!({"datetime": format!("{day}T10:20:31Z"), "eo:cloud_cover": (cover * 100.0).round() / 100.0, "proj:epsg": epsg, "platform": "sentinel-2b"}),
                assets,
            ));
        }
        for (di, (day, orbit)) in s1_dates(shape.s1_dates).into_iter().enumerate() {
            let id = format!(
                "S1A_{tile}_{}_{}",
                day.replace('-', ""),
                if orbit == "ascending" { "ASC" } else { "DSC" }
            );
            let mut assets = serde_json::Map::new();
            for (pi, pol) in ["vv", "vh"].iter().enumerate() {
                let mut data = Vec::with_capacity((n20 * n20 * 2) as usize);
                for (&lon, &lat) in lon20.iter().zip(&lat20) {
                    let class = class_at(lon, lat) as f64;
                    let speckle = rng::key(&[di as u64, pi as u64, lon.to_bits(), lat.to_bits()]) % 1000;
                    let db = -22.0 + 2.0 * class - 6.0 * pi as f64 + 0.6 * di as f64 + speckle as f64 / 500.0;
                    data.extend_from_slice(&(((db + 50.0) * 1000.0).round().clamp(1.0, 65535.0) as u16).to_le_bytes());
                }
                let file = format!("tiff/{id}_{pol}.tif");
                write_georeferenced(&dir.join(&file), n20, n20, 16, data, &georef(20.0))?;
                assets.insert(
                    pol.to_string(),
                    asset(
                        &file,
                        &AssetGrid {
                            epsg,
                            n: n20,
                            res: 20.0,
                            x0,
                            y0,
                        },
                        "uint16",
                        0,
                    ),
                );
            }
            features.push(feature(
                &id,
                "sentinel-1-rtc-series",
                bbox,
                json!({"datetime": format!("{day}T05:40:12Z"), "sat:orbit_state": orbit, "proj:epsg": epsg, "platform": "sentinel-1a"}),
                assets,
            ));
        }
    }
    // Labels: EPSG:4326, 0.0001°, over parts of both tiles.
    let (lon0, lat1, step, w, h) = (11.975, 46.52, 0.0001, 600u32, 400u32);
    let mut data = Vec::with_capacity((w * h) as usize);
    for r in 0..h {
        for c in 0..w {
            data.push(class_at(lon0 + (c as f64 + 0.5) * step, lat1 - (r as f64 + 0.5) * step));
        }
    }
    let file = "tiff/LC_SERIES_2024_classes.tif";
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
    let mut assets = serde_json::Map::new();
    assets.insert(
        "classes".into(),
        json!({
            "href": file, "roles": ["data"], "proj:code": "EPSG:4326", "proj:shape": [h, w],
            "proj:transform": [step, 0.0, lon0, 0.0, -step, lat1],
            "raster:bands": [{"data_type": "uint8", "nodata": 255}],
        }),
    );
    features.push(feature(
        "LC_SERIES_2024",
        "landcover-demo",
        bbox,
        json!({"datetime": null, "start_datetime": "2024-01-01T00:00:00Z", "end_datetime": "2024-12-31T23:59:59Z"}),
        assets,
    ));
    let doc = json!({"type": "FeatureCollection", "features": features});
    let tmp = dir.join("items.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&doc).map_err(std::io::Error::other)?)?;
    std::fs::rename(&tmp, &items_path)?;
    Ok(items_path)
}
