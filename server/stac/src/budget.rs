//! What decoding a Parquet file would cost, found before it is decoded, so that a small
//! file that decodes to gigabytes (a decompression bomb) is refused instead of read.
//!
//! [`check`] reads the file's metadata and then every page header of the columns to be
//! read, without decompressing anything, and refuses the file when:
//! - a page, or all pages together, would decompress to more than the limit (parquet
//!   allocates the size a page header declares before decompressing it, and its Snappy
//!   and ZSTD codecs never write past it, so these sizes bound every decompression);
//! - the values would decode to more than the limit: rows, and per value an offset,
//!   validity and levels (16 bytes) plus its width (fixed-width types) or its bytes
//!   (byte arrays: a PLAIN page's bytes; for dictionary-encoded pages the bytes of the
//!   dictionary entries the page's indices name, found by decompressing the page, one at
//!   a time, and reading its indices; this is what a dictionary-encoded file of one huge
//!   value repeated in every row amplifies);
//! - a page or header is one parquet 60 would trust too far: a codec other than Snappy
//!   and ZSTD (GZIP, LZ4 and Brotli read to the end of their input whatever the page
//!   declares; none is built in today), a dictionary page declaring more entries than its
//!   bytes can hold, a DELTA_LENGTH_BYTE_ARRAY page declaring more lengths than it has
//!   values, DELTA_BYTE_ARRAY pages (parquet sizes buffers by counts inside them that
//!   cannot be checked without decoding them), unknown encodings, bit-packed levels
//!   longer than their page, varints parquet would panic on.
//!
//! [`Meter`] counts the Arrow batches a reader then produces against the same limit, a
//! second line in case the estimate misses something.

use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use bytes::Bytes;
use parquet::arrow::ProjectionMask;
use parquet::basic::{Compression, Encoding, Type as PhysicalType};
use parquet::column::page::{Page, PageReader};
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};
use parquet::file::serialized_reader::SerializedPageReader;
use parquet::schema::types::ColumnDescriptor;

use crate::pages::{self, DATA_PAGE, DATA_PAGE_V2, DICTIONARY_PAGE, INDEX_PAGE, encoding};

/// The most bytes a Parquet file may decode to unless the caller says otherwise: 1 GiB.
pub const DEFAULT_MAX_DECODED_BYTES: u64 = 1 << 30;

/// Bytes counted per value besides its own: an offset or view, validity, levels.
const VALUE_OVERHEAD: u64 = 16;

/// Why a Parquet file is not decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// Reading it would take more than the limit.
    #[error("at least {} {what} would exceed the {} limit ({at})", human(*bytes), human(*limit))]
    OverLimit {
        /// `decoded` (values) or `decompressed` (page buffers).
        what: &'static str,
        /// Bytes counted when the limit was crossed.
        bytes: u64,
        /// The limit.
        limit: u64,
        /// Where: `row group R, column C` (the largest part), or rows.
        at: String,
    },
    /// A column chunk, page or header the reader is not trusted with.
    #[error("{at}: {reason}")]
    Malformed {
        /// `row group R, column C`.
        at: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// `n` bytes for people: `812 B`, `16.0 MiB`, `2.5 GiB`.
pub fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// The cost of one column chunk, from its page headers.
#[derive(Debug, Default)]
struct Walk {
    /// Decoded bytes known from headers.
    decoded: u64,
    /// Declared decompressed bytes of its pages.
    inflated: u64,
    /// Whether its page bodies must be read for their byte-array sizes.
    scan: bool,
}

/// Bytes of one value of `descr`'s type, past [`VALUE_OVERHEAD`], and the fewest bytes a
/// PLAIN dictionary entry takes (numerator, denominator: booleans are bits).
fn widths(descr: &ColumnDescriptor) -> (u64, (u64, u64)) {
    let flba = u64::try_from(descr.type_length()).unwrap_or(0);
    match descr.physical_type() {
        PhysicalType::BOOLEAN => (0, (1, 8)),
        PhysicalType::INT32 | PhysicalType::FLOAT => (0, (4, 1)),
        PhysicalType::INT64 | PhysicalType::DOUBLE => (0, (8, 1)),
        PhysicalType::INT96 => (0, (12, 1)),
        PhysicalType::FIXED_LEN_BYTE_ARRAY => (flba, (flba, 1)),
        PhysicalType::BYTE_ARRAY => (0, (4, 1)),
    }
}

/// Walks the page headers of `chunk` as parquet's page reader does, without decoding.
fn walk(file: &[u8], chunk: &ColumnChunkMetaData) -> Result<Walk, String> {
    let descr = chunk.column_descr();
    let start = chunk.dictionary_page_offset().unwrap_or(chunk.data_page_offset());
    let (Ok(start), Ok(len)) = (usize::try_from(start), usize::try_from(chunk.compressed_size())) else {
        return Err("negative offset or size".into());
    };
    let mut body = start
        .checked_add(len)
        .and_then(|end| file.get(start..end))
        .ok_or("column chunk lies past the end of the file")?;
    if chunk.uncompressed_size() < 0 {
        return Err("negative uncompressed size".into());
    }
    // Codecs that decompress into the page's declared size and no further.
    match chunk.compression() {
        Compression::UNCOMPRESSED | Compression::SNAPPY | Compression::ZSTD(_) => {}
        c => return Err(format!("{c} compression is not read")),
    }
    let compressed = chunk.compression() != Compression::UNCOMPRESSED;
    let (width, (min_num, min_den)) = widths(descr);
    let per_value = VALUE_OVERHEAD + width;
    let byte_array = descr.physical_type() == PhysicalType::BYTE_ARRAY;
    let mut w = Walk::default();
    while !body.is_empty() {
        let h = pages::read_header(body)?;
        body = &body[h.len..];
        let (Ok(comp), Ok(unc)) = (usize::try_from(h.compressed), u64::try_from(h.uncompressed)) else {
            return Err("a page of negative size".into());
        };
        body = body.get(comp..).ok_or("a page runs past its column chunk")?;
        if h.kind == INDEX_PAGE {
            continue;
        }
        // A compressed page is decompressed into a buffer of its declared size, which
        // decoding then reads; an uncompressed one is read as it lies in the file.
        let unc = if compressed && !h.v2_uncompressed {
            w.inflated = w.inflated.saturating_add(unc);
            unc
        } else {
            comp as u64
        };
        let n = u64::try_from(h.num_values).map_err(|_| "a page of negative value count")?;
        let values = n.saturating_mul(per_value);
        match h.kind {
            DICTIONARY_PAGE => {
                if !matches!(
                    h.encoding,
                    encoding::PLAIN | encoding::PLAIN_DICTIONARY | encoding::RLE_DICTIONARY
                ) {
                    return Err(format!("a dictionary page in {}", encoding::name(h.encoding)));
                }
                if n.saturating_mul(min_num).div_ceil(min_den) > unc {
                    return Err(format!("a dictionary page declares {n} entries in {unc} bytes"));
                }
                w.decoded = w
                    .decoded
                    .saturating_add(values)
                    .saturating_add(if byte_array { unc } else { 0 });
            }
            DATA_PAGE | DATA_PAGE_V2 => {
                let dict = matches!(h.encoding, encoding::PLAIN_DICTIONARY | encoding::RLE_DICTIONARY);
                match h.encoding {
                    encoding::PLAIN
                    | encoding::PLAIN_DICTIONARY
                    | encoding::RLE_DICTIONARY
                    | encoding::RLE
                    | encoding::DELTA_BINARY_PACKED
                    | encoding::DELTA_LENGTH_BYTE_ARRAY
                    | encoding::BYTE_STREAM_SPLIT => {}
                    encoding::DELTA_BYTE_ARRAY => {
                        return Err(
                            "DELTA_BYTE_ARRAY pages are not read (parquet sizes buffers by counts inside them)".into(),
                        );
                    }
                    e => return Err(format!("values in {}", encoding::name(e))),
                }
                if h.kind == DATA_PAGE {
                    // parquet slices bit-packed levels without checking them against
                    // the page (RLE levels carry their length, which it checks).
                    let (def, rep) = h.level_encodings;
                    let (mut packed, mut rle) = (0u64, false);
                    for (max, enc) in [(descr.max_rep_level(), rep), (descr.max_def_level(), def)] {
                        if max <= 0 {
                            continue;
                        }
                        match enc {
                            encoding::RLE => rle = true,
                            encoding::BIT_PACKED => {
                                let bits = u64::from(pages::level_bits(max));
                                packed = packed.saturating_add(n.saturating_mul(bits).div_ceil(8));
                            }
                            e => return Err(format!("levels in {}", encoding::name(e))),
                        }
                    }
                    if packed > 0 && rle {
                        return Err("levels both bit-packed and RLE in one page".into());
                    }
                    if packed > unc {
                        return Err(format!("{packed} bytes of bit-packed levels in a page of {unc}"));
                    }
                } else {
                    let (d, r) = h.v2_levels;
                    // parquet slices these without checking them against the page.
                    if d < 0 || r < 0 || (i64::from(d) + i64::from(r)) as u64 > unc {
                        return Err("a v2 page with levels longer than the page".into());
                    }
                }
                let bytes = if byte_array && !dict { unc } else { 0 };
                w.decoded = w.decoded.saturating_add(values).saturating_add(bytes);
                w.scan |= byte_array && (dict || h.encoding == encoding::DELTA_LENGTH_BYTE_ARRAY);
            }
            k => return Err(format!("a page of type {k}")),
        }
    }
    Ok(w)
}

/// parquet's [`Encoding`] as its number in parquet.thrift.
#[allow(deprecated)]
fn encoding_number(e: Encoding) -> i32 {
    match e {
        Encoding::PLAIN => encoding::PLAIN,
        Encoding::PLAIN_DICTIONARY => encoding::PLAIN_DICTIONARY,
        Encoding::RLE => encoding::RLE,
        Encoding::BIT_PACKED => encoding::BIT_PACKED,
        Encoding::DELTA_BINARY_PACKED => encoding::DELTA_BINARY_PACKED,
        Encoding::DELTA_LENGTH_BYTE_ARRAY => encoding::DELTA_LENGTH_BYTE_ARRAY,
        Encoding::DELTA_BYTE_ARRAY => encoding::DELTA_BYTE_ARRAY,
        Encoding::RLE_DICTIONARY => encoding::RLE_DICTIONARY,
        Encoding::BYTE_STREAM_SPLIT => encoding::BYTE_STREAM_SPLIT,
        _ => -1,
    }
}

/// Bytes the dictionary-encoded pages of byte-array `chunk` name, read one decompressed
/// page at a time; stops once past `budget`. Also checks DELTA_LENGTH_BYTE_ARRAY pages.
fn scan(file: &Bytes, chunk: &ColumnChunkMetaData, rows: usize, budget: u64) -> Result<u64, String> {
    let descr = chunk.column_descr();
    let levels = |rep: Encoding, def: Encoding| {
        [
            (descr.max_rep_level(), encoding_number(rep)),
            (descr.max_def_level(), encoding_number(def)),
        ]
    };
    let mut reader = SerializedPageReader::new(Arc::new(file.clone()), chunk, rows, None).map_err(|e| e.to_string())?;
    let mut lens = Vec::new();
    let mut total = 0u64;
    while let Some(page) = reader.get_next_page().map_err(|e| e.to_string())? {
        let (values, n, enc) = match &page {
            Page::DictionaryPage { buf, num_values, .. } => {
                lens = pages::dictionary_lengths(buf, *num_values as usize)?;
                continue;
            }
            Page::DataPage {
                buf,
                num_values,
                encoding,
                def_level_encoding,
                rep_level_encoding,
                ..
            } => {
                let n = u64::from(*num_values);
                let start = pages::v1_values_start(buf, n, levels(*rep_level_encoding, *def_level_encoding))?;
                (&buf[start..], n, *encoding)
            }
            Page::DataPageV2 {
                buf,
                num_values,
                encoding,
                def_levels_byte_len,
                rep_levels_byte_len,
                ..
            } => {
                let start = (*def_levels_byte_len as usize).saturating_add(*rep_levels_byte_len as usize);
                let values = buf.get(start..).ok_or("levels run past the page")?;
                (values, u64::from(*num_values), *encoding)
            }
        };
        match enc {
            Encoding::PLAIN_DICTIONARY | Encoding::RLE_DICTIONARY => {
                total = total.saturating_add(pages::dictionary_bytes(values, n, &lens)?);
                if total > budget {
                    return Ok(total);
                }
            }
            Encoding::DELTA_LENGTH_BYTE_ARRAY => {
                let declared = pages::delta_count(values)?;
                if declared > n {
                    return Err(format!(
                        "a DELTA_LENGTH_BYTE_ARRAY page declares {declared} lengths for {n} values"
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(total)
}

/// Checks that reading the leaves of `meta` in `mask` from `file` stays within `limit`
/// bytes, counting `row_bytes` per row for what the caller builds of each row. Returns
/// the decoded bytes counted. Nothing is decompressed unless every header passes, then
/// only byte-array pages that are dictionary-encoded, one page at a time.
pub fn check(
    file: &Bytes,
    meta: &ParquetMetaData,
    mask: &ProjectionMask,
    row_bytes: u64,
    limit: u64,
) -> Result<u64, BudgetError> {
    let leaves = meta.file_metadata().schema_descr().num_columns();
    let mut rows = 0u64;
    let mut decoded = 0u64;
    let mut inflated = 0u64;
    let (mut largest, mut largest_inflated) = ((0u64, String::new()), (0u64, String::new()));
    let mut later = Vec::new();
    for (r, rg) in meta.row_groups().iter().enumerate() {
        let n = u64::try_from(rg.num_rows()).map_err(|_| BudgetError::Malformed {
            at: format!("row group {r}"),
            reason: "negative row count".into(),
        })?;
        rows = rows.saturating_add(n);
        for (c, chunk) in rg.columns().iter().enumerate() {
            let at = || format!("row group {r}, column {}", chunk.column_descr().path().string());
            if c >= leaves {
                return Err(BudgetError::Malformed {
                    at: at(),
                    reason: "more column chunks than the schema has columns".into(),
                });
            }
            if !mask.leaf_included(c) {
                continue;
            }
            let w = walk(file, chunk).map_err(|reason| BudgetError::Malformed { at: at(), reason })?;
            decoded = decoded.saturating_add(w.decoded);
            inflated = inflated.saturating_add(w.inflated);
            if w.decoded >= largest.0 {
                largest = (w.decoded, at());
            }
            if w.inflated >= largest_inflated.0 {
                largest_inflated = (w.inflated, at());
            }
            if w.scan {
                later.push((r, chunk, n));
            }
        }
    }
    let row_cost = rows.saturating_mul(row_bytes);
    decoded = decoded.saturating_add(row_cost);
    if row_cost >= largest.0 {
        largest = (row_cost, format!("{rows} rows"));
    }
    let over = |what, bytes, at: String| BudgetError::OverLimit { what, bytes, limit, at };
    if inflated > limit {
        return Err(over("decompressed", inflated, largest_inflated.1));
    }
    if decoded > limit {
        return Err(over("decoded", decoded, largest.1));
    }
    for (r, chunk, n) in later {
        let at = || format!("row group {r}, column {}", chunk.column_descr().path().string());
        let rows = usize::try_from(n).unwrap_or(usize::MAX);
        let bytes =
            scan(file, chunk, rows, limit - decoded).map_err(|reason| BudgetError::Malformed { at: at(), reason })?;
        decoded = decoded.saturating_add(bytes);
        if decoded > limit {
            return Err(over("decoded", decoded, at()));
        }
    }
    Ok(decoded)
}

/// Counts the Arrow batches a reader produces against a limit.
#[derive(Debug, Clone)]
pub struct Meter {
    limit: u64,
    spent: u64,
    rows: u64,
}

impl Meter {
    /// A meter of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            spent: 0,
            rows: 0,
        }
    }

    /// Counts `batch` (the bytes its arrays use); an error once the batches together
    /// exceed the limit, naming the batch's rows and its largest column.
    pub fn add(&mut self, batch: &RecordBatch) -> Result<(), BudgetError> {
        let mut largest = (0u64, String::new());
        for (f, col) in batch.schema().fields().iter().zip(batch.columns()) {
            let data = col.to_data();
            let size = data
                .get_slice_memory_size()
                .unwrap_or_else(|_| col.get_array_memory_size()) as u64;
            self.spent = self.spent.saturating_add(size);
            if size >= largest.0 {
                largest = (size, f.name().clone());
            }
        }
        let first = self.rows;
        self.rows += batch.num_rows() as u64;
        if self.spent > self.limit {
            return Err(BudgetError::OverLimit {
                what: "decoded",
                bytes: self.spent,
                limit: self.limit,
                at: format!("rows {first}..{}, column {}", self.rows, largest.1),
            });
        }
        Ok(())
    }
}

/// Which files tests write: Parquet writers the crate already depends on.
#[cfg(test)]
pub(crate) mod testfiles {
    use arrow_array::RecordBatch;
    use parquet::arrow::{ArrowWriter, arrow_writer::ArrowWriterOptions};
    use parquet::basic::{Compression, ZstdLevel};
    use parquet::file::properties::WriterProperties;

    /// `batch` as a ZSTD-compressed Parquet file without an embedded Arrow schema (so
    /// strings read back as plain strings), dictionaries up to `dict_bytes`.
    pub(crate) fn zstd(batch: &RecordBatch, dict_bytes: usize) -> Vec<u8> {
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap()))
            .set_dictionary_page_size_limit(dict_bytes)
            .build();
        let options = ArrowWriterOptions::new()
            .with_properties(props)
            .with_skip_arrow_metadata(true);
        let mut buf = Vec::new();
        let mut w = ArrowWriter::try_new_with_options(&mut buf, batch.schema(), options).unwrap();
        w.write(batch).unwrap();
        w.close().unwrap();
        buf
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, DictionaryArray, Int32Array, RecordBatch, StringArray, types::Int32Type};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    use super::*;

    const MIB: u64 = 1 << 20;

    fn meta_of(file: &Bytes) -> Arc<ParquetMetaData> {
        ParquetRecordBatchReaderBuilder::try_new(file.clone())
            .unwrap()
            .metadata()
            .clone()
    }

    /// A column of `rows` copies of one `len`-byte string, dictionary-encoded.
    fn repeated(len: usize, rows: usize) -> Bytes {
        let values = StringArray::from(vec!["x".repeat(len)]);
        let keys = Int32Array::from(vec![0; rows]);
        let big = DictionaryArray::<Int32Type>::try_new(keys, Arc::new(values)).unwrap();
        let batch = RecordBatch::try_from_iter([("big", Arc::new(big) as ArrayRef)]).unwrap();
        Bytes::from(testfiles::zstd(&batch, 2 * len))
    }

    #[test]
    fn batches_are_metered_against_the_limit() {
        let batch = |n: usize| {
            let v = StringArray::from(vec!["m".repeat(1 << 10); n]);
            RecordBatch::try_from_iter([
                ("id", Arc::new(StringArray::from(vec!["a"; n])) as ArrayRef),
                ("m", Arc::new(v) as ArrayRef),
            ])
            .unwrap()
        };
        let mut meter = Meter::new(MIB);
        meter.add(&batch(512)).unwrap();
        let e = meter.add(&batch(512)).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("would exceed the 1.0 MiB limit (rows 512..1024, column m)"),
            "{e}"
        );
    }

    #[test]
    fn sizes_for_people() {
        assert_eq!(human(812), "812 B");
        assert_eq!(human(16 << 20), "16.0 MiB");
        assert_eq!(human(5 << 29), "2.5 GiB");
    }

    #[test]
    fn dictionary_amplification_is_counted_before_decoding() {
        // 1 MiB value x 1024 rows: 1 GiB decoded from a file of a few KiB.
        let file = repeated(1 << 20, 1024);
        assert!(file.len() < 16 << 10, "{} bytes", file.len());
        let e = check(&file, &meta_of(&file), &ProjectionMask::all(), 0, 16 * MIB).unwrap_err();
        let BudgetError::OverLimit { what, bytes, at, .. } = &e else {
            panic!("{e}");
        };
        assert_eq!((*what, at.as_str()), ("decoded", "row group 0, column big"));
        assert!(*bytes > 16 * MIB, "{e}");
        assert!(e.to_string().contains("would exceed the 16.0 MiB limit"), "{e}");
        // The same file within a limit that holds it.
        let n = check(&file, &meta_of(&file), &ProjectionMask::all(), 0, 2 << 30).unwrap();
        assert!((1 << 30..(1 << 30) + 4 * MIB).contains(&n), "{n}");
    }

    #[test]
    fn a_page_that_decompresses_past_the_limit_is_refused_from_its_header() {
        // One 32 MiB value: its page declares 32 MiB.
        let values = StringArray::from(vec!["y".repeat(32 << 20)]);
        let batch = RecordBatch::try_from_iter([("v", Arc::new(values) as ArrayRef)]).unwrap();
        let file = Bytes::from(testfiles::zstd(&batch, 1 << 20));
        let e = check(&file, &meta_of(&file), &ProjectionMask::all(), 0, 16 * MIB).unwrap_err();
        assert!(
            matches!(
                e,
                BudgetError::OverLimit {
                    what: "decompressed",
                    ..
                }
            ),
            "{e}"
        );
    }

    /// The file with the first occurrence of `from` (a header field's bytes) replaced.
    fn patched(file: &Bytes, from: &[u8], to: &[u8]) -> Bytes {
        let mut b = file.to_vec();
        let at = b.windows(from.len()).position(|w| w == from).unwrap();
        b[at..at + from.len()].copy_from_slice(to);
        Bytes::from(b)
    }

    /// `v` as a Thrift i32 (zigzag varint).
    fn varint(v: i32) -> Vec<u8> {
        let mut z = ((v << 1) ^ (v >> 31)) as u32;
        let mut out = Vec::new();
        loop {
            let b = (z & 0x7f) as u8;
            z >>= 7;
            if z == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    #[test]
    fn headers_that_lie_are_refused() {
        let file = repeated(1 << 20, 16);
        let meta = meta_of(&file);
        assert!(check(&file, &meta, &ProjectionMask::all(), 0, 64 * MIB).is_ok());
        let chunk = meta.row_group(0).column(0);
        let dict_at = chunk.dictionary_page_offset().unwrap() as usize;
        let header = pages::read_header(&file[dict_at..]).unwrap();
        assert_eq!(header.kind, DICTIONARY_PAGE);
        // A dictionary page that declares 1 MiB but 100 MiB of page is refused before
        // parquet would allocate it.
        let unc = varint(header.uncompressed);
        let lie = patched(
            &file,
            &[&[0x15][..], &unc].concat(),
            &[&[0x15][..], &varint(100 << 20)].concat(),
        );
        let e = check(&lie, &meta, &ProjectionMask::all(), 0, 64 * MIB).unwrap_err();
        assert!(
            matches!(
                e,
                BudgetError::OverLimit {
                    what: "decompressed",
                    ..
                }
            ),
            "{e}"
        );
        // A dictionary page declaring more entries than its bytes hold (parquet reserves
        // an offset for each before reading them).
        let mut h = file[dict_at..dict_at + header.len].to_vec();
        let n = [&[0x15][..], &varint(1)].concat();
        let at = h.windows(2).rposition(|w| w == n.as_slice()).unwrap();
        h.splice(at..at + 2, [&[0x15][..], &varint(1 << 28)].concat());
        let mut b = file.to_vec();
        b.splice(dict_at..dict_at + header.len, h);
        let e = check(&Bytes::from(b), &meta, &ProjectionMask::all(), 0, 64 * MIB).unwrap_err();
        assert!(e.to_string().contains("declares 268435456 entries"), "{e}");
    }
}
