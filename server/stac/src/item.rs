//! One STAC Item: id, time, footprint, properties and assets with their grids.
//!
//! Projection fields (`proj:epsg`, `proj:code`, `proj:shape` = `[rows, cols]`,
//! `proj:transform` in affine order) are read per asset, falling back to the Item's
//! properties; raster fields (`raster:bands[].data_type`, `nodata`) per asset.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::StacError;
use cogfeed_geo::Affine;

/// One band of an asset (`raster:bands[i]`).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct BandInfo {
    /// STAC data type name (`uint16`, `float32`, ...), when given.
    pub data_type: Option<String>,
    /// Nodata value (NaN for `"nan"`), when given.
    pub nodata: Option<f64>,
}

/// One asset of an Item.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Asset {
    /// The asset's key in the Item's `assets`.
    pub key: String,
    /// The href as written in the document.
    pub href_raw: String,
    /// The href resolved against the document and rewritten (what cogfeed reads).
    pub href: String,
    /// Media type (`type`), when given.
    pub media_type: Option<String>,
    /// `roles`, empty when absent.
    pub roles: Vec<String>,
    /// EPSG code of the asset's grid (`proj:epsg` or `proj:code`, asset over Item).
    pub epsg: Option<u32>,
    /// `proj:shape` as (rows, cols).
    pub shape: Option<(u64, u64)>,
    /// `proj:transform`.
    pub transform: Option<Affine>,
    /// `raster:bands`, empty when absent.
    pub bands: Vec<BandInfo>,
}

/// One STAC Item.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Item {
    /// The Item's `id` (never empty).
    pub id: String,
    /// `collection`, when given.
    pub collection: Option<String>,
    /// `datetime`, else `start_datetime` (the Item's time for ordering and filters).
    pub datetime: Option<DateTime<Utc>>,
    /// `start_datetime`, when given.
    pub start: Option<DateTime<Utc>>,
    /// `end_datetime`, when given.
    pub end: Option<DateTime<Utc>>,
    /// `[minx, miny, maxx, maxy]` in EPSG:4326.
    pub bbox: Option<[f64; 4]>,
    /// GeoJSON `geometry` (EPSG:4326), None when absent or null.
    pub geometry: Option<Value>,
    /// `properties` as written (empty when absent).
    pub properties: Map<String, Value>,
    /// Assets by key.
    pub assets: BTreeMap<String, Asset>,
}

/// Limits that keep a hostile document from costing unbounded work per Item.
const MAX_ASSETS: usize = 4096;
const MAX_BANDS: usize = 4096;

fn parse_time(v: Option<&Value>) -> Result<Option<DateTime<Utc>>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => DateTime::parse_from_rfc3339(s)
            .map(|t| Some(t.with_timezone(&Utc)))
            .map_err(|e| format!("datetime {s:?}: {e}")),
        Some(other) => Err(format!("datetime {other} is not a string")),
    }
}

/// `proj:epsg` (integer) or `proj:code` (`"EPSG:n"`) of an object, if it names one.
fn epsg_of(obj: &Map<String, Value>) -> Result<Option<u32>, String> {
    if let Some(v) = obj.get("proj:code").filter(|v| !v.is_null()) {
        let s = v.as_str().ok_or_else(|| format!("proj:code {v} is not a string"))?;
        let code = s
            .split_once(':')
            .filter(|(auth, _)| auth.eq_ignore_ascii_case("EPSG"))
            .and_then(|(_, c)| c.trim().parse::<u32>().ok())
            .ok_or_else(|| format!("proj:code {s:?} is not EPSG:<code>"))?;
        return Ok(Some(code));
    }
    match obj.get("proj:epsg") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|c| u32::try_from(c).ok())
            .map(Some)
            .ok_or_else(|| format!("proj:epsg {v} is not an EPSG code")),
    }
}

fn numbers(v: &Value, what: &str, max: usize) -> Result<Vec<f64>, String> {
    let arr = v.as_array().ok_or_else(|| format!("{what} is not an array"))?;
    if arr.len() > max {
        return Err(format!("{what} has {} elements (at most {max})", arr.len()));
    }
    arr.iter()
        .map(|x| x.as_f64().ok_or_else(|| format!("{what} holds {x}, not a number")))
        .collect()
}

fn shape_of(obj: &Map<String, Value>) -> Result<Option<(u64, u64)>, String> {
    let Some(v) = obj.get("proj:shape").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let n = numbers(v, "proj:shape", 2)?;
    match n.as_slice() {
        [r, c] if *r >= 1.0 && *c >= 1.0 && r.fract() == 0.0 && c.fract() == 0.0 && *r < 1e9 && *c < 1e9 => {
            Ok(Some((*r as u64, *c as u64)))
        }
        _ => Err(format!("proj:shape {v} is not [rows, cols]")),
    }
}

fn transform_of(obj: &Map<String, Value>) -> Result<Option<Affine>, String> {
    let Some(v) = obj.get("proj:transform").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let n = numbers(v, "proj:transform", 9)?;
    Affine::from_stac(&n)
        .map(Some)
        .map_err(|e| format!("proj:transform: {e}"))
}

fn nodata_of(v: Option<&Value>) -> Result<Option<f64>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_f64().map(Some).ok_or_else(|| format!("nodata {n}")),
        Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "nan" => Ok(Some(f64::NAN)),
            "inf" => Ok(Some(f64::INFINITY)),
            "-inf" => Ok(Some(f64::NEG_INFINITY)),
            _ => s.parse().map(Some).map_err(|_| format!("nodata {s:?} is not a number")),
        },
        Some(other) => Err(format!("nodata {other} is not a number")),
    }
}

fn bands_of(obj: &Map<String, Value>) -> Result<Vec<BandInfo>, String> {
    let Some(v) = obj.get("raster:bands").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let arr = v.as_array().ok_or("raster:bands is not an array")?;
    if arr.len() > MAX_BANDS {
        return Err(format!("raster:bands has {} entries (at most {MAX_BANDS})", arr.len()));
    }
    arr.iter()
        .map(|b| {
            let b = b.as_object().ok_or("raster:bands holds a non-object")?;
            Ok(BandInfo {
                data_type: b.get("data_type").and_then(Value::as_str).map(str::to_string),
                nodata: nodata_of(b.get("nodata"))?,
            })
        })
        .collect()
}

impl Item {
    /// Parses one Item. `resolve` turns a raw href into the URL cogfeed reads.
    pub fn from_json(value: &Value, doc: &str, resolve: &dyn Fn(&str) -> String) -> Result<Self, StacError> {
        let obj = value.as_object().ok_or_else(|| StacError::NotStac {
            doc: doc.to_string(),
            reason: "an item is not a JSON object".into(),
        })?;
        if obj.get("type").and_then(Value::as_str) != Some("Feature") {
            return Err(StacError::NotStac {
                doc: doc.to_string(),
                reason: format!(
                    "an item has type {}, not \"Feature\"",
                    obj.get("type").map(Value::to_string).unwrap_or_else(|| "(none)".into())
                ),
            });
        }
        let id = match obj.get("id") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            other => {
                return Err(StacError::NotStac {
                    doc: doc.to_string(),
                    reason: format!(
                        "an item has no string id ({})",
                        other.map(Value::to_string).unwrap_or_default()
                    ),
                });
            }
        };
        let bad = |reason: String| StacError::BadItem {
            doc: doc.to_string(),
            item: id.clone(),
            reason,
        };
        let empty = Map::new();
        let properties = match obj.get("properties") {
            Some(Value::Object(m)) => m.clone(),
            None | Some(Value::Null) => empty.clone(),
            Some(_) => return Err(bad("properties is not an object".into())),
        };
        let datetime = parse_time(properties.get("datetime")).map_err(&bad)?;
        let start = parse_time(properties.get("start_datetime")).map_err(&bad)?;
        let end = parse_time(properties.get("end_datetime")).map_err(&bad)?;
        let bbox = match obj.get("bbox") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let n = numbers(v, "bbox", 6).map_err(&bad)?;
                match n.as_slice() {
                    [a, b, c, d] => Some([*a, *b, *c, *d]),
                    [a, b, _, d, e, _] => Some([*a, *b, *d, *e]),
                    _ => return Err(bad(format!("bbox {v} has {} numbers (4 or 6 expected)", n.len()))),
                }
            }
        };
        let item_epsg = epsg_of(&properties).map_err(&bad)?;
        let item_shape = shape_of(&properties).map_err(&bad)?;
        let item_transform = transform_of(&properties).map_err(&bad)?;
        let mut assets = BTreeMap::new();
        match obj.get("assets") {
            Some(Value::Object(m)) => {
                if m.len() > MAX_ASSETS {
                    return Err(bad(format!("{} assets (at most {MAX_ASSETS})", m.len())));
                }
                for (key, a) in m {
                    let bad_asset = |reason: String| StacError::BadAsset {
                        item: id.clone(),
                        asset: key.clone(),
                        reason,
                    };
                    let a = a.as_object().ok_or_else(|| bad_asset("not a JSON object".into()))?;
                    let href_raw = a
                        .get("href")
                        .and_then(Value::as_str)
                        .ok_or_else(|| bad_asset("no href".into()))?
                        .to_string();
                    let asset = Asset {
                        key: key.clone(),
                        href: resolve(&href_raw),
                        href_raw,
                        media_type: a.get("type").and_then(Value::as_str).map(str::to_string),
                        roles: a
                            .get("roles")
                            .and_then(Value::as_array)
                            .map(|r| r.iter().filter_map(Value::as_str).map(str::to_string).collect())
                            .unwrap_or_default(),
                        epsg: epsg_of(a).map_err(&bad_asset)?.or(item_epsg),
                        shape: shape_of(a).map_err(&bad_asset)?.or(item_shape),
                        transform: transform_of(a).map_err(&bad_asset)?.or(item_transform),
                        bands: bands_of(a).map_err(&bad_asset)?,
                    };
                    assets.insert(key.clone(), asset);
                }
            }
            None | Some(Value::Null) => {}
            Some(_) => return Err(bad("assets is not an object".into())),
        }
        Ok(Self {
            collection: obj.get("collection").and_then(Value::as_str).map(str::to_string),
            datetime: datetime.or(start),
            start,
            end,
            bbox,
            geometry: obj.get("geometry").filter(|g| !g.is_null()).cloned(),
            properties,
            assets,
            id,
        })
    }

    /// The asset `key`, or an error naming the Item and the asset.
    pub fn asset(&self, key: &str) -> Result<&Asset, StacError> {
        self.assets.get(key).ok_or_else(|| StacError::BadAsset {
            item: self.id.clone(),
            asset: key.to_string(),
            reason: format!(
                "no such asset (the item has {})",
                self.assets.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(extra_props: Value, asset: Value) -> Value {
        let mut props = serde_json::json!({"datetime": "2024-06-03T10:18:21.281Z", "proj:epsg": 32632});
        props
            .as_object_mut()
            .unwrap()
            .extend(extra_props.as_object().unwrap().clone());
        serde_json::json!({"type": "Feature", "stac_version": "1.0.0", "id": "a", "bbox": [11.0, 46.0, 12.0, 47.0],
            "geometry": null, "properties": props, "assets": {"B02": asset}})
    }

    #[test]
    fn asset_projection_overrides_the_item() {
        let v = item(
            serde_json::json!({}),
            serde_json::json!({"href": "t/B02.tif", "proj:code": "EPSG:32633", "proj:shape": [900, 800],
                "proj:transform": [10.0, 0.0, 600000.0, 0.0, -10.0, 5000000.0],
                "raster:bands": [{"data_type": "uint16", "nodata": 0}]}),
        );
        let it = Item::from_json(&v, "doc", &|h| format!("/base/{h}")).unwrap();
        let a = it.asset("B02").unwrap();
        assert_eq!(a.epsg, Some(32633));
        assert_eq!(a.shape, Some((900, 800)));
        assert_eq!(a.href, "/base/t/B02.tif");
        assert_eq!(a.bands[0].nodata, Some(0.0));
        assert_eq!(it.datetime.unwrap().timestamp(), 1717409901);
        let e = it.asset("B10").unwrap_err().to_string();
        assert!(e.contains("item a, asset B10"), "{e}");
    }

    #[test]
    fn malformed_fields_name_the_item_and_asset() {
        let v = item(
            serde_json::json!({}),
            serde_json::json!({"href": "x", "proj:shape": [1, -2]}),
        );
        let e = Item::from_json(&v, "doc", &|h| h.to_string()).unwrap_err().to_string();
        assert!(e.contains("item a, asset B02") && e.contains("proj:shape"), "{e}");
        let v = item(
            serde_json::json!({"datetime": "yesterday"}),
            serde_json::json!({"href": "x"}),
        );
        let e = Item::from_json(&v, "doc", &|h| h.to_string()).unwrap_err().to_string();
        assert!(e.contains("item a") && e.contains("datetime"), "{e}");
        let e = Item::from_json(&serde_json::json!({"type": "Collection"}), "doc", &|h| h.to_string()).unwrap_err();
        assert!(matches!(e, StacError::NotStac { .. }));
    }
}
