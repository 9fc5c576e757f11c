//! Bilinear and cubic in integers where that is provably GDAL's f64 result, written
//! straight into the layer's bytes (issue 27's typed kernels).
//!
//! When it applies:
//! - one band of unsigned 8- or 16-bit samples, written out in the same type;
//! - every pixel of the window valid (none equals the band's nodata);
//! - the mapping axis-aligned and not downsampling (one x per column, one y per row);
//! - every destination centre with all its neighbours (2 × 2, or 4 × 4 for cubic) inside
//!   the window;
//! - every weight dyadic: bilinear's `k / 64` (Sentinel-2's 20 m bands read onto a 10 m grid
//!   give 1/4 and 3/4), cubic's `k / 1024` (positions in eighths of a pixel).
//!
//! Why it is exact (bilinear; cubic in [`cubic_into`]): the per-pixel kernel
//! (`warp_mapped`'s separable path, GDAL's order) sums four products of f64 weights
//! `rx·ry`, `(1-rx)·ry`, … and 16-bit values. With dyadic weights every product and every
//! partial sum holds at most 16 + 12 + 2 significant bits, so none rounds: the kernel's
//! value is exactly `S / 4096`, where `S` is the same sum over the integer weights `64·rx`,
//! `64·(1-rx)`, … (the weights sum to exactly 1, so the kernel does not divide). The output
//! conversion (saturate, add 0.5, truncate) of a value in range is then `(S + 2048) >> 12`.
//! An integer sum does not depend on its order, so it runs separably: each source row once
//! along x, then the rows along y.
//!
//! Owns that path only. Where a condition fails it returns false and leaves `out`
//! untouched: the caller runs the general warp, which gives the same bytes wherever this
//! path applies (tests compare them).

use super::axes;
use super::plan::SourceWindow;
use super::{MappedPoints, NodataTest};
use cogfeed_tiff::DType;

/// Weights are multiples of 1/ONE.
const ONE: u32 = 64;
/// Bits of ONE².
const SHIFT: u32 = 12;

/// An integer kernel: [`bilinear_into`] or [`cubic_into`].
pub type Kernel = fn(&MappedPoints, &SourceWindow, &TypedWindow<'_>, Option<f64>, f64, &mut [u8]) -> bool;

/// A window of decoded samples in their own type: `height × width`, one band, native order.
#[derive(Debug, Clone, Copy)]
pub struct TypedWindow<'a> {
    /// Sample type.
    pub dtype: DType,
    /// Width, in pixels.
    pub width: usize,
    /// Height, in pixels.
    pub height: usize,
    /// The samples.
    pub bytes: &'a [u8],
}

/// One axis of the kernel: per destination column (or row) the first neighbour and the
/// integer weights of it and the next, or None where the axis does not qualify.
fn axis(points: &[f64], offset: f64, size: usize) -> Option<Vec<(usize, u32, u32)>> {
    axes::bilinear_axis(points, offset, size)
        .into_iter()
        .map(|tap| {
            let (_, (first, r)) = tap?;
            // Both neighbours inside the window.
            if first < 0 || first as usize + 1 >= size {
                return None;
            }
            let (a, b) = (r * f64::from(ONE), (1.0 - r) * f64::from(ONE));
            let whole = |w: f64| w >= 0.0 && w <= f64::from(ONE) && w == (w as u32) as f64;
            (whole(a) && whole(b) && a as u32 + b as u32 == ONE).then_some((first as usize, a as u32, b as u32))
        })
        .collect()
}

/// Samples of a one-band window widened to u32: None where one is nodata (or the type is
/// not 8- or 16-bit unsigned, or the bytes do not make the window).
fn samples(src: &TypedWindow<'_>, nodata: Option<f64>) -> Option<Vec<u32>> {
    let n = src.width.checked_mul(src.height)?;
    if src.bytes.len() != n.checked_mul(src.dtype.size())? {
        return None;
    }
    let values: Vec<u32> = match src.dtype {
        DType::U8 => src.bytes.iter().map(|&b| u32::from(b)).collect(),
        DType::U16 => src
            .bytes
            .chunks_exact(2)
            .map(|c| u32::from(u16::from_ne_bytes([c[0], c[1]])))
            .collect(),
        _ => return None,
    };
    // GDAL's test: integers against floor(nodata + 1e-6); one outside the type's range,
    // or not whole, matches no sample.
    if let NodataTest::Equals(nd) = NodataTest::new(src.dtype, nodata)
        && nd >= 0.0
        && nd <= f64::from(u32::MAX)
        && nd == (nd as u32) as f64
    {
        let nd = nd as u32;
        if values.contains(&nd) {
            return None;
        }
    }
    Some(values)
}

/// What an integer kernel starts from, where it may run at all: per destination column and
/// per row its taps (`axis` over the footprint's separable points: one x per column, one y
/// per row), and the window's samples widened to u32. None where `out` is not the
/// footprint's samples of the window's type, the kernel would downsample, the mapping is not
/// separable, an axis does not qualify or a sample is nodata.
fn prepare<T>(
    (mapped, window, src, nodata): (&MappedPoints, &SourceWindow, &TypedWindow<'_>, Option<f64>),
    out: &[u8],
    axis: impl Fn(&[f64], f64, usize) -> Option<Vec<T>>,
) -> Option<(Vec<T>, Vec<T>, Vec<u32>)> {
    let (w, h) = (mapped.width, mapped.height);
    let fits = out.len() == w * h * src.dtype.size() && w > 0 && h > 0 && src.width >= 2 && src.height >= 2;
    let (xs, ys) = mapped.axes.as_ref()?;
    if !(fits && window.x_scale >= 0.95 && window.y_scale >= 0.95 && xs.len() == w && ys.len() == h) {
        return None;
    }
    let cols = axis(xs, window.col as f64, src.width)?;
    let rows = axis(ys, window.row as f64, src.height)?;
    Some((cols, rows, samples(src, nodata)?))
}

/// Writes one destination row of values already rounded and saturated into `dst` as
/// samples of `dtype` (8- or 16-bit unsigned, little-endian), the output's nodata moved
/// one step away as GDAL's kernels do for integer outputs (`Mosaic::to_bytes_into`).
fn write_row(dtype: DType, line: &[u32], out_nodata: f64, dst: &mut [u8]) {
    let max = if dtype == DType::U8 {
        u32::from(u8::MAX)
    } else {
        u32::from(u16::MAX)
    };
    // The nodata value as a sample of the type, where it is one.
    let nd =
        (out_nodata >= 0.0 && out_nodata <= f64::from(max) && out_nodata.fract() == 0.0).then_some(out_nodata as u32);
    let avoid = |x: u32| match nd {
        Some(nd) if x == nd => {
            if x == 0 {
                1
            } else {
                x - 1
            }
        }
        _ => x,
    };
    match dtype {
        DType::U8 => dst.iter_mut().zip(line).for_each(|(d, &v)| *d = avoid(v) as u8),
        _ => dst
            .chunks_exact_mut(2)
            .zip(line)
            .for_each(|(d, &v)| d.copy_from_slice(&(avoid(v) as u16).to_le_bytes())),
    }
}

/// The source rows `first..=last` that destination rows starting at `starts` and reaching
/// `reach` rows down read.
fn row_span(starts: impl Iterator<Item = usize>, reach: usize) -> (usize, usize) {
    starts.fold((usize::MAX, 0), |(lo, hi), y| (lo.min(y), hi.max(y + reach - 1)))
}

/// Bilinear of the one-band window `src` (read at `window` of its level, nodata `nodata`)
/// over `mapped`'s footprint, written into `out` as samples of the window's type with
/// `out_nodata` avoided as GDAL's kernels do: true where the integer path applies (see the
/// module's doc), false with `out` untouched where it does not.
pub fn bilinear_into(
    mapped: &MappedPoints,
    window: &SourceWindow,
    src: &TypedWindow<'_>,
    nodata: Option<f64>,
    out_nodata: f64,
    out: &mut [u8],
) -> bool {
    let Some((cols, rows, values)) = prepare((mapped, window, src, nodata), out, axis) else {
        return false;
    };
    // Along x, each source row the footprint reads once: 64 × (its value there).
    let w = mapped.width;
    let (y_first, y_last) = row_span(rows.iter().map(|r| r.0), 2);
    let mut along_x = vec![0u32; (y_last + 1 - y_first) * w];
    for (y, line) in (y_first..=y_last).zip(along_x.chunks_exact_mut(w)) {
        let row = &values[y * src.width..(y + 1) * src.width];
        for (v, &(x, a, b)) in line.iter_mut().zip(&cols) {
            *v = a * row[x] + b * row[x + 1];
        }
    }
    let mut line = vec![0u32; w];
    for (&(y, a, b), dst) in rows.iter().zip(out.chunks_exact_mut(w * src.dtype.size())) {
        let (top, bottom) = (
            &along_x[(y - y_first) * w..(y - y_first + 1) * w],
            &along_x[(y + 1 - y_first) * w..(y + 2 - y_first) * w],
        );
        for ((v, &t), &u) in line.iter_mut().zip(top).zip(bottom) {
            *v = (a * t + b * u + (1 << (SHIFT - 1))) >> SHIFT;
        }
        write_row(src.dtype, &line, out_nodata, dst);
    }
    true
}

/// Cubic weights are multiples of 1/CUBIC_ONE where they qualify.
const CUBIC_ONE: f64 = 1024.0;
/// Bits of CUBIC_ONE².
const CUBIC_SHIFT: u32 = 20;

/// One axis of `kernel::cubic4`: per destination column (or row) the first of its four
/// neighbours and their integer weights (× 1024), or None where the axis does not qualify:
/// a neighbour outside the window (the kernel falls back to bilinear there), or a weight
/// that is not a multiple of 1/1024 (a position in eighths of a pixel gives multiples of
/// 1/1024; Sentinel-2's 20 m bands on a 10 m grid, in quarters, of 1/128).
fn cubic_axis(points: &[f64], offset: f64, size: usize) -> Option<Vec<(usize, [i64; 4])>> {
    points
        .iter()
        .map(|&p| {
            let v = p - offset;
            // `cubic4`'s own arithmetic: the pixel left of the centre, the fraction past it.
            let i = (v - 0.5) as isize;
            let t = v - 0.5 - i as f64;
            if v.is_nan() || v < 0.5 || i < 1 || i as usize + 2 >= size {
                return None;
            }
            let mut weights = [0i64; 4];
            for (w, c) in weights.iter_mut().zip(super::kernel::cubic_weights(t)) {
                let scaled = c * CUBIC_ONE;
                if !(scaled.abs() <= CUBIC_ONE * 2.0 && scaled == (scaled as i64) as f64) {
                    return None;
                }
                *w = scaled as i64;
            }
            Some((i as usize - 1, weights))
        })
        .collect()
}

/// Cubic (`kernel::cubic4`, Catmull-Rom over 4 × 4 neighbours) of the one-band window
/// `src` over `mapped`'s footprint, in integers, written into `out` as
/// [`bilinear_into`] does: true where it applies, false with `out` untouched where not.
/// Exact for the same reason: with weights in multiples of 1/1024 every f64 product and sum
/// of the kernel (a row's four products, then the four rows) holds at most 16 + 20 + 6
/// significant bits, so none rounds and the value is `S / 2^20`; saturation and GDAL's
/// rounding are then integer comparisons and a shift.
pub fn cubic_into(
    mapped: &MappedPoints,
    window: &SourceWindow,
    src: &TypedWindow<'_>,
    nodata: Option<f64>,
    out_nodata: f64,
    out: &mut [u8],
) -> bool {
    let Some((cols, rows, values)) = prepare((mapped, window, src, nodata), out, cubic_axis) else {
        return false;
    };
    let w = mapped.width;
    let (y_first, y_last) = row_span(rows.iter().map(|r| r.0), 4);
    let mut along_x = vec![0i64; (y_last + 1 - y_first) * w];
    for (y, line) in (y_first..=y_last).zip(along_x.chunks_exact_mut(w)) {
        let row = &values[y * src.width..(y + 1) * src.width];
        for (v, (x, k)) in line.iter_mut().zip(&cols) {
            let taps = &row[*x..*x + 4];
            *v = taps.iter().zip(k).map(|(&s, &k)| i64::from(s) * k).sum();
        }
    }
    let max = if src.dtype == DType::U8 {
        i64::from(u8::MAX)
    } else {
        i64::from(u16::MAX)
    };
    let mut line = vec![0u32; w];
    for ((y, k), dst) in rows.iter().zip(out.chunks_exact_mut(w * src.dtype.size())) {
        let base = (y - y_first) * w;
        for (j, v) in line.iter_mut().enumerate() {
            let sum: i64 = (0..4).map(|t| k[t] * along_x[base + t * w + j]).sum();
            // Saturate (a cubic overshoots), then round half up.
            *v = if sum <= 0 {
                0
            } else if sum >= max << CUBIC_SHIFT {
                max as u32
            } else {
                ((sum + (1 << (CUBIC_SHIFT - 1))) >> CUBIC_SHIFT) as u32
            };
        }
        write_row(src.dtype, &line, out_nodata, dst);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warp::kernel::Source;
    use crate::warp::test_rng::{below, lcg};
    use crate::warp::{Mosaic, Resampling, samples_to_f64, validity, warp_mapped};

    /// Points of a `w` × `h` footprint whose centres map to `offset + j·step` along both
    /// axes, separable.
    fn mapped(w: usize, h: usize, (ox, oy): (f64, f64), step: f64) -> MappedPoints {
        let xs: Vec<f64> = (0..h).flat_map(|_| (0..w).map(move |j| ox + j as f64 * step)).collect();
        let ys: Vec<f64> = (0..h)
            .flat_map(|i| std::iter::repeat_n(oy + i as f64 * step, w))
            .collect();
        let axes = axes::separable_centres(&xs, &ys, w, h);
        MappedPoints {
            width: w,
            height: h,
            xs,
            ys,
            axes,
        }
    }

    /// The general path's bytes: the f64 warp, a mosaic of one source, GDAL's conversion.
    fn general(
        kernel: Resampling,
        m: &MappedPoints,
        window: &SourceWindow,
        src: &TypedWindow<'_>,
        nodata: Option<f64>,
        out_nodata: f64,
    ) -> Vec<u8> {
        let values = samples_to_f64(src.dtype, src.bytes);
        let tests = [NodataTest::new(src.dtype, nodata)];
        let valid = validity(&values, src.width * src.height, &tests);
        let s = Source {
            width: src.width,
            height: src.height,
            bands: 1,
            values: &values,
            valid: &valid,
        };
        let mut mosaic = Mosaic::new(1, m.width, m.height);
        mosaic.add_owned(warp_mapped(m, window, &s, kernel));
        mosaic.to_bytes(src.dtype, out_nodata, true)
    }

    fn window(col: u64, row: u64, w: usize, h: usize, scale: f64) -> SourceWindow {
        SourceWindow {
            col,
            row,
            width: w as u64,
            height: h as u64,
            x_scale: scale,
            y_scale: scale,
        }
    }

    #[test]
    fn the_integer_path_gives_the_general_paths_bytes() {
        let mut seed = 11u64;
        for kernel in [Resampling::Bilinear, Resampling::Cubic] {
            let (mut applied, mut declined) = (0, 0);
            for round in 0..400 {
                let dtype = if round % 3 == 0 { DType::U8 } else { DType::U16 };
                let max = if dtype == DType::U8 { 256 } else { 65536 };
                let (sw, sh) = (20 + below(&mut seed, 6) as usize, 18 + below(&mut seed, 6) as usize);
                // Upsampling by 2 (Sentinel-2's 20 m onto 10 m), 4 and 8, plain copies, and
                // steps whose weights are not dyadic (declined).
                let step = [0.5, 0.25, 0.125, 1.0, 0.5, 0.3][below(&mut seed, 6) as usize];
                let nudge = if round % 7 == 0 { 0.1 } else { 0.0 };
                let start = 12.0 + below(&mut seed, 8) as f64 * 0.125 + nudge;
                let (w, h) = (16 + below(&mut seed, 8) as usize, 16 + below(&mut seed, 8) as usize);
                let m = mapped(w, h, (start, start), step);
                let win = window(10, 10, sw, sh, 1.0 / step.min(1.0));
                let nodata = [None, Some(0.0), Some(7.0)][below(&mut seed, 3) as usize];
                let out_nodata = [0.0, 3.0, (max - 1) as f64, 300.0][below(&mut seed, 4) as usize];
                // Values near the type's ends (a cubic overshoots and saturates there) and a
                // few equal to the output's nodata.
                let bytes: Vec<u8> = (0..sw * sh)
                    .flat_map(|_| {
                        let v = match below(&mut seed, 10) {
                            0 => (out_nodata as u64).min(max - 1),
                            1 => max - 1 - below(&mut seed, 3),
                            2 => 1 + below(&mut seed, 2),
                            // Nodata now and then: the path declines the window.
                            3 if round % 5 == 0 => nodata.unwrap_or(1.0) as u64,
                            _ => 1 + (lcg(&mut seed) * (max - 1) as f64) as u64,
                        };
                        if dtype == DType::U8 {
                            vec![v as u8]
                        } else {
                            (v as u16).to_ne_bytes().to_vec()
                        }
                    })
                    .collect();
                let src = TypedWindow {
                    dtype,
                    width: sw,
                    height: sh,
                    bytes: &bytes,
                };
                let want = general(kernel, &m, &win, &src, nodata, out_nodata);
                let mut got = vec![0xAAu8; want.len()];
                let ok = match kernel {
                    Resampling::Cubic => cubic_into(&m, &win, &src, nodata, out_nodata, &mut got),
                    _ => bilinear_into(&m, &win, &src, nodata, out_nodata, &mut got),
                };
                if ok {
                    applied += 1;
                    assert_eq!(
                        got, want,
                        "{kernel:?} round {round}: {dtype:?} step {step} start {start}"
                    );
                } else {
                    declined += 1;
                    assert!(got.iter().all(|&b| b == 0xAA), "declined, yet wrote");
                }
            }
            assert!(
                applied > 100 && declined > 50,
                "{kernel:?}: {applied} applied, {declined} declined"
            );
        }
    }

    #[test]
    fn declines_what_it_cannot_prove() {
        let bytes = vec![5u8; 20 * 20];
        let src = TypedWindow {
            dtype: DType::U8,
            width: 20,
            height: 20,
            bytes: &bytes,
        };
        let mut out = vec![0u8; 8 * 8];
        // Weights of 0.3 and 0.7 are not dyadic.
        assert!(!bilinear_into(
            &mapped(8, 8, (12.3, 12.3), 1.0),
            &window(10, 10, 20, 20, 1.0),
            &src,
            None,
            0.0,
            &mut out
        ));
        // A centre whose right neighbour lies beyond the window.
        assert!(!bilinear_into(
            &mapped(8, 8, (27.75, 12.25), 0.5),
            &window(10, 10, 20, 20, 2.0),
            &src,
            None,
            0.0,
            &mut out
        ));
        // Downsampling.
        assert!(!bilinear_into(
            &mapped(8, 8, (12.25, 12.25), 2.0),
            &window(10, 10, 20, 20, 0.5),
            &src,
            None,
            0.0,
            &mut out
        ));
        // A nodata pixel in the window.
        assert!(!bilinear_into(
            &mapped(8, 8, (12.25, 12.25), 0.5),
            &window(10, 10, 20, 20, 2.0),
            &src,
            Some(5.0),
            0.0,
            &mut out
        ));
        // Another type.
        let i16s = TypedWindow {
            dtype: DType::I16,
            bytes: &bytes[..200],
            ..src
        };
        assert!(!bilinear_into(
            &mapped(8, 8, (12.25, 12.25), 0.5),
            &window(10, 10, 20, 10, 2.0),
            &i16s,
            None,
            0.0,
            &mut out
        ));
        assert!(out.iter().all(|&b| b == 0));
        // And applies where it can: a constant window stays constant.
        assert!(bilinear_into(
            &mapped(8, 8, (12.25, 12.25), 0.5),
            &window(10, 10, 20, 20, 2.0),
            &src,
            None,
            0.0,
            &mut out
        ));
        assert!(out.iter().all(|&b| b == 5));
    }
}
