//! Warping: source windows in, footprint-grid samples out (DESIGN §8).
//!
//! Pure: no I/O. [`plan`] decides, per source, the overview level, the pixel window to read
//! and the kernel scale; [`kernel`] holds the resampling kernels; this module runs a kernel
//! over a footprint ([`warp_source`]), stacks sources in priority order, first valid pixel
//! wins ([`Mosaic`]), and converts to the output type with GDAL's rounding. [`axes`] plans
//! the areal kernels once per column and row where the mapping allows it; `areal` runs
//! them over a footprint where it does not.

mod areal;
pub mod axes;
pub mod kernel;
pub mod plan;

use cogfeed_tiff::DType;
use kernel::{Filter, Source};
use plan::{PixelMapper, SourceWindow};

/// A resampling kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resampling {
    /// The value of the source pixel under the destination pixel's centre.
    Nearest,
    /// Bilinear interpolation at the centre (2×2, or a stretched tent filter when downsampling).
    Bilinear,
    /// Cubic interpolation at the centre (4×4 Catmull-Rom, stretched when downsampling).
    Cubic,
    /// Area-weighted mean of the valid source pixels under the destination pixel.
    Average,
    /// Most frequent valid source value under the destination pixel.
    Mode,
}

impl Resampling {
    /// Every kernel, in the order the docs list them.
    pub const ALL: [Resampling; 5] = [
        Resampling::Nearest,
        Resampling::Bilinear,
        Resampling::Cubic,
        Resampling::Average,
        Resampling::Mode,
    ];

    /// The kernel's name in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Resampling::Nearest => "nearest",
            Resampling::Bilinear => "bilinear",
            Resampling::Cubic => "cubic",
            Resampling::Average => "average",
            Resampling::Mode => "mode",
        }
    }

    /// Parses a kernel name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(text.trim()))
    }

    /// Source pixels the kernel reaches beyond the pixel under a centre, at scale 1.
    pub fn radius(self) -> usize {
        match self {
            Resampling::Bilinear => 1,
            Resampling::Cubic => 2,
            _ => 0,
        }
    }

    /// Whether the kernel works on the destination pixel's area (corners), not its centre.
    pub fn is_areal(self) -> bool {
        matches!(self, Resampling::Average | Resampling::Mode)
    }
}

/// One source's contribution to a footprint: values `bands × H × W` and validity `H × W`.
#[derive(Debug, Clone)]
pub struct Warped {
    /// Number of bands.
    pub bands: usize,
    /// Values `bands × H × W`, band-major, over the footprint's pixels (meaningful where valid).
    pub values: Vec<f64>,
    /// Validity `H × W`, row-major: whether this source gave the footprint pixel a value.
    pub valid: Vec<bool>,
}

/// Runs `resampling` over the footprint of `mapper` from `src`, the decoded pixels of
/// `window` at the mapper's level.
pub fn warp_source(
    mapper: &PixelMapper<'_>,
    window: &SourceWindow,
    src: &Source<'_>,
    resampling: Resampling,
) -> Warped {
    warp_mapped(&MappedPoints::new(mapper, resampling), window, src, resampling)
}

/// A footprint's points as one kernel samples them, mapped into a source level: centres, or
/// corners for the areal kernels ([`PixelMapper::points`]), and, where the mapping is
/// axis-aligned, the same points as one x per column and one y per row. Every asset and
/// date on one grid shares one.
#[derive(Debug, Clone)]
pub struct MappedPoints {
    /// Width of the footprint, in pixels.
    width: usize,
    /// Height of the footprint, in pixels.
    height: usize,
    /// Level-pixel x of every point, row by row.
    xs: Vec<f64>,
    /// Level-pixel y of every point, row by row.
    ys: Vec<f64>,
    /// One x per point column and one y per point row, where they are separable.
    axes: Option<(Vec<f64>, Vec<f64>)>,
}

impl MappedPoints {
    /// The points of `mapper`'s footprint that `resampling` samples.
    pub fn new(mapper: &PixelMapper<'_>, resampling: Resampling) -> Self {
        let (xs, ys) = mapper.points(resampling);
        let (w, h) = (mapper.footprint.width() as usize, mapper.footprint.height() as usize);
        let axes = if resampling.is_areal() {
            axes::separable_edges(&xs, &ys, w, h)
        } else {
            axes::separable_centres(&xs, &ys, w, h)
        };
        Self {
            width: w,
            height: h,
            xs,
            ys,
            axes,
        }
    }
}

/// [`warp_source`] over points already mapped: every source on one grid shares them.
pub fn warp_mapped(mapped: &MappedPoints, window: &SourceWindow, src: &Source<'_>, resampling: Resampling) -> Warped {
    let (w, h) = (mapped.width, mapped.height);
    let n = w * h;
    let bands = src.bands;
    if resampling.is_areal() && (resampling == Resampling::Mode || mapped.axes.is_none()) {
        let (values, valid, _) = areal::warp_areal(mapped, window, src, resampling);
        return Warped { bands, values, valid };
    }
    let tiny = src.width == 1 || src.height == 1;
    let four = window.x_scale >= 0.95 && window.y_scale >= 0.95;
    let (ox, oy) = (window.col as f64, window.row as f64);
    if resampling == Resampling::Bilinear
        && four
        && !tiny
        && let Some((xs, ys)) = &mapped.axes
    {
        // Same CRS, north-up on both sides: centre pixels, neighbours and weights once per
        // column and row. Band 0 and validity written once, pixel after pixel (no zeroed
        // buffers: a Sentinel-2 sample makes ~100 of these warps); other bands beside.
        let cols = axes::bilinear_axis(xs, ox, src.width);
        let rows = axes::bilinear_axis(ys, oy, src.height);
        let sw = src.width;
        let (mut values, mut valid) = (Vec::with_capacity(bands * n), Vec::with_capacity(n));
        let mut rest = vec![0.0; bands.saturating_sub(1) * n];
        let mut px = vec![0.0; bands];
        // Where both neighbours of an axis point lie in the window.
        let inner = |i: isize, size: usize| i >= 0 && (i as usize) + 1 < size;
        for (i, row) in rows.iter().enumerate() {
            let Some((iy, by)) = *row else {
                values.extend(std::iter::repeat_n(0.0, w));
                valid.extend(std::iter::repeat_n(false, w));
                continue;
            };
            let inner_y = inner(by.0, src.height);
            for (j, col) in cols.iter().enumerate() {
                let value = (|| {
                    let (ix, bx) = (*col)?;
                    if !src.valid[iy * sw + ix] {
                        return None;
                    }
                    if bands == 1 && inner_y && inner(bx.0, sw) {
                        // One band, four valid neighbours: `bilinear_at`'s sums, in its
                        // order, without gathering the live taps.
                        let p = by.0 as usize * sw + bx.0 as usize;
                        let q = p + sw;
                        if src.valid[p] & src.valid[p + 1] & src.valid[q] & src.valid[q + 1] {
                            let ((rx, ry), v) = ((bx.1, by.1), src.values);
                            let (w00, w10, w01, w11) =
                                (rx * ry, (1.0 - rx) * ry, rx * (1.0 - ry), (1.0 - rx) * (1.0 - ry));
                            let div = 0.0 + w00 + w10 + w01 + w11;
                            let acc = 0.0 + w00 * v[p] + w10 * v[p + 1] + w01 * v[q] + w11 * v[q + 1];
                            return Some(if div == 1.0 { acc } else { acc / div });
                        }
                    }
                    if !kernel::bilinear_at(src, bx, by, &mut px) {
                        return None;
                    }
                    for (b, v) in px.iter().enumerate().skip(1) {
                        rest[(b - 1) * n + i * w + j] = *v;
                    }
                    Some(px[0])
                })();
                valid.push(value.is_some());
                values.push(value.unwrap_or(0.0));
            }
        }
        values.extend_from_slice(&rest);
        return Warped { bands, values, valid };
    }
    let mut values = vec![0.0; bands * n];
    let mut valid = vec![false; n];
    let mut px = vec![0.0; bands];
    let put = |p: usize, px: &[f64], values: &mut Vec<f64>, valid: &mut Vec<bool>| {
        valid[p] = true;
        for (b, v) in px.iter().enumerate() {
            values[b * n + p] = *v;
        }
    };
    let (cx, cy) = (&mapped.xs, &mapped.ys);
    if resampling.is_areal()
        && let Some((xs, ys)) = &mapped.axes
    {
        // Average (mode went to `warp_areal` above), same CRS, north-up on both sides:
        // spans and weights once per column and row.
        let margin = |s: f64| 2.0 * (1.0f64).max((1.0 / s).ceil());
        let margins = (margin(window.x_scale), margin(window.y_scale));
        let shift = |edges: &[f64], o: f64| edges.iter().map(|v| v - o).collect::<Vec<_>>();
        let cols = axes::AxisSpans::new(&shift(xs, ox), src.width, margins.0);
        let rows = axes::AxisSpans::new(&shift(ys, oy), src.height, margins.1);
        for i in 0..h {
            for j in 0..w {
                if axes::average(src, &cols, &rows, j, i, &mut px) {
                    put(i * w + j, &px, &mut values, &mut valid);
                }
            }
        }
        return Warped { bands, values, valid };
    }
    for p in 0..n {
        let (x, y) = (cx[p] - ox, cy[p] - oy);
        let Some((ix, iy)) = kernel::centre_pixel(src, x, y) else {
            continue;
        };
        if !src.valid[iy * src.width + ix] {
            continue;
        }
        let ok = match resampling {
            _ if tiny => kernel::nearest(src, ix, iy, &mut px),
            Resampling::Nearest => kernel::nearest(src, ix, iy, &mut px),
            Resampling::Bilinear if four => kernel::bilinear4(src, x, y, &mut px),
            Resampling::Cubic if four => kernel::cubic4(src, x, y, &mut px),
            Resampling::Bilinear => {
                kernel::scaled(src, Filter::Bilinear, x, y, window.x_scale, window.y_scale, &mut px)
            }
            _ => kernel::scaled(src, Filter::Cubic, x, y, window.x_scale, window.y_scale, &mut px),
        };
        if ok {
            put(p, &px, &mut values, &mut valid);
        }
    }
    Warped { bands, values, valid }
}

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

/// A small deterministic generator for the warp tests, so they need no dependency.
#[cfg(test)]
pub(crate) mod test_rng {
    /// The next value of `state` in `[0, 1)`.
    pub fn lcg(state: &mut u64) -> f64 {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*state >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A random `w` × `h` window of `bands` bands: whole values below `max`, then one
    /// validity flag per pixel, valid above `invalid_below`.
    pub fn random_window(
        state: &mut u64,
        (w, h, bands): (usize, usize, usize),
        max: f64,
        invalid_below: f64,
    ) -> (Vec<f64>, Vec<bool>) {
        let values = (0..w * h * bands).map(|_| (lcg(state) * max).floor()).collect();
        let valid = (0..w * h).map(|_| lcg(state) > invalid_below).collect();
        (values, valid)
    }

    /// A one-band window of `w` × `h` over `values` and `valid`.
    pub fn one_band<'a>(w: usize, h: usize, values: &'a [f64], valid: &'a [bool]) -> super::kernel::Source<'a> {
        super::kernel::Source {
            width: w,
            height: h,
            bands: 1,
            values,
            valid,
        }
    }

    /// The next value of `state` in `0..m`.
    pub fn below(state: &mut u64, m: u64) -> u64 {
        ((lcg(state) * m as f64) as u64).min(m - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::test_rng::random_window;
    use super::*;

    #[test]
    fn separable_bilinear_gives_the_per_point_bits() {
        let mut seed = 3u64;
        for bands in [1usize, 2] {
            for &(step, offset) in &[(1.0, 10.5), (0.5, 10.25), (0.5, 9.6), (1.0, 9.13), (0.77, 8.9)] {
                let (sw, sh) = (19usize, 17usize);
                let (values, valid) = random_window(&mut seed, (sw, sh, bands), 4000.0, 0.15);
                let src = Source {
                    width: sw,
                    height: sh,
                    bands,
                    values: &values,
                    valid: &valid,
                };
                // The window starts at (10, 10) of its level; some points fall beyond it.
                let window = SourceWindow {
                    col: 10,
                    row: 10,
                    width: sw as u64,
                    height: sh as u64,
                    x_scale: 1.0,
                    y_scale: 1.0,
                };
                let (w, h) = (30usize, 28usize);
                let xs: Vec<f64> = (0..h)
                    .flat_map(|_| (0..w).map(move |j| offset + j as f64 * step))
                    .collect();
                let ys: Vec<f64> = (0..h)
                    .flat_map(|i| std::iter::repeat_n(offset - 0.5 + i as f64 * step, w))
                    .collect();
                let axes = axes::separable_centres(&xs, &ys, w, h);
                assert!(axes.is_some());
                let separable = MappedPoints {
                    width: w,
                    height: h,
                    xs: xs.clone(),
                    ys: ys.clone(),
                    axes,
                };
                let per_point = MappedPoints {
                    axes: None,
                    ..separable.clone()
                };
                let a = warp_mapped(&separable, &window, &src, Resampling::Bilinear);
                let b = warp_mapped(&per_point, &window, &src, Resampling::Bilinear);
                assert_eq!(a.valid, b.valid, "{bands} {step} {offset}");
                assert!(a.valid.iter().any(|&v| v) && a.valid.iter().any(|&v| !v));
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a.values), bits(&b.values), "{bands} {step} {offset}");
            }
        }
    }

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
    fn kernels_parse_by_name() {
        for k in Resampling::ALL {
            assert_eq!(Resampling::parse(k.name()), Some(k));
        }
        assert_eq!(Resampling::parse("lanczos"), None);
    }

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
