//! CCITT bilevel codecs: Modified Huffman RLE (compression 2), Group 3 one-dimensional
//! (compression 3) and Group 4 (compression 4), decoded into packed 1-bit rows the way
//! libtiff delivers them: black runs are 1 bits, white runs 0 bits.
//!
//! The run-length code tables and the Group 4 decoder come from the `fax` crate; the
//! byte-aligned row framing of RLE and the EOL framing of Group 3 are handled here.

use fax::BitReader;

use super::codec::{Compression, Produced};

/// Whether CCITT decoding is built in.
pub const AVAILABLE: bool = true;

/// Decodes a CCITT block of `cols` x `rows` into `out` (rows of `ceil(cols/8)` bytes).
pub fn decode(kind: Compression, input: &[u8], cols: usize, rows: usize, out: &mut [u8]) -> Produced {
    let row_bytes = cols.div_ceil(8);
    if out.len() < rows * row_bytes {
        return Err("ccitt: output too small".into());
    }
    match kind {
        Compression::CcittFax4 => {
            let mut y = 0usize;
            let ok = fax::decoder::decode_g4(input.iter().copied(), cols as u32, Some(rows as u32), |transitions| {
                if y < rows {
                    fill_row(&mut out[y * row_bytes..(y + 1) * row_bytes], transitions, cols);
                }
                y += 1;
            });
            if ok.is_none() {
                return Err("ccitt g4: invalid code".into());
            }
            Ok(rows * row_bytes)
        }
        Compression::CcittRle => runs_1d(input, cols, rows, row_bytes, out, false),
        Compression::CcittFax3 => runs_1d(input, cols, rows, row_bytes, out, true),
        other => Err(format!("ccitt: not a ccitt scheme {other:?}")),
    }
}

/// Sets the black runs of one row given the transition positions (starting with white).
fn fill_row(row: &mut [u8], transitions: &[u32], cols: usize) {
    row.fill(0);
    let mut start = 0usize;
    let mut black = false;
    for &t in transitions.iter().chain(std::iter::once(&(cols as u32))) {
        let end = (t as usize).min(cols);
        if black {
            for x in start..end {
                row[x / 8] |= 0x80 >> (x % 8);
            }
        }
        start = end.max(start);
        black = !black;
    }
}

/// Bits of a byte slice, most significant first, with a position that can be aligned.
struct SliceBits<'a> {
    data: &'a [u8],
    pos: usize,
}

impl BitReader for SliceBits<'_> {
    type Error = ();

    fn peek(&self, bits: u8) -> Option<u16> {
        // Code tables look ahead further than the shortest codes: read zeros past the end,
        // and let `run` reject a code that really runs past it.
        if bits > 16 || self.pos >= self.data.len() * 8 {
            return None;
        }
        let mut v: u32 = 0;
        for i in 0..bits as usize {
            let p = self.pos + i;
            let bit = self.data.get(p / 8).map_or(0, |b| (b >> (7 - p % 8)) & 1);
            v = (v << 1) | bit as u32;
        }
        Some(v as u16)
    }

    fn consume(&mut self, bits: u8) -> Result<(), ()> {
        self.pos += bits as usize;
        Ok(())
    }

    fn bits_to_byte_boundary(&self) -> u8 {
        ((8 - self.pos % 8) % 8) as u8
    }
}

/// One run: terminating code after any make-up codes.
fn run(reader: &mut SliceBits<'_>, black: bool) -> Option<u32> {
    let mut total = 0u32;
    loop {
        let n = if black {
            fax::maps::black::decode(reader)?
        } else {
            fax::maps::white::decode(reader)?
        };
        total = total.checked_add(n as u32)?;
        if reader.pos > reader.data.len() * 8 {
            return None;
        }
        if n < 64 {
            return Some(total);
        }
    }
}

/// Skips fill bits and one EOL (eleven or more zeros then a one); false if none is there.
fn skip_eol(reader: &mut SliceBits<'_>) -> bool {
    let start = reader.pos;
    let mut zeros = 0;
    while reader.peek(1) == Some(0) {
        reader.pos += 1;
        zeros += 1;
    }
    if zeros >= 11 && reader.peek(1) == Some(1) {
        reader.pos += 1;
        true
    } else {
        reader.pos = start;
        false
    }
}

/// Modified Huffman rows: byte-aligned without EOLs (RLE), or EOL-framed (Group 3 1-D).
fn runs_1d(input: &[u8], cols: usize, rows: usize, row_bytes: usize, out: &mut [u8], eols: bool) -> Produced {
    let mut reader = SliceBits { data: input, pos: 0 };
    let mut transitions = Vec::new();
    for y in 0..rows {
        if eols {
            skip_eol(&mut reader);
        }
        transitions.clear();
        let mut x = 0u32;
        let mut black = false;
        while (x as usize) < cols {
            let Some(n) = run(&mut reader, black) else {
                return Err(format!("ccitt: invalid code in row {y}"));
            };
            x = x.saturating_add(n);
            transitions.push(x);
            black = !black;
        }
        fill_row(&mut out[y * row_bytes..(y + 1) * row_bytes], &transitions, cols);
        if !eols {
            reader.pos = reader.pos.div_ceil(8) * 8;
        }
    }
    Ok(rows * row_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_black_runs() {
        let mut row = [0u8; 2];
        // white 0..3, black 3..10, white 10..12
        fill_row(&mut row, &[3, 10], 12);
        assert_eq!(row, [0b0001_1111, 0b1100_0000]);
    }

    #[test]
    fn rle_rows_are_byte_aligned() {
        // Row of 8 pixels: white run 8 = 10011 ends the row; padded to a byte.
        // Two identical rows.
        let row_bits = "10011".to_string();
        let mut bits = String::new();
        for _ in 0..2 {
            bits.push_str(&row_bits);
            while !bits.len().is_multiple_of(8) {
                bits.push('0');
            }
        }
        let bytes: Vec<u8> = bits
            .as_bytes()
            .chunks(8)
            .map(|c| u8::from_str_radix(std::str::from_utf8(c).unwrap(), 2).unwrap())
            .collect();
        let mut out = [0xFFu8; 2];
        assert_eq!(decode(Compression::CcittRle, &bytes, 8, 2, &mut out), Ok(2));
        assert_eq!(out, [0, 0]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut out = [0u8; 64];
        let _ = decode(Compression::CcittRle, &[0, 0, 0, 0], 64, 8, &mut out);
        let _ = decode(Compression::CcittFax4, &[0xFF; 16], 64, 8, &mut out);
        let _ = decode(Compression::CcittFax3, &[], 64, 8, &mut out);
    }
}
