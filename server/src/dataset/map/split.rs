//! Leak-free spatial splits: square cells of an equal-area grid (EPSG:6933, EASE-Grid 2.0
//! global, metres) are dealt to named splits by a seeded hash, and a footprint belongs to
//! a split only when every cell its bounding box in that grid meets is of that split.
//!
//! Why this is leak-free, not just likely: a footprint lies inside its bounding box in
//! EPSG:6933 (edges densified, then widened by a margin far above the curvature of an
//! edge between two densified points), so two footprints of different splits lie in
//! disjoint unions of cells and their interiors never meet, whatever their CRSs, UTM zones
//! or Items. A footprint that straddles cells of two splits belongs to none.

use crate::config::SplitConfig;
use crate::rng;
use cogfeed_geo::{Affine, Crs, Transformer};

/// EPSG code of the equal-area grid.
pub const EQUAL_AREA_EPSG: u32 = 6933;
/// Points per footprint side transformed into the equal-area grid.
const EDGE_STEPS: usize = 16;
/// Metres added around the transformed bounding box (edges bulge by far less between two
/// of the `EDGE_STEPS` points of a footprint under a few hundred kilometres).
const MARGIN_M: f64 = 1.0;
/// A footprint meeting more cells than this belongs to no split (it would be too large to
/// lie in one split's cells but by chance).
const MAX_CELLS: i64 = 4096;

/// The cells and their splits.
#[derive(Debug, Clone)]
pub struct SplitRule {
    pub cell_size: f64,
    /// Split names, sorted.
    pub names: Vec<String>,
    /// Upper bound of each split's share of `[0, 1)`, in `names` order.
    bounds: Vec<f64>,
    seed: u64,
    grid: Crs,
}

impl SplitRule {
    /// Checks `c`: a positive cell size, valid names, fractions in `[0, 1]` adding up to 1.
    pub fn new(c: &SplitConfig) -> Result<Self, String> {
        if !(c.cell_size.is_finite() && c.cell_size >= 1.0) {
            return Err(format!("cell_size {} must be at least 1 metre", c.cell_size));
        }
        if c.fractions.is_empty() {
            return Err("fractions is empty".into());
        }
        let mut total = 0.0;
        let mut bounds = Vec::with_capacity(c.fractions.len());
        for (name, &f) in &c.fractions {
            if name.is_empty() || !name.chars().all(|ch| ch.is_ascii_alphanumeric() || "-_".contains(ch)) {
                return Err(format!("split name {name:?}: use letters, digits, - _"));
            }
            if !(0.0..=1.0).contains(&f) {
                return Err(format!("fraction of {name} is {f}, not in [0, 1]"));
            }
            total += f;
            bounds.push(total);
        }
        if (total - 1.0).abs() > 1e-6 {
            return Err(format!("fractions add up to {total}, not 1"));
        }
        if let Some(last) = bounds.last_mut() {
            *last = f64::INFINITY;
        }
        let grid = Crs::from_epsg(EQUAL_AREA_EPSG).map_err(|e| e.to_string())?;
        Ok(Self {
            cell_size: c.cell_size,
            names: c.fractions.keys().cloned().collect(),
            bounds,
            seed: c.seed,
            grid,
        })
    }

    /// Index (in `names`) of `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// The split of cell (`i`, `j`) (column, row of the equal-area grid).
    pub fn cell_split(&self, i: i64, j: i64) -> usize {
        let h = rng::key(&[self.seed, i as u64, j as u64, 0x5A11]);
        let u = (h >> 11) as f64 / (1u64 << 53) as f64;
        self.bounds.partition_point(|&b| b <= u).min(self.names.len() - 1)
    }

    /// The cells (inclusive column and row ranges) that `bounds` in `crs` may meet.
    pub fn cells(&self, crs: &Crs, bounds: [f64; 4]) -> Option<([i64; 2], [i64; 2])> {
        let t = Affine::north_up(bounds[0], bounds[3], 1.0);
        let (w, h) = (bounds[2] - bounds[0], bounds[3] - bounds[1]);
        let (mut xs, mut ys) = (Vec::with_capacity(4 * (EDGE_STEPS + 1)), Vec::new());
        for s in 0..=EDGE_STEPS {
            let r = s as f64 / EDGE_STEPS as f64;
            for (c, row) in [(r * w, 0.0), (r * w, h), (0.0, r * h), (w, r * h)] {
                let (x, y) = t.apply(c, row);
                xs.push(x);
                ys.push(y);
            }
        }
        Transformer::new(crs, &self.grid).transform(&mut xs, &mut ys);
        if xs.iter().chain(ys.iter()).any(|v| !v.is_finite()) {
            return None;
        }
        let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let cs = self.cell_size;
        let cell = |v: f64| (v / cs).floor() as i64;
        Some((
            [cell(min(&xs) - MARGIN_M), cell(max(&xs) + MARGIN_M)],
            [cell(min(&ys) - MARGIN_M), cell(max(&ys) + MARGIN_M)],
        ))
    }

    /// The split whose cells hold the whole footprint `bounds` in `crs` (None: it
    /// straddles splits, or cannot be placed in the equal-area grid).
    pub fn footprint_split(&self, crs: &Crs, bounds: [f64; 4]) -> Option<usize> {
        let (cols, rows) = self.cells(crs, bounds)?;
        let n = (cols[1] - cols[0] + 1).saturating_mul(rows[1] - rows[0] + 1);
        if n > MAX_CELLS {
            return None;
        }
        let first = self.cell_split(cols[0], rows[0]);
        for i in cols[0]..=cols[1] {
            for j in rows[0]..=rows[1] {
                if self.cell_split(i, j) != first {
                    return None;
                }
            }
        }
        Some(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rule(cell: f64, seed: u64, val: f64) -> SplitRule {
        SplitRule::new(&SplitConfig {
            cell_size: cell,
            fractions: [("train".to_string(), 1.0 - val), ("val".to_string(), val)]
                .into_iter()
                .collect(),
            seed,
        })
        .unwrap()
    }

    #[test]
    fn refuses_bad_configs() {
        let mk = |cell: f64, f: &[(&str, f64)]| {
            SplitRule::new(&SplitConfig {
                cell_size: cell,
                fractions: f.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                seed: 0,
            })
        };
        assert!(mk(0.0, &[("train", 1.0)]).is_err());
        assert!(mk(1000.0, &[("train", 0.7), ("val", 0.2)]).is_err());
        assert!(mk(1000.0, &[("train", 1.2), ("val", -0.2)]).is_err());
        assert!(mk(1000.0, &[("tr ain", 1.0)]).is_err());
        assert!(mk(1000.0, &[]).is_err());
        assert!(mk(1000.0, &[("train", 0.8), ("val", 0.2)]).is_ok());
    }

    #[test]
    fn cell_shares_follow_the_fractions() {
        let r = rule(1000.0, 3, 0.2);
        let n = 200i64;
        let val = (0..n)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .filter(|&(i, j)| r.cell_split(i, j) == 1)
            .count() as f64;
        let share = val / (n * n) as f64;
        assert!((share - 0.2).abs() < 0.01, "val share {share}");
    }

    /// A footprint in `epsg` near (lon, lat), `side` metres (or degrees) wide.
    fn footprint(epsg: u32, lon: f64, lat: f64, dx: f64, dy: f64, side: f64) -> (Crs, [f64; 4]) {
        let crs = Crs::from_epsg(epsg).unwrap();
        let wgs = Crs::from_epsg(4326).unwrap();
        let (x, y) = Transformer::new(&wgs, &crs).point(lon, lat).unwrap();
        let (x, y) = (x + dx, y + dy);
        (crs, [x, y, x + side, y + side])
    }

    /// Whether two footprints' interiors meet, tested on a dense set of points of `a`
    /// carried into `b`'s CRS.
    fn overlaps(a: &(Crs, [f64; 4]), b: &(Crs, [f64; 4])) -> bool {
        let n = 40;
        let (mut xs, mut ys) = (Vec::new(), Vec::new());
        for i in 1..n {
            for j in 1..n {
                xs.push(a.1[0] + (a.1[2] - a.1[0]) * i as f64 / n as f64);
                ys.push(a.1[1] + (a.1[3] - a.1[1]) * j as f64 / n as f64);
            }
        }
        Transformer::new(&a.0, &b.0).transform(&mut xs, &mut ys);
        xs.iter()
            .zip(&ys)
            .any(|(&x, &y)| x > b.1[0] && x < b.1[2] && y > b.1[1] && y < b.1[3])
    }

    proptest! {
        /// Footprints of two different splits never overlap, across UTM zones 32/33 and
        /// EPSG:4326, for random cell sizes, seeds and positions around the zone boundary.
        #[test]
        fn footprints_of_different_splits_never_overlap(
            seed in any::<u64>(),
            cell in 300.0f64..5000.0,
            fps in proptest::collection::vec((0usize..3, -3000.0f64..3000.0, -3000.0f64..3000.0, 200.0f64..2500.0), 12..40),
        ) {
            let r = rule(cell, seed, 0.4);
            let placed: Vec<((Crs, [f64; 4]), usize)> = fps
                .iter()
                .filter_map(|&(z, dx, dy, side)| {
                    let f = match z {
                        0 => footprint(32632, 12.0, 46.5, dx, dy, side),
                        1 => footprint(32633, 12.0, 46.5, dx, dy, side),
                        _ => footprint(4326, 12.0, 46.5, dx / 80_000.0, dy / 110_000.0, side / 90_000.0),
                    };
                    r.footprint_split(&f.0, f.1).map(|s| (f, s))
                })
                .collect();
            for (i, (a, sa)) in placed.iter().enumerate() {
                for (b, sb) in &placed[i + 1..] {
                    if sa != sb {
                        prop_assert!(!overlaps(a, b) && !overlaps(b, a), "{a:?} ({sa}) overlaps {b:?} ({sb})");
                    }
                }
            }
        }
    }

    #[test]
    fn a_footprint_inside_one_cell_has_that_cells_split() {
        let r = rule(10_000.0, 1, 0.5);
        let (crs, b) = footprint(32632, 12.0, 46.5, 0.0, 0.0, 100.0);
        let (cols, rows) = r.cells(&crs, b).unwrap();
        if cols[0] == cols[1] && rows[0] == rows[1] {
            assert_eq!(r.footprint_split(&crs, b), Some(r.cell_split(cols[0], rows[0])));
        }
    }
}
