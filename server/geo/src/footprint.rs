//! The output grid of one sample: a CRS, bounds and a square pixel size, with GDAL's
//! conventions (`W = floor((maxx − minx) / res + 0.5)`, origin at (minx, maxy)).

use super::{Affine, Crs, GridError};

/// Largest side of a footprint, in pixels (a backstop: requests are admitted by bytes).
pub const MAX_SIDE: u64 = 1 << 16;

/// A north-up output grid in map space.
#[derive(Debug, Clone, PartialEq)]
pub struct Footprint {
    /// CRS of the grid and of its bounds.
    pub crs: Crs,
    /// `[minx, miny, maxx, maxy]` in `crs` units, x first.
    pub bounds: [f64; 4],
    /// Side of a square pixel, in `crs` units.
    pub resolution: f64,
    width: u64,
    height: u64,
}

impl Footprint {
    /// Checks the bounds and resolution and derives the pixel size of the grid.
    pub fn new(crs: Crs, bounds: [f64; 4], resolution: f64) -> Result<Self, GridError> {
        let bad = |m: String| Err(GridError::InvalidFootprint(m));
        if bounds.iter().any(|v| !v.is_finite()) {
            return bad(format!("bounds {bounds:?} are not finite"));
        }
        if !(bounds[0] < bounds[2] && bounds[1] < bounds[3]) {
            return bad(format!("bounds {bounds:?}: need minx < maxx and miny < maxy"));
        }
        if !(resolution.is_finite() && resolution > 0.0) {
            return bad(format!("resolution {resolution} is not a positive number"));
        }
        let side = |len: f64| (len / resolution + 0.5).floor();
        let (w, h) = (side(bounds[2] - bounds[0]), side(bounds[3] - bounds[1]));
        if !(w >= 1.0 && h >= 1.0) {
            return bad(format!("bounds {bounds:?} at resolution {resolution} hold no pixel"));
        }
        if w > MAX_SIDE as f64 || h > MAX_SIDE as f64 {
            return bad(format!("{w}x{h} pixels (at most {MAX_SIDE} per side)"));
        }
        Ok(Self {
            crs,
            bounds,
            resolution,
            width: w as u64,
            height: h as u64,
        })
    }

    /// Pixels across.
    pub fn width(&self) -> u64 {
        self.width
    }

    /// Pixels down.
    pub fn height(&self) -> u64 {
        self.height
    }

    /// Pixel → map transform of the grid.
    pub fn transform(&self) -> Affine {
        Affine::north_up(self.bounds[0], self.bounds[3], self.resolution)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_follows_gdal() {
        let crs = Crs::from_epsg(32633).unwrap();
        let f = Footprint::new(crs.clone(), [726820.0, 5153860.0, 729200.0, 5156230.0], 10.0).unwrap();
        assert_eq!((f.width(), f.height()), (238, 237));
        let f = Footprint::new(crs.clone(), [0.0, 0.0, 10.4, 10.6], 1.0).unwrap();
        assert_eq!((f.width(), f.height()), (10, 11));
        assert!(Footprint::new(crs.clone(), [0.0, 0.0, 0.4, 10.0], 1.0).is_err());
        assert!(Footprint::new(crs.clone(), [1.0, 0.0, 0.0, 10.0], 1.0).is_err());
        assert!(Footprint::new(crs.clone(), [0.0, 0.0, 1e12, 10.0], 1.0).is_err());
        assert!(Footprint::new(crs, [0.0, 0.0, 10.0, 10.0], f64::NAN).is_err());
    }
}
