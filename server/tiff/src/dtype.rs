//! Sample types: how a TIFF stores samples and the native type a reader returns.
//!
//! The output type follows GDAL: n-bit unsigned integers widen to the smallest unsigned type
//! that holds them, Float16/Float24 become f32, complex floats stay complex.

use super::error::{TiffError, TiffResult};

/// The type of the samples a window read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 16-bit integer.
    U16,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 32-bit integer.
    U32,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 64-bit integer.
    U64,
    /// Signed 64-bit integer.
    I64,
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// Complex of two f32 (numpy complex64).
    C64,
    /// Complex of two f64 (numpy complex128).
    C128,
}

impl DType {
    /// Bytes per sample.
    pub fn size(self) -> usize {
        match self {
            DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 | DType::C64 => 8,
            DType::C128 => 16,
        }
    }

    /// Lowercase name, as numpy spells it.
    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::U16 => "uint16",
            DType::I16 => "int16",
            DType::U32 => "uint32",
            DType::I32 => "int32",
            DType::U64 => "uint64",
            DType::I64 => "int64",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
        }
    }

    /// The type called `name` (numpy spelling, as [`DType::name`] writes it).
    pub fn from_name(name: &str) -> Option<Self> {
        [
            DType::U8,
            DType::I8,
            DType::U16,
            DType::I16,
            DType::U32,
            DType::I32,
            DType::U64,
            DType::I64,
            DType::F32,
            DType::F64,
            DType::C64,
            DType::C128,
        ]
        .into_iter()
        .find(|d| d.name() == name)
    }

    /// The numpy `descr` for little-endian data (`<u2`, `|u1`, ...).
    pub fn npy_descr(self) -> &'static str {
        match self {
            DType::U8 => "|u1",
            DType::I8 => "|i1",
            DType::U16 => "<u2",
            DType::I16 => "<i2",
            DType::U32 => "<u4",
            DType::I32 => "<i4",
            DType::U64 => "<u8",
            DType::I64 => "<i8",
            DType::F32 => "<f4",
            DType::F64 => "<f8",
            DType::C64 => "<c8",
            DType::C128 => "<c16",
        }
    }

    /// Size of one byte-swappable component (half the sample for complex types).
    pub fn component_size(self) -> usize {
        match self {
            DType::C64 => 4,
            DType::C128 => 8,
            other => other.size(),
        }
    }
}

/// One sample of `value` in `dtype` (integers saturate, NaN becomes 0 for them),
/// native byte order. Used to fill sparse blocks and padding.
pub fn fill_bytes(dtype: DType, value: f64) -> Vec<u8> {
    match dtype {
        DType::U8 => vec![value as u8],
        DType::I8 => (value as i8).to_ne_bytes().to_vec(),
        DType::U16 => (value as u16).to_ne_bytes().to_vec(),
        DType::I16 => (value as i16).to_ne_bytes().to_vec(),
        DType::U32 => (value as u32).to_ne_bytes().to_vec(),
        DType::I32 => (value as i32).to_ne_bytes().to_vec(),
        DType::U64 => (value as u64).to_ne_bytes().to_vec(),
        DType::I64 => (value as i64).to_ne_bytes().to_vec(),
        DType::F32 => (value as f32).to_ne_bytes().to_vec(),
        DType::F64 => value.to_ne_bytes().to_vec(),
        DType::C64 => [(value as f32).to_ne_bytes(), 0f32.to_ne_bytes()].concat(),
        DType::C128 => [value.to_ne_bytes(), 0f64.to_ne_bytes()].concat(),
    }
}

/// How samples are stored in the file, before conversion to a [`DType`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Storage {
    /// BitsPerSample.
    pub bits: u16,
    /// SampleFormat: 1 unsigned, 2 signed, 3 float, 5 complex int, 6 complex float.
    pub format: u16,
}

impl Storage {
    /// The type a reader returns for these stored samples, or why they are unsupported.
    pub fn dtype(self) -> TiffResult<DType> {
        let Storage { bits, format } = self;
        let unsupported = || TiffError::Unsupported(format!("sample type ({bits} bits, sample format {format})"));
        Ok(match format {
            1 | 4 => match bits {
                1..=8 => DType::U8,
                9..=16 => DType::U16,
                17..=32 => DType::U32,
                64 => DType::U64,
                _ => return Err(unsupported()),
            },
            2 => match bits {
                8 => DType::I8,
                16 => DType::I16,
                32 => DType::I32,
                64 => DType::I64,
                _ => return Err(unsupported()),
            },
            3 => match bits {
                16 | 24 | 32 => DType::F32,
                64 => DType::F64,
                _ => return Err(unsupported()),
            },
            6 => match bits {
                64 => DType::C64,
                128 => DType::C128,
                _ => return Err(unsupported()),
            },
            _ => return Err(unsupported()),
        })
    }

    /// True when stored samples are whole bytes of the output type's width
    /// (no unpacking or promotion needed after decompression).
    pub fn is_native(self) -> bool {
        match self.dtype() {
            Ok(d) => d.size() * 8 == self.bits as usize,
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_like_gdal() {
        let s = |bits, format| Storage { bits, format }.dtype().unwrap();
        assert_eq!(s(1, 1), DType::U8);
        assert_eq!(s(12, 1), DType::U16);
        assert_eq!(s(24, 1), DType::U32);
        assert_eq!(s(8, 2), DType::I8);
        assert_eq!(s(16, 3), DType::F32);
        assert_eq!(s(64, 6), DType::C64);
        assert!(Storage { bits: 12, format: 2 }.dtype().is_err());
        assert!(Storage { bits: 8, format: 3 }.dtype().is_err());
        assert!(Storage { bits: 16, format: 1 }.is_native());
        assert!(!Storage { bits: 12, format: 1 }.is_native());
        assert!(!Storage { bits: 16, format: 3 }.is_native());
    }

    #[test]
    fn fill_values() {
        assert_eq!(fill_bytes(DType::U8, 255.0), vec![255]);
        assert_eq!(fill_bytes(DType::I16, -9999.0), (-9999i16).to_ne_bytes().to_vec());
        assert_eq!(fill_bytes(DType::U16, -1.0), vec![0, 0]);
        assert!(f32::from_ne_bytes(fill_bytes(DType::F32, f64::NAN).try_into().unwrap()).is_nan());
        assert_eq!(fill_bytes(DType::C64, 1.0).len(), 8);
    }
}
