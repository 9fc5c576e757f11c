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
        let mut xs = Vec::with_capacity(w * h);
        let mut ys = Vec::with_capacity(w * h);
        for i in 0..h {
            for j in 0..w {
                xs.push(j as f64 + offset);
                ys.push(i as f64 + offset);
            }
        }
        if self.transformer.is_identity() || w < 8 {
            // Affine end to end (or too short a row to gain anything): exact.
            self.map(&mut xs, &mut ys);
            return (xs, ys);
        }
        for i in 0..h {
            let row = i * w..(i + 1) * w;
            self.approx_row(&mut xs[row.clone()], &mut ys[row]);
        }
        (xs, ys)
    }

    /// Maps one row of points, as GDAL's approximate transformer does but with an error
    /// bound far below what any kernel can see: the ends and the middle are transformed
    /// exactly; where the middle lies within [`APPROX_ERROR_PX`] of the straight line between
    /// the ends, the row is interpolated, else each half is done the same way.
    fn approx_row(&self, xs: &mut [f64], ys: &mut [f64]) {
        let n = xs.len();
        if n <= 4 {
            self.map(xs, ys);
            return;
        }
        let mid = n / 2;
        let (mut px, mut py) = ([xs[0], xs[mid], xs[n - 1]], [ys[0], ys[mid], ys[n - 1]]);
        self.map(&mut px, &mut py);
        if !px.iter().chain(py.iter()).all(|v| v.is_finite()) {
            self.map(xs, ys);
            return;
        }
        let f = mid as f64 / (n - 1) as f64;
        let (ix, iy) = (px[0] + (px[2] - px[0]) * f, py[0] + (py[2] - py[0]) * f);
        if (ix - px[1]).hypot(iy - py[1]) <= APPROX_ERROR_PX {
            for k in 0..n {
                let t = k as f64 / (n - 1) as f64;
                xs[k] = px[0] + (px[2] - px[0]) * t;
                ys[k] = py[0] + (py[2] - py[0]) * t;
            }
            return;
        }
        let (left_x, right_x) = xs.split_at_mut(mid);
        let (left_y, right_y) = ys.split_at_mut(mid);
        self.approx_row(left_x, left_y);
        self.approx_row(right_x, right_y);
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
