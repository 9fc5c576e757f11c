//! TIFF predictors, undone in place on one decompressed row at a time.
//!
//! Predictor 2 (horizontal differencing) works on native-endian integers of 1, 2, 4 or 8
//! bytes; callers swap bytes to native order first. Predictor 3 (floating point) works on
//! the byte planes libtiff writes (most significant byte first) and leaves native order.

/// Undoes horizontal differencing in one row of `samples_per_pixel`-interleaved samples of
/// `width` bytes each (1, 2, 4 or 8).
pub fn undo_horizontal(row: &mut [u8], samples_per_pixel: usize, width: usize) {
    match width {
        1 => acc_u8(row, samples_per_pixel),
        2 => acc_typed::<2>(row, samples_per_pixel),
        4 => acc_typed::<4>(row, samples_per_pixel),
        8 => acc_typed::<8>(row, samples_per_pixel),
        _ => {}
    }
}

fn acc_u8(row: &mut [u8], spp: usize) {
    for i in spp..row.len() {
        row[i] = row[i].wrapping_add(row[i - spp]);
    }
}

fn acc_typed<const W: usize>(row: &mut [u8], spp: usize) {
    let n = row.len() / W;
    match W {
        2 => {
            if let Ok(v) = bytemuck::try_cast_slice_mut::<u8, u16>(&mut row[..n * W]) {
                for i in spp..v.len() {
                    v[i] = v[i].wrapping_add(v[i - spp]);
                }
                return;
            }
        }
        4 => {
            if let Ok(v) = bytemuck::try_cast_slice_mut::<u8, u32>(&mut row[..n * W]) {
                for i in spp..v.len() {
                    v[i] = v[i].wrapping_add(v[i - spp]);
                }
                return;
            }
        }
        _ => {
            if let Ok(v) = bytemuck::try_cast_slice_mut::<u8, u64>(&mut row[..n * W]) {
                for i in spp..v.len() {
                    v[i] = v[i].wrapping_add(v[i - spp]);
                }
                return;
            }
        }
    }
    // Unaligned row: the same arithmetic on byte arrays.
    for i in spp..n {
        let mut prev = [0u8; 8];
        prev[..W].copy_from_slice(&row[(i - spp) * W..(i - spp + 1) * W]);
        let mut cur = [0u8; 8];
        cur[..W].copy_from_slice(&row[i * W..(i + 1) * W]);
        let sum = u64::from_ne_bytes(cur).wrapping_add(u64::from_ne_bytes(prev));
        row[i * W..(i + 1) * W].copy_from_slice(&sum.to_ne_bytes()[..W]);
    }
}

/// Undoes the floating-point predictor on one row of `count` samples of `width` bytes,
/// `samples_per_pixel` interleaved. `scratch` must hold the row's length.
pub fn undo_float(row: &mut [u8], samples_per_pixel: usize, width: usize, scratch: &mut [u8]) {
    let count = row.len() / width;
    let len = count * width;
    acc_u8(&mut row[..len], samples_per_pixel);
    scratch[..len].copy_from_slice(&row[..len]);
    for i in 0..count {
        for b in 0..width {
            // Plane 0 holds the most significant bytes.
            let plane = if cfg!(target_endian = "little") {
                width - b - 1
            } else {
                b
            };
            row[i * width + b] = scratch[plane * count + i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn diff_u16(values: &[u16], spp: usize) -> Vec<u8> {
        let mut d = values.to_vec();
        for i in (spp..d.len()).rev() {
            d[i] = d[i].wrapping_sub(d[i - spp]);
        }
        d.iter().flat_map(|v| v.to_ne_bytes()).collect()
    }

    #[test]
    fn horizontal_u8_two_samples() {
        let mut row = vec![10, 20, 1, 2, 1, 2];
        undo_horizontal(&mut row, 2, 1);
        assert_eq!(row, vec![10, 20, 11, 22, 12, 24]);
    }

    proptest! {
        #[test]
        fn horizontal_u16_inverts_differencing(values in prop::collection::vec(any::<u16>(), 1..200), spp in 1usize..5) {
            let mut row = diff_u16(&values, spp);
            undo_horizontal(&mut row, spp, 2);
            let back: Vec<u16> = row.chunks_exact(2).map(|c| u16::from_ne_bytes([c[0], c[1]])).collect();
            prop_assert_eq!(back, values);
        }

        #[test]
        fn float_predictor_inverts_encoding(values in prop::collection::vec(any::<f32>(), 1..100)) {
            // Encode as libtiff does: byte planes, most significant first, then differencing.
            let n = values.len();
            let mut planes = vec![0u8; n * 4];
            for (i, v) in values.iter().enumerate() {
                let be = v.to_bits().to_be_bytes();
                for b in 0..4 { planes[b * n + i] = be[b]; }
            }
            for i in (1..planes.len()).rev() { planes[i] = planes[i].wrapping_sub(planes[i - 1]); }
            let mut scratch = vec![0u8; planes.len()];
            undo_float(&mut planes, 1, 4, &mut scratch);
            let back: Vec<u32> = planes.chunks_exact(4).map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect();
            let want: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
            prop_assert_eq!(back, want);
        }
    }
}
