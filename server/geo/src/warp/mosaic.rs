//! Mosaics of warped sources: sources stacked in priority order (the first valid pixel
//! wins) and converted to the output type with GDAL's rounding.
//!
//! Owns the stacking and the conversion only; it must never change a value a kernel gave
//! other than by that conversion.

use super::Warped;
use super::kernel;
use cogfeed_tiff::DType;

/// Sources stacked in priority order: the first source with a valid pixel wins it.
#[derive(Debug, Clone)]
pub struct Mosaic {
    /// Number of bands.
    pub bands: usize,
    /// Width of the footprint, in pixels.
    pub width: usize,
    /// Height of the footprint, in pixels.
    pub height: usize,
    values: Vec<f64>,
    filled: Vec<bool>,
    /// Pixels filled so far.
    filled_count: usize,
}

impl Mosaic {
    /// An empty mosaic (nothing filled). Its buffers come with the first source: the first
    /// one usually becomes them ([`Self::add_owned`]), and a mosaic no source fills converts
    /// to nodata without them.
    pub fn new(bands: usize, width: usize, height: usize) -> Self {
        Self {
            bands,
            width,
            height,
            values: Vec::new(),
            filled: Vec::new(),
            filled_count: 0,
        }
    }

    /// Whether every pixel is filled: later sources in priority order cannot change it.
    pub fn is_full(&self) -> bool {
        self.filled_count == self.width * self.height
    }

    /// Adds the next source in priority order: it fills only pixels no earlier one did.
    pub fn add(&mut self, w: &Warped) {
        let n = self.width * self.height;
        debug_assert_eq!(w.valid.len(), n);
        if self.filled.len() != n {
            self.values = vec![0.0; self.bands * n];
            self.filled = vec![false; n];
        }
        for p in 0..n {
            if w.valid[p] && !self.filled[p] {
                self.filled[p] = true;
                self.filled_count += 1;
                for b in 0..self.bands.min(w.bands) {
                    self.values[b * n + p] = w.values[b * n + p];
                }
            }
        }
    }

    /// [`Self::add`] taking the source: the first source of an empty mosaic becomes it
    /// without a copy.
    pub fn add_owned(&mut self, w: Warped) {
        let n = self.width * self.height;
        if self.filled_count == 0 && w.bands == self.bands && w.valid.len() == n && w.values.len() == self.bands * n {
            self.filled_count = w.valid.iter().filter(|&&v| v).count();
            self.values = w.values;
            self.filled = w.valid;
            return;
        }
        self.add(&w);
    }

    /// Little-endian samples of `dtype`, `nodata` where nothing filled. Interpolated values
    /// round half up and saturate; `avoid_nodata` moves a computed value that equals
    /// `nodata` one step away, as GDAL's kernels do for integer outputs.
    pub fn to_bytes(&self, dtype: DType, nodata: f64, avoid_nodata: bool) -> Vec<u8> {
        let mut out = vec![0u8; self.bands * self.width * self.height * dtype.size()];
        self.to_bytes_into(dtype, nodata, avoid_nodata, &mut out);
        out
    }

    /// [`Mosaic::to_bytes`] into `out` (a slice of a larger buffer): false, and `out`
    /// untouched, where it does not hold exactly the mosaic's samples.
    pub fn to_bytes_into(&self, dtype: DType, nodata: f64, avoid_nodata: bool, mut out: &mut [u8]) -> bool {
        let n = self.width * self.height;
        if out.len() != self.bands * n * dtype.size() {
            return false;
        }
        if n == 0 {
            return true;
        }
        // Nothing added: every sample is the nodata one (converted as a filled-less pixel).
        let (none, empty);
        let (values, filled): (&[f64], &[bool]) = if self.filled.len() == n {
            (&self.values, &self.filled)
        } else {
            (none, empty) = (vec![false; n], vec![0.0; self.bands * n]);
            (&empty, &none)
        };
        macro_rules! int {
            ($t:ty) => {{
                let (lo, hi) = (<$t>::MIN as f64, <$t>::MAX as f64);
                let cast = |v: f64| -> $t {
                    if std::mem::size_of::<$t>() <= 4 {
                        // Up to 32 bits the saturating cast of the rounded value is the
                        // same (NaN to 0), without branches.
                        kernel::floor(v + 0.5) as $t
                    } else if v.is_nan() {
                        0
                    } else if v < lo {
                        <$t>::MIN
                    } else if v > hi {
                        <$t>::MAX
                    } else {
                        kernel::floor(v + 0.5) as $t
                    }
                };
                // Unsigned up to 16 bits (most imagery): clamped by two comparisons (NaN
                // and negatives to 0), the rounded value is ≥ 0.5 so truncation floors it.
                let cast_unsigned = |v: f64| -> $t {
                    let c = if v > 0.0 { v } else { 0.0 };
                    let c = if c < hi { c } else { hi };
                    (c + 0.5) as u32 as $t
                };
                let fill = cast(nodata);
                // The nodata value as a sample of the type, where it is one.
                let nd = (nodata >= lo && nodata <= hi && nodata.fract() == 0.0).then(|| nodata as $t);
                let (avoid, nd) = (avoid_nodata && nd.is_some(), nd.unwrap_or(0));
                let step = |x: $t| if x == <$t>::MIN { x + 1 } else { x - 1 };
                macro_rules! convert {
                    ($cast:expr) => {
                        typed::<$t>(&mut out, |samples| {
                            for (b, dst) in samples.chunks_exact_mut(n).enumerate() {
                                let plane = &values[b * n..(b + 1) * n];
                                for ((v, &filled), d) in plane.iter().zip(filled).zip(dst) {
                                    let x = $cast(*v);
                                    let x = if avoid && x == nd { step(x) } else { x };
                                    *d = (if filled { x } else { fill }).to_le();
                                }
                            }
                        })
                    };
                }
                if <$t>::MIN == 0 && std::mem::size_of::<$t>() <= 2 {
                    convert!(cast_unsigned)
                } else {
                    convert!(cast)
                }
            }};
        }
        macro_rules! float {
            ($t:ty, $u:ty, $complex:expr) => {{
                // Complex samples: the real part, then a zero imaginary part (left as is).
                let step = if $complex { 2 } else { 1 };
                typed::<$u>(&mut out, |samples| {
                    for (b, dst) in samples.chunks_exact_mut(n * step).enumerate() {
                        let plane = &values[b * n..(b + 1) * n];
                        for ((v, &filled), d) in plane.iter().zip(filled).zip(dst.chunks_exact_mut(step)) {
                            let x = if filled { *v } else { nodata };
                            d[0] = (x as $t).to_bits().to_le();
                        }
                    }
                });
            }};
        }
        match dtype {
            DType::U8 => int!(u8),
            DType::I8 => int!(i8),
            DType::U16 => int!(u16),
            DType::I16 => int!(i16),
            DType::U32 => int!(u32),
            DType::I32 => int!(i32),
            DType::U64 => int!(u64),
            DType::I64 => int!(i64),
            DType::F32 => float!(f32, u32, false),
            DType::F64 => float!(f64, u64, false),
            DType::C64 => float!(f32, u32, true),
            DType::C128 => float!(f64, u64, true),
        }
        true
    }
}

/// Runs `fill` over `out` seen as samples of `T` (in place where `out` is aligned for
/// `T`, as the allocator gives it; else through a copy).
fn typed<T: bytemuck::Pod>(out: &mut [u8], fill: impl FnOnce(&mut [T])) {
    match bytemuck::try_cast_slice_mut::<u8, T>(out) {
        Ok(samples) => fill(samples),
        Err(_) => {
            let mut samples = vec![T::zeroed(); out.len() / std::mem::size_of::<T>()];
            fill(&mut samples);
            out.copy_from_slice(bytemuck::cast_slice(&samples));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warp::is_nodata;

    #[test]
    fn integer_samples_round_half_up_and_saturate() {
        // The cast as written before its branch-free form.
        fn reference(v: f64, lo: f64, hi: f64) -> f64 {
            if v.is_nan() {
                0.0
            } else if v < lo {
                lo
            } else if v > hi {
                hi
            } else {
                (v + 0.5).floor()
            }
        }
        let probes = [
            f64::NAN,
            f64::NEG_INFINITY,
            f64::INFINITY,
            -1e300,
            1e300,
            -2147483648.7,
            -2147483648.2,
            -129.5,
            -128.6,
            -0.7,
            -0.5,
            -0.3,
            0.0,
            0.49,
            0.5,
            2.5,
            127.5,
            254.5,
            255.4,
            255.6,
            32767.5,
            65535.3,
            65535.6,
            2147483647.4,
            2147483647.6,
            4294967295.7,
            9e18,
        ];
        let mut m = Mosaic::new(1, probes.len(), 1);
        m.add(&Warped {
            bands: 1,
            values: probes.to_vec(),
            valid: vec![true; probes.len()],
        });
        macro_rules! check {
            ($t:ty, $dtype:expr) => {{
                let b = m.to_bytes($dtype, f64::NAN, false);
                let size = std::mem::size_of::<$t>();
                for (c, &v) in b.chunks_exact(size).zip(&probes) {
                    let got = <$t>::from_le_bytes(c.try_into().unwrap());
                    let want = reference(v, <$t>::MIN as f64, <$t>::MAX as f64);
                    assert_eq!(got as f64, want, "{} {v}", stringify!($t));
                }
            }};
        }
        check!(u8, DType::U8);
        check!(i8, DType::I8);
        check!(u16, DType::U16);
        check!(i16, DType::I16);
        check!(u32, DType::U32);
        check!(i32, DType::I32);
        // A computed value equal to nodata moves one step away from it, toward the range.
        let mut m = Mosaic::new(1, 3, 1);
        m.add(&Warped {
            bands: 1,
            values: vec![0.2, -40000.0, 3.4],
            valid: vec![true, true, true],
        });
        assert_eq!(m.to_bytes(DType::U8, 0.0, true), vec![1, 1, 3]);
        assert_eq!(m.to_bytes(DType::U8, 0.0, false), vec![0, 0, 3]);
        assert_eq!(m.to_bytes(DType::U8, 3.0, true), vec![0, 0, 2]);
        assert_eq!(m.to_bytes(DType::U8, 3.5, true), vec![0, 0, 3]);
        let i16s = |b: Vec<u8>| {
            b.chunks(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]))
                .collect::<Vec<_>>()
        };
        assert_eq!(i16s(m.to_bytes(DType::I16, -32768.0, true)), vec![0, -32767, 3]);
    }

    #[test]
    fn a_mosaic_taking_its_first_source_gives_the_same_bytes() {
        let first = Warped {
            bands: 2,
            values: vec![1.0, 99.0, 3.0, 4.0, 5.0, 98.0],
            valid: vec![true, false, true],
        };
        let second = Warped {
            bands: 2,
            values: vec![7.0, 8.0, 9.0, 10.0, 11.0, 12.0],
            valid: vec![true, true, false],
        };
        let (mut copied, mut owned) = (Mosaic::new(2, 3, 1), Mosaic::new(2, 3, 1));
        copied.add(&first);
        copied.add(&second);
        owned.add_owned(first);
        owned.add_owned(second);
        assert!(owned.is_full() == copied.is_full() && owned.filled_count == 3);
        for dtype in [DType::U16, DType::F32, DType::C64] {
            assert_eq!(owned.to_bytes(dtype, 0.0, true), copied.to_bytes(dtype, 0.0, true));
        }
        let b = owned.to_bytes(DType::C64, 0.0, false);
        assert_eq!(b.len(), 2 * 3 * 8);
        assert_eq!(f32::from_le_bytes([b[8], b[9], b[10], b[11]]), 8.0);
        assert_eq!(f32::from_le_bytes([b[12], b[13], b[14], b[15]]), 0.0);
    }

    #[test]
    fn a_mosaic_no_source_fills_is_nodata_in_every_type() {
        let m = Mosaic::new(2, 3, 2);
        assert!(!m.is_full());
        assert_eq!(m.to_bytes(DType::U8, 7.0, true), vec![7; 12]);
        assert_eq!(
            m.to_bytes(DType::I16, -2.0, false),
            [(-2i16).to_le_bytes(); 12].concat()
        );
        let b = m.to_bytes(DType::C64, f64::NAN, false);
        for c in b.chunks_exact(8) {
            assert!(f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_nan());
            assert_eq!(f32::from_le_bytes([c[4], c[5], c[6], c[7]]), 0.0);
        }
        // Too short a slice is refused and left untouched, as for a filled mosaic.
        let mut out = [9u8; 11];
        assert!(!m.to_bytes_into(DType::U8, 0.0, false, &mut out));
        assert_eq!(out, [9; 11]);
        // A source that misses every pixel: still nodata, and the mosaic not full.
        let mut m = Mosaic::new(1, 2, 1);
        m.add_owned(Warped {
            bands: 1,
            values: vec![0.0; 2],
            valid: vec![false; 2],
        });
        assert!(!m.is_full());
        assert_eq!(m.to_bytes(DType::U16, 5.0, false), [5u16.to_le_bytes(); 2].concat());
        assert!(Mosaic::new(1, 0, 4).is_full());
    }

    #[test]
    fn mosaic_first_valid_wins_and_rounds_half_up() {
        let mut m = Mosaic::new(1, 3, 1);
        m.add(&Warped {
            bands: 1,
            values: vec![1.5, 0.0, 0.0],
            valid: vec![true, false, false],
        });
        m.add(&Warped {
            bands: 1,
            values: vec![9.0, 2.49, 0.0],
            valid: vec![true, true, false],
        });
        let b = m.to_bytes(DType::U16, 7.0, false);
        let got: Vec<u16> = b.chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
        assert_eq!(got, vec![2, 2, 7]);
        let mut m = Mosaic::new(1, 1, 1);
        m.add(&Warped {
            bands: 1,
            values: vec![70000.0],
            valid: vec![true],
        });
        assert_eq!(m.to_bytes(DType::U16, 0.0, false), 65535u16.to_le_bytes().to_vec());
        assert_eq!(m.to_bytes(DType::U16, 65535.0, true), 65534u16.to_le_bytes().to_vec());
        assert!(is_nodata(DType::U16, 0.0, 0.0) && !is_nodata(DType::U16, 1.0, 0.0));
        assert!(is_nodata(DType::F32, f64::NAN, f64::NAN));
    }
}
