//! Parquet pages read without parquet's decoders, for [`crate::budget`]: [`read_header`]
//! parses one Thrift-compact page header as the `parquet` crate (60.x) does, and refuses
//! what it might read differently; the scans below read what a decompressed page body says
//! about its size (how many values a delta header declares, which dictionary entries the
//! indices of a page name) the way parquet's decoders read it.
//!
//! Everything here is bounded by its input: no allocation is sized by a number read from
//! the file, every count is capped by the page, arithmetic saturates.

/// Page types (`PageType` in parquet.thrift).
pub(crate) const DATA_PAGE: i32 = 0;
/// An index page: skipped by readers.
pub(crate) const INDEX_PAGE: i32 = 1;
/// A dictionary page.
pub(crate) const DICTIONARY_PAGE: i32 = 2;
/// A data page, format v2.
pub(crate) const DATA_PAGE_V2: i32 = 3;

/// Encodings (`Encoding` in parquet.thrift) this module names.
pub(crate) mod encoding {
    /// PLAIN.
    pub(crate) const PLAIN: i32 = 0;
    /// PLAIN_DICTIONARY (v1 name of RLE_DICTIONARY).
    pub(crate) const PLAIN_DICTIONARY: i32 = 2;
    /// RLE / bit-packing hybrid.
    pub(crate) const RLE: i32 = 3;
    /// Deprecated bit-packed levels.
    pub(crate) const BIT_PACKED: i32 = 4;
    /// DELTA_BINARY_PACKED.
    pub(crate) const DELTA_BINARY_PACKED: i32 = 5;
    /// DELTA_LENGTH_BYTE_ARRAY.
    pub(crate) const DELTA_LENGTH_BYTE_ARRAY: i32 = 6;
    /// DELTA_BYTE_ARRAY.
    pub(crate) const DELTA_BYTE_ARRAY: i32 = 7;
    /// RLE_DICTIONARY.
    pub(crate) const RLE_DICTIONARY: i32 = 8;
    /// BYTE_STREAM_SPLIT.
    pub(crate) const BYTE_STREAM_SPLIT: i32 = 9;

    /// The name of an encoding, for messages.
    pub(crate) fn name(e: i32) -> String {
        match e {
            PLAIN => "PLAIN".into(),
            PLAIN_DICTIONARY => "PLAIN_DICTIONARY".into(),
            RLE => "RLE".into(),
            BIT_PACKED => "BIT_PACKED".into(),
            DELTA_BINARY_PACKED => "DELTA_BINARY_PACKED".into(),
            DELTA_LENGTH_BYTE_ARRAY => "DELTA_LENGTH_BYTE_ARRAY".into(),
            DELTA_BYTE_ARRAY => "DELTA_BYTE_ARRAY".into(),
            RLE_DICTIONARY => "RLE_DICTIONARY".into(),
            BYTE_STREAM_SPLIT => "BYTE_STREAM_SPLIT".into(),
            other => format!("encoding {other}"),
        }
    }
}

/// The fields of a page header that say what reading the page costs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct PageHeader {
    /// Bytes the header itself takes.
    pub len: usize,
    /// [`DATA_PAGE`], [`INDEX_PAGE`], [`DICTIONARY_PAGE`] or [`DATA_PAGE_V2`].
    pub kind: i32,
    /// Bytes the page body decompresses to, as declared (parquet allocates this much).
    pub uncompressed: i32,
    /// Bytes the page body takes in the file.
    pub compressed: i32,
    /// Values (levels) of a data page, entries of a dictionary page.
    pub num_values: i32,
    /// Encoding of the values.
    pub encoding: i32,
    /// Encoding of definition and repetition levels (v1 data pages).
    pub level_encodings: (i32, i32),
    /// Byte lengths of the definition and repetition levels (v2 data pages).
    pub v2_levels: (i32, i32),
    /// Whether a v2 data page's values are compressed (`is_compressed`, default true).
    pub v2_uncompressed: bool,
}

/// The most nested Thrift structs or lists skipped in a header (parquet allows 64).
const MAX_DEPTH: u8 = 16;

/// Thrift compact protocol over a slice, reading as parquet's `ThriftCompactInputProtocol`.
struct Thrift<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Thrift<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self.buf.get(self.pos).ok_or("page header runs past its column chunk")?;
        self.pos += 1;
        Ok(b)
    }

    /// A ULEB128 varint of at most 10 bytes (parquet reads longer ones too; a longer
    /// one is refused here).
    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f).wrapping_shl(7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("page header has a varint of more than 10 bytes".into())
    }

    fn zigzag(&mut self) -> Result<i64, String> {
        let v = self.varint()?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// An i32 field: parquet truncates the zigzag value (`as i32`).
    fn i32(&mut self) -> Result<i32, String> {
        Ok(self.zigzag()? as i32)
    }

    fn skip_bytes(&mut self, n: u64) -> Result<(), String> {
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| self.pos.checked_add(n))
            .filter(|&e| e <= self.buf.len())
            .ok_or("page header runs past its column chunk")?;
        self.pos = end;
        Ok(())
    }

    /// The next field's (type, id), None at the struct's end.
    fn field(&mut self, last: i16) -> Result<Option<(u8, i16)>, String> {
        let b = self.byte()?;
        let ty = b & 0x0f;
        if ty == 0 {
            return Ok(None);
        }
        if ty > 13 {
            return Err(format!("page header has a field of unknown type {ty}"));
        }
        let delta = b >> 4;
        let id = if delta != 0 {
            last.checked_add(i16::from(delta))
                .ok_or("page header field ids overflow")?
        } else {
            self.zigzag()? as i16
        };
        Ok(Some((ty, id)))
    }

    /// A bool field's value (carried by its type).
    fn bool_field(ty: u8) -> Result<bool, String> {
        match ty {
            1 => Ok(true),
            2 => Ok(false),
            _ => Err("page header has a non-boolean flag".into()),
        }
    }

    /// Skips a value of type `ty`, as parquet's `skip_till_depth` does, for the types
    /// writers put in page headers; maps, UUIDs and lists of booleans are refused.
    fn skip(&mut self, ty: u8, depth: u8) -> Result<(), String> {
        if depth >= MAX_DEPTH {
            return Err("page header nests too deep".into());
        }
        match ty {
            1 | 2 => Ok(()),
            3 => self.byte().map(|_| ()),
            4..=6 => loop {
                if self.byte()? & 0x80 == 0 {
                    return Ok(());
                }
            },
            7 => self.skip_bytes(8),
            8 => {
                let n = self.varint()?;
                self.skip_bytes(n)
            }
            9 | 10 => {
                let h = self.byte()?;
                if h == 0 {
                    return Ok(());
                }
                let elem = h & 0x0f;
                let n = match h >> 4 {
                    15 => i32::try_from(self.varint()?).map_err(|_| "page header list too long")?,
                    n => i32::from(n),
                };
                if n > 0 && !matches!(elem, 3..=10 | 12) {
                    return Err(format!("page header has a list of type {elem}"));
                }
                for _ in 0..n {
                    self.skip(elem, depth + 1)?;
                }
                Ok(())
            }
            12 => {
                while let Some((t, _)) = self.field(0)? {
                    self.skip(t, depth + 1)?;
                }
                Ok(())
            }
            t => Err(format!("page header has a field of type {t}")),
        }
    }
}

/// Parses the page header at the start of `buf` (the rest of its column chunk).
pub(crate) fn read_header(buf: &[u8]) -> Result<PageHeader, String> {
    let mut t = Thrift { buf, pos: 0 };
    let mut h = PageHeader::default();
    let (mut kind, mut unc, mut comp) = (None, None, None);
    let mut sub: [Option<PageHeader>; 4] = Default::default();
    let mut last = 0;
    while let Some((ty, id)) = t.field(last)? {
        match id {
            1 => kind = Some(t.i32()?),
            2 => unc = Some(t.i32()?),
            3 => comp = Some(t.i32()?),
            4 => {
                t.i32()?;
            }
            5 => sub[0] = Some(data_header(&mut t)?),
            6 => {
                t.skip(12, 0)?;
                sub[1] = Some(PageHeader::default());
            }
            7 => sub[2] = Some(dictionary_header(&mut t)?),
            8 => sub[3] = Some(data_header_v2(&mut t)?),
            _ => t.skip(ty, 0)?,
        }
        last = id;
    }
    let (Some(kind), Some(unc), Some(comp)) = (kind, unc, comp) else {
        return Err("page header lacks its type or sizes".into());
    };
    if !(DATA_PAGE..=DATA_PAGE_V2).contains(&kind) {
        return Err(format!("page of unknown type {kind}"));
    }
    // parquet picks a page's header by its type but decompresses a page by whether it
    // has a v2 header: one header per page, so both read the same one.
    if sub.iter().filter(|s| s.is_some()).count() > 1 {
        return Err("a page with more than one page header".into());
    }
    if kind != INDEX_PAGE {
        h = sub[kind as usize]
            .take()
            .ok_or_else(|| format!("page of type {kind} without its header"))?;
    }
    h.len = t.pos;
    h.kind = kind;
    h.uncompressed = unc;
    h.compressed = comp;
    Ok(h)
}

/// Reads a struct's fields with `f(thrift, type, id)`, skipping those it returns false for.
fn fields(t: &mut Thrift, mut f: impl FnMut(&mut Thrift, u8, i16) -> Result<bool, String>) -> Result<(), String> {
    let mut last = 0;
    while let Some((ty, id)) = t.field(last)? {
        if !f(t, ty, id)? {
            t.skip(ty, 1)?;
        }
        last = id;
    }
    Ok(())
}

fn data_header(t: &mut Thrift) -> Result<PageHeader, String> {
    let mut got = [None; 4];
    fields(t, |t, _, id| match id {
        1..=4 => {
            got[id as usize - 1] = Some(t.i32()?);
            Ok(true)
        }
        _ => Ok(false),
    })?;
    let [Some(n), Some(e), Some(d), Some(r)] = got else {
        return Err("data page header lacks a required field".into());
    };
    Ok(PageHeader {
        num_values: n,
        encoding: e,
        level_encodings: (d, r),
        ..Default::default()
    })
}

fn dictionary_header(t: &mut Thrift) -> Result<PageHeader, String> {
    let mut got = [None; 2];
    fields(t, |t, ty, id| match id {
        1 | 2 => {
            got[id as usize - 1] = Some(t.i32()?);
            Ok(true)
        }
        3 => Thrift::bool_field(ty).map(|_| true),
        _ => Ok(false),
    })?;
    let [Some(n), Some(e)] = got else {
        return Err("dictionary page header lacks a required field".into());
    };
    Ok(PageHeader {
        num_values: n,
        encoding: e,
        ..Default::default()
    })
}

fn data_header_v2(t: &mut Thrift) -> Result<PageHeader, String> {
    let mut got = [None; 6];
    let mut compressed = true;
    fields(t, |t, ty, id| match id {
        1..=6 => {
            got[id as usize - 1] = Some(t.i32()?);
            Ok(true)
        }
        7 => {
            compressed = Thrift::bool_field(ty)?;
            Ok(true)
        }
        _ => Ok(false),
    })?;
    let [Some(n), Some(_), Some(_), Some(e), Some(d), Some(r)] = got else {
        return Err("data page v2 header lacks a required field".into());
    };
    Ok(PageHeader {
        num_values: n,
        encoding: e,
        v2_levels: (d, r),
        v2_uncompressed: !compressed,
        ..Default::default()
    })
}

/// Bits needed for levels up to `max` (parquet's `num_required_bits`).
pub(crate) fn level_bits(max: i16) -> u32 {
    64 - u64::try_from(max).unwrap_or(0).leading_zeros()
}

/// Where the values of a v1 data page body start: after its repetition then definition
/// levels (RLE: a 4-byte length, then that many bytes; BIT_PACKED: `ceil(n * bits / 8)`).
pub(crate) fn v1_values_start(body: &[u8], n: u64, levels: [(i16, i32); 2]) -> Result<usize, String> {
    let mut at = 0usize;
    for (max, enc) in levels {
        if max <= 0 {
            continue;
        }
        let len = match enc {
            encoding::RLE => {
                let w: [u8; 4] = body
                    .get(at..at + 4)
                    .and_then(|w| w.try_into().ok())
                    .ok_or("levels run past the page")?;
                4 + u64::from(u32::from_le_bytes(w))
            }
            encoding::BIT_PACKED => n.saturating_mul(u64::from(level_bits(max))).div_ceil(8),
            e => return Err(format!("levels in {}", encoding::name(e))),
        };
        at = usize::try_from(len)
            .ok()
            .and_then(|l| at.checked_add(l))
            .filter(|&e| e <= body.len())
            .ok_or("levels run past the page")?;
    }
    Ok(at)
}

/// A ULEB128 varint as parquet's `BitReader::get_vlq_int` reads it (which panics past 10
/// bytes: refused here); None at the end of `buf`.
fn vlq(buf: &[u8], at: &mut usize) -> Result<Option<u64>, String> {
    let mut v = 0u64;
    for i in 0..10 {
        let Some(&b) = buf.get(*at + i as usize) else {
            return Ok(None);
        };
        v |= u64::from(b & 0x7f).wrapping_shl(7 * i);
        if b & 0x80 == 0 {
            *at += i as usize + 1;
            return Ok(Some(v));
        }
    }
    Err("a varint of more than 10 bytes".into())
}

/// How many values the DELTA_BINARY_PACKED header at the start of `values` declares
/// (parquet sizes a buffer by it for DELTA_LENGTH_BYTE_ARRAY pages).
pub(crate) fn delta_count(values: &[u8]) -> Result<u64, String> {
    let mut at = 0;
    let mut next = || vlq(values, &mut at)?.ok_or_else(|| "a delta header runs past the page".to_string());
    let (_block, _mini, count) = (next()?, next()?, next()?);
    next()?;
    Ok(count)
}

/// The byte length of each entry of a PLAIN BYTE_ARRAY dictionary of `n` entries.
pub(crate) fn dictionary_lengths(body: &[u8], n: usize) -> Result<Vec<u32>, String> {
    let mut lens = Vec::with_capacity(n.min(body.len() / 4));
    let mut at = 0usize;
    while lens.len() < n && at < body.len() {
        let w: [u8; 4] = body
            .get(at..at + 4)
            .and_then(|w| w.try_into().ok())
            .ok_or("dictionary entry runs past its page")?;
        let len = u32::from_le_bytes(w);
        at = at
            .checked_add(4 + len as usize)
            .filter(|&e| e <= body.len())
            .ok_or("dictionary entry runs past its page")?;
        lens.push(len);
    }
    Ok(lens)
}

/// Bytes the first `n` dictionary indices of `values` (a bit width, then the RLE /
/// bit-packing hybrid) name in a dictionary of entries `lens`, read as parquet's
/// `DictIndexDecoder` and `RleDecoder` read them. Indices past the dictionary count 0
/// (parquet stops there with an error).
pub(crate) fn dictionary_bytes(values: &[u8], n: u64, lens: &[u32]) -> Result<u64, String> {
    let len_of = |i: u64| {
        usize::try_from(i)
            .ok()
            .and_then(|i| lens.get(i))
            .map_or(0, |&l| u64::from(l))
    };
    let Some((&bits, data)) = values.split_first() else {
        return Ok(0);
    };
    if bits > 32 {
        return Err(format!("dictionary indices of {bits} bits"));
    }
    let bits = u64::from(bits);
    let (mut left, mut total, mut at) = (n, 0u64, 0usize);
    while left > 0 {
        let Some(indicator) = vlq(data, &mut at)? else {
            break;
        };
        if indicator == 0 {
            break;
        }
        let run = if indicator & 1 == 1 {
            (indicator >> 1).saturating_mul(8)
        } else {
            indicator >> 1
        };
        if run > i32::MAX as u64 {
            return Err(format!("an index run of {run} values"));
        }
        if indicator & 1 == 0 {
            let width = bits.div_ceil(8) as usize;
            let w = data.get(at..at + width).ok_or("an index run past the page")?;
            at += width;
            let v = w.iter().rev().fold(0u64, |v, &b| (v << 8) | u64::from(b));
            if bits < 64 && v >= (1u64 << bits) {
                return Err(format!("index {v} wider than {bits} bits"));
            }
            let k = run.min(left);
            total = total.saturating_add(k.saturating_mul(len_of(v)));
            left -= k;
            continue;
        }
        // Bit-packed: `run` values of `bits` bits, LSB first; a short final run is read
        // as far as it goes.
        let avail_bits = ((data.len() - at) as u64).saturating_mul(8);
        let have = avail_bits.checked_div(bits).map_or(run, |m| run.min(m));
        let k = have.min(left);
        if bits == 0 {
            total = total.saturating_add(k.saturating_mul(len_of(0)));
        } else {
            let mask = (1u64 << bits) - 1;
            for i in 0..k {
                let bit = i * bits;
                let from = at + (bit / 8) as usize;
                let word = data[from..]
                    .iter()
                    .take(8)
                    .enumerate()
                    .fold(0u64, |w, (b, &x)| w | (u64::from(x) << (8 * b)));
                total = total.saturating_add(len_of((word >> (bit % 8)) & mask));
            }
        }
        left -= k;
        if have < run {
            break;
        }
        at += (run * bits / 8) as usize;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_read_as_parquet_writes_them() {
        // type DATA_PAGE, 100 bytes uncompressed, 40 compressed, data header {n 7, PLAIN, RLE, RLE}
        let h = [
            0x15, 0x00, 0x15, 0xc8, 0x01, 0x15, 0x50, 0x2c, 0x15, 0x0e, 0x15, 0x00, 0x15, 0x06, 0x15, 0x06, 0x00, 0x00,
        ];
        let p = read_header(&h).unwrap();
        assert_eq!(
            (p.kind, p.uncompressed, p.compressed, p.num_values),
            (DATA_PAGE, 100, 40, 7)
        );
        assert_eq!((p.encoding, p.level_encodings, p.len), (0, (3, 3), h.len()));
        assert!(read_header(&h[..10]).is_err(), "cut short");
        // A header claiming a map is refused rather than skipped another way.
        assert!(read_header(&[0x9b, 0x01, 0x00]).is_err());
    }

    #[test]
    fn dictionary_indices_are_summed_as_parquet_reads_them() {
        let lens = [10, 1000];
        // bit width 1; RLE run of 5 x index 1; bit-packed group of 8: 0b0000_0101
        let v = [1, 10, 1, 3, 0b0000_0101];
        assert_eq!(dictionary_bytes(&v, 13, &lens).unwrap(), 5 * 1000 + 2 * 1000 + 6 * 10);
        // Capped at the page's values.
        assert_eq!(dictionary_bytes(&v, 3, &lens).unwrap(), 3000);
        // A run past i32::MAX or a varint past 10 bytes is refused.
        assert!(dictionary_bytes(&[1, 0xfe, 0xff, 0xff, 0xff, 0x1f, 1], 1, &lens).is_err());
        assert!(
            dictionary_bytes(
                &[1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
                1,
                &lens
            )
            .is_err()
        );
        assert_eq!(
            dictionary_lengths(&[2, 0, 0, 0, b'a', b'b', 0, 0, 0, 0], 5).unwrap(),
            [2, 0]
        );
        assert!(dictionary_lengths(&[9, 0, 0, 0, b'a'], 1).is_err());
    }
}
