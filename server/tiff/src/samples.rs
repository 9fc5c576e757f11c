//! Stored samples to output samples: byte order, n-bit unpacking, Float16/Float24 promotion.
//!
//! Works on one decompressed (and un-predicted) block at a time; rows of n-bit data start on
//! byte boundaries, as TIFF requires.

/// Reverses the bytes of every `width`-byte component (big-endian file to native).
pub fn swap_components(buf: &mut [u8], width: usize) {
    if width > 1 {
        for c in buf.chunks_exact_mut(width) {
            c.reverse();
        }
    }
}

/// Reverses the bit order of every byte (FillOrder 2).
pub fn reverse_bits(buf: &mut [u8]) {
    for b in buf {
        *b = b.reverse_bits();
    }
}

/// Unpacks `rows` rows of `per_row` samples of `bits` bits (MSB first, rows byte-aligned)
/// into native integers of `out_width` bytes.
pub fn unpack_bits(stored: &[u8], rows: usize, per_row: usize, bits: usize, out_width: usize) -> Vec<u8> {
    let row_bytes = (per_row * bits).div_ceil(8);
    let mut out = vec![0u8; rows * per_row * out_width];
    for r in 0..rows {
        let src = &stored[r * row_bytes..(r + 1) * row_bytes];
        let dst = &mut out[r * per_row * out_width..(r + 1) * per_row * out_width];
        let mut bitpos = 0usize;
        for i in 0..per_row {
            let mut v: u64 = 0;
            let mut need = bits;
            while need > 0 {
                let byte = src[bitpos / 8];
                let avail = 8 - bitpos % 8;
                let take = avail.min(need);
                let shift = avail - take;
                let chunk = (byte >> shift) as u64 & ((1u64 << take) - 1);
                v = (v << take) | chunk;
                need -= take;
                bitpos += take;
            }
            dst[i * out_width..(i + 1) * out_width].copy_from_slice(&v.to_ne_bytes()[..out_width]);
        }
    }
    out
}

/// One 24-bit value from three bytes, most significant first when `big_endian`.
fn triple(c: &[u8], big_endian: bool) -> u32 {
    if big_endian {
        (c[0] as u32) << 16 | (c[1] as u32) << 8 | c[2] as u32
    } else {
        (c[2] as u32) << 16 | (c[1] as u32) << 8 | c[0] as u32
    }
}

/// 24-bit unsigned integers in file order (`big_endian` or not) to native u32.
pub fn widen_u24(stored: &[u8], big_endian: bool) -> Vec<u8> {
    stored
        .chunks_exact(3)
        .flat_map(|c| triple(c, big_endian).to_ne_bytes())
        .collect()
}

/// Native-order IEEE half floats to native f32, bit for bit as GDAL widens them (NaN
/// payloads kept as they are, not quieted).
pub fn widen_f16(native: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(native.len() * 2);
    for c in native.chunks_exact(2) {
        let v = f16_to_f32(u16::from_ne_bytes([c[0], c[1]]));
        out.extend_from_slice(&v.to_ne_bytes());
    }
    out
}

fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    let bits = match (exp, mant) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: shift the mantissa up until its leading one is implicit.
            let mut m = mant;
            let mut e: u32 = 127 - 15 + 1;
            while m & 0x400 == 0 {
                m <<= 1;
                e -= 1;
            }
            sign | (e << 23) | ((m & 0x3ff) << 13)
        }
        (31, _) => sign | 0x7f80_0000 | (mant << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (mant << 13),
    };
    f32::from_bits(bits)
}

/// 24-bit floats (1 sign, 7 exponent bits biased by 63, 16 mantissa bits) to native f32;
/// `big_endian` says the order of each triple.
pub fn widen_f24(stored: &[u8], big_endian: bool) -> Vec<u8> {
    stored
        .chunks_exact(3)
        .flat_map(|c| f24_to_f32(triple(c, big_endian)).to_ne_bytes())
        .collect()
}

fn f24_to_f32(v: u32) -> f32 {
    let sign = (v >> 23) & 1;
    let exp = (v >> 16) & 0x7f;
    let mant = v & 0xffff;
    let bits = if exp == 0 {
        if mant == 0 {
            sign << 31
        } else {
            // Subnormal: normalise into an f32 exponent.
            let mut e: i32 = 1 - 63 + 127;
            let mut m = mant;
            while m & 0x10000 == 0 {
                m <<= 1;
                e -= 1;
            }
            (sign << 31) | ((e as u32) << 23) | ((m & 0xffff) << 7)
        }
    } else if exp == 0x7f {
        (sign << 31) | (0xff << 23) | (mant << 7)
    } else {
        (sign << 31) | ((exp + 127 - 63) << 23) | (mant << 7)
    };
    f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpacks_one_bit_rows() {
        // Two rows of 10 one-bit samples; each row padded to 2 bytes.
        let stored = [0b1010_0000, 0b1100_0000, 0b0000_0001, 0b0100_0000];
        let out = unpack_bits(&stored, 2, 10, 1, 1);
        assert_eq!(out, vec![1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1]);
    }

    #[test]
    fn unpacks_twelve_bits() {
        // 0xABC, 0x123 packed MSB first.
        let out = unpack_bits(&[0xAB, 0xC1, 0x23], 1, 2, 12, 2);
        let vals: Vec<u16> = out.chunks(2).map(|c| u16::from_ne_bytes([c[0], c[1]])).collect();
        assert_eq!(vals, vec![0xABC, 0x123]);
    }

    #[test]
    fn widens_24_bit_values() {
        let le = widen_u24(&[0x01, 0x02, 0x03], false);
        assert_eq!(u32::from_ne_bytes([le[0], le[1], le[2], le[3]]), 0x030201);
        let be = widen_u24(&[0x01, 0x02, 0x03], true);
        assert_eq!(u32::from_ne_bytes([be[0], be[1], be[2], be[3]]), 0x010203);
    }

    #[test]
    fn float24_values() {
        // 1.0: exponent 63, mantissa 0.
        assert_eq!(f24_to_f32(63 << 16), 1.0);
        assert_eq!(f24_to_f32((1 << 23) | (64 << 16) | 0x8000), -3.0);
        assert_eq!(f24_to_f32(0), 0.0);
    }

    #[test]
    fn half_floats() {
        assert_eq!(f16_to_f32(0x3e00), 1.5);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert_eq!(f16_to_f32(0x8000).to_bits(), 0x8000_0000);
        // A signalling NaN keeps its payload (GDAL does not quiet it).
        assert_eq!(f16_to_f32(0x7d00).to_bits(), 0x7fa0_0000);
    }
}
