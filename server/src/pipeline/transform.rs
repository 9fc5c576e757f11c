//! Per-patch transforms: cast to the output type, per-band normalisation, and seeded
//! flips / 90-degree rotations applied to image and label alike. Pure; runs on the CPU pool.

use half::{bf16, f16};

use cogfeed_tiff::DType;

/// Output sample type of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutType {
    Native,
    F32,
    F16,
    BF16,
    U8,
    U16,
}

impl OutType {
    /// From the request's `dtype` string ("" = native).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "" | "native" => OutType::Native,
            "float32" | "f32" => OutType::F32,
            "float16" | "f16" => OutType::F16,
            "bfloat16" | "bf16" => OutType::BF16,
            "uint8" | "u8" => OutType::U8,
            "uint16" | "u16" => OutType::U16,
            _ => return None,
        })
    }

    /// The tensor dtype name for images of `native` samples.
    pub fn name(self, native: DType) -> &'static str {
        match self {
            OutType::Native => native.name(),
            OutType::F32 => "float32",
            OutType::F16 => "float16",
            OutType::BF16 => "bfloat16",
            OutType::U8 => "uint8",
            OutType::U16 => "uint16",
        }
    }

    /// Bytes per output sample.
    pub fn size(self, native: DType) -> usize {
        match self {
            OutType::Native => native.size(),
            OutType::F32 => 4,
            OutType::F16 | OutType::BF16 | OutType::U16 => 2,
            OutType::U8 => 1,
        }
    }

    /// True for floating-point outputs.
    pub fn is_float(self) -> bool {
        matches!(self, OutType::F32 | OutType::F16 | OutType::BF16)
    }
}

/// What to do to every patch of a stream.
#[derive(Debug, Clone)]
pub struct Transform {
    pub out: OutType,
    /// Per output band (mean, std).
    pub normalize: Option<Vec<(f64, f64)>>,
    pub augment: bool,
}

impl Transform {
    /// True when no sample changes value, type or orientation: what the stitched patch
    /// holds is the sample (it may then be assembled straight into the batch's buffer).
    pub fn keeps_values(&self) -> bool {
        self.out == OutType::Native && self.normalize.is_none()
    }

    /// [`Transform::keeps_values`], and no augmentation either.
    pub fn is_identity(&self) -> bool {
        self.keeps_values() && !self.augment
    }
}

/// One of the eight symmetries of a square (four flips for non-square patches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Orientation {
    pub flip_x: bool,
    pub flip_y: bool,
    pub transpose: bool,
}

impl Orientation {
    /// The identity.
    pub const NONE: Orientation = Orientation {
        flip_x: false,
        flip_y: false,
        transpose: false,
    };

    /// The orientation drawn for a sample's key.
    pub fn from_key(key: u64, square: bool) -> Self {
        Orientation {
            flip_x: key & 1 != 0,
            flip_y: key & 2 != 0,
            transpose: square && key & 4 != 0,
        }
    }
}

/// Reorients a `h x w` plane of `es`-byte samples.
pub fn orient(plane: &[u8], h: usize, w: usize, es: usize, o: Orientation) -> Vec<u8> {
    if o == Orientation::NONE {
        return plane.to_vec();
    }
    let mut out = vec![0u8; plane.len()];
    for y in 0..h {
        for x in 0..w {
            let (mut sy, mut sx) = if o.transpose { (x, y) } else { (y, x) };
            if o.flip_y {
                sy = h - 1 - sy;
            }
            if o.flip_x {
                sx = w - 1 - sx;
            }
            let s = (sy * w + sx) * es;
            let d = (y * w + x) * es;
            out[d..d + es].copy_from_slice(&plane[s..s + es]);
        }
    }
    out
}

/// Native samples (little-endian) as f64.
fn values(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    macro_rules! conv {
        ($t:ty, $n:expr) => {
            bytes
                .chunks_exact($n)
                .map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or([0; $n])) as f64)
                .collect()
        };
    }
    match dtype {
        DType::U8 => bytes.iter().map(|&b| b as f64).collect(),
        DType::I8 => bytes.iter().map(|&b| b as i8 as f64).collect(),
        DType::U16 => conv!(u16, 2),
        DType::I16 => conv!(i16, 2),
        DType::U32 => conv!(u32, 4),
        DType::I32 => conv!(i32, 4),
        DType::U64 => conv!(u64, 8),
        DType::I64 => conv!(i64, 8),
        DType::F32 => conv!(f32, 4),
        DType::F64 => conv!(f64, 8),
        // Complex samples: the real part.
        DType::C64 => bytes
            .chunks_exact(8)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        DType::C128 => bytes
            .chunks_exact(16)
            .map(|c| f64::from_le_bytes(c[..8].try_into().unwrap_or([0; 8])))
            .collect(),
    }
}

/// Casts one band plane of native samples, normalising with `norm` when given.
pub fn cast_plane(dtype: DType, plane: &[u8], out: OutType, norm: Option<(f64, f64)>, dst: &mut Vec<u8>) {
    if out == OutType::Native || (out == OutType::U8 && dtype == DType::U8 && norm.is_none()) {
        dst.extend_from_slice(plane);
        return;
    }
    if out == OutType::U16 && dtype == DType::U16 && norm.is_none() {
        dst.extend_from_slice(plane);
        return;
    }
    if out == OutType::F32 && dtype == DType::U16 {
        // The common case, without the f64 detour.
        let (m, s) = norm.unwrap_or((0.0, 1.0));
        let (scale, shift) = ((1.0 / s) as f32, (-m / s) as f32);
        for c in plane.chunks_exact(2) {
            let v = u16::from_le_bytes([c[0], c[1]]) as f32 * scale + shift;
            dst.extend_from_slice(&v.to_le_bytes());
        }
        return;
    }
    let (m, s) = norm.unwrap_or((0.0, 1.0));
    for v in values(dtype, plane) {
        let v = (v - m) / s;
        match out {
            OutType::F32 => dst.extend_from_slice(&(v as f32).to_le_bytes()),
            OutType::F16 => dst.extend_from_slice(&f16::from_f64(v).to_le_bytes()),
            OutType::BF16 => dst.extend_from_slice(&bf16::from_f64(v).to_le_bytes()),
            OutType::U8 => dst.push(v.round().clamp(0.0, 255.0) as u8),
            OutType::U16 => dst.extend_from_slice(&(v.round().clamp(0.0, 65535.0) as u16).to_le_bytes()),
            OutType::Native => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orientations_are_symmetries() {
        // 2x2 plane [[1,2],[3,4]]
        let p = [1u8, 2, 3, 4];
        let fx = orient(
            &p,
            2,
            2,
            1,
            Orientation {
                flip_x: true,
                flip_y: false,
                transpose: false,
            },
        );
        assert_eq!(fx, vec![2, 1, 4, 3]);
        let t = orient(
            &p,
            2,
            2,
            1,
            Orientation {
                flip_x: false,
                flip_y: false,
                transpose: true,
            },
        );
        assert_eq!(t, vec![1, 3, 2, 4]);
        let fy = orient(
            &p,
            2,
            2,
            1,
            Orientation {
                flip_x: false,
                flip_y: true,
                transpose: false,
            },
        );
        assert_eq!(fy, vec![3, 4, 1, 2]);
    }

    #[test]
    fn casts_and_normalises() {
        let plane: Vec<u8> = [100u16, 300].iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = Vec::new();
        cast_plane(DType::U16, &plane, OutType::F32, Some((100.0, 2.0)), &mut out);
        let v: Vec<f32> = out
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(v, vec![0.0, 100.0]);
        let mut out = Vec::new();
        cast_plane(DType::U16, &plane, OutType::U8, None, &mut out);
        assert_eq!(out, vec![100, 255]);
        let mut out = Vec::new();
        cast_plane(DType::U16, &plane, OutType::BF16, None, &mut out);
        assert_eq!(out.len(), 4);
    }
}
