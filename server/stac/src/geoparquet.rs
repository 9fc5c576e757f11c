//! stac-geoparquet: Items stored as rows of a Parquet file (one column per top-level field
//! and per property, `assets` a struct column, `bbox` a struct or list, `geometry` WKB).
//! Read with arrow-rs's `parquet` reader; each row becomes the JSON Item it encodes and
//! goes through the same parser as JSON documents. What a file decodes to is bounded
//! before it is decoded ([`crate::budget`]): a few KiB that would decode to gigabytes are
//! refused, naming the file, the limit and the column.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, DataType, Field, Schema};
use bytes::Bytes;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::file::metadata::PageIndexPolicy;
use serde_json::{Map, Value};

use super::{HrefRewrite, Item, StacError, resolve_href};
use crate::budget::{self, BudgetError, DEFAULT_MAX_DECODED_BYTES, Meter};

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
const BATCH_ROWS: usize = 1024;

/// Bytes counted per row, besides its values, for the Item it becomes.
const ITEM_ROW_BYTES: u64 = 512;

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
/// hrefs. Refuses a file that would decode to more than [`DEFAULT_MAX_DECODED_BYTES`]
/// (see [`parse_geoparquet_bounded`]).
pub fn parse_geoparquet(doc: &str, bytes: Bytes, rewrite: &HrefRewrite) -> Result<Vec<Item>, StacError> {
    parse_geoparquet_bounded(doc, bytes, rewrite, DEFAULT_MAX_DECODED_BYTES)
}

/// [`parse_geoparquet`], refusing before it is decoded a file whose values would decode
/// to more than `max_decoded_bytes` (counted by [`budget::check`]: values, their offsets
/// and levels, and 512 bytes per row for its Item; the `geometry` column is not read).
pub fn parse_geoparquet_bounded(
    doc: &str,
    bytes: Bytes,
    rewrite: &HrefRewrite,
    max_decoded_bytes: u64,
) -> Result<Vec<Item>, StacError> {
    let not_stac = |reason: String| StacError::NotStac {
        doc: doc.to_string(),
        reason,
    };
    let over = |e: BudgetError| match e {
        BudgetError::OverLimit { .. } => not_stac(format!("stac-geoparquet too large: {e}")),
        BudgetError::Malformed { .. } => not_stac(format!("corrupt column chunk ({e})")),
    };
    let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Skip);
    let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(bytes.clone(), options)
        .map_err(|e| not_stac(format!("not a readable Parquet file ({e})")))?;
    if builder.schema().column_with_name("id").is_none() {
        return Err(not_stac("no id column: not stac-geoparquet".into()));
    }
    // WKB geometry is not decoded (the bbox prunes; validity is per pixel): not read.
    let schema = builder.parquet_schema();
    let root = |c: usize| schema.column(c).path().parts().first().cloned().unwrap_or_default();
    let mask = ProjectionMask::leaves(schema, (0..schema.num_columns()).filter(|&c| root(c) != "geometry"));
    budget::check(&bytes, builder.metadata(), &mask, ITEM_ROW_BYTES, max_decoded_bytes).map_err(over)?;
    let reader = builder
        .with_projection(mask)
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| not_stac(format!("cannot read its row groups ({e})")))?;
    let mut meter = Meter::new(max_decoded_bytes);
    let resolve = |h: &str| rewrite.apply(&resolve_href(doc, h));
    let mut items = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| not_stac(format!("corrupt row group ({e})")))?;
        meter.add(&batch).map_err(over)?;
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, BinaryArray, DictionaryArray, Int32Array, StringArray, StructArray, types::Int32Type};

    use super::*;
    use crate::budget::testfiles;

    const MIB: u64 = 1 << 20;

    /// Items `item-0`.. with one asset each, and a `notes` property: `rows` copies of one
    /// `len`-byte string, dictionary-encoded (so the file holds it once).
    fn items_file(rows: usize, len: usize) -> Bytes {
        let ids: Vec<String> = (0..rows).map(|i| format!("item-{i}")).collect();
        let hrefs: Vec<String> = (0..rows).map(|i| format!("b01/{i}.tif")).collect();
        let href = Arc::new(StringArray::from(hrefs)) as ArrayRef;
        let b01 = StructArray::from(vec![(Arc::new(Field::new("href", DataType::Utf8, false)), href)]);
        let b01 = Arc::new(b01) as ArrayRef;
        let assets = StructArray::from(vec![(Arc::new(Field::new("B01", b01.data_type().clone(), false)), b01)]);
        let notes = DictionaryArray::<Int32Type>::try_new(
            Int32Array::from(vec![0; rows]),
            Arc::new(StringArray::from(vec!["n".repeat(len)])),
        )
        .unwrap();
        let wkb: Vec<u8> = [&[1u8, 1, 0, 0, 0][..], &12f64.to_le_bytes(), &46f64.to_le_bytes()].concat();
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(StringArray::from(ids)) as ArrayRef),
            (
                "datetime",
                Arc::new(StringArray::from(vec!["2024-05-01T10:00:00Z"; rows])) as ArrayRef,
            ),
            ("assets", Arc::new(assets) as ArrayRef),
            ("notes", Arc::new(notes) as ArrayRef),
            (
                "geometry",
                Arc::new(BinaryArray::from_iter_values(vec![wkb; rows])) as ArrayRef,
            ),
        ])
        .unwrap();
        Bytes::from(testfiles::zstd(&batch, 2 * len + 4096))
    }

    #[test]
    fn stac_geoparquet_bomb_is_refused_naming_the_file_limit_and_column() {
        // 1024 rows of a 64 KiB property: 64 MiB decoded from a file of a few KiB; then
        // 1 MiB per row, 1 GiB decoded.
        for len in [64 << 10, 1 << 20] {
            let file = items_file(1024, len);
            assert!(file.len() < 32 << 10, "{} bytes", file.len());
            let doc = "s3://bucket/cat/bomb.parquet";
            let e = parse_geoparquet_bounded(doc, file, &HrefRewrite::default(), 16 * MIB).unwrap_err();
            let StacError::NotStac { doc: named, reason } = &e else {
                panic!("{e}");
            };
            assert_eq!(named, doc);
            assert!(reason.starts_with("stac-geoparquet too large: at least "), "{e}");
            assert!(
                reason.ends_with("decoded would exceed the 16.0 MiB limit (row group 0, column notes)"),
                "{e}"
            );
        }
    }

    #[test]
    fn stac_geoparquet_within_its_limit_still_parses() {
        let file = items_file(100, 1000);
        let items =
            parse_geoparquet_bounded("c/items.parquet", file.clone(), &HrefRewrite::default(), 16 * MIB).unwrap();
        assert_eq!(items.len(), 100);
        assert_eq!(items[7].id, "item-7");
        assert_eq!(items[7].assets["B01"].href, "c/b01/7.tif");
        assert_eq!(items[7].properties["notes"].as_str().map(str::len), Some(1000));
        assert_eq!(
            items,
            parse_geoparquet("c/items.parquet", file, &HrefRewrite::default()).unwrap()
        );
    }

    /// The published stac-geoparquet fixture (100 Sentinel-2 Items): what the check counts
    /// for it, and that a limit just under that refuses it.
    #[test]
    fn published_fixture_parses_within_what_it_is_counted_at() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/stac/100-sentinel-2-items.parquet"
        );
        let bytes = Bytes::from(std::fs::read(path).unwrap());
        let rewrite = HrefRewrite::default();
        assert_eq!(parse_geoparquet(path, bytes.clone(), &rewrite).unwrap().len(), 100);
        let builder = ParquetRecordBatchReaderBuilder::try_new(bytes.clone()).unwrap();
        let schema = builder.parquet_schema();
        let mask = ProjectionMask::leaves(
            schema,
            (0..schema.num_columns()).filter(|&c| schema.column(c).path().parts()[0] != "geometry"),
        );
        let counted = budget::check(&bytes, builder.metadata(), &mask, ITEM_ROW_BYTES, u64::MAX).unwrap();
        let mut decoded = 0;
        for b in builder.with_projection(mask).build().unwrap() {
            decoded += b.unwrap().get_array_memory_size() as u64;
        }
        println!(
            "fixture: {} bytes, counted {counted}, Arrow holds {decoded}",
            bytes.len()
        );
        assert!(counted >= decoded, "counted {counted} < decoded {decoded}");
        assert!(counted < 8 * decoded, "counted {counted} far over decoded {decoded}");
        assert!(parse_geoparquet_bounded(path, bytes.clone(), &rewrite, counted).is_ok());
        let e = parse_geoparquet_bounded(path, bytes, &rewrite, counted - 1).unwrap_err();
        assert!(e.to_string().contains("stac-geoparquet too large"), "{e}");
    }
}
