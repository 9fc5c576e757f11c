//! One STAC Item: id, time, footprint, properties and assets with their grids.
//!
//! Projection fields (`proj:epsg`, `proj:code`, `proj:shape` = `[rows, cols]`,
//! `proj:transform` in affine order) are read per asset, falling back to the Item's
//! properties; raster fields (`raster:bands[].data_type`, `nodata`) per asset.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::value::RawValue;
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
    /// The scalar `properties` the parse kept (see [`KeepProperties`]; `geometry` and
    /// nested properties are never kept: nothing cogfeed does reads them).
    pub properties: Map<String, Value>,
    /// Assets by key.
    pub assets: BTreeMap<String, Asset>,
}

/// Limits that keep a hostile document from costing unbounded work per Item.
const MAX_ASSETS: usize = 4096;
const MAX_BANDS: usize = 4096;
/// Most scalar properties an Item keeps with [`KeepProperties::Scalars`] (STAC Items have
/// tens to hundreds).
pub const MAX_PROPERTIES: usize = 4096;
/// Largest JSON text of one field cogfeed decodes (an id, an href, a `proj:transform`, a
/// band's `nodata`, ...): these are small in every real Item; a field of megabytes is
/// refused before it is decoded, so no field amplifies into a large `Value`.
pub const MAX_FIELD_BYTES: usize = 64 << 10;

/// Which Item properties an [`Item`] keeps in [`Item::properties`]. cogfeed reads
/// `datetime`, `start_datetime`, `end_datetime` and the `proj:*` fields itself whatever
/// this says; the kept properties are what filters compare. Arrays and objects are never
/// kept (filters compare numbers, strings and booleans), so a property of megabytes of
/// nested JSON costs a scan, not a copy.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum KeepProperties<'k> {
    /// Every scalar property, at most [`MAX_PROPERTIES`] (more is refused).
    #[default]
    Scalars,
    /// Only these (the keys a dataset's filters name); the others are skipped unread.
    Named(&'k [String]),
}

impl KeepProperties<'_> {
    fn keeps(&self, key: &str) -> bool {
        match self {
            Self::Scalars => true,
            Self::Named(keys) => keys.iter().any(|k| k == key),
        }
    }
}

/// An Item as the document holds it: each field borrowed from the document's text, unread
/// until it is needed; fields cogfeed does not use (`geometry`, `links`, ...) are skipped
/// by the parser without being stored.
#[derive(serde::Deserialize)]
struct WireItem<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    collection: Option<&'a RawValue>,
    #[serde(borrow, default)]
    bbox: Option<&'a RawValue>,
    #[serde(borrow, default)]
    properties: Option<&'a RawValue>,
    #[serde(borrow, default)]
    assets: Option<&'a RawValue>,
}

/// The projection fields of an asset or of an Item's properties.
#[derive(Default)]
struct WireProjection<'a> {
    epsg: Option<&'a RawValue>,
    code: Option<&'a RawValue>,
    shape: Option<&'a RawValue>,
    transform: Option<&'a RawValue>,
}

#[derive(serde::Deserialize)]
struct WireAsset<'a> {
    #[serde(borrow, default)]
    href: Option<&'a RawValue>,
    #[serde(rename = "type", borrow, default)]
    media_type: Option<&'a RawValue>,
    #[serde(borrow, default)]
    roles: Option<&'a RawValue>,
    // Not `#[serde(flatten)]`: flattened fields are buffered, and borrowed raw JSON cannot be.
    #[serde(rename = "proj:epsg", borrow, default)]
    epsg: Option<&'a RawValue>,
    #[serde(rename = "proj:code", borrow, default)]
    code: Option<&'a RawValue>,
    #[serde(rename = "proj:shape", borrow, default)]
    shape: Option<&'a RawValue>,
    #[serde(rename = "proj:transform", borrow, default)]
    transform: Option<&'a RawValue>,
    #[serde(rename = "raster:bands", borrow, default)]
    bands: Option<&'a RawValue>,
}

#[derive(serde::Deserialize)]
struct WireBand<'a> {
    #[serde(borrow, default)]
    data_type: Option<&'a RawValue>,
    #[serde(borrow, default)]
    nodata: Option<&'a RawValue>,
}

/// A small field's JSON as a `Value` (at most [`MAX_FIELD_BYTES`] of text).
fn small(raw: &RawValue, what: &str) -> Result<Value, String> {
    let text = raw.get();
    if text.len() > MAX_FIELD_BYTES {
        return Err(format!(
            "{what} is {} bytes of JSON (at most {MAX_FIELD_BYTES})",
            text.len()
        ));
    }
    serde_json::from_str(text).map_err(|e| format!("{what}: {e}"))
}

fn is_object(raw: &RawValue) -> bool {
    raw.get().starts_with('{')
}

/// The entries of a JSON object, each borrowed, at most `max` of them (counted as they are
/// read, so a map of millions of keys is refused after `max`, not after it is built).
struct BoundedEntries<'w> {
    max: usize,
    what: &'w str,
}

impl<'de> serde::de::DeserializeSeed<'de> for BoundedEntries<'_> {
    type Value = Vec<(String, &'de RawValue)>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for BoundedEntries<'_> {
    type Value = Vec<(String, &'de RawValue)>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{} as an object", self.what)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.len() == self.max {
                return Err(serde::de::Error::custom(format_args!(
                    "more than {} {} (at most {})",
                    self.max, self.what, self.max
                )));
            }
            out.push((key, map.next_value::<&RawValue>()?));
        }
        Ok(out)
    }
}

/// The elements of a JSON array, each borrowed, at most `max` of them.
pub(crate) struct BoundedElements<'w> {
    pub(crate) max: usize,
    pub(crate) what: &'w str,
}

impl<'de> serde::de::DeserializeSeed<'de> for BoundedElements<'_> {
    type Value = Vec<&'de RawValue>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for BoundedElements<'_> {
    type Value = Vec<&'de RawValue>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{} as an array", self.what)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element::<&RawValue>()? {
            if out.len() == self.max {
                return Err(serde::de::Error::custom(format_args!(
                    "{} has more than {} entries (at most {})",
                    self.what, self.max, self.max
                )));
            }
            out.push(v);
        }
        Ok(out)
    }
}

/// Reads `raw` with `seed` and nothing after it.
pub(crate) fn read_with<'de, S: serde::de::DeserializeSeed<'de>>(
    raw: &'de RawValue,
    seed: S,
) -> serde_json::Result<S::Value> {
    let mut d = serde_json::Deserializer::from_str(raw.get());
    let v = seed.deserialize(&mut d)?;
    d.end()?;
    Ok(v)
}

/// The properties an Item keeps, and its projection fields, read in one pass over
/// `properties`; what is not kept is skipped unread.
struct PropertiesSeed<'k> {
    keep: KeepProperties<'k>,
}

struct ReadProperties<'a> {
    kept: Map<String, Value>,
    times: [Option<&'a RawValue>; 3],
    projection: WireProjection<'a>,
}

impl<'de> serde::de::DeserializeSeed<'de> for PropertiesSeed<'_> {
    type Value = ReadProperties<'de>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for PropertiesSeed<'_> {
    type Value = ReadProperties<'de>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("properties as an object")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        use serde::de::Error as _;
        let mut out = ReadProperties {
            kept: Map::new(),
            times: [None; 3],
            projection: WireProjection::default(),
        };
        let mut seen = 0usize;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let slot = match key.as_ref() {
                "datetime" => Some(&mut out.times[0]),
                "start_datetime" => Some(&mut out.times[1]),
                "end_datetime" => Some(&mut out.times[2]),
                "proj:epsg" => Some(&mut out.projection.epsg),
                "proj:code" => Some(&mut out.projection.code),
                "proj:shape" => Some(&mut out.projection.shape),
                "proj:transform" => Some(&mut out.projection.transform),
                _ => None,
            };
            let keep = self.keep.keeps(&key);
            if slot.is_none() && !keep {
                map.next_value::<serde::de::IgnoredAny>()?;
                continue;
            }
            let raw = map.next_value::<&'de RawValue>()?;
            let scalar = !matches!(raw.get().as_bytes().first(), Some(b'[' | b'{'));
            if keep && scalar {
                seen += 1;
                if seen > MAX_PROPERTIES {
                    return Err(A::Error::custom(format_args!(
                        "more than {MAX_PROPERTIES} properties (at most {MAX_PROPERTIES})"
                    )));
                }
                let value =
                    serde_json::from_str(raw.get()).map_err(|e| A::Error::custom(format_args!("{key}: {e}")))?;
                out.kept.insert(key.clone().into_owned(), value);
            }
            if let Some(slot) = slot {
                *slot = Some(raw);
            }
        }
        Ok(out)
    }
}

fn parse_time(v: Option<&RawValue>, what: &str) -> Result<Option<DateTime<Utc>>, String> {
    match v.map(|r| small(r, what)).transpose()? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => DateTime::parse_from_rfc3339(&s)
            .map(|t| Some(t.with_timezone(&Utc)))
            .map_err(|e| format!("datetime {s:?}: {e}")),
        Some(other) => Err(format!("datetime {other} is not a string")),
    }
}

/// `proj:epsg` (integer) or `proj:code` (`"EPSG:n"`), if the fields name one.
fn epsg_of(p: &WireProjection) -> Result<Option<u32>, String> {
    if let Some(v) = p
        .code
        .map(|r| small(r, "proj:code"))
        .transpose()?
        .filter(|v| !v.is_null())
    {
        let s = v.as_str().ok_or_else(|| format!("proj:code {v} is not a string"))?;
        let code = s
            .split_once(':')
            .filter(|(auth, _)| auth.eq_ignore_ascii_case("EPSG"))
            .and_then(|(_, c)| c.trim().parse::<u32>().ok())
            .ok_or_else(|| format!("proj:code {s:?} is not EPSG:<code>"))?;
        return Ok(Some(code));
    }
    match p.epsg.map(|r| small(r, "proj:epsg")).transpose()? {
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

/// A small field that may be absent or null.
fn field(raw: Option<&RawValue>, what: &str) -> Result<Option<Value>, String> {
    Ok(raw.map(|r| small(r, what)).transpose()?.filter(|v| !v.is_null()))
}

fn shape_of(p: &WireProjection) -> Result<Option<(u64, u64)>, String> {
    let Some(v) = field(p.shape, "proj:shape")? else {
        return Ok(None);
    };
    let n = numbers(&v, "proj:shape", 2)?;
    match n.as_slice() {
        [r, c] if *r >= 1.0 && *c >= 1.0 && r.fract() == 0.0 && c.fract() == 0.0 && *r < 1e9 && *c < 1e9 => {
            Ok(Some((*r as u64, *c as u64)))
        }
        _ => Err(format!("proj:shape {v} is not [rows, cols]")),
    }
}

fn transform_of(p: &WireProjection) -> Result<Option<Affine>, String> {
    let Some(v) = field(p.transform, "proj:transform")? else {
        return Ok(None);
    };
    let n = numbers(&v, "proj:transform", 9)?;
    Affine::from_stac(&n)
        .map(Some)
        .map_err(|e| format!("proj:transform: {e}"))
}

fn nodata_of(v: Option<Value>) -> Result<Option<f64>, String> {
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

fn bands_of(raw: Option<&RawValue>) -> Result<Vec<BandInfo>, String> {
    let Some(raw) = raw.filter(|r| r.get() != "null") else {
        return Ok(Vec::new());
    };
    if !raw.get().starts_with('[') {
        return Err("raster:bands is not an array".into());
    }
    let bands = read_with(
        raw,
        BoundedElements {
            max: MAX_BANDS,
            what: "raster:bands",
        },
    )
    .map_err(|e| e.to_string())?;
    bands
        .into_iter()
        .map(|b| {
            if !is_object(b) {
                return Err("raster:bands holds a non-object".to_string());
            }
            let b: WireBand = serde_json::from_str(b.get()).map_err(|e| format!("raster:bands: {e}"))?;
            Ok(BandInfo {
                data_type: field(b.data_type, "data_type")?.and_then(|v| v.as_str().map(str::to_string)),
                nodata: nodata_of(field(b.nodata, "nodata")?)?,
            })
        })
        .collect()
}

fn strings(raw: Option<&RawValue>, what: &str) -> Result<Vec<String>, String> {
    Ok(match field(raw, what)? {
        Some(Value::Array(a)) => a.into_iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
        _ => Vec::new(),
    })
}

impl Item {
    /// Parses one Item given as a JSON value (a stac-geoparquet row, a test). Keeps every
    /// scalar property.
    pub fn from_json(value: &Value, doc: &str, resolve: &dyn Fn(&str) -> String) -> Result<Self, StacError> {
        let text = serde_json::value::to_raw_value(value).map_err(|e| StacError::NotStac {
            doc: doc.to_string(),
            reason: format!("an item cannot be read ({e})"),
        })?;
        Self::from_raw(&text, doc, resolve, KeepProperties::Scalars)
    }

    /// Parses one Item from its JSON text, reading only the fields cogfeed uses (each
    /// bounded by [`MAX_FIELD_BYTES`]) and the properties `keep` names. `resolve` turns a
    /// raw href into the URL cogfeed reads.
    pub fn from_raw(
        raw: &RawValue,
        doc: &str,
        resolve: &dyn Fn(&str) -> String,
        keep: KeepProperties<'_>,
    ) -> Result<Self, StacError> {
        let not_stac = |reason: String| StacError::NotStac {
            doc: doc.to_string(),
            reason,
        };
        if !is_object(raw) {
            return Err(not_stac("an item is not a JSON object".into()));
        }
        let wire: WireItem = serde_json::from_str(raw.get()).map_err(|e| not_stac(format!("an item: {e}")))?;
        let kind = field(wire.kind, "type").map_err(&not_stac)?;
        if kind.as_ref().and_then(Value::as_str) != Some("Feature") {
            return Err(not_stac(format!(
                "an item has type {}, not \"Feature\"",
                kind.map(|v| v.to_string()).unwrap_or_else(|| "(none)".into())
            )));
        }
        let id = match field(wire.id, "id").map_err(&not_stac)? {
            Some(Value::String(s)) if !s.is_empty() => s,
            other => {
                return Err(not_stac(format!(
                    "an item has no string id ({})",
                    other.map(|v| v.to_string()).unwrap_or_default()
                )));
            }
        };
        let bad = |reason: String| StacError::BadItem {
            doc: doc.to_string(),
            item: id.clone(),
            reason,
        };
        let props = match wire.properties.filter(|r| r.get() != "null") {
            None => ReadProperties {
                kept: Map::new(),
                times: [None; 3],
                projection: WireProjection::default(),
            },
            Some(r) if !is_object(r) => return Err(bad("properties is not an object".into())),
            Some(r) => read_with(r, PropertiesSeed { keep }).map_err(|e| bad(format!("properties: {e}")))?,
        };
        let datetime = parse_time(props.times[0], "datetime").map_err(&bad)?;
        let start = parse_time(props.times[1], "start_datetime").map_err(&bad)?;
        let end = parse_time(props.times[2], "end_datetime").map_err(&bad)?;
        let bbox = match field(wire.bbox, "bbox").map_err(&bad)? {
            None => None,
            Some(v) => {
                let n = numbers(&v, "bbox", 6).map_err(&bad)?;
                match n.as_slice() {
                    [a, b, c, d] => Some([*a, *b, *c, *d]),
                    [a, b, _, d, e, _] => Some([*a, *b, *d, *e]),
                    _ => return Err(bad(format!("bbox {v} has {} numbers (4 or 6 expected)", n.len()))),
                }
            }
        };
        let item_epsg = epsg_of(&props.projection).map_err(&bad)?;
        let item_shape = shape_of(&props.projection).map_err(&bad)?;
        let item_transform = transform_of(&props.projection).map_err(&bad)?;
        let mut assets = BTreeMap::new();
        match wire.assets.filter(|r| r.get() != "null") {
            Some(r) if is_object(r) => {
                let entries = read_with(
                    r,
                    BoundedEntries {
                        max: MAX_ASSETS,
                        what: "assets",
                    },
                )
                .map_err(|e| bad(e.to_string()))?;
                for (key, a) in entries {
                    let bad_asset = |reason: String| StacError::BadAsset {
                        item: id.clone(),
                        asset: key.clone(),
                        reason,
                    };
                    if !is_object(a) {
                        return Err(bad_asset("not a JSON object".into()));
                    }
                    let a: WireAsset = serde_json::from_str(a.get()).map_err(|e| bad_asset(e.to_string()))?;
                    let projection = WireProjection {
                        epsg: a.epsg,
                        code: a.code,
                        shape: a.shape,
                        transform: a.transform,
                    };
                    let href_raw = match field(a.href, "href").map_err(&bad_asset)? {
                        Some(Value::String(h)) => h,
                        _ => return Err(bad_asset("no href".into())),
                    };
                    let asset = Asset {
                        key: key.clone(),
                        href: resolve(&href_raw),
                        href_raw,
                        media_type: field(a.media_type, "type")
                            .map_err(&bad_asset)?
                            .and_then(|v| v.as_str().map(str::to_string)),
                        roles: strings(a.roles, "roles").map_err(&bad_asset)?,
                        epsg: epsg_of(&projection).map_err(&bad_asset)?.or(item_epsg),
                        shape: shape_of(&projection).map_err(&bad_asset)?.or(item_shape),
                        transform: transform_of(&projection).map_err(&bad_asset)?.or(item_transform),
                        bands: bands_of(a.bands).map_err(&bad_asset)?,
                    };
                    assets.insert(key, asset);
                }
            }
            None => {}
            Some(_) => return Err(bad("assets is not an object".into())),
        }
        Ok(Self {
            collection: field(wire.collection, "collection")
                .map_err(&bad)?
                .and_then(|v| v.as_str().map(str::to_string)),
            datetime: datetime.or(start),
            start,
            end,
            bbox,
            properties: props.kept,
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

    #[test]
    fn only_scalar_properties_are_kept_and_named_keeps_fewer() {
        let v = item(
            serde_json::json!({"eo:cloud_cover": 12.5, "platform": "s2a", "s2:history": [[1, 2]], "view": {"az": 1}}),
            serde_json::json!({"href": "x", "file:values": [1, 2, 3]}),
        );
        let raw = serde_json::value::to_raw_value(&v).unwrap();
        let all = Item::from_raw(&raw, "doc", &|h| h.to_string(), KeepProperties::Scalars).unwrap();
        let mut keys: Vec<&String> = all.properties.keys().collect();
        keys.sort();
        assert_eq!(keys, ["datetime", "eo:cloud_cover", "platform", "proj:epsg"]);
        let named = ["platform".to_string()];
        let some = Item::from_raw(&raw, "doc", &|h| h.to_string(), KeepProperties::Named(&named)).unwrap();
        assert_eq!(some.properties.keys().collect::<Vec<_>>(), ["platform"]);
        // What cogfeed reads itself is read whatever is kept.
        assert_eq!(some.datetime, all.datetime);
        assert_eq!(some.asset("B02").unwrap().epsg, Some(32632));
    }

    #[test]
    fn a_field_of_megabytes_is_refused_before_it_is_decoded() {
        let v = item(
            serde_json::json!({}),
            serde_json::json!({"href": "x", "proj:transform": vec![1.0; 100_000]}),
        );
        let e = Item::from_json(&v, "doc", &|h| h.to_string()).unwrap_err().to_string();
        assert!(
            e.contains("asset B02") && e.contains("proj:transform is") && e.contains("at most 65536"),
            "{e}"
        );
        // A huge geometry or an unread field costs a scan: the Item is read.
        let mut v = item(serde_json::json!({}), serde_json::json!({"href": "x"}));
        v["geometry"] = serde_json::json!({"type": "Polygon", "coordinates": [vec![[1.0, 2.0]; 100_000]]});
        v["links"] = serde_json::json!(vec!["l"; 100_000]);
        assert!(Item::from_json(&v, "doc", &|h| h.to_string()).is_ok());
        // Duplicate fields are an error, not a silent choice.
        let raw = RawValue::from_string(r#"{"type":"Feature","id":"a","id":"b"}"#.to_string()).unwrap();
        let e = Item::from_raw(&raw, "doc", &|h| h.to_string(), KeepProperties::Scalars).unwrap_err();
        assert!(e.to_string().contains("duplicate field"), "{e}");
    }
}
