//! Points to sample at: a GeoJSON FeatureCollection of `Point` features, a CSV file with
//! `lon`/`lat` (or `x`/`y`) columns, or a GeoParquet file (WKB `geometry` points), in
//! EPSG:4326 or the CRS the dataset names. Each point
//! keeps an id (the feature's `id`, the CSV's `id` column, or its position) and its numeric
//! attributes (numbers, and booleans as 0/1), which travel with its sample as targets.
//! Attributes missing on a point are NaN. A GeoParquet file that would decode to more
//! than a limit is refused before it is decoded ([`crate::budget`]).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::budget::DEFAULT_MAX_DECODED_BYTES;

/// Largest points file read whole.
pub const MAX_POINTS_BYTES: u64 = 1 << 30;

/// The points of a dataset.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PointSet {
    /// Point ids, one per point: the feature's `id`, the `id` column, or the 0-based position.
    pub ids: Vec<String>,
    /// (x, y) in the points' CRS.
    pub coords: Vec<(f64, f64)>,
    /// Attribute names, sorted.
    pub names: Vec<String>,
    /// `values[p][k]`: attribute `names[k]` of point `p`.
    pub values: Vec<Vec<f64>>,
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    }
}

/// Most attribute values a points file may hold (points × numeric attribute names; the
/// set is stored dense): 2^25 float64s, 256 MiB.
pub const MAX_POINT_VALUES: u64 = 1 << 25;

/// Refuses a set whose dense values would exceed [`MAX_POINT_VALUES`] before they are made
/// (features that each name other attributes multiply: 40,000 points with one distinct
/// attribute each would be 1.6 billion values).
fn check_dense(points: usize, names: usize) -> Result<(), String> {
    let values = (points as u64).saturating_mul(names as u64);
    if values > MAX_POINT_VALUES {
        return Err(format!(
            "{points} points x {names} numeric attributes would be {values} values (at most {MAX_POINT_VALUES}): keep the attributes training needs"
        ));
    }
    Ok(())
}

/// Parses a GeoJSON FeatureCollection (or one Feature) of points.
pub fn parse_geojson(bytes: &[u8]) -> Result<PointSet, String> {
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let features: Vec<&Value> = match doc.get("type").and_then(Value::as_str) {
        Some("FeatureCollection") => doc
            .get("features")
            .and_then(Value::as_array)
            .ok_or("a FeatureCollection without features")?
            .iter()
            .collect(),
        Some("Feature") => vec![&doc],
        _ => return Err("expected a GeoJSON FeatureCollection of Point features".into()),
    };
    let mut names = BTreeSet::new();
    for f in &features {
        if let Some(p) = f.get("properties").and_then(Value::as_object) {
            names.extend(p.iter().filter(|(_, v)| number(v).is_some()).map(|(k, _)| k.clone()));
        }
    }
    let names: Vec<String> = names.into_iter().collect();
    check_dense(features.len(), names.len())?;
    let mut set = PointSet {
        names,
        ..Default::default()
    };
    for (i, f) in features.iter().enumerate() {
        let g = f
            .get("geometry")
            .ok_or_else(|| format!("feature {i} has no geometry"))?;
        if g.get("type").and_then(Value::as_str) != Some("Point") {
            return Err(format!("feature {i} is not a Point"));
        }
        let c = g
            .get("coordinates")
            .and_then(Value::as_array)
            .filter(|c| c.len() >= 2)
            .ok_or_else(|| format!("feature {i}: Point without coordinates"))?;
        let (x, y) = (c[0].as_f64(), c[1].as_f64());
        let (Some(x), Some(y)) = (x, y) else {
            return Err(format!("feature {i}: coordinates are not numbers"));
        };
        if !(x.is_finite() && y.is_finite()) {
            return Err(format!("feature {i}: coordinates are not finite"));
        }
        let id = match f.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => i.to_string(),
        };
        let props = f.get("properties").and_then(Value::as_object);
        let values = set
            .names
            .iter()
            .map(|k| props.and_then(|p| p.get(k)).and_then(number).unwrap_or(f64::NAN))
            .collect();
        set.ids.push(id);
        set.coords.push((x, y));
        set.values.push(values);
    }
    Ok(set)
}

/// Parses a CSV file with a header: `lon`/`lat` or `x`/`y` (any case), an optional `id`,
/// and numeric attribute columns (a column with a value that is not a number is not an
/// attribute).
pub fn parse_csv(bytes: &[u8]) -> Result<PointSet, String> {
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(bytes);
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| format!("CSV header: {e}"))?
        .iter()
        .map(|h| h.to_string())
        .collect();
    let find = |names: &[&str]| {
        header
            .iter()
            .position(|h| names.iter().any(|n| h.eq_ignore_ascii_case(n)))
    };
    let xi = find(&["lon", "longitude", "x"]).ok_or("CSV needs a lon (or x) column")?;
    let yi = find(&["lat", "latitude", "y"]).ok_or("CSV needs a lat (or y) column")?;
    let idi = find(&["id"]);
    let mut rows = Vec::new();
    for (n, r) in reader.records().enumerate() {
        let r = r.map_err(|e| format!("CSV row {}: {e}", n + 1))?;
        rows.push(r.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    }
    let attrs: Vec<usize> = (0..header.len())
        .filter(|&c| c != xi && c != yi && Some(c) != idi)
        .filter(|&c| {
            rows.iter()
                .all(|r| r.get(c).is_none_or(|v| v.is_empty() || v.parse::<f64>().is_ok()))
        })
        .collect();
    let mut order: Vec<usize> = attrs.clone();
    order.sort_by(|a, b| header[*a].cmp(&header[*b]));
    let mut set = PointSet {
        names: order.iter().map(|&c| header[c].clone()).collect(),
        ..Default::default()
    };
    for (n, r) in rows.iter().enumerate() {
        let coord = |c: usize| -> Result<f64, String> {
            r.get(c)
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite())
                .ok_or_else(|| format!("CSV row {}: column {} is not a number", n + 1, header[c]))
        };
        set.coords.push((coord(xi)?, coord(yi)?));
        set.ids
            .push(idi.and_then(|c| r.get(c).cloned()).unwrap_or_else(|| n.to_string()));
        set.values.push(
            order
                .iter()
                .map(|&c| r.get(c).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN))
                .collect(),
        );
    }
    Ok(set)
}

/// The x, y of a WKB point (2D, Z, M or ZM; either byte order).
fn wkb_point(b: &[u8]) -> Option<(f64, f64)> {
    let le = match b.first()? {
        1 => true,
        0 => false,
        _ => return None,
    };
    let word = |r: std::ops::Range<usize>| -> Option<[u8; 8]> { b.get(r)?.try_into().ok() };
    let t = {
        let w: [u8; 4] = b.get(1..5)?.try_into().ok()?;
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    if (t & 0x0fff_ffff) % 1000 != 1 {
        return None;
    }
    let f = |w: [u8; 8]| {
        if le {
            f64::from_le_bytes(w)
        } else {
            f64::from_be_bytes(w)
        }
    };
    Some((f(word(5..13)?), f(word(13..21)?)))
}

/// Parses a GeoParquet file of points: a WKB `geometry` column, an optional `id`, numeric
/// and boolean columns as attributes. Refuses a file that would decode to more than
/// [`DEFAULT_MAX_DECODED_BYTES`] (see [`parse_geoparquet_bounded`]).
pub fn parse_geoparquet(bytes: bytes::Bytes) -> Result<PointSet, String> {
    parse_geoparquet_bounded(bytes, DEFAULT_MAX_DECODED_BYTES)
}

/// Bytes counted per point, besides its values, for its id and coordinates.
const POINT_ROW_BYTES: u64 = 64;

/// [`parse_geoparquet`], refusing before it is decoded a file whose columns read (geometry,
/// id, numeric and boolean ones) would decode to more than `max_decoded_bytes` (counted by
/// [`crate::budget::check`], plus 64 bytes per point).
pub fn parse_geoparquet_bounded(bytes: bytes::Bytes, max_decoded_bytes: u64) -> Result<PointSet, String> {
    use arrow_array::{Array, BinaryArray, Float64Array, StringArray};
    use arrow_schema::DataType;
    use parquet::arrow::ProjectionMask;
    use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
    use parquet::file::metadata::PageIndexPolicy;

    use crate::budget::{self, BudgetError, Meter};
    let over = |e: BudgetError| match e {
        BudgetError::OverLimit { .. } => format!("GeoParquet too large: {e}"),
        BudgetError::Malformed { .. } => format!("corrupt column chunk ({e})"),
    };
    let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Skip);
    let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(bytes.clone(), options)
        .map_err(|e| format!("not a readable Parquet file ({e})"))?;
    if builder.schema().column_with_name("geometry").is_none() {
        return Err("no geometry column".into());
    }
    // Only the columns a point keeps are read.
    let read: Vec<String> = builder
        .schema()
        .fields()
        .iter()
        .filter(|f| {
            ["geometry", "id"].contains(&f.name().as_str())
                || f.data_type().is_numeric()
                || f.data_type() == &DataType::Boolean
        })
        .map(|f| f.name().clone())
        .collect();
    let schema = builder.parquet_schema();
    let root = |c: usize| schema.column(c).path().parts().first().cloned().unwrap_or_default();
    let mask = ProjectionMask::leaves(schema, (0..schema.num_columns()).filter(|&c| read.contains(&root(c))));
    budget::check(&bytes, builder.metadata(), &mask, POINT_ROW_BYTES, max_decoded_bytes).map_err(over)?;
    let reader = builder
        .with_projection(mask)
        .with_batch_size(1024)
        .build()
        .map_err(|e| format!("cannot read its row groups ({e})"))?;
    let mut meter = Meter::new(max_decoded_bytes);
    let mut set = PointSet::default();
    let mut columns: Option<Vec<String>> = None;
    for batch in reader {
        let batch = batch.map_err(|e| format!("corrupt row group ({e})"))?;
        meter.add(&batch).map_err(over)?;
        let names = columns.get_or_insert_with(|| {
            let mut n: Vec<String> = batch
                .schema()
                .fields()
                .iter()
                .filter(|f| f.name() != "geometry" && f.name() != "id")
                .filter(|f| f.data_type().is_numeric() || f.data_type() == &DataType::Boolean)
                .map(|f| f.name().clone())
                .collect();
            n.sort();
            n
        });
        set.names.clone_from(names);
        let geometry = batch.column_by_name("geometry").ok_or("no geometry column")?;
        let geometry = arrow_cast::cast(geometry, &DataType::Binary).map_err(|e| format!("geometry: {e}"))?;
        let geometry = geometry
            .as_any()
            .downcast_ref::<BinaryArray>()
            .ok_or("geometry is not WKB")?;
        let ids = match batch.column_by_name("id") {
            Some(c) => Some(arrow_cast::cast(c, &DataType::Utf8).map_err(|e| format!("id: {e}"))?),
            None => None,
        };
        let ids = ids.as_ref().and_then(|c| c.as_any().downcast_ref::<StringArray>());
        let mut attrs = Vec::with_capacity(names.len());
        for name in names.iter() {
            let c = batch
                .column_by_name(name)
                .ok_or_else(|| format!("row groups differ: no column {name}"))?;
            let c = arrow_cast::cast(c, &DataType::Float64).map_err(|e| format!("{name}: {e}"))?;
            attrs.push(c);
        }
        let attrs: Vec<&Float64Array> = attrs
            .iter()
            .filter_map(|c| c.as_any().downcast_ref::<Float64Array>())
            .collect();
        for r in 0..batch.num_rows() {
            let n = set.coords.len();
            let wkb = (!geometry.is_null(r)).then(|| geometry.value(r));
            let (x, y) = wkb
                .and_then(wkb_point)
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .ok_or_else(|| format!("row {n}: geometry is not a point"))?;
            set.coords.push((x, y));
            set.ids.push(
                ids.filter(|a| !a.is_null(r))
                    .map_or_else(|| n.to_string(), |a| a.value(r).to_string()),
            );
            set.values.push(
                attrs
                    .iter()
                    .map(|a| if a.is_null(r) { f64::NAN } else { a.value(r) })
                    .collect(),
            );
        }
    }
    Ok(set)
}

/// Parses `bytes` named `url`: GeoParquet by its magic number, CSV when the name ends in
/// `.csv`, else GeoJSON. A GeoParquet file may decode to at most
/// [`DEFAULT_MAX_DECODED_BYTES`] (see [`parse_bounded`]).
pub fn parse(url: &str, bytes: &[u8]) -> Result<PointSet, String> {
    parse_bounded(url, bytes, DEFAULT_MAX_DECODED_BYTES)
}

/// [`parse`], a GeoParquet file decoding to at most `max_decoded_bytes`. Errors do not
/// name the file: the caller does (`points {url}: ...`), as for every points error.
pub fn parse_bounded(url: &str, bytes: &[u8], max_decoded_bytes: u64) -> Result<PointSet, String> {
    let set = if crate::is_parquet(bytes) {
        parse_geoparquet_bounded(bytes::Bytes::copy_from_slice(bytes), max_decoded_bytes)?
    } else if url.to_ascii_lowercase().ends_with(".csv") {
        parse_csv(bytes)?
    } else {
        parse_geojson(bytes)?
    };
    if set.coords.is_empty() {
        return Err("no points".into());
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_distinct_attributes_are_refused_before_they_are_made_dense() {
        let features: Vec<String> = (0..20_000)
            .map(|i| {
                format!(
                    r#"{{"type":"Feature","geometry":{{"type":"Point","coordinates":[1,2]}},"properties":{{"a{i}":1}}}}"#
                )
            })
            .collect();
        let doc = format!(r#"{{"type":"FeatureCollection","features":[{}]}}"#, features.join(","));
        let e = parse_geojson(doc.as_bytes()).unwrap_err();
        assert!(e.contains("20000 points x 20000 numeric attributes"), "{e}");
    }

    #[test]
    fn geojson_points_with_attributes() {
        let doc = br#"{"type": "FeatureCollection", "features": [
            {"type": "Feature", "id": "a", "geometry": {"type": "Point", "coordinates": [12.0, 46.5]},
             "properties": {"biomass": 3.5, "crop": "maize", "irrigated": true}},
            {"type": "Feature", "geometry": {"type": "Point", "coordinates": [12.01, 46.49]},
             "properties": {"biomass": 1}}]}"#;
        let s = parse("p.geojson", doc).unwrap();
        assert_eq!(s.ids, ["a", "1"]);
        assert_eq!(s.names, ["biomass", "irrigated"]);
        assert_eq!(s.values[0], [3.5, 1.0]);
        assert!(s.values[1][1].is_nan());
        assert!(parse("p.geojson", br#"{"type": "FeatureCollection", "features": [{"type": "Feature", "geometry": {"type": "LineString", "coordinates": []}}]}"#).is_err());
        assert!(parse("p.geojson", b"nope").is_err());
    }

    #[test]
    fn geoparquet_points_with_attributes() {
        use std::sync::Arc;

        use arrow_array::{ArrayRef, BinaryArray, BooleanArray, Float32Array, Int64Array, RecordBatch, StringArray};
        let wkb = |x: f64, y: f64, le: bool| {
            let mut b = vec![u8::from(le)];
            if le {
                b.extend(1u32.to_le_bytes());
                b.extend(x.to_le_bytes());
                b.extend(y.to_le_bytes());
            } else {
                b.extend(1u32.to_be_bytes());
                b.extend(x.to_be_bytes());
                b.extend(y.to_be_bytes());
            }
            b
        };
        let geoms = [wkb(12.0, 46.5, true), wkb(12.01, 46.49, false)];
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef),
            (
                "geometry",
                Arc::new(BinaryArray::from_iter_values(geoms.iter())) as ArrayRef,
            ),
            ("yield", Arc::new(Float32Array::from(vec![Some(7.5), None])) as ArrayRef),
            ("crop", Arc::new(Int64Array::from(vec![3, 4])) as ArrayRef),
            ("irrigated", Arc::new(BooleanArray::from(vec![true, false])) as ArrayRef),
            ("name", Arc::new(StringArray::from(vec!["n", "s"])) as ArrayRef),
        ])
        .unwrap();
        let mut buf = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let s = parse("points.parquet", &buf).unwrap();
        assert_eq!(s.ids, ["a", "b"]);
        assert_eq!(s.coords, [(12.0, 46.5), (12.01, 46.49)]);
        assert_eq!(s.names, ["crop", "irrigated", "yield"]);
        assert_eq!(s.values[0], [3.0, 1.0, 7.5]);
        assert!(s.values[1][2].is_nan());
        assert_eq!(wkb_point(&[1, 2, 0, 0, 0]), None, "a LineString is not a point");
    }

    /// `rows` points: WKB geometry, `yield`, and `notes`, `rows` copies of one `len`-byte
    /// string (dictionary-encoded, held once by the file); with `bomb_id` the ids are
    /// such copies too.
    fn points_file(rows: usize, len: usize, bomb_id: bool) -> bytes::Bytes {
        use std::sync::Arc;

        use arrow_array::{ArrayRef, BinaryArray, DictionaryArray, Float64Array, Int32Array, RecordBatch, StringArray};
        let repeated = || -> ArrayRef {
            let values = Arc::new(StringArray::from(vec!["z".repeat(len)]));
            let keys = Int32Array::from(vec![0; rows]);
            Arc::new(DictionaryArray::<arrow_array::types::Int32Type>::try_new(keys, values).unwrap())
        };
        let ids: ArrayRef = if bomb_id {
            repeated()
        } else {
            Arc::new(StringArray::from(
                (0..rows).map(|i| format!("p{i}")).collect::<Vec<_>>(),
            ))
        };
        let wkb: Vec<Vec<u8>> = (0..rows)
            .map(|i| [&[1u8, 1, 0, 0, 0][..], &(i as f64).to_le_bytes(), &46f64.to_le_bytes()].concat())
            .collect();
        let batch = RecordBatch::try_from_iter([
            ("id", ids),
            (
                "geometry",
                Arc::new(BinaryArray::from_iter_values(wkb.iter())) as ArrayRef,
            ),
            ("yield", Arc::new(Float64Array::from(vec![1.5; rows])) as ArrayRef),
            ("notes", repeated()),
        ])
        .unwrap();
        bytes::Bytes::from(crate::budget::testfiles::zstd(&batch, 2 * len + 4096))
    }

    #[test]
    fn geoparquet_points_bomb_is_refused_before_decoding() {
        // 1024 ids of 1 MiB each: 1 GiB decoded from a few KiB.
        let file = points_file(1024, 1 << 20, true);
        assert!(file.len() < 64 << 10, "{} bytes", file.len());
        let e = parse_bounded("points.parquet", &file, 16 << 20).unwrap_err();
        assert!(e.starts_with("GeoParquet too large: at least "), "{e}");
        assert!(
            e.ends_with("decoded would exceed the 16.0 MiB limit (row group 0, column id)"),
            "{e}"
        );
        assert_eq!(parse_geoparquet_bounded(file, 16 << 20).unwrap_err(), e);
    }

    #[test]
    fn geoparquet_points_columns_not_kept_are_not_read() {
        // `notes` would decode to 1 GiB, but a point keeps no string attributes.
        let s = parse_bounded("points.parquet", &points_file(1024, 1 << 20, false), 16 << 20).unwrap();
        assert_eq!((s.ids.len(), s.names.as_slice()), (1024, &["yield".to_string()][..]));
        assert_eq!(
            (s.ids[3].as_str(), s.coords[3], s.values[3][0]),
            ("p3", (3.0, 46.0), 1.5)
        );
    }

    #[test]
    fn csv_points_with_attributes() {
        let s = parse(
            "p.csv",
            b"id,lat,lon,yield,name\nf1,46.5,12.0,7.5,north\nf2,46.49,12.01,,south\n",
        )
        .unwrap();
        assert_eq!(s.ids, ["f1", "f2"]);
        assert_eq!(s.coords, [(12.0, 46.5), (12.01, 46.49)]);
        assert_eq!(s.names, ["yield"]);
        assert_eq!(s.values[0], [7.5]);
        assert!(s.values[1][0].is_nan());
        assert!(parse("p.csv", b"a,b\n1,2\n").unwrap_err().contains("lon"));
        assert!(parse("p.csv", b"lon,lat\n12.0,north\n").is_err());
    }
}
