//! Coordinate reference systems and point transformation between them.
//!
//! A CRS is named by its EPSG code (`EPSG:32633`, `epsg:4326`, or a STAC `proj:epsg`
//! integer). Definitions come from the EPSG registry as PROJ strings (`crs-definitions`) and
//! points move through `proj4rs`, a pure-Rust port of PROJ's projections: no C library at
//! build or run time (README, "Projections", says how it compares with PROJ/GDAL).
//! Geographic CRSs take and give degrees, longitude first (x = easting or longitude).

use std::sync::Arc;

use proj4rs::Proj;
use proj4rs::transform::{Transform, TransformClosure};

use super::GridError;

/// A coordinate reference system known by its EPSG code.
#[derive(Clone)]
pub struct Crs {
    code: u32,
    proj: Arc<Proj>,
}

impl std::fmt::Debug for Crs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EPSG:{}", self.code)
    }
}

impl std::fmt::Display for Crs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EPSG:{}", self.code)
    }
}

impl PartialEq for Crs {
    fn eq(&self, other: &Self) -> bool {
        self.code == other.code
    }
}
impl Eq for Crs {}

impl Crs {
    /// Parses `EPSG:<code>` (any case; `OGC:CRS84` is EPSG:4326 with the same axis order
    /// used here) or a bare code.
    pub fn parse(text: &str) -> Result<Self, GridError> {
        let t = text.trim();
        let unknown = || GridError::UnknownCrs(text.to_string());
        if t.eq_ignore_ascii_case("OGC:CRS84") || t.eq_ignore_ascii_case("CRS84") {
            return Self::from_epsg(4326);
        }
        let digits = match t.split_once(':') {
            Some((auth, code)) if auth.eq_ignore_ascii_case("EPSG") => code.trim(),
            Some(_) => return Err(unknown()),
            None => t,
        };
        let code: u32 = digits.parse().map_err(|_| unknown())?;
        Self::from_epsg(code).map_err(|_| unknown())
    }

    /// The CRS with EPSG code `code` (definitions are parsed once per process).
    pub fn from_epsg(code: u32) -> Result<Self, GridError> {
        static KNOWN: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<u32, Crs>>> =
            std::sync::OnceLock::new();
        let known = KNOWN.get_or_init(Default::default);
        if let Some(c) = known.lock().ok().and_then(|k| k.get(&code).cloned()) {
            return Ok(c);
        }
        let crs = Self::define(code)?;
        if let Ok(mut k) = known.lock() {
            k.insert(code, crs.clone());
        }
        Ok(crs)
    }

    fn define(code: u32) -> Result<Self, GridError> {
        let unknown = || GridError::UnknownCrs(format!("EPSG:{code}"));
        let short = u16::try_from(code).map_err(|_| unknown())?;
        let proj = Proj::from_epsg_code(short).map_err(|_| unknown())?;
        if proj.is_geocent() {
            return Err(unknown());
        }
        Ok(Self {
            code,
            proj: Arc::new(proj),
        })
    }

    /// The EPSG code.
    pub fn code(&self) -> u32 {
        self.code
    }

    /// Whether coordinates are longitude/latitude in degrees.
    pub fn is_geographic(&self) -> bool {
        self.proj.is_latlong()
    }
}

/// Moves points from one CRS to another.
#[derive(Debug, Clone)]
pub struct Transformer {
    src: Crs,
    dst: Crs,
}

/// `x` and `y` slices transformed in place; a point that fails becomes NaN.
struct Points<'a> {
    xs: &'a mut [f64],
    ys: &'a mut [f64],
}

impl Transform for Points<'_> {
    fn transform_coordinates<F: TransformClosure>(&mut self, f: &mut F) -> proj4rs::errors::Result<()> {
        for (x, y) in self.xs.iter_mut().zip(self.ys.iter_mut()) {
            if !(x.is_finite() && y.is_finite()) {
                *x = f64::NAN;
                *y = f64::NAN;
                continue;
            }
            match f(*x, *y, 0.0) {
                Ok((nx, ny, _)) if nx.is_finite() && ny.is_finite() => {
                    *x = nx;
                    *y = ny;
                }
                _ => {
                    *x = f64::NAN;
                    *y = f64::NAN;
                }
            }
        }
        Ok(())
    }
}

impl Transformer {
    /// A transformer from `src` to `dst`.
    pub fn new(src: &Crs, dst: &Crs) -> Self {
        Self {
            src: src.clone(),
            dst: dst.clone(),
        }
    }

    /// Whether the two CRSs are the same (points do not move).
    pub fn is_identity(&self) -> bool {
        self.src == self.dst
    }

    /// Transforms the points (`xs[i]`, `ys[i]`) in place. Points outside the domain of
    /// either CRS become NaN.
    pub fn transform(&self, xs: &mut [f64], ys: &mut [f64]) {
        if self.is_identity() {
            return;
        }
        if self.src.is_geographic() {
            xs.iter_mut().for_each(|v| *v = v.to_radians());
            ys.iter_mut().for_each(|v| *v = v.to_radians());
        }
        let mut pts = Points { xs, ys };
        if proj4rs::transform::transform(&self.src.proj, &self.dst.proj, &mut pts).is_err() {
            pts.xs.iter_mut().for_each(|v| *v = f64::NAN);
            pts.ys.iter_mut().for_each(|v| *v = f64::NAN);
        }
        if self.dst.is_geographic() {
            pts.xs.iter_mut().for_each(|v| *v = v.to_degrees());
            pts.ys.iter_mut().for_each(|v| *v = v.to_degrees());
        }
    }

    /// Transforms one point; None outside the domain.
    pub fn point(&self, x: f64, y: f64) -> Option<(f64, f64)> {
        let (mut xs, mut ys) = ([x], [y]);
        self.transform(&mut xs, &mut ys);
        (xs[0].is_finite() && ys[0].is_finite()).then_some((xs[0], ys[0]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_codes_and_refuses_what_is_not_a_crs() {
        assert_eq!(Crs::parse("EPSG:32633").unwrap().code(), 32633);
        assert_eq!(Crs::parse("epsg:4326").unwrap().code(), 4326);
        assert_eq!(Crs::parse(" 3035 ").unwrap().code(), 3035);
        assert!(Crs::parse("EPSG:4326").unwrap().is_geographic());
        for bad in [
            "EPSG:999999",
            "EPSG:32699",
            "EPSG:",
            "ESRI:102003",
            "utm",
            "",
            "EPSG:4978",
        ] {
            assert!(Crs::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn utm_round_trip_and_known_point() {
        let wgs = Crs::from_epsg(4326).unwrap();
        let utm = Crs::from_epsg(32633).unwrap();
        // 15°E on the equator is UTM 33N's central meridian: (500000, 0).
        let (x, y) = Transformer::new(&wgs, &utm).point(15.0, 0.0).unwrap();
        assert!((x - 500000.0).abs() < 1e-6 && y.abs() < 1e-6, "{x} {y}");
        let (x, y) = Transformer::new(&wgs, &utm).point(12.5, 46.5).unwrap();
        let (lon, lat) = Transformer::new(&utm, &wgs).point(x, y).unwrap();
        assert!((lon - 12.5).abs() < 1e-9 && (lat - 46.5).abs() < 1e-9);
        let mut xs = [f64::NAN, x];
        let mut ys = [0.0, y];
        Transformer::new(&utm, &wgs).transform(&mut xs, &mut ys);
        assert!(xs[0].is_nan() && (xs[1] - 12.5).abs() < 1e-9);
    }
}
