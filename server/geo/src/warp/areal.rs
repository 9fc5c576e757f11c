//! The areal kernels' loop over a footprint (average and mode): each destination pixel's
//! area from two of its corners, then the kernel over it. For a one-band mode (a class
//! map) it first decides one-value areas from the source's row runs, and a run of
//! destination pixels at once where the box around all their corners holds one valid
//! value: every area inside that box then has that value as its mode.
//!
//! Owns the loop and the one-value shortcuts only; the kernels' arithmetic is
//! [`kernel`]'s. It must never give a pixel another value than [`kernel::mode`] or
//! [`kernel::average`] over that pixel's own area would (tests compare them), and never
//! allocates per pixel.

use super::kernel::{self, Area, Source};
use super::plan::SourceWindow;
use super::{MappedPoints, Resampling};

/// Destination pixels of one row decided together from the box around their corners: a
/// box of 8 pixels of a class map at about its own resolution spans ~9 × 3 source
/// pixels, which one class block usually holds; where it does not, the 8 go one by one.
const ROW_BLOCK: usize = 8;

/// Per pixel of a one-band window: how many pixels from it rightward along its row are
/// valid and hold its value (0 where it is invalid). What [`uniform`] reads.
pub fn runs(src: &Source<'_>) -> Vec<u32> {
    let mut runs = vec![0u32; src.width * src.height];
    let width = src.width.max(1);
    for ((values, valid), row) in src
        .values
        .chunks_exact(width)
        .zip(src.valid.chunks_exact(width))
        .zip(runs.chunks_exact_mut(width))
    {
        let mut next = 0u32;
        for x in (0..values.len()).rev() {
            let same_as_next = x + 1 < values.len() && next > 0 && values[x + 1] == values[x];
            next = if !valid[x] {
                0
            } else if same_as_next {
                next + 1
            } else {
                1
            };
            row[x] = next;
        }
    }
    runs
}

/// The value of the source pixels `ix0..ix1` × `iy0..iy1` where every one is valid and
/// equal (a class map's usual case), read from its rows' [`runs`]: one look per row, not
/// per pixel. None otherwise (or for an empty box).
#[inline]
fn uniform_box(src: &Source<'_>, runs: &[u32], (ix0, ix1): (usize, usize), (iy0, iy1): (usize, usize)) -> Option<f64> {
    let cols = (ix1 - ix0) as u32;
    let first = iy0 * src.width + ix0;
    if cols == 0 || iy1 <= iy0 || runs[first] < cols {
        return None;
    }
    let v = src.values[first];
    for iy in iy0 + 1..iy1 {
        let p = iy * src.width + ix0;
        if runs[p] < cols || src.values[p] != v {
            return None;
        }
    }
    Some(v)
}

/// The value of an area whose every pixel is valid and equal, from [`runs`]; None
/// otherwise (the area then takes [`kernel::mode`], which gives the same value wherever
/// this one gives one).
#[inline]
pub fn uniform(src: &Source<'_>, runs: &[u32], a: &Area) -> Option<f64> {
    uniform_box(src, runs, (a.ix0, a.ix1), (a.iy0, a.iy1))
}

/// The one value of every destination pixel of a row run whose corners are `top` (x, y of
/// the run's upper corners, one more than its pixels) and `bottom` (its lower corners),
/// window pixels, where the source box around them all holds one valid value. None where
/// it does not, where a corner is not finite or outside the margins, or where the box
/// reaches past the window's edges (a pixel there could have an empty area).
///
/// Why it is exact: a pixel's area spans at least its own pixels' floor/ceil ends, which
/// are monotonic in the edges, so they lie inside the box's ends (one pixel more on the
/// high sides covers GDAL's "at least one pixel" rule); every pixel then has an area of
/// valid pixels all equal to the box's value, which is their mode.
fn uniform_row_run(
    src: &Source<'_>,
    runs: &[u32],
    (tx, ty): (&[f64], &[f64]),
    (bx, by): (&[f64], &[f64]),
    (ox, oy): (f64, f64),
    margins: (f64, f64),
) -> Option<f64> {
    // Plain comparisons (a NaN fails them all and is caught by the finiteness test of the
    // sum, as is an infinity).
    let bounds = |a: &[f64], b: &[f64], o: f64| {
        let (mut lo, mut hi, mut sum) = (a[0], a[0], 0.0);
        for &v in a.iter().chain(b) {
            sum += v;
            if v < lo {
                lo = v;
            }
            if v > hi {
                hi = v;
            }
        }
        sum.is_finite().then_some((lo - o, hi - o))
    };
    let (x_lo, x_hi) = bounds(tx, bx, ox)?;
    let (y_lo, y_hi) = bounds(ty, by, oy)?;
    let (w, h) = (src.width as f64, src.height as f64);
    let inside = |lo: f64, hi: f64, size: f64, m: f64| lo >= -m && hi - size <= m;
    if !(inside(x_lo, x_hi, w, margins.0) && inside(y_lo, y_hi, h, margins.1)) {
        return None;
    }
    // A pixel whose area lies a pixel or more before the window's first column or row
    // has an empty span (no value): leave runs near those edges to the pixels alone.
    if x_lo <= -0.5 || y_lo <= -0.5 {
        return None;
    }
    let (ix0, ix1) = kernel::span(x_lo, x_hi, w);
    let (iy0, iy1) = kernel::span(y_lo, y_hi, h);
    if ix1 + 1 > src.width || iy1 + 1 > src.height {
        return None;
    }
    uniform_box(src, runs, (ix0, ix1 + 1), (iy0, iy1 + 1))
}

/// Average or mode of every destination pixel of `mapped` (corners) over `src`, into
/// `values` (one band plane after another) and `valid`.
pub(super) fn warp_areal(
    mapped: &MappedPoints,
    window: &SourceWindow,
    src: &Source<'_>,
    resampling: Resampling,
    values: &mut [f64],
    valid: &mut [bool],
) {
    let (w, h) = (mapped.width, mapped.height);
    let n = w * h;
    let (ox, oy) = (window.col as f64, window.row as f64);
    let margin = |s: f64| 2.0 * (1.0f64).max((1.0 / s).ceil());
    let margins = (margin(window.x_scale), margin(window.y_scale));
    // The mode's value counts, kept across pixels (no allocation per pixel); for one band,
    // the row runs that decide one-value areas with a look per row.
    let mut counts = Vec::new();
    let mut px = vec![0.0; src.bands];
    let runs = (resampling == Resampling::Mode && src.bands == 1).then(|| runs(src));
    let (cx, cy) = (&mapped.xs, &mapped.ys);
    let mut one = |p: usize, c1: usize, c2: usize, values: &mut [f64], valid: &mut [bool]| {
        let (x1, y1, x2, y2) = (cx[c1] - ox, cy[c1] - oy, cx[c2] - ox, cy[c2] - oy);
        if !(x1.is_finite() && y1.is_finite() && x2.is_finite() && y2.is_finite()) {
            return;
        }
        let Some(area) = kernel::area(src, (x1, y1), (x2, y2), margins) else {
            return;
        };
        if let Some(v) = runs.as_deref().and_then(|r| uniform(src, r, &area)) {
            values[p] = v;
            valid[p] = true;
            return;
        }
        let ok = match resampling {
            Resampling::Average => kernel::average(src, &area, &mut px),
            _ => kernel::mode(src, &area, &mut px, &mut counts),
        };
        if ok {
            valid[p] = true;
            for (b, v) in px.iter().enumerate() {
                values[b * n + p] = *v;
            }
        }
    };
    for i in 0..h {
        let mut j = 0;
        while j < w {
            let k = ROW_BLOCK.min(w - j);
            if let Some(r) = runs.as_deref() {
                let (top, bottom) = (i * (w + 1) + j, (i + 1) * (w + 1) + j);
                let (t, b) = (top..top + k + 1, bottom..bottom + k + 1);
                let (top_xy, bottom_xy) = ((&cx[t.clone()], &cy[t]), (&cx[b.clone()], &cy[b]));
                if let Some(v) = uniform_row_run(src, r, top_xy, bottom_xy, (ox, oy), margins) {
                    values[i * w + j..i * w + j + k].fill(v);
                    valid[i * w + j..i * w + j + k].fill(true);
                    j += k;
                    continue;
                }
            }
            for jj in j..j + k {
                one(i * w + jj, i * (w + 1) + jj, (i + 1) * (w + 1) + jj + 1, values, valid);
            }
            j += k;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warp::kernel::{area, mode};
    use crate::warp::test_rng::below;
    use crate::warp::test_rng::one_band as src;

    /// A class map of `w` × `h`: blocks of one class `block` pixels wide, a few invalid
    /// pixels, now and then a NaN.
    fn class_map(seed: &mut u64, w: usize, h: usize, block: usize) -> (Vec<f64>, Vec<bool>) {
        let classes: Vec<f64> = (0..w * h).map(|_| below(seed, 3) as f64).collect();
        let values = (0..w * h)
            .map(|p| match below(seed, 40) {
                0 => f64::NAN,
                _ => classes[(p / w / block) * w + (p % w) / block],
            })
            .collect();
        let valid = (0..w * h).map(|_| below(seed, 25) != 0).collect();
        (values, valid)
    }

    fn same(a: f64, b: f64) -> bool {
        a == b || (a.is_nan() && b.is_nan())
    }

    #[test]
    fn uniform_areas_take_the_value_the_mode_gives() {
        let mut seed = 5u64;
        let (w, h) = (11, 9);
        let mut hits = 0;
        for _ in 0..3000 {
            let block = 1 + below(&mut seed, 4) as usize;
            let (values, valid) = class_map(&mut seed, w, h, block);
            let s = src(w, h, &values, &valid);
            let runs = runs(&s);
            let (x, y) = (below(&mut seed, 7) as f64 + 0.4, below(&mut seed, 5) as f64 + 0.7);
            let (dx, dy) = (below(&mut seed, 3) as f64 + 0.3, below(&mut seed, 3) as f64 + 0.6);
            let a = area(&s, (x, y), (x + dx, y + dy), (2.0, 2.0)).unwrap();
            let mut out = [0.0];
            let ok = mode(&s, &a, &mut out, &mut Vec::new());
            if let Some(v) = uniform(&s, &runs, &a) {
                hits += 1;
                assert!(ok && same(out[0], v), "{v} {out:?}");
                for iy in a.iy0..a.iy1 {
                    for ix in a.ix0..a.ix1 {
                        assert!(valid[iy * w + ix] && same(values[iy * w + ix], v));
                    }
                }
            }
        }
        assert!(hits > 300, "{hits}");
    }

    /// Every pixel's own mode, one pixel at a time: what the row runs must reproduce.
    fn mode_per_pixel(mapped: &MappedPoints, window: &SourceWindow, s: &Source<'_>) -> (Vec<f64>, Vec<bool>) {
        let (w, h) = (mapped.width, mapped.height);
        let (mut values, mut valid) = (vec![0.0; w * h], vec![false; w * h]);
        let (ox, oy) = (window.col as f64, window.row as f64);
        let margin = |sc: f64| 2.0 * (1.0f64).max((1.0 / sc).ceil());
        for i in 0..h {
            for j in 0..w {
                let (c1, c2) = (i * (w + 1) + j, (i + 1) * (w + 1) + j + 1);
                let (x1, y1) = (mapped.xs[c1] - ox, mapped.ys[c1] - oy);
                let (x2, y2) = (mapped.xs[c2] - ox, mapped.ys[c2] - oy);
                if !(x1.is_finite() && y1.is_finite() && x2.is_finite() && y2.is_finite()) {
                    continue;
                }
                let Some(a) = area(s, (x1, y1), (x2, y2), (margin(window.x_scale), margin(window.y_scale))) else {
                    continue;
                };
                let mut out = [0.0];
                if mode(s, &a, &mut out, &mut Vec::new()) {
                    values[i * w + j] = out[0];
                    valid[i * w + j] = true;
                }
            }
        }
        (values, valid)
    }

    #[test]
    fn row_runs_decide_as_each_pixel_alone() {
        let mut seed = 11u64;
        let mut blocks = 0;
        for round in 0..400 {
            let (sw, sh) = (20 + below(&mut seed, 30) as usize, 12 + below(&mut seed, 20) as usize);
            let block = 1 + below(&mut seed, 9) as usize;
            let (values, valid) = class_map(&mut seed, sw, sh, block);
            let s = src(sw, sh, &values, &valid);
            // A footprint at about the source's resolution, rotated and sheared a little,
            // shifted so that some corners fall outside the window (and now and then one
            // is not finite).
            let (w, h) = (1 + below(&mut seed, 24) as usize, 1 + below(&mut seed, 10) as usize);
            let scale = 0.5 + below(&mut seed, 100) as f64 / 80.0;
            let (rot, shear) = (
                below(&mut seed, 100) as f64 / 2000.0,
                below(&mut seed, 100) as f64 / 3000.0,
            );
            let (x0, y0) = (below(&mut seed, 8) as f64 - 3.3, below(&mut seed, 8) as f64 - 3.6);
            let (mut xs, mut ys) = (Vec::new(), Vec::new());
            for i in 0..=h {
                for j in 0..=w {
                    let (u, v) = (j as f64 * scale, i as f64 * scale);
                    xs.push(x0 + u + v * rot);
                    ys.push(y0 + v - u * rot + u * shear);
                }
            }
            if round % 37 == 0 {
                let at = below(&mut seed, xs.len() as u64) as usize;
                xs[at] = f64::NAN;
            }
            let mapped = MappedPoints {
                width: w,
                height: h,
                xs,
                ys,
                axes: None,
            };
            let window = SourceWindow {
                col: 0,
                row: 0,
                width: sw as u64,
                height: sh as u64,
                x_scale: 1.0 / scale,
                y_scale: 1.0 / scale,
            };
            let (mut got, mut got_valid) = (vec![0.0; w * h], vec![false; w * h]);
            warp_areal(&mapped, &window, &s, Resampling::Mode, &mut got, &mut got_valid);
            let (want, want_valid) = mode_per_pixel(&mapped, &window, &s);
            for p in 0..w * h {
                assert_eq!(
                    got_valid[p], want_valid[p],
                    "round {round} pixel {p} of {w}x{h}, window {sw}x{sh}, scale {scale}, x0 {x0} y0 {y0}"
                );
            }
            for p in 0..w * h {
                assert!(
                    !want_valid[p] || same(got[p], want[p]),
                    "round {round} pixel {p}: {} {}",
                    got[p],
                    want[p]
                );
            }
            let r = runs(&s);
            for i in 0..h {
                let k = ROW_BLOCK.min(w);
                let (t, b) = (i * (w + 1), (i + 1) * (w + 1));
                let sl = |v: &[f64], a: usize| v[a..=a + k].to_vec();
                let (tx, ty, bx, by) = (
                    sl(&mapped.xs, t),
                    sl(&mapped.ys, t),
                    sl(&mapped.xs, b),
                    sl(&mapped.ys, b),
                );
                blocks +=
                    usize::from(uniform_row_run(&s, &r, (&tx, &ty), (&bx, &by), (0.0, 0.0), (2.0, 2.0)).is_some());
            }
        }
        // The row runs were taken, not only the pixel-by-pixel path.
        assert!(blocks > 40, "{blocks}");
    }
}
