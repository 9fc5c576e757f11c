//! The areal kernels' loop over a footprint (average and mode): each destination pixel's
//! area from two of its corners, then the kernel over it. For a one-band mode (a class
//! map) it first decides one-value areas from the source's row runs, and keeps the last
//! one-value box found, stretched along the runs, as a region: the next pixels of the row,
//! whose areas usually lie inside it, take its value from a few comparisons of their edges.
//!
//! Owns the loop and the one-value shortcuts only; the kernels' arithmetic is
//! [`kernel`]'s. It must never give a pixel another value than [`kernel::mode`] or
//! [`kernel::average`] over that pixel's own area would (tests compare them), and never
//! allocates per pixel.

use super::kernel::{self, Source};
use super::plan::SourceWindow;
use super::{MappedPoints, Resampling};

/// Per pixel of a one-band window: how many pixels from it rightward along its row are
/// valid and hold its value (0 where it is invalid; a NaN is a run of its own). What
/// [`Region::of_area`] reads.
pub fn runs(src: &Source<'_>) -> Vec<u32> {
    let mut runs = vec![0u32; src.width * src.height];
    let width = src.width.max(1);
    for ((values, valid), row) in src
        .values
        .chunks_exact(width)
        .zip(src.valid.chunks_exact(width))
        .zip(runs.chunks_exact_mut(width))
    {
        // Segment by segment, left to right: one comparison per pixel, then the segment's
        // counts in a loop a compiler vectorises.
        let mut x = 0;
        while x < values.len() {
            if !valid[x] {
                x += 1;
                continue;
            }
            let v = values[x];
            let mut end = x + 1;
            while end < values.len() && valid[end] && values[end] == v {
                end += 1;
            }
            for (k, r) in row[x..end].iter_mut().enumerate() {
                *r = (end - x - k) as u32;
            }
            x = end;
        }
    }
    runs
}

/// Rows a [`Region`] holds at most: a destination pixel about as fine as its source
/// covers two or three.
const REGION_ROWS: usize = 4;

/// A box of valid source pixels whose every row holds one value (a class map's block, or
/// the rows on both sides of a boundary between two classes' blocks): columns
/// `ends[0]..ends[1]` of rows `ends[2]..ends[3]`. Built from a pixel's area whose rows are
/// each one value, stretched right as far as every one of its rows keeps its value (what
/// [`runs`] says). The mode of any area inside it follows from its rows' values alone.
#[derive(Debug, Clone, Copy)]
struct Region {
    /// The box's ends as floats: first and end column, first and end row.
    ends: [f64; 4],
    /// The first row, and each row's value.
    first_row: usize,
    row_values: [f64; REGION_ROWS],
    /// The value where every row holds the same one.
    one: Option<f64>,
}

impl Region {
    /// The region of the area `cols` × `rows` where each of its rows is valid and one value
    /// over `cols` (None otherwise, or for an empty area), stretched right along its rows'
    /// runs: one look per row.
    #[inline]
    fn of_area(src: &Source<'_>, runs: &[u32], (ix0, ix1): (usize, usize), (iy0, iy1): (usize, usize)) -> Option<Self> {
        let cols = (ix1 - ix0) as u32;
        if cols == 0 || iy1 <= iy0 || iy1 - iy0 > REGION_ROWS {
            return None;
        }
        let (mut reach, mut row_values) = (usize::MAX, [0.0; REGION_ROWS]);
        for (k, iy) in (iy0..iy1).enumerate() {
            let p = iy * src.width + ix0;
            if runs[p] < cols {
                return None;
            }
            reach = reach.min(ix0 + runs[p] as usize);
            row_values[k] = src.values[p];
        }
        let v = row_values[0];
        let one = row_values[1..iy1 - iy0].iter().all(|&u| u == v).then_some(v);
        Some(Self {
            ends: [ix0 as f64, reach as f64, iy0 as f64, iy1 as f64],
            first_row: iy0,
            row_values,
            one,
        })
    }

    /// The mode of the area whose rows are `iy0..iy1` (inside the region): the value of the
    /// most rows, ties to the first row's (every row adds as many pixels, and a value
    /// reaches `k` rows' worth first where its `k`-th row comes first, rows top-down).
    #[inline]
    fn mode_of_rows(&self, (iy0, iy1): (usize, usize)) -> f64 {
        match self.one {
            Some(v) => v,
            None => kernel::first_most_frequent(&self.row_values[iy0 - self.first_row..iy1 - self.first_row]),
        }
    }

    /// Whether the area with edges `x` = (lo, hi) and `y` (window pixels) lies inside the
    /// region: then its span ([`kernel::span`]) does, and every pixel of it holds the
    /// region's value. Exact without the span: for `a = lo + 1e-10 < b = hi - 1e-10` the
    /// span is `floor(a)..ceil(b)` (no "at least one pixel" step, and no clamp inside the
    /// window), and for whole ends `c0 ≤ floor(a) ⇔ c0 ≤ a`, `ceil(b) ≤ c1 ⇔ b ≤ c1`. A
    /// NaN or an infinity fails a comparison (and the margin test then is moot: the region
    /// lies inside the window).
    #[inline]
    fn holds(&self, x: (f64, f64), y: (f64, f64)) -> bool {
        let inside = |(lo, hi): (f64, f64), c0: f64, c1: f64| {
            let (a, b) = (lo + 1e-10, hi - 1e-10);
            a < b && a >= c0 && b <= c1
        };
        inside(x, self.ends[0], self.ends[1]) && inside(y, self.ends[2], self.ends[3])
    }
}

/// Two edges in order (a NaN fails every region test whichever side it lands on).
#[inline]
fn ordered(a: f64, b: f64) -> (f64, f64) {
    if a <= b { (a, b) } else { (b, a) }
}

/// Average or mode of every destination pixel of `mapped` (corners) over `src`: values
/// (one band plane after another) and validity, each buffer written once (no zeroing
/// first: a label's are the largest of a sample). Also how many pixels a region decided
/// (what tests check the shortcut with).
pub(super) fn warp_areal(
    mapped: &MappedPoints,
    window: &SourceWindow,
    src: &Source<'_>,
    resampling: Resampling,
) -> (Vec<f64>, Vec<bool>, usize) {
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
    // The last one-value region found (one band's mode): areas inside it take its value.
    let mut region: Option<Region> = None;
    let mut by_region = 0;
    // Band 0 and validity pixel after pixel; the other bands (average only) beside.
    let (mut values, mut valid) = (Vec::with_capacity(src.bands * n), Vec::with_capacity(n));
    let mut rest = vec![0.0; src.bands.saturating_sub(1) * n];
    let mut pixel = |p: usize, (x1, y1): (f64, f64), (x2, y2): (f64, f64)| -> Option<f64> {
        let (x1, y1, x2, y2) = (x1 - ox, y1 - oy, x2 - ox, y2 - oy);
        if let Some(g) = &region {
            let y = ordered(y1, y2);
            if g.holds(ordered(x1, x2), y) {
                by_region += 1;
                return Some(match g.one {
                    Some(v) => v,
                    // Inside the region the rows' span is plain floor/ceil (`holds`).
                    None => g.mode_of_rows(kernel::span(y.0, y.1, src.height as f64)),
                });
            }
        }
        if !(x1.is_finite() && y1.is_finite() && x2.is_finite() && y2.is_finite()) {
            return None;
        }
        let area = kernel::area(src, (x1, y1), (x2, y2), margins)?;
        if let Some(r) = runs.as_deref() {
            let rows = (area.iy0, area.iy1);
            if let Some(g) = Region::of_area(src, r, (area.ix0, area.ix1), rows) {
                let v = g.mode_of_rows(rows);
                region = Some(g);
                return Some(v);
            }
        }
        let decided = match resampling {
            Resampling::Average => kernel::average(src, &area, &mut px),
            _ => kernel::mode(src, &area, &mut px, &mut counts),
        };
        if !decided {
            return None;
        }
        for (b, v) in px.iter().enumerate().skip(1) {
            rest[(b - 1) * n + p] = *v;
        }
        Some(px[0])
    };
    for i in 0..h {
        // Pixel j's corners: (j, i) on the top row and (j + 1, i + 1) on the bottom one.
        let (top, bottom) = (i * (w + 1)..(i + 1) * (w + 1), (i + 1) * (w + 1) + 1..(i + 2) * (w + 1));
        let corners = mapped.xs[top.clone()]
            .iter()
            .zip(&mapped.ys[top])
            .zip(mapped.xs[bottom.clone()].iter().zip(&mapped.ys[bottom]));
        for (j, ((&x1, &y1), (&x2, &y2))) in corners.enumerate() {
            let v = pixel(i * w + j, (x1, y1), (x2, y2));
            valid.push(v.is_some());
            values.push(v.unwrap_or(0.0));
        }
    }
    values.extend_from_slice(&rest);
    (values, valid, by_region)
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
    fn areas_of_a_region_take_the_value_the_mode_gives() {
        let mut seed = 5u64;
        let (w, h) = (11, 9);
        let (mut hits, mut striped) = (0, 0);
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
            if let Some(g) = Region::of_area(&s, &runs, (a.ix0, a.ix1), (a.iy0, a.iy1)) {
                hits += 1;
                striped += usize::from(g.one.is_none());
                let v = g.mode_of_rows((a.iy0, a.iy1));
                assert!(ok && same(out[0], v), "{v} {out:?}");
                // Every pixel of the region is valid and holds its row's value.
                let reach = g.ends[1] as usize;
                for iy in a.iy0..a.iy1 {
                    for ix in a.ix0..reach {
                        let row_value = g.row_values[iy - g.first_row];
                        assert!(valid[iy * w + ix] && same(values[iy * w + ix], row_value));
                    }
                }
            }
        }
        // Both one-value regions and regions whose rows differ were checked.
        assert!(hits > 300 && striped > 30, "{hits} {striped}");
    }

    #[test]
    fn runs_count_equal_valid_pixels_rightward() {
        let mut seed = 3u64;
        for _ in 0..200 {
            let (w, h) = (1 + below(&mut seed, 30) as usize, 1 + below(&mut seed, 6) as usize);
            let block = 1 + below(&mut seed, 6) as usize;
            let (values, valid) = class_map(&mut seed, w, h, block);
            let s = src(w, h, &values, &valid);
            let r = runs(&s);
            for y in 0..h {
                for x in 0..w {
                    let p = y * w + x;
                    // A valid NaN is a run of one: no other value equals it.
                    let want = match values[p].is_nan() {
                        true => usize::from(valid[p]),
                        false => (x..w)
                            .take_while(|&k| valid[y * w + k] && values[y * w + k] == values[p])
                            .count(),
                    };
                    assert_eq!(r[p] as usize, want, "{x},{y} of {w}x{h}");
                }
            }
        }
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
    fn regions_decide_as_each_pixel_alone() {
        let mut seed = 11u64;
        let mut regions = 0;
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
            let (got, got_valid, by_region) = warp_areal(&mapped, &window, &s, Resampling::Mode);
            regions += by_region;
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
        }
        // Regions decided pixels, not only the pixel-by-pixel path.
        assert!(regions > 2000, "{regions}");
    }
}
