//! Source windows as the kernels read them: native samples decoded to f64, and GDAL's
//! unified validity mask from each band's nodata test.
//!
//! Owns the decoding and the nodata tests only; no kernel arithmetic.

use cogfeed_tiff::DType;

/// Decodes native-order samples of `dtype` to f64 (complex: the real part).
pub fn samples_to_f64(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    macro_rules! conv {
        ($t:ty) => {
            bytes
                .chunks_exact(std::mem::size_of::<$t>())
                .map(|c| <$t>::from_ne_bytes(c.try_into().unwrap_or_default()) as f64)
                .collect()
        };
    }
    match dtype {
        DType::U8 => bytes.iter().map(|&b| b as f64).collect(),
        DType::I8 => bytes.iter().map(|&b| b as i8 as f64).collect(),
        DType::U16 => conv!(u16),
        DType::I16 => conv!(i16),
        DType::U32 => conv!(u32),
        DType::I32 => conv!(i32),
        DType::U64 => conv!(u64),
        DType::I64 => conv!(i64),
        DType::F32 => conv!(f32),
        DType::F64 => conv!(f64),
        DType::C64 => bytes
            .chunks_exact(8)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        DType::C128 => bytes
            .chunks_exact(16)
            .map(|c| f64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect(),
    }
}

/// One band's nodata test decided once per window: for every value, what [`is_nodata`]
/// says of it (None: the band has no nodata, or an integer band a NaN one).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NodataTest {
    /// Every value is valid.
    None,
    /// NaN is nodata.
    Nan,
    /// Values equal to this once cast to f32 are nodata (Float32 bands).
    F32(f32),
    /// Values equal to this are nodata.
    Equals(f64),
}

impl NodataTest {
    /// The test of a `dtype` band whose nodata is `nodata`.
    pub fn new(dtype: DType, nodata: Option<f64>) -> Self {
        let Some(nd) = nodata else { return Self::None };
        match dtype {
            DType::F32 | DType::F64 | DType::C64 | DType::C128 if nd.is_nan() => Self::Nan,
            DType::F32 => Self::F32(nd as f32),
            DType::F64 | DType::C64 | DType::C128 => Self::Equals(nd),
            _ if nd.is_nan() => Self::None,
            _ => Self::Equals((nd + 1e-6).floor()),
        }
    }
}

/// One validity flag per pixel of `values` (band-major planes of `n` pixels, one test per
/// band): valid where any band is not nodata, GDAL's unified source mask. Loops a
/// compiler can vectorise, one band at a time.
pub fn validity(values: &[f64], n: usize, tests: &[NodataTest]) -> Vec<bool> {
    if tests.contains(&NodataTest::None) {
        return vec![true; n];
    }
    let mut valid = vec![false; n];
    for (plane, test) in values.chunks_exact(n.max(1)).zip(tests) {
        let v = plane.iter().zip(valid.iter_mut());
        match *test {
            NodataTest::Nan => v.for_each(|(x, ok)| *ok |= !x.is_nan()),
            NodataTest::F32(nd) => v.for_each(|(x, ok)| *ok |= *x as f32 != nd),
            NodataTest::Equals(nd) => v.for_each(|(x, ok)| *ok |= *x != nd),
            NodataTest::None => {}
        }
    }
    valid
}

/// Whether `v` is the nodata value `nodata` the way GDAL compares: integers against
/// `floor(nodata + 1e-6)`, floats exactly or both NaN.
#[inline]
pub fn is_nodata(dtype: DType, v: f64, nodata: f64) -> bool {
    match dtype {
        DType::F32 | DType::F64 | DType::C64 | DType::C128 => {
            if nodata.is_nan() {
                v.is_nan()
            } else if dtype == DType::F32 {
                v as f32 == nodata as f32
            } else {
                v == nodata
            }
        }
        _ => !nodata.is_nan() && v == (nodata + 1e-6).floor(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_is_any_band_not_nodata() {
        let values = [0.0, 5.0, f64::NAN, 3.4, 0.0, 0.0, 7.0, f64::NAN];
        let all = |dtype: DType, nodata: &[Option<f64>]| {
            let tests: Vec<NodataTest> = nodata.iter().map(|&nd| NodataTest::new(dtype, nd)).collect();
            let fast = validity(&values, 4, &tests);
            let slow: Vec<bool> = (0..4)
                .map(|p| {
                    (0..2).any(|b| match nodata[b] {
                        None => true,
                        Some(nd) => !is_nodata(dtype, values[b * 4 + p], nd),
                    })
                })
                .collect();
            assert_eq!(fast, slow, "{dtype:?} {nodata:?}");
        };
        for dtype in [DType::U8, DType::I16, DType::F32, DType::F64] {
            for a in [None, Some(0.0), Some(f64::NAN), Some(3.4), Some(-0.0)] {
                for b in [None, Some(0.0), Some(f64::NAN), Some(7.0)] {
                    all(dtype, &[a, b]);
                }
            }
        }
    }
}
