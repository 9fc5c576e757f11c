//! A stac-geoparquet decompression bomb (a few KiB that decode to GiBs: one huge value,
//! dictionary-encoded, repeated in every row) is refused before it is decoded, and the
//! process's peak memory stays where it was. One test in its own binary, so that the
//! peak it reads is its own.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

use std::sync::Arc;

use arrow_array::{ArrayRef, DictionaryArray, Int32Array, RecordBatch, StringArray, types::Int32Type};
use bytes::Bytes;
use cogfeed_stac::{HrefRewrite, StacError};
use parquet::arrow::{ArrowWriter, arrow_writer::ArrowWriterOptions};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

/// Items `i0`.. with a `notes` property of `rows` copies of one `len`-byte string.
fn bomb(rows: usize, len: usize) -> Bytes {
    let ids: Vec<String> = (0..rows).map(|i| format!("i{i}")).collect();
    let notes = DictionaryArray::<Int32Type>::try_new(
        Int32Array::from(vec![0; rows]),
        Arc::new(StringArray::from(vec!["b".repeat(len)])),
    )
    .unwrap();
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(StringArray::from(ids)) as ArrayRef),
        ("notes", Arc::new(notes) as ArrayRef),
    ])
    .unwrap();
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap()))
        .set_dictionary_page_size_limit(2 * len)
        .build();
    let options = ArrowWriterOptions::new()
        .with_properties(props)
        .with_skip_arrow_metadata(true);
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new_with_options(&mut buf, batch.schema(), options).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    Bytes::from(buf)
}

/// Peak resident memory of this process (Linux: `VmHWM`), in bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[test]
fn a_bomb_is_refused_without_the_memory_it_would_take() {
    // 1 GiB decoded against a 16 MiB limit; 4 GiB against the default 1 GiB.
    let small = bomb(1024, 1 << 20);
    let large = bomb(2048, 2 << 20);
    assert!(
        small.len() < 16 << 10 && large.len() < 32 << 10,
        "{} and {} bytes",
        small.len(),
        large.len()
    );
    println!("bombs of {} and {} bytes", small.len(), large.len());
    let before = peak_rss();
    let rewrite = HrefRewrite::default();
    let e = cogfeed_stac::parse_geoparquet_bounded("cat/small.parquet", small, &rewrite, 16 << 20).unwrap_err();
    assert!(
        matches!(&e, StacError::NotStac { doc, .. } if doc == "cat/small.parquet"),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("would exceed the 16.0 MiB limit (row group 0, column notes)"),
        "{e}"
    );
    let e = cogfeed_stac::parse_geoparquet("cat/large.parquet", large, &rewrite).unwrap_err();
    assert!(
        e.to_string()
            .contains("would exceed the 1.0 GiB limit (row group 0, column notes)"),
        "{e}"
    );
    if let (Some(before), Some(after)) = (before, peak_rss()) {
        println!(
            "peak RSS {} MiB before parsing, {} MiB after",
            before >> 20,
            after >> 20
        );
        assert!(
            after < before + (32 << 20),
            "peak RSS grew from {before} to {after} bytes"
        );
    }
}
