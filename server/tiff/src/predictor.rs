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
    accumulate(row, spp);
}

/// An unsigned sample that adds with wraparound (the predictor's arithmetic).
trait Lane: Copy + Default {
    fn wrapping(self, other: Self) -> Self;
}

macro_rules! lane {
    ($($t:ty),*) => {$(
        impl Lane for $t {
            #[inline(always)]
            fn wrapping(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
        }
    )*};
}
lane!(u8, u16, u32, u64);

/// Running sums per interleaved sample: `v[i] += v[i - spp]`. The common sample counts get
/// a fixed-size accumulator, so each pixel is one vector add instead of `spp` dependent
/// scalar adds with bounds checks (perf: the predictor fell from 8 % of a cold epoch's
/// CPU).
fn accumulate<T: Lane>(v: &mut [T], spp: usize) {
    match spp {
        1 => accumulate_fixed::<T, 1>(v),
        2 => accumulate_fixed::<T, 2>(v),
        3 => accumulate_fixed::<T, 3>(v),
        4 => accumulate_fixed::<T, 4>(v),
        5 => accumulate_fixed::<T, 5>(v),
        6 => accumulate_fixed::<T, 6>(v),
        7 => accumulate_fixed::<T, 7>(v),
        8 => accumulate_fixed::<T, 8>(v),
        _ => {
            for i in spp..v.len() {
                v[i] = v[i].wrapping(v[i - spp]);
            }
        }
    }
}

fn accumulate_fixed<T: Lane, const S: usize>(v: &mut [T]) {
    let mut acc = [T::default(); S];
    let mut pixels = v.chunks_exact_mut(S);
    for px in &mut pixels {
        for j in 0..S {
            acc[j] = acc[j].wrapping(px[j]);
            px[j] = acc[j];
        }
    }
    for (j, x) in pixels.into_remainder().iter_mut().enumerate() {
        acc[j] = acc[j].wrapping(*x);
        *x = acc[j];
    }
}

fn acc_typed<const W: usize>(row: &mut [u8], spp: usize) {
    let n = row.len() / W;
    let done = match W {
        2 => bytemuck::try_cast_slice_mut::<u8, u16>(&mut row[..n * W]).map(|v| accumulate(v, spp)),
        4 => bytemuck::try_cast_slice_mut::<u8, u32>(&mut row[..n * W]).map(|v| accumulate(v, spp)),
        _ => bytemuck::try_cast_slice_mut::<u8, u64>(&mut row[..n * W]).map(|v| accumulate(v, spp)),
    };
    if done.is_ok() {
        return;
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
        fn horizontal_any_width_and_sample_count_matches_the_scalar_rule(
            bytes in prop::collection::vec(any::<u8>(), 0..400), spp in 1usize..11, width in prop::sample::select(vec![1usize, 2, 4, 8]),
        ) {
            // The rule, one sample at a time on byte arrays (what the fast paths must equal).
            let n = bytes.len() / width;
            let mut want = bytes.clone();
            for i in spp..n {
                let mut a = [0u8; 8];
                let mut b = [0u8; 8];
                a[..width].copy_from_slice(&want[i * width..(i + 1) * width]);
                b[..width].copy_from_slice(&want[(i - spp) * width..(i - spp + 1) * width]);
                let sum = u64::from_ne_bytes(a).wrapping_add(u64::from_ne_bytes(b)).to_ne_bytes();
                want[i * width..(i + 1) * width].copy_from_slice(&sum[..width]);
            }
            // Aligned and unaligned starts.
            for offset in [0usize, 1] {
                let mut buf = vec![0u8; offset];
                buf.extend_from_slice(&bytes);
                undo_horizontal(&mut buf[offset..], spp, width);
                prop_assert_eq!(&buf[offset..], &want[..]);
            }
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
