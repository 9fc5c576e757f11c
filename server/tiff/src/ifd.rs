//! TIFF and BigTIFF structure: byte order, the IFD chain, entries and their values.
//!
//! Parsing works over a [`SparseBytes`]: the parts of the object fetched so far. When a value
//! lies outside them, parsing stops with [`Step::Need`] naming the missing range; the caller
//! fetches it and parses again (parsing is cheap, round trips are not). Every count, offset
//! and size read from the file is checked against the object size and the limits before
//! anything is allocated.

use std::collections::HashSet;
use std::ops::Range;

use bytes::Bytes;

use super::error::{TiffError, malformed};

/// Largest value array of one tag we are willing to read (offset tables of huge COGs fit).
pub const MAX_TAG_BYTES: u64 = 256 * 1024 * 1024;
/// Largest number of entries in one IFD.
const MAX_ENTRIES: u64 = 4096;
/// Largest number of IFDs followed in the chain.
pub const MAX_IFDS: usize = 1024;

/// Outcome of a parse attempt that did not succeed.
#[derive(Debug)]
pub enum Step {
    /// These bytes are needed and not fetched yet.
    Need(Range<u64>),
    /// The file cannot be read.
    Fail(TiffError),
}

impl From<TiffError> for Step {
    fn from(e: TiffError) -> Self {
        Step::Fail(e)
    }
}

/// Parse result that may ask for more bytes.
pub type StepResult<T> = Result<T, Step>;

fn fail<T>(msg: impl Into<String>) -> StepResult<T> {
    Err(Step::Fail(malformed(msg)))
}

/// The fetched parts of one object.
#[derive(Debug, Clone, Default)]
pub struct SparseBytes {
    segments: Vec<(u64, Bytes)>,
    size: u64,
}

impl SparseBytes {
    /// An empty view of an object of `size` bytes.
    pub fn new(size: u64) -> Self {
        Self {
            segments: Vec::new(),
            size,
        }
    }

    /// Size of the whole object.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Adds fetched bytes starting at `offset`.
    pub fn insert(&mut self, offset: u64, bytes: Bytes) {
        if !bytes.is_empty() {
            self.segments.push((offset, bytes));
            self.segments.sort_by_key(|s| s.0);
        }
    }

    /// End of the contiguous run of bytes fetched from offset 0.
    pub fn prefix_end(&self) -> u64 {
        let mut end = 0;
        for (start, bytes) in &self.segments {
            if *start <= end {
                end = end.max(start + bytes.len() as u64);
            }
        }
        end
    }

    /// `len` bytes at `offset`, or the range to fetch first.
    pub fn get(&self, offset: u64, len: u64) -> StepResult<&[u8]> {
        let end = match offset.checked_add(len) {
            Some(end) if end <= self.size => end,
            _ => {
                return fail(format!(
                    "{len} bytes at offset {offset} lie beyond the end of the file ({} bytes)",
                    self.size
                ));
            }
        };
        for (start, bytes) in self.segments.iter().rev() {
            let seg_end = start + bytes.len() as u64;
            if *start <= offset && end <= seg_end {
                let from = (offset - start) as usize;
                return Ok(&bytes[from..from + len as usize]);
            }
        }
        Err(Step::Need(offset..end))
    }
}

/// Byte order of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    /// Little-endian (`II`).
    Little,
    /// Big-endian (`MM`).
    Big,
}

impl ByteOrder {
    fn u16(self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        match self {
            ByteOrder::Little => u16::from_le_bytes(a),
            ByteOrder::Big => u16::from_be_bytes(a),
        }
    }
    fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        match self {
            ByteOrder::Little => u32::from_le_bytes(a),
            ByteOrder::Big => u32::from_be_bytes(a),
        }
    }
    fn u64(self, b: &[u8]) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        match self {
            ByteOrder::Little => u64::from_le_bytes(a),
            ByteOrder::Big => u64::from_be_bytes(a),
        }
    }
}

/// One IFD entry; its value is read on demand.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Tag number.
    pub tag: u16,
    /// TIFF field type (1 BYTE, 2 ASCII, 3 SHORT, 4 LONG, 12 DOUBLE, 16 LONG8, ...).
    pub typ: u16,
    /// Number of values.
    pub count: u64,
    inline: [u8; 8],
    offset: Option<u64>,
}

/// Size in bytes of one value of a TIFF field type.
fn type_size(typ: u16) -> Option<u64> {
    Some(match typ {
        1 | 2 | 6 | 7 => 1,
        3 | 8 => 2,
        4 | 9 | 11 | 13 => 4,
        5 | 10 | 12 | 16 | 17 | 18 => 8,
        _ => return None,
    })
}

/// One image file directory.
#[derive(Debug, Clone)]
pub struct Ifd {
    /// Where it starts in the file.
    pub offset: u64,
    /// Its entries, sorted by tag.
    pub entries: Vec<Entry>,
}

impl Ifd {
    /// The entry for `tag`, if present.
    pub fn entry(&self, tag: u16) -> Option<&Entry> {
        self.entries
            .binary_search_by_key(&tag, |e| e.tag)
            .ok()
            .map(|i| &self.entries[i])
    }
}

/// The structure of a TIFF: byte order, flavour and the IFD chain.
#[derive(Debug, Clone)]
pub struct Structure {
    /// Byte order of the file.
    pub order: ByteOrder,
    /// Whether the file is BigTIFF (64-bit offsets).
    pub bigtiff: bool,
    /// The IFDs in chain order.
    pub ifds: Vec<Ifd>,
}

/// Parses the header and every IFD of the chain (entries only, values on demand).
pub fn parse_structure(src: &SparseBytes) -> StepResult<Structure> {
    if src.size() < 8 {
        return fail("file too short for a tiff header");
    }
    let head = src.get(0, 8)?;
    let order = match &head[..2] {
        b"II" => ByteOrder::Little,
        b"MM" => ByteOrder::Big,
        _ => return fail("not a tiff file (bad byte-order mark)"),
    };
    let (bigtiff, mut next) = match order.u16(&head[2..4]) {
        42 => (false, order.u32(&head[4..8]) as u64),
        43 => {
            let h = src.get(0, 16)?;
            if order.u16(&h[4..6]) != 8 {
                return fail("bigtiff with an offset size other than 8");
            }
            (true, order.u64(&h[8..16]))
        }
        v => return fail(format!("not a tiff file (version {v})")),
    };
    let mut ifds = Vec::new();
    let mut seen = HashSet::new();
    while next != 0 && ifds.len() < MAX_IFDS {
        if !seen.insert(next) {
            return fail(format!("ifd chain loops back to offset {next}"));
        }
        let (ifd, following) = parse_ifd(src, order, bigtiff, next)?;
        ifds.push(ifd);
        next = following;
    }
    if ifds.is_empty() {
        return fail("no image file directory");
    }
    Ok(Structure { order, bigtiff, ifds })
}

fn parse_ifd(src: &SparseBytes, order: ByteOrder, bigtiff: bool, offset: u64) -> StepResult<(Ifd, u64)> {
    let (count_len, entry_len, next_len) = if bigtiff { (8, 20, 8) } else { (2, 12, 4) };
    let raw_count = src.get(offset, count_len)?;
    let count = if bigtiff {
        order.u64(raw_count)
    } else {
        order.u16(raw_count) as u64
    };
    if count == 0 || count > MAX_ENTRIES {
        return fail(format!("ifd at {offset} has {count} entries"));
    }
    let body_len = count * entry_len + next_len;
    let body = src.get(offset + count_len, body_len)?;
    let mut entries = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let e = &body[i * entry_len as usize..(i + 1) * entry_len as usize];
        let tag = order.u16(&e[0..2]);
        let typ = order.u16(&e[2..4]);
        let (count, value) = if bigtiff {
            (order.u64(&e[4..12]), &e[12..20])
        } else {
            (order.u32(&e[4..8]) as u64, &e[8..12])
        };
        let Some(size) = type_size(typ) else {
            // Unknown field types are skipped, as libtiff does.
            continue;
        };
        let total = count.saturating_mul(size);
        let mut inline = [0u8; 8];
        let offset = if total <= value.len() as u64 {
            inline[..value.len()].copy_from_slice(value);
            None
        } else if bigtiff {
            Some(order.u64(value))
        } else {
            Some(order.u32(value) as u64)
        };
        entries.push(Entry {
            tag,
            typ,
            count,
            inline,
            offset,
        });
    }
    entries.sort_by_key(|e| e.tag);
    entries.dedup_by_key(|e| e.tag);
    let tail = &body[(count * entry_len) as usize..];
    let next = if bigtiff {
        order.u64(tail)
    } else {
        order.u32(tail) as u64
    };
    Ok((Ifd { offset, entries }, next))
}

/// Reads entry values with the file's byte order.
#[derive(Debug, Clone, Copy)]
pub struct Values<'a> {
    /// The fetched bytes of the file.
    pub src: &'a SparseBytes,
    /// Byte order of the file.
    pub order: ByteOrder,
}

impl<'a> Values<'a> {
    /// The raw bytes of an entry's value.
    pub fn raw<'e>(&self, e: &'e Entry) -> StepResult<&'e [u8]>
    where
        'a: 'e,
    {
        let size = type_size(e.typ).unwrap_or(1);
        let total = e.count.saturating_mul(size);
        if total > MAX_TAG_BYTES {
            return Err(Step::Fail(TiffError::TooLarge(format!(
                "tag {} holds {} values",
                e.tag, e.count
            ))));
        }
        match e.offset {
            None => Ok(&e.inline[..total as usize]),
            Some(off) => self.src.get(off, total),
        }
    }

    /// Integer values (any unsigned or signed integer type; negative values are an error).
    pub fn u64s(&self, e: &Entry) -> StepResult<Vec<u64>> {
        let raw = self.raw(e)?;
        let o = self.order;
        let out: Vec<u64> = match e.typ {
            1 | 7 => raw.iter().map(|&b| b as u64).collect(),
            3 => raw.chunks_exact(2).map(|c| o.u16(c) as u64).collect(),
            4 | 13 => raw.chunks_exact(4).map(|c| o.u32(c) as u64).collect(),
            16 | 18 => raw.chunks_exact(8).map(|c| o.u64(c)).collect(),
            6 | 8 | 9 | 17 => {
                let signed: Vec<i64> = match e.typ {
                    6 => raw.iter().map(|&b| b as i8 as i64).collect(),
                    8 => raw.chunks_exact(2).map(|c| o.u16(c) as i16 as i64).collect(),
                    9 => raw.chunks_exact(4).map(|c| o.u32(c) as i32 as i64).collect(),
                    _ => raw.chunks_exact(8).map(|c| o.u64(c) as i64).collect(),
                };
                if signed.iter().any(|&v| v < 0) {
                    return fail(format!("tag {} holds a negative value", e.tag));
                }
                signed.into_iter().map(|v| v as u64).collect()
            }
            _ => return fail(format!("tag {} has non-integer type {}", e.tag, e.typ)),
        };
        Ok(out)
    }

    /// The first integer value.
    pub fn u64(&self, e: &'a Entry) -> StepResult<u64> {
        if e.count == 0 {
            return fail(format!("tag {} has no value", e.tag));
        }
        // Only the first value is read, wherever the array lives (inline values start at
        // the first one too).
        let first = Entry { count: 1, ..e.clone() };
        let values = self.u64s(&first)?;
        values
            .first()
            .copied()
            .ok_or_else(|| Step::Fail(malformed(format!("tag {} has no value", e.tag))))
    }

    /// Numeric values as f64 (integers, rationals, floats).
    pub fn f64s(&self, e: &'a Entry) -> StepResult<Vec<f64>> {
        let raw = self.raw(e)?;
        let o = self.order;
        Ok(match e.typ {
            5 => raw
                .chunks_exact(8)
                .map(|c| o.u32(&c[..4]) as f64 / o.u32(&c[4..]) as f64)
                .collect(),
            10 => raw
                .chunks_exact(8)
                .map(|c| o.u32(&c[..4]) as i32 as f64 / o.u32(&c[4..]) as i32 as f64)
                .collect(),
            11 => raw.chunks_exact(4).map(|c| f32::from_bits(o.u32(c)) as f64).collect(),
            12 => raw.chunks_exact(8).map(|c| f64::from_bits(o.u64(c))).collect(),
            _ => self.u64s(e)?.into_iter().map(|v| v as f64).collect(),
        })
    }

    /// An ASCII value without its trailing NULs.
    pub fn ascii(&self, e: &'a Entry) -> StepResult<String> {
        let raw = self.raw(e)?;
        let text = String::from_utf8_lossy(raw);
        Ok(text.trim_end_matches('\0').to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic little-endian TIFF with one IFD holding `entries` (tag, type, count, value).
    fn classic(order: ByteOrder, entries: &[(u16, u16, u32, u32)]) -> Vec<u8> {
        let mut b = Vec::new();
        let w16 = |b: &mut Vec<u8>, v: u16| match order {
            ByteOrder::Little => b.extend(v.to_le_bytes()),
            ByteOrder::Big => b.extend(v.to_be_bytes()),
        };
        let w32 = |b: &mut Vec<u8>, v: u32| match order {
            ByteOrder::Little => b.extend(v.to_le_bytes()),
            ByteOrder::Big => b.extend(v.to_be_bytes()),
        };
        b.extend(if order == ByteOrder::Little { b"II" } else { b"MM" });
        w16(&mut b, 42);
        w32(&mut b, 8);
        w16(&mut b, entries.len() as u16);
        for &(tag, typ, count, value) in entries {
            w16(&mut b, tag);
            w16(&mut b, typ);
            w32(&mut b, count);
            if typ == 3 && count == 1 {
                w16(&mut b, value as u16);
                w16(&mut b, 0);
            } else {
                w32(&mut b, value);
            }
        }
        w32(&mut b, 0);
        b
    }

    fn full(bytes: Vec<u8>) -> SparseBytes {
        let mut s = SparseBytes::new(bytes.len() as u64);
        s.insert(0, Bytes::from(bytes));
        s
    }

    #[test]
    fn parses_both_byte_orders() {
        for order in [ByteOrder::Little, ByteOrder::Big] {
            let src = full(classic(order, &[(257, 3, 1, 300), (256, 4, 1, 70000)]));
            let s = parse_structure(&src).unwrap();
            assert_eq!(s.order, order);
            assert!(!s.bigtiff);
            let ifd = &s.ifds[0];
            let v = Values { src: &src, order };
            assert_eq!(v.u64(ifd.entry(256).unwrap()).unwrap(), 70000);
            assert_eq!(v.u64(ifd.entry(257).unwrap()).unwrap(), 300);
            assert_eq!(ifd.entries[0].tag, 256, "entries sorted by tag");
        }
    }

    #[test]
    fn asks_for_missing_bytes() {
        let bytes = classic(ByteOrder::Little, &[(256, 3, 1, 5)]);
        let mut src = SparseBytes::new(bytes.len() as u64);
        src.insert(0, Bytes::copy_from_slice(&bytes[..10]));
        match parse_structure(&src) {
            Err(Step::Need(r)) => assert!(r.start >= 10 && r.end as usize <= bytes.len()),
            other => panic!("expected a fetch request, got {other:?}"),
        }
    }

    #[test]
    fn rejects_loops_and_garbage() {
        let mut b = classic(ByteOrder::Little, &[(256, 3, 1, 5)]);
        let n = b.len();
        b[n - 4..].copy_from_slice(&8u32.to_le_bytes());
        assert!(matches!(parse_structure(&full(b)), Err(Step::Fail(_))));
        assert!(matches!(
            parse_structure(&full(b"XX*\0\0\0\0\0".to_vec())),
            Err(Step::Fail(_))
        ));
        assert!(matches!(
            parse_structure(&full(b"II*\0\xff\xff\xff\x00".to_vec())),
            Err(Step::Fail(_))
        ));
    }

    #[test]
    fn out_of_file_values_fail_cleanly() {
        // A LONG array of 1000 values pointing past the end of the file.
        let src = full(classic(ByteOrder::Little, &[(273, 4, 1000, 1 << 30)]));
        let s = parse_structure(&src).unwrap();
        let v = Values {
            src: &src,
            order: s.order,
        };
        assert!(matches!(v.u64s(s.ifds[0].entry(273).unwrap()), Err(Step::Fail(_))));
    }
}
