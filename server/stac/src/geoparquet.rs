//! stac-geoparquet: Items stored as rows of a Parquet file (one column per top-level field
//! and per property, `assets` a struct column, `bbox` a struct or list, `geometry` WKB).
//! Read with arrow-rs's `parquet` reader; each row becomes the JSON Item it encodes and
//! goes through the same parser as JSON documents.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, DataType, Field, Schema};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Map, Value};

use super::{HrefRewrite, Item, StacError, resolve_href};

/// Top-level Item fields; every other column is a property.
const ITEM_FIELDS: [&str; 9] = [
    "type",
    "stac_version",
    "stac_extensions",
    "id",
    "links",
    "assets",
    "collection",
    "bbox",
    "geometry",
];

/// Rows decoded per Arrow batch.
const BATCH_ROWS: usize = 4096;

/// Whether `bytes` start like a Parquet file.
pub fn is_parquet(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes.starts_with(b"PAR1") && bytes.ends_with(b"PAR1")
}

fn bbox_value(v: &Value) -> Option<Value> {
    match v {
        Value::Object(o) => {
            let g = |k: &str| o.get(k).and_then(Value::as_f64);
            Some(Value::from(vec![g("xmin")?, g("ymin")?, g("xmax")?, g("ymax")?]))
        }
        Value::Array(_) => Some(v.clone()),
        _ => None,
    }
}

/// A timestamp as arrow-json writes it (`2024-12-03T17:46:29.024Z`, or without a zone for
/// naive timestamps, which stac-geoparquet stores in UTC) as RFC 3339.
fn rfc3339(v: &Value) -> Value {
    match v.as_str() {
        Some(s) if chrono::DateTime::parse_from_rfc3339(s).is_err() => {
            let t = s.replace(' ', "T");
            if chrono::DateTime::parse_from_rfc3339(&format!("{t}Z")).is_ok() {
                Value::from(format!("{t}Z"))
            } else {
                v.clone()
            }
        }
        _ => v.clone(),
    }
}

/// The batch with every zoned timestamp column relabelled `+00:00` (values are UTC
/// instants either way): arrow-json formats only offset zones without a zone database.
fn utc_offsets(batch: RecordBatch) -> Result<RecordBatch, ArrowError> {
    let schema = batch.schema();
    if !schema
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Timestamp(_, Some(_))))
    {
        return Ok(batch);
    }
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (f, c) in schema.fields().iter().zip(batch.columns()) {
        match f.data_type() {
            DataType::Timestamp(unit, Some(_)) => {
                let utc = DataType::Timestamp(*unit, Some("+00:00".into()));
                columns.push(arrow_cast::cast(c, &utc)?);
                fields.push(Field::new(f.name(), utc, f.is_nullable()));
            }
            _ => {
                columns.push(c.clone());
                fields.push(f.as_ref().clone());
            }
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}

/// The Item a stac-geoparquet row encodes.
fn row_to_item(row: Map<String, Value>) -> Value {
    let mut item = Map::new();
    let mut properties = Map::new();
    for (k, v) in row {
        match k.as_str() {
            "bbox" => {
                if let Some(b) = bbox_value(&v) {
                    item.insert(k, b);
                }
            }
            // WKB: not decoded (the bbox prunes; validity is per pixel).
            "geometry" => {}
            f if ITEM_FIELDS.contains(&f) => {
                item.insert(k, v);
            }
            "datetime" | "start_datetime" | "end_datetime" => {
                properties.insert(k, rfc3339(&v));
            }
            _ => {
                properties.insert(k, v);
            }
        }
    }
    properties.entry("datetime").or_insert(Value::Null);
    item.insert("type".into(), Value::from("Feature"));
    item.insert("properties".into(), Value::Object(properties));
    Value::Object(item)
}

/// Parses a stac-geoparquet file. `doc` names it in errors and is the base of relative
/// hrefs.
pub fn parse_geoparquet(doc: &str, bytes: Bytes, rewrite: &HrefRewrite) -> Result<Vec<Item>, StacError> {
    let not_stac = |reason: String| StacError::NotStac {
        doc: doc.to_string(),
        reason,
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| not_stac(format!("not a readable Parquet file ({e})")))?
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| not_stac(format!("cannot read its row groups ({e})")))?;
    let resolve = |h: &str| rewrite.apply(&resolve_href(doc, h));
    let mut items = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| not_stac(format!("corrupt row group ({e})")))?;
        let batch = utc_offsets(batch).map_err(|e| not_stac(format!("cannot read its timestamps ({e})")))?;
        if batch.schema().column_with_name("id").is_none() {
            return Err(not_stac("no id column: not stac-geoparquet".into()));
        }
        let mut buf = Vec::new();
        {
            let mut w = arrow_json::LineDelimitedWriter::new(&mut buf);
            w.write(&batch)
                .map_err(|e| not_stac(format!("cannot convert rows ({e})")))?;
            w.finish().map_err(|e| not_stac(format!("cannot convert rows ({e})")))?;
        }
        for line in buf.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let row: Map<String, Value> =
                serde_json::from_slice(line).map_err(|e| not_stac(format!("row is not JSON ({e})")))?;
            items.push(Item::from_json(&row_to_item(row), doc, &resolve)?);
        }
    }
    Ok(items)
}
