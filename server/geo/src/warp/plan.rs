//! Where a footprint falls in one source: the overview level GDAL's warper would read, the
//! source pixel window (with the kernel's margin) and the kernel scale, computed the way
//! `GDALWarpOperation::ComputeSourceWindow` and `GDALWarpKernel::PerformWarp` do (GDAL 3.6).

use super::Resampling;
use crate::{Affine, Footprint, Transformer};

/// Largest deviation (source pixels) of an interpolated point from its exact transform.
/// GDAL's default is 0.125; at 1e-5 a nearest pick flips for about one pixel in 50 000, so
/// results match an exact transform (the corpus's reprojections stay 100 % identical).
pub const APPROX_ERROR_PX: f64 = 1e-5;

/// One level of a source: its size and its map → pixel transform.
#[derive(Debug, Clone, Copy)]
pub struct LevelGrid {
    /// Width of the level, in pixels.
    pub width: u64,
    /// Height of the level, in pixels.
    pub height: u64,
    /// Map (source CRS) → pixel of this level.
    pub to_pixel: Affine,
}

impl LevelGrid {
    /// Level `(width, height)` of a source whose full-resolution grid is `full` (pixel → map)
    /// of `full_width` × `full_height`.
    pub fn overview(full: &Affine, full_width: u64, full_height: u64, width: u64, height: u64) -> Option<Self> {
        let fx = full_width as f64 / width.max(1) as f64;
        let fy = full_height as f64 / height.max(1) as f64;
        Some(Self {
            width,
            height,
            to_pixel: full.scaled(fx, fy).inverse().ok()?,
        })
    }
}

/// Maps footprint pixel coordinates (continuous, corner-based) into a level's pixels.
#[derive(Debug, Clone)]
pub struct PixelMapper<'a> {
    /// The output grid whose pixels are mapped.
    pub footprint: &'a Footprint,
    /// Footprint CRS → source CRS.
    pub transformer: &'a Transformer,
    /// The source level mapped into.
    pub level: LevelGrid,
}

impl PixelMapper<'_> {
    /// Maps the footprint pixel points (`xs[i]`, `ys[i]`) in place to level pixels.
    pub fn map(&self, xs: &mut [f64], ys: &mut [f64]) {
        let t = self.footprint.transform();
        for (x, y) in xs.iter_mut().zip(ys.iter_mut()) {
            (*x, *y) = t.apply(*x, *y);
        }
        self.transformer.transform(xs, ys);
        let p = self.level.to_pixel;
        for (x, y) in xs.iter_mut().zip(ys.iter_mut()) {
            (*x, *y) = p.apply(*x, *y);
        }
    }

    /// The points `resampling` samples, in level pixels: corners for the areal kernels
    /// ([`Self::corners`]), else centres ([`Self::centres`]).
    pub fn points(&self, resampling: Resampling) -> (Vec<f64>, Vec<f64>) {
        if resampling.is_areal() {
            self.corners()
        } else {
            self.centres()
        }
    }

    /// Level-pixel coordinates of every pixel centre of the footprint, row by row.
    pub fn centres(&self) -> (Vec<f64>, Vec<f64>) {
        self.grid(0.5, self.footprint.width() as usize, self.footprint.height() as usize)
    }

    /// Level-pixel coordinates of every pixel corner of the footprint:
    /// `(width + 1) × (height + 1)` points, row by row.
    pub fn corners(&self) -> (Vec<f64>, Vec<f64>) {
        self.grid(
            0.0,
            self.footprint.width() as usize + 1,
            self.footprint.height() as usize + 1,
        )
    }

    fn grid(&self, offset: f64, w: usize, h: usize) -> (Vec<f64>, Vec<f64>) {
        // Written once, not zeroed first: these are the largest buffers of a label's warp.
        let (mut xs, mut ys) = (Vec::with_capacity(w * h), Vec::with_capacity(w * h));
        for i in 0..h {
            xs.extend((0..w).map(|j| j as f64 + offset));
            ys.extend(std::iter::repeat_n(i as f64 + offset, w));
        }
        if self.transformer.is_identity() || w < 8 {
            // Affine end to end (or too short a row to gain anything): exact.
            self.map(&mut xs, &mut ys);
            return (xs, ys);
        }
        if h <= SHORT_SEGMENT {
            for i in 0..h {
                self.row(&mut xs, &mut ys, w, i);
            }
            return (xs, ys);
        }
        let (a, b) = (0, h - 1);
        for i in [a, (a + b) / 2, b] {
            self.row(&mut xs, &mut ys, w, i);
        }
        self.rows(&mut xs, &mut ys, w, (a, b));
        (xs, ys)
    }

    /// Row `i` (of `w` points) mapped by [`Self::approx_row`].
    fn row(&self, xs: &mut [f64], ys: &mut [f64], w: usize, i: usize) {
        let row = i * w..(i + 1) * w;
        self.approx_row(&mut xs[row.clone()], &mut ys[row]);
    }

    /// The rows strictly between `a` and `b` (of `w` points each) whose rows `a`, `(a + b) / 2`
    /// and `b` are already mapped: [`Self::segment`] across rows. The quarter rows are mapped
    /// row by row; where every point of both lies within half of [`APPROX_ERROR_PX`] of the
    /// parabola through its column's three mapped rows, the rows between are interpolated
    /// column by column, else each half is done the same way. A reprojected footprint of a few
    /// hundred rows then maps five rows, not every one.
    fn rows(&self, xs: &mut [f64], ys: &mut [f64], w: usize, (a, b): (usize, usize)) {
        let m = (a + b) / 2;
        if b - a <= SHORT_SEGMENT {
            for i in (a + 1..b).filter(|&i| i != m) {
                self.row(xs, ys, w, i);
            }
            return;
        }
        let (q1, q3) = ((a + m) / 2, (m + b) / 2);
        self.row(xs, ys, w, q1);
        self.row(xs, ys, w, q3);
        let finite = [a, q1, m, q3, b].iter().all(|&i| {
            xs[i * w..(i + 1) * w]
                .iter()
                .chain(&ys[i * w..(i + 1) * w])
                .all(|v| v.is_finite())
        });
        let weights = lagrange(a, m, b);
        let tol = (APPROX_ERROR_PX / 2.0).powi(2);
        let fits = |k: usize| {
            let [la, lm, lb] = weights(k);
            (0..w).all(|j| {
                let (pa, pm, pb, pk) = (a * w + j, m * w + j, b * w + j, k * w + j);
                let ix = xs[pa] * la + xs[pm] * lm + xs[pb] * lb;
                let iy = ys[pa] * la + ys[pm] * lm + ys[pb] * lb;
                (ix - xs[pk]).powi(2) + (iy - ys[pk]).powi(2) <= tol
            })
        };
        if finite && fits(q1) && fits(q3) {
            // The three rows copied out, so that each row between is one loop over four
            // slices (vectorised), with the arithmetic of `fits`.
            let row = |v: &[f64], r: usize| v[r * w..(r + 1) * w].to_vec();
            let (xa, xm, xb) = (row(xs, a), row(xs, m), row(xs, b));
            let (ya, ym, yb) = (row(ys, a), row(ys, m), row(ys, b));
            for k in (a + 1..b).filter(|&k| k != q1 && k != m && k != q3) {
                let [la, lm, lb] = weights(k);
                let put = |out: &mut [f64], pa: &[f64], pm: &[f64], pb: &[f64]| {
                    for (((o, &va), &vm), &vb) in out.iter_mut().zip(pa).zip(pm).zip(pb) {
                        *o = va * la + vm * lm + vb * lb;
                    }
                };
                put(&mut xs[k * w..(k + 1) * w], &xa, &xm, &xb);
                put(&mut ys[k * w..(k + 1) * w], &ya, &ym, &yb);
            }
            return;
        }
        self.rows(xs, ys, w, (a, m));
        self.rows(xs, ys, w, (m, b));
    }

    /// Maps one row of points, as GDAL's approximate transformer does but with an error
    /// bound far below what any kernel can see and a quadratic in place of its straight
    /// line: the ends and the middle are transformed exactly and a parabola laid through
    /// them; where the quarter points, transformed exactly too, lie within
    /// [`APPROX_ERROR_PX`] of it, the row is interpolated, else each half is done the same
    /// way (reusing the points already transformed). A reprojected row of a few hundred
    /// pixels costs five exact transforms instead of one per pixel.
    fn approx_row(&self, xs: &mut [f64], ys: &mut [f64]) {
        let n = xs.len();
        if n <= SHORT_SEGMENT {
            self.map(xs, ys);
            return;
        }
        let (a, b) = (0, n - 1);
        let m = (a + b) / 2;
        let (mut px, mut py) = ([xs[a], xs[m], xs[b]], [ys[a], ys[m], ys[b]]);
        self.map(&mut px, &mut py);
        if !px.iter().chain(py.iter()).all(|v| v.is_finite()) {
            self.map(xs, ys);
            return;
        }
        self.segment(xs, ys, (a, b), [(px[0], py[0]), (px[1], py[1]), (px[2], py[2])]);
    }

    /// One segment `a..=b` of [`Self::approx_row`]: `exact` holds the transformed points at
    /// `a`, the middle `(a + b) / 2` and `b`; every other point of the segment still holds
    /// its footprint coordinates. Leaves the whole segment transformed.
    fn segment(&self, xs: &mut [f64], ys: &mut [f64], (a, b): (usize, usize), exact: [(f64, f64); 3]) {
        let m = (a + b) / 2;
        let [pa, pm, pb] = exact;
        let put = |xs: &mut [f64], ys: &mut [f64], k: usize, p: (f64, f64)| {
            xs[k] = p.0;
            ys[k] = p.1;
        };
        if b - a <= SHORT_SEGMENT {
            self.map(&mut xs[a + 1..b], &mut ys[a + 1..b]);
            put(xs, ys, a, pa);
            put(xs, ys, b, pb);
            return;
        }
        let (q1, q3) = ((a + m) / 2, (m + b) / 2);
        let (mut qx, mut qy) = ([xs[q1], xs[q3]], [ys[q1], ys[q3]]);
        self.map(&mut qx, &mut qy);
        if !qx.iter().chain(qy.iter()).all(|v| v.is_finite()) {
            self.map(&mut xs[a + 1..b], &mut ys[a + 1..b]);
            put(xs, ys, a, pa);
            put(xs, ys, b, pb);
            return;
        }
        let weights = lagrange(a, m, b);
        let quad = |k: usize| {
            let [la, lm, lb] = weights(k);
            (pa.0 * la + pm.0 * lm + pb.0 * lb, pa.1 * la + pm.1 * lm + pb.1 * lb)
        };
        let close = |k: usize, x: f64, y: f64| {
            let (ix, iy) = quad(k);
            (ix - x).powi(2) + (iy - y).powi(2) <= APPROX_ERROR_PX * APPROX_ERROR_PX
        };
        let (e1, e3) = ((qx[0], qy[0]), (qx[1], qy[1]));
        if close(q1, e1.0, e1.1) && close(q3, e3.0, e3.1) {
            for k in a..=b {
                let p = quad(k);
                put(xs, ys, k, p);
            }
            for (k, p) in [(a, pa), (q1, e1), (m, pm), (q3, e3), (b, pb)] {
                put(xs, ys, k, p);
            }
            return;
        }
        self.segment(xs, ys, (a, m), [pa, e1, pm]);
        self.segment(xs, ys, (m, b), [pm, e3, pb]);
    }
}

/// Segments of at most this many points (plus one) are transformed point by point.
const SHORT_SEGMENT: usize = 8;

/// Lagrange's weights at `k` of the parabola through positions `a`, `m` and `b` (their
/// denominators inverted once).
fn lagrange(a: usize, m: usize, b: usize) -> impl Fn(usize) -> [f64; 3] {
    let (fa, fm, fb) = (a as f64, m as f64, b as f64);
    let (ra, rm, rb) = (
        1.0 / ((fa - fm) * (fa - fb)),
        1.0 / ((fm - fa) * (fm - fb)),
        1.0 / ((fb - fa) * (fb - fm)),
    );
    move |k| {
        let t = k as f64;
        [
            (t - fm) * (t - fb) * ra,
            (t - fa) * (t - fb) * rm,
            (t - fa) * (t - fm) * rb,
        ]
    }
}

/// The length, in full-resolution source pixels, of one footprint pixel's x edge at the
/// footprint's centre: the ratio GDAL's `-ovr AUTO` compares overview factors with.
pub fn target_ratio(footprint: &Footprint, transformer: &Transformer, full: LevelGrid) -> Option<f64> {
    let m = PixelMapper {
        footprint,
        transformer,
        level: full,
    };
    let (cx, cy) = (footprint.width() as f64 / 2.0, footprint.height() as f64 / 2.0);
    let mut xs = [cx, cx + 1.0];
    let mut ys = [cy, cy];
    m.map(&mut xs, &mut ys);
    let t = (xs[1] - xs[0]).hypot(ys[1] - ys[0]);
    t.is_finite().then_some(t)
}

/// The level to read: the smallest overview (largest factor) whose decimation factor is at
/// most `ratio`, or full resolution. `factors[k]` is level k+1's x factor.
pub fn choose_level(ratio: f64, factors: &[f64]) -> usize {
    let mut best = 0;
    for (k, &f) in factors.iter().enumerate() {
        if f <= ratio * (1.0 + 1e-9) {
            best = k + 1;
        }
    }
    best
}

/// The source window of a footprint at one level, and the kernel scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SourceWindow {
    /// First column of the window, in level pixels.
    pub col: u64,
    /// First row of the window, in level pixels.
    pub row: u64,
    /// Width of the window, in level pixels.
    pub width: u64,
    /// Height of the window, in level pixels.
    pub height: u64,
    /// Destination pixels per source pixel along x (≤ 1 when downsampling), GDAL's
    /// `dfXScale`.
    pub x_scale: f64,
    /// Destination pixels per source pixel along y (≤ 1 when downsampling), GDAL's `dfYScale`.
    pub y_scale: f64,
}

/// Edge samples per side (GDAL's `SAMPLE_STEPS` default).
const STEPS: usize = 21;

/// The source window GDAL would read for `footprint` from this level, None when the
/// footprint misses the level entirely.
pub fn source_window(mapper: &PixelMapper<'_>, resampling: Resampling) -> Option<SourceWindow> {
    let (w, h) = (mapper.footprint.width() as f64, mapper.footprint.height() as f64);
    let mut xs = Vec::with_capacity(4 * STEPS);
    let mut ys = Vec::with_capacity(4 * STEPS);
    for s in 0..STEPS {
        let r = s as f64 / (STEPS - 1) as f64;
        xs.extend_from_slice(&[r * w, r * w, 0.0, w]);
        ys.extend_from_slice(&[0.0, h, r * h, r * h]);
    }
    mapper.map(&mut xs, &mut ys);
    let (mut min_x, mut min_y, mut max_x, mut max_y) =
        (f64::INFINITY, f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY);
    let mut failed = 0usize;
    for (&x, &y) in xs.iter().zip(ys.iter()) {
        if !(x.is_finite() && y.is_finite()) {
            failed += 1;
            continue;
        }
        min_x = min_x.min(x);
        min_y = min_y.min(y);
        max_x = max_x.max(x);
        max_y = max_y.max(y);
    }
    if failed > xs.len().saturating_sub(5) {
        return None;
    }
    let (rw, rh) = (mapper.level.width as f64, mapper.level.height as f64);
    if min_x > rw || max_x < 0.0 || min_y > rh || max_y < 0.0 {
        return None;
    }
    let round_close = |v: f64| if (v.round() - v).abs() < 1e-6 { v.round() } else { v };
    let (min_x, min_y, max_x, max_y) = (
        round_close(min_x),
        round_close(min_y),
        round_close(max_x),
        round_close(max_y),
    );
    let radius = resampling.radius() as f64;
    let sx = (w / (max_x - min_x)).max(1e-3);
    let sy = (h / (max_y - min_y)).max(1e-3);
    let extra = if failed > 0 { 10.0 } else { 0.0 };
    let rx = if sx < 0.95 { (radius / sx).ceil() } else { radius } + extra;
    let ry = if sy < 0.95 { (radius / sy).ceil() } else { radius } + extra;
    let axis = |min: f64, max: f64, size: f64, r: f64| -> (f64, f64, f64) {
        let min_c = min.max(0.0).trunc();
        let max_c = max.ceil().min(size);
        let raw = (size - min_c).min(max - min).max(0.0);
        let (off, len) = if max_c - min_c > 0.9 * size {
            (0.0, size)
        } else {
            let off = (min_c - r).clamp(0.0, size);
            (off, (size - off).min(max_c - off + r).max(0.0))
        };
        (off, len, raw)
    };
    let (x_off, x_len, x_raw) = axis(min_x, max_x, rw, rx);
    let (y_off, y_len, y_raw) = axis(min_y, max_y, rh, ry);
    if x_len < 1.0 || y_len < 1.0 {
        return None;
    }
    let scale = |dst: f64, len: f64, raw: f64| {
        let extra = len - raw;
        let mut s = dst / (len - extra);
        if len >= dst && len <= dst + extra {
            s = 1.0;
        }
        if s < 1.0 {
            let r = 1.0 / s;
            let n = (r + 0.5).floor();
            if (r - n).abs() < 0.05 && n > 0.0 {
                s = 1.0 / n;
            }
        }
        if s.is_finite() { s } else { 1.0 }
    };
    Some(SourceWindow {
        col: x_off as u64,
        row: y_off as u64,
        width: x_len as u64,
        height: y_len as u64,
        x_scale: scale(w, x_len, x_raw),
        y_scale: scale(h, y_len, y_raw),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Crs;

    #[test]
    fn level_choice_takes_the_largest_factor_not_above_the_ratio() {
        assert_eq!(choose_level(1.0, &[2.0, 4.0]), 0);
        assert_eq!(choose_level(2.0, &[2.0, 4.0]), 1);
        assert_eq!(choose_level(3.9, &[2.0, 4.0]), 1);
        assert_eq!(choose_level(6.0, &[2.0, 4.0]), 2);
        assert_eq!(choose_level(6.0, &[]), 0);
    }

    #[test]
    fn reprojected_rows_stay_within_the_error_bound_of_exact_transforms() {
        // A 1 m UTM footprint over a ~1 m EPSG:4326 raster (the published label layer) and a
        // 10 m one across the UTM zone seam: every interpolated corner within the bound.
        let cases = [
            (
                32632,
                [600_000.0, 5_190_000.0, 600_320.0, 5_190_320.0],
                1.0,
                4326,
                (1.3e-5, 9e-6),
                (10.0, 47.0),
            ),
            (
                32633,
                [290_000.0, 5_180_000.0, 290_640.0, 5_180_640.0],
                10.0,
                32632,
                (10.0, 10.0),
                (700_000.0, 5_200_000.0),
            ),
        ];
        for (fp_epsg, bounds, res, src_epsg, (px, py), (x0, y0)) in cases {
            let fp = Footprint::new(Crs::from_epsg(fp_epsg).unwrap(), bounds, res).unwrap();
            let tr = Transformer::new(&fp.crs, &Crs::from_epsg(src_epsg).unwrap());
            let to_pixel = Affine {
                a: px,
                b: 0.0,
                c: x0,
                d: 0.0,
                e: -py,
                f: y0,
            }
            .inverse()
            .unwrap();
            let m = PixelMapper {
                footprint: &fp,
                transformer: &tr,
                level: LevelGrid {
                    width: 1 << 20,
                    height: 1 << 20,
                    to_pixel,
                },
            };
            let (ax, ay) = m.corners();
            let (mut ex, mut ey): (Vec<f64>, Vec<f64>) = (0..=fp.height())
                .flat_map(|i| (0..=fp.width()).map(move |j| (j as f64, i as f64)))
                .unzip();
            m.map(&mut ex, &mut ey);
            let worst = ax
                .iter()
                .zip(&ay)
                .zip(ex.iter().zip(&ey))
                .map(|((x, y), (u, v))| (x - u).hypot(y - v))
                .fold(0.0, f64::max);
            assert!(
                worst <= 2.0 * APPROX_ERROR_PX,
                "EPSG:{src_epsg}: {worst} px off the exact transform"
            );
        }
    }

    #[test]
    fn same_grid_window_is_the_footprint_plus_the_kernel_margin() {
        let crs = Crs::from_epsg(32633).unwrap();
        let fp = Footprint::new(crs.clone(), [1000.0, 1000.0, 1320.0, 1320.0], 10.0).unwrap();
        let tr = Transformer::new(&crs, &crs);
        let full = LevelGrid::overview(&Affine::north_up(0.0, 9000.0, 10.0), 900, 900, 900, 900).unwrap();
        let m = PixelMapper {
            footprint: &fp,
            transformer: &tr,
            level: full,
        };
        let w = source_window(&m, Resampling::Nearest).unwrap();
        assert_eq!((w.col, w.row, w.width, w.height), (100, 768, 32, 32));
        assert_eq!((w.x_scale, w.y_scale), (1.0, 1.0));
        let w = source_window(&m, Resampling::Cubic).unwrap();
        assert_eq!((w.col, w.row, w.width, w.height), (98, 766, 36, 36));
        assert_eq!(target_ratio(&fp, &tr, full), Some(1.0));
        // 20 m output over 10 m pixels: scale 1/2, radius doubled.
        let fp2 = Footprint::new(crs, [1000.0, 1000.0, 1320.0, 1320.0], 20.0).unwrap();
        let m2 = PixelMapper {
            footprint: &fp2,
            transformer: &tr,
            level: full,
        };
        let w = source_window(&m2, Resampling::Bilinear).unwrap();
        assert_eq!((w.col, w.width, w.x_scale), (98, 36, 0.5));
        // Outside the source: nothing to read.
        let far = Footprint::new(Crs::from_epsg(32633).unwrap(), [-5000.0, 0.0, -4000.0, 1000.0], 10.0).unwrap();
        let m3 = PixelMapper {
            footprint: &far,
            transformer: &tr,
            level: full,
        };
        assert!(source_window(&m3, Resampling::Nearest).is_none());
    }
}
