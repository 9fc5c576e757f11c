//! Compression schemes: which TIFF codes we know, and the byte-stream decompressors.
//!
//! Byte codecs (Deflate, ZSTD, LZW, PackBits, LZMA) write straight into the caller's block
//! buffer. Image codecs (JPEG, WebP, LERC) live in `image_codecs`; CCITT in `ccitt`.
//! Decompressors are reused per thread (libdeflate and zstd contexts are not free to build).

use std::cell::RefCell;

use serde::Serialize;

/// A TIFF Compression tag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// No compression (1).
    None,
    /// CCITT modified Huffman RLE (2).
    CcittRle,
    /// CCITT Group 3 fax (3).
    CcittFax3,
    /// CCITT Group 4 fax (4).
    CcittFax4,
    /// LZW (5).
    Lzw,
    /// Old-style JPEG (6).
    OldJpeg,
    /// JPEG (7).
    Jpeg,
    /// Deflate (8, or Adobe's 32946).
    Deflate,
    /// PackBits (32773).
    PackBits,
    /// LERC (34887).
    Lerc,
    /// LZMA (34925).
    Lzma,
    /// Zstandard (50000, or 34926).
    Zstd,
    /// WebP (50001, or 34927).
    Webp,
    /// Any other code.
    Other(u16),
}

impl Compression {
    /// From the tag value.
    pub fn from_code(code: u16) -> Self {
        match code {
            1 => Compression::None,
            2 => Compression::CcittRle,
            3 => Compression::CcittFax3,
            4 => Compression::CcittFax4,
            5 => Compression::Lzw,
            6 => Compression::OldJpeg,
            7 => Compression::Jpeg,
            8 | 32946 => Compression::Deflate,
            32773 => Compression::PackBits,
            34887 => Compression::Lerc,
            34925 => Compression::Lzma,
            50000 | 34926 => Compression::Zstd,
            50001 | 34927 => Compression::Webp,
            other => Compression::Other(other),
        }
    }

    /// GDAL's name for the scheme (`COMPRESS=` value), or the number for unknown codes.
    pub fn name(self) -> String {
        match self {
            Compression::None => "NONE",
            Compression::CcittRle => "CCITTRLE",
            Compression::CcittFax3 => "CCITTFAX3",
            Compression::CcittFax4 => "CCITTFAX4",
            Compression::Lzw => "LZW",
            Compression::OldJpeg => "OJPEG",
            Compression::Jpeg => "JPEG",
            Compression::Deflate => "DEFLATE",
            Compression::PackBits => "PACKBITS",
            Compression::Lerc => "LERC",
            Compression::Lzma => "LZMA",
            Compression::Zstd => "ZSTD",
            Compression::Webp => "WEBP",
            Compression::Other(code) => return other_name(code),
        }
        .to_string()
    }
}

impl Serialize for Compression {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

/// "compression 34712 (JPEG2000)" style name for codes we do not decode.
fn other_name(code: u16) -> String {
    let known = match code {
        34712 | 33003 | 33004 | 33005 => Some("JPEG2000"),
        50002 | 52546 => Some("JPEGXL"),
        34892 => Some("lossy JPEG (DNG)"),
        32809 => Some("ThunderScan"),
        32908 | 32909 => Some("PixarLog"),
        34676 | 34677 => Some("SGILog"),
        34661 => Some("JBIG"),
        32947 => Some("Kodak DCS"),
        34713 => Some("Nikon NEF"),
        9 | 10 => Some("JBIG"),
        _ => None,
    };
    match known {
        Some(name) => format!("{code} ({name})"),
        None => format!("{code}"),
    }
}

thread_local! {
    static INFLATER: RefCell<libdeflater::Decompressor> = RefCell::new(libdeflater::Decompressor::new());
}

/// Outcome of a byte codec: how many bytes it produced.
pub type Produced = Result<usize, String>;

/// zlib (Deflate) into `out`. Streams that hold more than `out` (a last strip written at full
/// height) are decoded into scratch space and cut to fit.
pub fn inflate(input: &[u8], out: &mut [u8]) -> Produced {
    INFLATER.with(|d| {
        let mut d = d.borrow_mut();
        match d.zlib_decompress(input, out) {
            Ok(n) => Ok(n),
            Err(libdeflater::DecompressionError::InsufficientSpace) => {
                let mut cap = out.len().max(1024) * 2;
                loop {
                    let mut scratch = vec![0u8; cap];
                    match d.zlib_decompress(input, &mut scratch) {
                        Ok(_) => {
                            out.copy_from_slice(&scratch[..out.len()]);
                            return Ok(out.len());
                        }
                        Err(libdeflater::DecompressionError::InsufficientSpace) if cap < out.len() * 64 => cap *= 4,
                        Err(e) => return Err(format!("deflate: {e:?}")),
                    }
                }
            }
            Err(e) => Err(format!("deflate: {e:?}")),
        }
    })
}

/// The first `out.len()` bytes of a zlib stream, inflating no further: a row-limited decode
/// of a block's top rows. The rest of the stream (and its checksum) is not read, so damage
/// past the prefix goes unnoticed here; a whole decode of the block still reports it.
pub fn inflate_prefix(input: &[u8], out: &mut [u8]) -> Produced {
    let mut z = flate2::Decompress::new(true);
    loop {
        let (read, written) = (z.total_in() as usize, z.total_out() as usize);
        if written == out.len() {
            return Ok(written);
        }
        let status = z
            .decompress(&input[read..], &mut out[written..], flate2::FlushDecompress::None)
            .map_err(|e| format!("deflate: {e}"))?;
        let progressed = z.total_in() as usize != read || z.total_out() as usize != written;
        if status == flate2::Status::StreamEnd || !progressed {
            return Ok(z.total_out() as usize);
        }
    }
}

/// zlib stream of unknown decompressed size (at most `limit` bytes).
pub fn inflate_unknown(input: &[u8], hint: usize, limit: usize) -> Result<Vec<u8>, String> {
    INFLATER.with(|d| {
        let mut d = d.borrow_mut();
        let mut cap = hint.max(4096);
        loop {
            let mut buf = vec![0u8; cap];
            match d.zlib_decompress(input, &mut buf) {
                Ok(n) => {
                    buf.truncate(n);
                    return Ok(buf);
                }
                Err(libdeflater::DecompressionError::InsufficientSpace) if cap < limit => cap = (cap * 2).min(limit),
                Err(e) => return Err(format!("deflate: {e:?}")),
            }
        }
    })
}

thread_local! {
    static ZSTD: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Zstandard frame(s) into `out`.
pub fn unzstd(input: &[u8], out: &mut [u8]) -> Produced {
    ZSTD.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = Some(zstd::bulk::Decompressor::new().map_err(|e| format!("zstd: {e}"))?);
        }
        let Some(d) = cell.as_mut() else {
            return Err("zstd: no context".to_string());
        };
        match d.decompress_to_buffer(input, out) {
            Ok(n) => Ok(n),
            Err(_) => {
                // Either corrupt, or more data than the block holds: stream it to tell.
                let full = unzstd_bounded(input, out.len())?;
                let n = full.len().min(out.len());
                out[..n].copy_from_slice(&full[..n]);
                Ok(n)
            }
        }
    })
}

/// Zstandard of unknown decompressed size (at most `limit` bytes). Single-frame streams that
/// declare their size (libtiff writes them so) decode in one call into an exact buffer.
pub fn unzstd_unknown(input: &[u8], limit: usize) -> Result<Vec<u8>, String> {
    if let Ok(Some(size)) = zstd::zstd_safe::get_frame_content_size(input)
        && size as usize <= limit
    {
        let mut out = Vec::with_capacity(size as usize);
        let done = ZSTD.with(|cell| {
            let mut cell = cell.borrow_mut();
            if cell.is_none() {
                *cell = zstd::bulk::Decompressor::new().ok();
            }
            cell.as_mut().map(|d| d.decompress_to_buffer(input, &mut out))
        });
        if let Some(Ok(n)) = done
            && n == size as usize
        {
            return Ok(out);
        }
    }
    let out = unzstd_bounded(input, limit)?;
    if out.len() > limit {
        return Err(format!("zstd: more than {limit} bytes"));
    }
    Ok(out)
}

/// Streams a Zstandard input, keeping at most `limit + 1` bytes (a bomb cannot grow memory).
fn unzstd_bounded(input: &[u8], limit: usize) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let decoder = zstd::stream::read::Decoder::new(input).map_err(|e| format!("zstd: {e}"))?;
    let mut out = Vec::new();
    decoder
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("zstd: {e}"))?;
    Ok(out)
}

/// TIFF LZW into `out`: the modern MSB-first variant with early change is decoded here, the
/// old LSB-first variant (pre-TIFF 6.0 files) by `weezl`.
pub fn unlzw(input: &[u8], out: &mut [u8]) -> Produced {
    // libtiff's test for old-style LZW streams.
    if input.len() >= 2 && input[0] == 0 && input[1] & 1 != 0 {
        return unlzw_old(input, out);
    }
    unlzw_msb(input, out)
}

/// LZW decoding as LZ77-style copies: every table entry is a (position, length) pair in the
/// output already written, because the string of a new entry is always the previous code's
/// string followed by one more byte, and those sit next to each other in the output. Each
/// code then costs one `copy_within` instead of a walk down a prefix chain. A corrupt code
/// ends decoding with what was produced, as libtiff does.
fn unlzw_msb(input: &[u8], out: &mut [u8]) -> Produced {
    const CLEAR: usize = 256;
    const EOI: usize = 257;
    let mut pos = [0u32; 4096];
    let mut len = [0u32; 4096];
    let mut next = 258usize;
    let mut width = 9u32;
    // Where and how long the previous code's string was written.
    let mut prev: Option<(usize, usize)> = None;
    let (mut acc, mut nbits, mut i) = (0u64, 0u32, 0usize);
    let mut o = 0usize;
    loop {
        if nbits < width {
            if let Some(four) = input.get(i..i + 4) {
                acc = (acc << 32) | u32::from_be_bytes([four[0], four[1], four[2], four[3]]) as u64;
                nbits += 32;
                i += 4;
            } else {
                while nbits < width {
                    let Some(&b) = input.get(i) else {
                        return Ok(o);
                    };
                    acc = (acc << 8) | b as u64;
                    nbits += 8;
                    i += 1;
                }
            }
        }
        // Codes are at most 12 bits wide; the mask keeps table indexing check-free.
        let code = ((acc >> (nbits - width)) & ((1 << width) - 1)) as usize & 4095;
        nbits -= width;
        if code == CLEAR {
            next = 258;
            width = 9;
            prev = None;
            continue;
        }
        if code == EOI || o >= out.len() {
            return Ok(o);
        }
        let start = o;
        if code < 256 {
            out[o] = code as u8;
            o += 1;
        } else if code < next && prev.is_some() {
            let (src, n) = (pos[code] as usize, len[code] as usize);
            if n <= 16 && o + 16 <= out.len() {
                // Short strings dominate: copy a fixed 16 bytes (the tail is rewritten later).
                let mut chunk = [0u8; 16];
                chunk.copy_from_slice(&out[src..src + 16]);
                out[o..o + 16].copy_from_slice(&chunk);
                o += n;
            } else {
                let n_fit = n.min(out.len() - o);
                out.copy_within(src..src + n_fit, o);
                o += n_fit;
            }
        } else if let (true, Some((p_start, p_len))) = (code == next, prev) {
            // The string of the code being defined: previous string plus its first byte.
            let n_fit = p_len.min(out.len() - o);
            out.copy_within(p_start..p_start + n_fit, o);
            o += n_fit;
            if o < out.len() {
                out[o] = out[p_start];
                o += 1;
            }
        } else {
            return if o > 0 {
                Ok(o)
            } else {
                Err(format!("lzw: code {code} before it was defined"))
            };
        }
        if let Some((p_start, p_len)) = prev
            && next < 4096
        {
            // The new entry: previous string followed by this string's first byte, which
            // is exactly what the output holds from the previous string's start.
            pos[next] = p_start as u32;
            len[next] = p_len as u32 + 1;
            next += 1;
            // TIFF's "early change": the width grows one code before the table needs it.
            if next + 1 >= (1 << width) && width < 12 {
                width += 1;
            }
        }
        prev = Some((start, o - start));
    }
}

fn unlzw_old(input: &[u8], out: &mut [u8]) -> Produced {
    use weezl::{BitOrder, LzwStatus, decode::Decoder};
    let mut decoder = Decoder::new(BitOrder::Lsb, 8);
    let (mut consumed_in, mut produced) = (0, 0);
    while produced < out.len() {
        let r = decoder.decode_bytes(&input[consumed_in..], &mut out[produced..]);
        consumed_in += r.consumed_in;
        produced += r.consumed_out;
        match r.status {
            Ok(LzwStatus::Done) | Ok(LzwStatus::NoProgress) => break,
            Ok(LzwStatus::Ok) => {}
            Err(e) if produced == 0 => return Err(format!("lzw: {e}")),
            Err(_) => break,
        }
    }
    Ok(produced)
}

/// PackBits (Macintosh RLE) into `out`.
pub fn unpackbits(input: &[u8], out: &mut [u8]) -> Produced {
    let (mut i, mut o) = (0usize, 0usize);
    while i < input.len() && o < out.len() {
        let n = input[i] as i8;
        i += 1;
        if n >= 0 {
            let len = n as usize + 1;
            let len = len.min(input.len() - i).min(out.len() - o);
            out[o..o + len].copy_from_slice(&input[i..i + len]);
            i += len;
            o += len;
        } else if n != -128 {
            let len = (1 - n as isize) as usize;
            let Some(&b) = input.get(i) else { break };
            i += 1;
            let len = len.min(out.len() - o);
            out[o..o + len].fill(b);
            o += len;
        }
    }
    Ok(o)
}

/// LZMA (xz stream, as libtiff writes it) into `out`.
pub fn unlzma(input: &[u8], out: &mut [u8]) -> Produced {
    let mut stream = xz2::stream::Stream::new_stream_decoder(1 << 30, 0).map_err(|e| format!("lzma: {e}"))?;
    match stream.process(input, out, xz2::stream::Action::Finish) {
        Ok(_) => Ok(stream.total_out() as usize),
        Err(e) => Err(format!("lzma: {e}")),
    }
}

/// Uncompressed data: copied as it is.
pub fn copy(input: &[u8], out: &mut [u8]) -> Produced {
    let n = input.len().min(out.len());
    out[..n].copy_from_slice(&input[..n]);
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packbits_round_trip_example() {
        // The example from Apple's TN1023.
        let input = [
            0xFE, 0xAA, 0x02, 0x80, 0x00, 0x2A, 0xFD, 0xAA, 0x03, 0x80, 0x00, 0x2A, 0x22, 0xF7, 0xAA,
        ];
        let expected = [
            0xAA, 0xAA, 0xAA, 0x80, 0x00, 0x2A, 0xAA, 0xAA, 0xAA, 0xAA, 0x80, 0x00, 0x2A, 0x22, 0xAA, 0xAA, 0xAA, 0xAA,
            0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA,
        ];
        let mut out = [0u8; 24];
        assert_eq!(unpackbits(&input, &mut out), Ok(24));
        assert_eq!(out, expected);
    }

    #[test]
    fn packbits_truncated_input_is_short_not_a_panic() {
        let mut out = [0u8; 10];
        assert_eq!(unpackbits(&[0x05, 1, 2], &mut out), Ok(2));
        assert_eq!(unpackbits(&[0xFE], &mut out), Ok(0));
    }

    #[test]
    fn lzw_matches_weezl_on_tiff_streams() {
        use weezl::{BitOrder, encode::Encoder};
        let mut data: Vec<u8> = Vec::new();
        for i in 0..20_000u32 {
            data.push(((i / 7) % 13) as u8 ^ ((i % 251) as u8 & 0x3));
        }
        data.extend(std::iter::repeat_n(9u8, 5000)); // long runs exercise the KwKwK case
        let encoded = Encoder::with_tiff_size_switch(BitOrder::Msb, 8).encode(&data).unwrap();
        let mut out = vec![0u8; data.len()];
        assert_eq!(unlzw(&encoded, &mut out), Ok(data.len()));
        assert_eq!(out, data);
        // A short output buffer is filled, not overrun.
        let mut short = vec![0u8; 1000];
        assert_eq!(unlzw(&encoded, &mut short), Ok(1000));
        assert_eq!(&short[..], &data[..1000]);
        // Garbage ends cleanly.
        let mut junk = vec![0u8; 100];
        let _ = unlzw(&[0xFF; 64], &mut junk);
    }

    #[test]
    fn codec_names() {
        assert_eq!(Compression::from_code(34712).name(), "34712 (JPEG2000)");
        assert_eq!(Compression::from_code(32946), Compression::Deflate);
        assert_eq!(Compression::from_code(50000).name(), "ZSTD");
    }

    #[test]
    fn inflate_handles_overlong_streams() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i % 7) as u8).collect();
        let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
        let mut z = vec![0u8; c.zlib_compress_bound(data.len())];
        let n = c.zlib_compress(&data, &mut z).unwrap();
        let mut out = vec![0u8; 600];
        assert_eq!(inflate(&z[..n], &mut out), Ok(600));
        assert_eq!(&out[..], &data[..600]);
        assert!(inflate(&z[..n / 2], &mut out).is_err());
    }
}
