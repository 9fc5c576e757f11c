//! Warping: source windows in, footprint-grid samples out (DESIGN §8).
//!
//! Pure: no I/O. [`plan`] decides, per source, the overview level, the pixel window to read
//! and the kernel scale; [`kernel`] holds the resampling kernels; this module runs a kernel
//! over a footprint ([`warp_source`]). `mosaic` stacks sources in priority order, first
//! valid pixel wins ([`Mosaic`]), and converts to the output type with GDAL's rounding;
//! `samples` decodes a window to f64 and its validity. [`axes`] plans the areal kernels once
//! per column and row where the mapping allows it; `areal` runs them over a footprint where
//! it does not. [`exact`] runs bilinear in integers, straight into output bytes, where that
//! is provably the f64 kernel's result.

mod areal;
pub mod axes;
pub mod exact;
pub mod kernel;
mod mosaic;
pub mod plan;
mod samples;

pub use mosaic::Mosaic;
pub use samples::{NodataTest, is_nodata, samples_to_f64, validity};

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
    fn kernels_parse_by_name() {
        for k in Resampling::ALL {
            assert_eq!(Resampling::parse(k.name()), Some(k));
        }
        assert_eq!(Resampling::parse("lanczos"), None);
    }
}
