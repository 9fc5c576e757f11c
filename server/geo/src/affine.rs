//! Affine transforms between pixel (column, row) and map (x, y) coordinates.
//!
//! Stored in STAC's `proj:transform` order `[a, b, c, d, e, f]`: `x = a·col + b·row + c`,
//! `y = d·col + e·row + f` (GDAL's geotransform is `[c, a, b, f, d, e]`). Pixel (0, 0)'s
//! top-left corner is at (c, f); pixel centres are at half-integer pixel coordinates.

use super::GridError;

/// A 2-D affine transform, pixel → map.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Affine {
    /// Map x change per column (the pixel width on a north-up grid).
    pub a: f64,
    /// Map x change per row (rotation or shear; 0 on a north-up grid).
    pub b: f64,
    /// Map x of pixel (0, 0)'s top-left corner.
    pub c: f64,
    /// Map y change per column (rotation or shear; 0 on a north-up grid).
    pub d: f64,
    /// Map y change per row (minus the pixel height on a north-up grid).
    pub e: f64,
    /// Map y of pixel (0, 0)'s top-left corner.
    pub f: f64,
}

impl Affine {
    /// From STAC `proj:transform` (6 or 9 numbers, the last row `[0, 0, 1]`).
    pub fn from_stac(v: &[f64]) -> Result<Self, GridError> {
        if v.len() != 6 && v.len() != 9 {
            return Err(GridError::Degenerate(format!(
                "proj:transform has {} numbers (6 or 9 expected)",
                v.len()
            )));
        }
        if v.len() == 9 && (v[6] != 0.0 || v[7] != 0.0 || v[8] != 1.0) {
            return Err(GridError::Degenerate(format!(
                "proj:transform's last row is {:?}, not [0, 0, 1]",
                &v[6..]
            )));
        }
        Self::checked(Self {
            a: v[0],
            b: v[1],
            c: v[2],
            d: v[3],
            e: v[4],
            f: v[5],
        })
    }

    /// From GDAL's geotransform `[x0, dx, rx, y0, ry, dy]`.
    pub fn from_gdal(g: [f64; 6]) -> Result<Self, GridError> {
        Self::checked(Self {
            a: g[1],
            b: g[2],
            c: g[0],
            d: g[4],
            e: g[5],
            f: g[3],
        })
    }

    /// A north-up grid with square pixels of `res` whose top-left corner is (`x0`, `y0`).
    pub fn north_up(x0: f64, y0: f64, res: f64) -> Self {
        Self {
            a: res,
            b: 0.0,
            c: x0,
            d: 0.0,
            e: -res,
            f: y0,
        }
    }

    fn checked(t: Self) -> Result<Self, GridError> {
        let terms = [t.a, t.b, t.c, t.d, t.e, t.f];
        if terms.iter().any(|v| !v.is_finite()) || t.det() == 0.0 || !t.det().is_finite() {
            return Err(GridError::Degenerate(format!("{:?}", terms)));
        }
        Ok(t)
    }

    /// The determinant of the linear part.
    pub fn det(&self) -> f64 {
        self.a * self.e - self.b * self.d
    }

    /// Map coordinates of pixel coordinates (`col`, `row`).
    #[inline]
    pub fn apply(&self, col: f64, row: f64) -> (f64, f64) {
        (
            self.a * col + self.b * row + self.c,
            self.d * col + self.e * row + self.f,
        )
    }

    /// The inverse transform (map → pixel).
    pub fn inverse(&self) -> Result<Self, GridError> {
        let det = self.det();
        if det == 0.0 || !det.is_finite() {
            return Err(GridError::Degenerate(format!("{self:?} is not invertible")));
        }
        let (a, b, d, e) = (self.e / det, -self.b / det, -self.d / det, self.a / det);
        Self::checked(Self {
            a,
            b,
            c: -(a * self.c + b * self.f),
            d,
            e,
            f: -(d * self.c + e * self.f),
        })
    }

    /// The same grid with pixels `fx` × `fy` times larger (an overview's transform).
    pub fn scaled(&self, fx: f64, fy: f64) -> Self {
        Self {
            a: self.a * fx,
            b: self.b * fy,
            c: self.c,
            d: self.d * fx,
            e: self.e * fy,
            f: self.f,
        }
    }

    /// Pixel width and height in map units (lengths of the column and row vectors).
    pub fn pixel_size(&self) -> (f64, f64) {
        (self.a.hypot(self.d), self.b.hypot(self.e))
    }

    /// STAC order `[a, b, c, d, e, f]`.
    pub fn to_stac(&self) -> [f64; 6] {
        [self.a, self.b, self.c, self.d, self.e, self.f]
    }

    /// The map-space bounding box `[minx, miny, maxx, maxy]` of a `width` × `height` raster.
    pub fn bounds(&self, width: f64, height: f64) -> [f64; 4] {
        let corners = [
            self.apply(0.0, 0.0),
            self.apply(width, 0.0),
            self.apply(0.0, height),
            self.apply(width, height),
        ];
        let mut b = [f64::INFINITY, f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY];
        for (x, y) in corners {
            b[0] = b[0].min(x);
            b[1] = b[1].min(y);
            b[2] = b[2].max(x);
            b[3] = b[3].max(y);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stac_order_and_inverse_round_trip() {
        let t = Affine::from_stac(&[10.0, 0.5, 600000.0, 0.3, -10.0, 5000000.0, 0.0, 0.0, 1.0]).unwrap();
        assert_eq!(t.apply(0.0, 0.0), (600000.0, 5000000.0));
        assert_eq!(t.apply(1.0, 0.0), (600010.0, 5000000.3));
        let inv = t.inverse().unwrap();
        let (x, y) = t.apply(123.25, 77.5);
        let (c, r) = inv.apply(x, y);
        assert!((c - 123.25).abs() < 1e-9 && (r - 77.5).abs() < 1e-9);
        let g = Affine::from_gdal([600000.0, 10.0, 0.5, 5000000.0, 0.3, -10.0]).unwrap();
        assert_eq!(g, t);
    }

    #[test]
    fn degenerate_transforms_are_refused() {
        assert!(Affine::from_stac(&[0.0, 0.0, 1.0, 0.0, 0.0, 1.0]).is_err());
        assert!(Affine::from_stac(&[1.0, 0.0, 1.0, 0.0, f64::NAN, 1.0]).is_err());
        assert!(Affine::from_stac(&[1.0, 0.0, 1.0]).is_err());
        assert!(Affine::from_stac(&[1.0, 0.0, 1.0, 0.0, -1.0, 1.0, 0.0, 1.0, 1.0]).is_err());
    }

    #[test]
    fn overview_scaling_keeps_the_origin() {
        let t = Affine::north_up(100.0, 200.0, 10.0).scaled(2.0, 2.0);
        assert_eq!(t.apply(1.0, 1.0), (120.0, 180.0));
        assert_eq!(t.pixel_size(), (20.0, 20.0));
        assert_eq!(
            Affine::north_up(0.0, 10.0, 1.0).bounds(4.0, 10.0),
            [0.0, 0.0, 4.0, 10.0]
        );
    }
}
