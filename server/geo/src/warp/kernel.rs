//! Resampling kernels over one source window, as GDAL 3.6's warp kernel computes them with
//! a source validity mask: nearest, bilinear and cubic (4×4 Catmull-Rom) at a pixel centre,
//! their scaled forms when downsampling, and area-weighted average and mode over a
//! destination pixel's corners. Values are f64; validity is one mask for all bands (GDAL's
//! unified source mask: a pixel is invalid only where every band is nodata).

/// `v.floor()` without a libm call (the baseline x86-64 target has no rounding
/// instruction); exact for |v| < 2^63.
#[inline]
pub fn floor(v: f64) -> f64 {
    let t = v as i64 as f64;
    if t > v { t - 1.0 } else { t }
}

/// A decoded source window: band-major values and one validity flag per pixel.
#[derive(Debug, Clone)]
pub struct Source<'a> {
    /// Width of the window, in source pixels.
    pub width: usize,
    /// Height of the window, in source pixels.
    pub height: usize,
    /// Number of bands.
    pub bands: usize,
    /// Values `bands × height × width`, band-major.
    pub values: &'a [f64],
    /// Validity `height × width`, row-major: one flag per pixel for all bands.
    pub valid: &'a [bool],
}

impl Source<'_> {
    #[inline]
    fn ok(&self, x: isize, y: isize) -> bool {
        x >= 0
            && y >= 0
            && (x as usize) < self.width
            && (y as usize) < self.height
            && self.valid[y as usize * self.width + x as usize]
    }
    #[inline]
    fn v(&self, band: usize, x: usize, y: usize) -> f64 {
        self.values[(band * self.height + y) * self.width + x]
    }
}

/// The source pixel that holds a centre at (`x`, `y`) (window pixels), None when the
/// centre lies outside the window.
#[inline]
pub fn centre_pixel(src: &Source<'_>, x: f64, y: f64) -> Option<(usize, usize)> {
    Some((centre_index(x, src.width)?, centre_index(y, src.height)?))
}

/// Along one axis of `size` pixels: the pixel holding coordinate `v`, None outside.
#[inline]
pub(crate) fn centre_index(v: f64, size: usize) -> Option<usize> {
    if !(v >= 0.0 && v + 1e-10 <= size as f64) {
        return None;
    }
    Some(((v + 1e-10) as usize).min(size - 1))
}

/// Nearest: the value of the pixel under the centre, for every band.
pub fn nearest(src: &Source<'_>, ix: usize, iy: usize, out: &mut [f64]) -> bool {
    for (b, o) in out.iter_mut().enumerate() {
        *o = src.v(b, ix, iy);
    }
    true
}

/// Bilinear over the 2×2 neighbours, weights renormalised over the valid ones.
pub fn bilinear4(src: &Source<'_>, x: f64, y: f64, out: &mut [f64]) -> bool {
    let (ix, rx) = bilinear_axis(x);
    let (iy, ry) = bilinear_axis(y);
    bilinear_at(src, (ix, rx), (iy, ry), out)
}

/// Along one axis: the first of the two neighbours of coordinate `v` and its weight.
#[inline]
pub(crate) fn bilinear_axis(v: f64) -> (isize, f64) {
    let i = floor(v - 0.5) as isize;
    if i == -1 { (0, 1.0) } else { (i, 1.5 - (v - i as f64)) }
}

/// [`bilinear4`] from each axis's first neighbour and weight ([`bilinear_axis`]).
#[inline]
pub(crate) fn bilinear_at(src: &Source<'_>, (ix, rx): (isize, f64), (iy, ry): (isize, f64), out: &mut [f64]) -> bool {
    let taps = [
        (ix, iy, rx * ry),
        (ix + 1, iy, (1.0 - rx) * ry),
        (ix, iy + 1, rx * (1.0 - ry)),
        (ix + 1, iy + 1, (1.0 - rx) * (1.0 - ry)),
    ];
    // The valid taps once, as (offset in a band plane, weight).
    let mut live = [(0usize, 0.0f64); 4];
    let mut count = 0;
    let mut div = 0.0;
    for &(tx, ty, w) in &taps {
        if src.ok(tx, ty) {
            live[count] = (ty as usize * src.width + tx as usize, w);
            count += 1;
            div += w;
        }
    }
    if div < 1e-5 {
        return false;
    }
    let plane = src.width * src.height;
    for (b, o) in out.iter_mut().enumerate() {
        let values = &src.values[b * plane..(b + 1) * plane];
        let mut acc = 0.0;
        for &(at, w) in &live[..count] {
            acc += w * values[at];
        }
        *o = if div == 1.0 { acc } else { acc / div };
    }
    true
}

#[inline]
pub(crate) fn cubic_weights(t: f64) -> [f64; 4] {
    [
        0.5 * t * (-1.0 + t * (2.0 - t)),
        1.0 + 0.5 * t * t * (-5.0 + 3.0 * t),
        0.5 * t * (1.0 + t * (4.0 - 3.0 * t)),
        0.5 * t * t * (t - 1.0),
    ]
}

/// Cubic (Keys, a = −0.5) over the 4×4 neighbours; falls back to bilinear at the window's
/// border or where a neighbour is invalid, as GDAL does.
pub fn cubic4(src: &Source<'_>, x: f64, y: f64, out: &mut [f64]) -> bool {
    let ix = (x - 0.5) as isize;
    let iy = (y - 0.5) as isize;
    let (tx, ty) = (x - 0.5 - ix as f64, y - 0.5 - iy as f64);
    if ix - 1 < 0 || iy - 1 < 0 || ix + 2 >= src.width as isize || iy + 2 >= src.height as isize {
        return bilinear4(src, x, y, out);
    }
    for j in -1..=2 {
        for i in -1..=2 {
            if !src.ok(ix + i, iy + j) {
                return bilinear4(src, x, y, out);
            }
        }
    }
    let wx = cubic_weights(tx);
    let wy = cubic_weights(ty);
    for (b, o) in out.iter_mut().enumerate() {
        let mut acc = 0.0;
        for (j, wyj) in wy.iter().enumerate() {
            let row = (iy - 1 + j as isize) as usize;
            let mut r = 0.0;
            for (i, wxi) in wx.iter().enumerate() {
                r += wxi * src.v(b, (ix - 1 + i as isize) as usize, row);
            }
            acc += wyj * r;
        }
        *o = acc;
    }
    true
}

/// A separable filter for the scaled (downsampling) path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// Tent filter, radius 1 source pixel at scale 1.
    Bilinear,
    /// Catmull-Rom cubic filter (Keys, a = −0.5), radius 2 source pixels at scale 1.
    Cubic,
}

impl Filter {
    fn radius(self) -> i64 {
        match self {
            Filter::Bilinear => 1,
            Filter::Cubic => 2,
        }
    }

    #[inline]
    fn weight(self, x: f64) -> f64 {
        let a = x.abs();
        match self {
            Filter::Bilinear => {
                if a <= 1.0 {
                    1.0 - a
                } else {
                    0.0
                }
            }
            Filter::Cubic => {
                if a <= 1.0 {
                    x * x * (1.5 * a - 2.5) + 1.0
                } else if a <= 2.0 {
                    x * x * (-0.5 * a + 2.5) - 4.0 * a + 2.0
                } else {
                    0.0
                }
            }
        }
    }
}

/// The filter's taps along one axis for a given scale: (first offset, last offset).
pub fn filter_extent(filter: Filter, scale: f64) -> (i64, i64) {
    let r = filter.radius();
    let radius = if scale < 1.0 {
        (r as f64 / scale).ceil() as i64
    } else {
        r
    };
    (((r + 1) % 2) - radius, radius)
}

/// The general (scaled) kernel: the filter stretched by 1/scale along each axis where the
/// scale is below 1, weights renormalised over the valid taps.
pub fn scaled(src: &Source<'_>, filter: Filter, x: f64, y: f64, sx: f64, sy: f64, out: &mut [f64]) -> bool {
    let ix = floor(x - 0.5) as i64;
    let iy = floor(y - 0.5) as i64;
    let (dx, dy) = (x - 0.5 - ix as f64, y - 0.5 - iy as f64);
    let (fx0, fx1) = filter_extent(filter, sx);
    let (fy0, fy1) = filter_extent(filter, sy);
    let (w, h) = (src.width as i64, src.height as i64);
    let (i0, i1) = (fx0.max(-ix), fx1.min(w - ix - 1));
    let (j0, j1) = (fy0.max(-iy), fy1.min(h - iy - 1));
    if i0 > i1 || j0 > j1 {
        return false;
    }
    let weight = |f: Filter, d: f64, s: f64| if s < 1.0 { f.weight(d * s) } else { f.weight(d) };
    let wx: Vec<f64> = (i0..=i1).map(|i| weight(filter, i as f64 - dx, sx)).collect();
    let mut total = 0.0;
    out.iter_mut().for_each(|o| *o = 0.0);
    for j in j0..=j1 {
        let row = (iy + j) as usize;
        let wy = weight(filter, j as f64 - dy, sy);
        let mut row_w = 0.0;
        for (k, i) in (i0..=i1).enumerate() {
            let col = (ix + i) as usize;
            if !src.valid[row * src.width + col] {
                continue;
            }
            row_w += wx[k];
            for (b, o) in out.iter_mut().enumerate() {
                *o += wx[k] * wy * src.v(b, col, row);
            }
        }
        total += row_w * wy;
    }
    if total < 1e-6 {
        return false;
    }
    if !(0.99999..=1.00001).contains(&total) {
        out.iter_mut().for_each(|o| *o /= total);
    }
    true
}

/// The source pixels under one destination pixel for average and mode: index ranges and
/// the unclamped edges GDAL weights partial pixels with.
#[derive(Debug, Clone, Copy)]
pub struct Area {
    pub(crate) x_min: f64,
    pub(crate) x_max: f64,
    pub(crate) y_min: f64,
    pub(crate) y_max: f64,
    pub(crate) ix0: usize,
    pub(crate) ix1: usize,
    pub(crate) iy0: usize,
    pub(crate) iy1: usize,
}

/// The area of the destination pixel whose corners map to (`x1`, `y1`) and (`x2`, `y2`)
/// (window pixels), None when GDAL's margin check skips it. `margin_x`/`margin_y`:
/// `2·max(1, ceil(1/scale))`.
#[inline]
pub fn area(src: &Source<'_>, c1: (f64, f64), c2: (f64, f64), margin: (f64, f64)) -> Option<Area> {
    let (w, h) = (src.width as f64, src.height as f64);
    let (mut x1, mut y1) = c1;
    let (mut x2, mut y2) = c2;
    let inside = |v: f64, size: f64, m: f64| v >= -m && v - size <= m;
    if !(inside(x1, w, margin.0) && inside(x2, w, margin.0) && inside(y1, h, margin.1) && inside(y2, h, margin.1)) {
        return None;
    }
    if x1 > x2 {
        std::mem::swap(&mut x1, &mut x2);
    }
    if y1 > y2 {
        std::mem::swap(&mut y1, &mut y2);
    }
    let (ix0, ix1) = span(x1, x2, w);
    let (iy0, iy1) = span(y1, y2, h);
    Some(Area {
        x_min: x1,
        x_max: x2,
        y_min: y1,
        y_max: y2,
        ix0,
        ix1,
        iy0,
        iy1,
    })
}

/// The source pixels `first..end` under the edges `lo..hi` (`lo <= hi`, window pixels) of
/// one destination pixel along an axis of `size` source pixels, as GDAL's areal kernels
/// count them: at least one pixel where the axis allows it.
#[inline]
pub(crate) fn span(lo: f64, hi: f64, size: f64) -> (usize, usize) {
    // In integers: floor(lo + 1e-10) clamped to 0..=size, ceil(hi - 1e-10) at most size
    // (the float form's results for any edge within ±2^62, without its NaN-aware min/max
    // and saturating casts: this runs twice per destination pixel of the areal kernels).
    // Edges beyond ±2^62 saturate to the same clamped ends.
    let size = size as i64;
    let (a, b) = (lo + 1e-10, hi - 1e-10);
    let (ta, tb) = (a as i64, b as i64);
    let i0 = (ta - i64::from((ta as f64) > a)).clamp(0, size);
    let mut i1 = (tb + i64::from((tb as f64) < b)).min(size);
    if i0 == i1 && i1 < size {
        i1 += 1;
    }
    (i0 as usize, i1.max(i0) as usize)
}

/// The weight of source pixel `i` of the span `first..end` under the edges `lo..hi`: the
/// covered part of a partial first or last pixel, 1 inside (and for a one-pixel span).
#[inline]
pub(crate) fn edge_weight(i: usize, first: usize, end: usize, lo: f64, hi: f64) -> f64 {
    if i == first {
        if first + 1 == end {
            1.0
        } else {
            1.0 - (lo - first as f64)
        }
    } else if i + 1 == end {
        1.0 - (end as f64 - hi)
    } else {
        1.0
    }
}

impl Area {
    #[inline]
    fn weight_y(&self, iy: usize) -> f64 {
        edge_weight(iy, self.iy0, self.iy1, self.y_min, self.y_max)
    }
    #[inline]
    fn weight(&self, ix: usize, wy: f64) -> f64 {
        wy * edge_weight(ix, self.ix0, self.ix1, self.x_min, self.x_max)
    }
}

/// Area-weighted average of the valid pixels under `area`.
#[inline]
pub fn average(src: &Source<'_>, a: &Area, out: &mut [f64]) -> bool {
    // Column weights are the same on every row: the partial first and last columns.
    let wx = |ix: usize| a.weight(ix, 1.0);
    let plane = src.width * src.height;
    let mut total = 0.0;
    if out.len() == 1 {
        let mut acc = 0.0;
        for iy in a.iy0..a.iy1 {
            let wy = a.weight_y(iy);
            let row = iy * src.width;
            let (valid, values) = (
                &src.valid[row + a.ix0..row + a.ix1],
                &src.values[row + a.ix0..row + a.ix1],
            );
            for (k, (&ok, &v)) in valid.iter().zip(values).enumerate() {
                if ok {
                    let w = wy * wx(a.ix0 + k);
                    total += w;
                    acc += w * v;
                }
            }
        }
        if total <= 0.0 {
            return false;
        }
        out[0] = acc / total;
        return true;
    }
    out.iter_mut().for_each(|o| *o = 0.0);
    for iy in a.iy0..a.iy1 {
        let wy = a.weight_y(iy);
        let row = iy * src.width;
        for ix in a.ix0..a.ix1 {
            if !src.valid[row + ix] {
                continue;
            }
            let w = wy * wx(ix);
            total += w;
            for (b, o) in out.iter_mut().enumerate() {
                *o += w * src.values[b * plane + row + ix];
            }
        }
    }
    if total <= 0.0 {
        return false;
    }
    out.iter_mut().for_each(|o| *o /= total);
    true
}

/// Areas of up to this many source pixels take the mode through a stack array (the
/// label case: a destination pixel about as fine as its source covers 2×2 or 3×2).
const SMALL_AREA: usize = 16;

/// The most frequent valid value under `area`, per band; ties go to the value that reached
/// the winning count first (rows top-down, columns left to right). `counts` is scratch space
/// the caller keeps across pixels.
pub fn mode(src: &Source<'_>, a: &Area, out: &mut [f64], counts: &mut Vec<(f64, u32)>) -> bool {
    if (a.ix1 - a.ix0) * (a.iy1 - a.iy0) <= SMALL_AREA {
        mode_small(src, a, out)
    } else {
        mode_counted(src, a, out, counts)
    }
}

/// [`mode`] over a table of the values seen and their counts.
fn mode_counted(src: &Source<'_>, a: &Area, out: &mut [f64], counts: &mut Vec<(f64, u32)>) -> bool {
    let mut any = false;
    for (b, o) in out.iter_mut().enumerate() {
        counts.clear();
        let (mut best, mut best_n) = (0.0, 0u32);
        for iy in a.iy0..a.iy1 {
            for ix in a.ix0..a.ix1 {
                if !src.valid[iy * src.width + ix] {
                    continue;
                }
                let v = src.v(b, ix, iy);
                let n = match counts.iter_mut().find(|(cv, _)| same(*cv, v)) {
                    Some(c) => {
                        c.1 += 1;
                        c.1
                    }
                    None => {
                        counts.push((v, 1));
                        1
                    }
                };
                if n > best_n {
                    best = v;
                    best_n = n;
                }
            }
        }
        if best_n == 0 {
            return false;
        }
        any = true;
        *o = best;
    }
    any
}

/// Two values one mode counts as the same: equal, or both NaN.
#[inline]
fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// [`mode`] of an area of at most [`SMALL_AREA`] pixels: the valid values gathered in
/// scan order (for one band straight from the rows), then [`first_most_frequent`], which
/// decides as the general form does. (One-value areas of a one-band window rarely get
/// here: the warp decides them from the source's row runs first.)
#[inline]
fn mode_small(src: &Source<'_>, a: &Area, out: &mut [f64]) -> bool {
    if out.len() != 1 {
        return mode_small_bands(src, a, out);
    }
    let mut vals = [0.0f64; SMALL_AREA];
    let mut k = 0;
    for iy in a.iy0..a.iy1 {
        let (start, end) = (iy * src.width + a.ix0, iy * src.width + a.ix1);
        for (&v, &ok) in src.values[start..end].iter().zip(&src.valid[start..end]) {
            vals[k] = v;
            k += usize::from(ok);
        }
    }
    if k == 0 {
        return false;
    }
    out[0] = first_most_frequent(&vals[..k]);
    true
}

/// The value of `vals` (at least one) that first reaches the highest count, in order:
/// each one's running count is how many of the values so far equal it.
#[inline]
pub(crate) fn first_most_frequent(vals: &[f64]) -> f64 {
    let (mut best, mut best_n) = (vals[0], 1usize);
    for (i, &v) in vals.iter().enumerate().skip(1) {
        let n = 1 + vals[..i].iter().filter(|&&u| same(u, v)).count();
        if n > best_n {
            best = v;
            best_n = n;
        }
    }
    best
}

/// [`mode_small`] of several bands: the valid pixels' offsets once, then each band.
fn mode_small_bands(src: &Source<'_>, a: &Area, out: &mut [f64]) -> bool {
    let plane = src.width * src.height;
    let mut at = [0usize; SMALL_AREA];
    let mut k = 0;
    for iy in a.iy0..a.iy1 {
        let row = iy * src.width;
        for (ix, &ok) in (a.ix0..a.ix1).zip(&src.valid[row + a.ix0..row + a.ix1]) {
            at[k] = row + ix;
            k += usize::from(ok);
        }
    }
    if k == 0 {
        return false;
    }
    let at = &at[..k];
    for (b, o) in out.iter_mut().enumerate() {
        let values = &src.values[b * plane..(b + 1) * plane];
        let mut vals = [0.0f64; SMALL_AREA];
        for (v, &p) in vals.iter_mut().zip(at) {
            *v = values[p];
        }
        *o = first_most_frequent(&vals[..k]);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warp::test_rng::one_band as src;

    /// [`span`] as GDAL's float arithmetic writes it.
    fn span_in_floats(lo: f64, hi: f64, size: f64) -> (usize, usize) {
        let i0 = (lo + 1e-10).floor().max(0.0).min(size);
        let mut i1 = (-(-(hi - 1e-10)).floor()).min(size);
        if i0 == i1 && i1 < size {
            i1 += 1.0;
        }
        (i0 as usize, i1.max(i0) as usize)
    }

    #[test]
    fn spans_in_integers_match_the_float_form() {
        let mut seed = 7u64;
        let mut next = || crate::warp::test_rng::lcg(&mut seed);
        let edges = [
            -3.0,
            -1e-10,
            -1e-11,
            0.0,
            1e-11,
            1e-10,
            0.5,
            1.0 - 1e-11,
            1.0,
            4.0,
            5.0,
            5.0 + 1e-11,
            7.5,
        ];
        for &lo in &edges {
            for &hi in &edges {
                assert_eq!(span(lo, hi, 5.0), span_in_floats(lo, hi, 5.0), "{lo} {hi}");
            }
        }
        for _ in 0..100_000 {
            let size = (next() * 40.0).floor();
            let lo = next() * 60.0 - 10.0;
            let hi = lo + next() * 4.0;
            assert_eq!(span(lo, hi, size), span_in_floats(lo, hi, size), "{lo} {hi} {size}");
            let (lo, hi) = (lo.round(), hi.round());
            assert_eq!(span(lo, hi, size), span_in_floats(lo, hi, size), "{lo} {hi} {size}");
        }
    }

    #[test]
    fn bilinear_interpolates_and_renormalises_over_valid_neighbours() {
        let v = [0.0, 10.0, 20.0, 30.0];
        let ok = [true; 4];
        let s = src(2, 2, &v, &ok);
        let mut out = [0.0];
        assert!(bilinear4(&s, 1.0, 1.0, &mut out));
        assert!((out[0] - 15.0).abs() < 1e-12);
        let ok = [true, false, true, true];
        let s = src(2, 2, &v, &ok);
        assert!(bilinear4(&s, 1.0, 1.0, &mut out));
        assert!((out[0] - 50.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn cubic_reproduces_a_linear_ramp() {
        let v: Vec<f64> = (0..36).map(|i| (i % 6) as f64 * 3.0).collect();
        let ok = vec![true; 36];
        let s = src(6, 6, &v, &ok);
        let mut out = [0.0];
        assert!(cubic4(&s, 2.8, 3.1, &mut out));
        assert!((out[0] - (2.8 - 0.5) * 3.0).abs() < 1e-9, "{}", out[0]);
    }

    #[test]
    fn average_weights_partial_pixels_and_mode_breaks_ties_first_come() {
        let v = [1.0, 3.0, 5.0, 7.0];
        let ok = [true; 4];
        let s = src(4, 1, &v, &ok);
        let a = area(&s, (0.5, 0.0), (2.5, 1.0), (2.0, 2.0)).unwrap();
        let mut out = [0.0];
        assert!(average(&s, &a, &mut out));
        assert!((out[0] - (0.5 * 1.0 + 3.0 + 0.5 * 5.0) / 2.0).abs() < 1e-12);
        let v = [2.0, 1.0, 1.0, 2.0];
        let s = src(4, 1, &v, &ok);
        let a = area(&s, (0.0, 0.0), (4.0, 1.0), (2.0, 2.0)).unwrap();
        assert!(mode(&s, &a, &mut out, &mut Vec::new()));
        assert_eq!(out[0], 1.0);
        assert!(area(&s, (-9.0, 0.0), (-8.0, 1.0), (2.0, 2.0)).is_none());
    }

    #[test]
    fn the_small_area_mode_decides_as_the_counted_one() {
        let mut seed = 11u64;
        let mut next = |m: u64| crate::warp::test_rng::below(&mut seed, m);
        let (w, h) = (7, 6);
        for round in 0..10_000 {
            let bands = 1 + round % 2;
            // Few classes and runs of one value, as class maps have.
            let values: Vec<f64> = (0..bands * w * h)
                .map(|i| match next(6) {
                    0 => f64::NAN,
                    _ if round % 3 == 0 => (i / 9 % 2) as f64,
                    k => (k % 3) as f64,
                })
                .collect();
            let valid: Vec<bool> = (0..w * h).map(|_| next(4) != 0).collect();
            let s = Source {
                width: w,
                height: h,
                bands,
                values: &values,
                valid: &valid,
            };
            let (x, y) = (next(5) as f64 + 0.3, next(4) as f64 + 0.6);
            let (dx, dy) = (next(3) as f64 + 0.5, next(3) as f64 + 0.2);
            let a = area(&s, (x, y), (x + dx, y + dy), (2.0, 2.0)).unwrap();
            let (mut small, mut counted) = (vec![7.0; bands], vec![7.0; bands]);
            let ok = mode_small(&s, &a, &mut small);
            assert_eq!(ok, mode_counted(&s, &a, &mut counted, &mut Vec::new()));
            if ok {
                for b in 0..bands {
                    assert!(same(small[b], counted[b]), "{small:?} {counted:?}");
                }
            }
        }
    }

    #[test]
    fn scaled_bilinear_at_half_scale_averages_a_wider_neighbourhood() {
        let v: Vec<f64> = (0..16).map(|i| (i % 4) as f64).collect();
        let ok = vec![true; 16];
        let s = Source {
            width: 4,
            height: 4,
            bands: 1,
            values: &v,
            valid: &ok,
        };
        let mut out = [0.0];
        assert!(scaled(&s, Filter::Bilinear, 2.0, 2.0, 0.5, 0.5, &mut out));
        assert!((out[0] - 1.5).abs() < 1e-12, "{}", out[0]);
    }
}
