//! A spatial index of Item bboxes (EPSG:4326): which Items may meet a lon/lat box, without
//! scanning every Item of a large catalog for every sample.

use std::collections::HashMap;

/// Items by the 1° cells their bbox covers; Items over many cells (or across the
/// antimeridian) are always candidates.
#[derive(Debug, Clone, Default)]
pub struct BboxIndex {
    cell: f64,
    cells: HashMap<(i32, i32), Vec<u32>>,
    wide: Vec<u32>,
    len: usize,
}

/// Cells one Item may occupy before it goes to the always-checked list.
const MAX_CELLS_PER_ITEM: i64 = 64;
/// Cells one query may visit before it returns every Item.
const MAX_CELLS_PER_QUERY: i64 = 4096;

impl BboxIndex {
    /// Indexes `bboxes` (`[minlon, minlat, maxlon, maxlat]`, one per Item) on cells of
    /// `cell` degrees.
    pub fn new(bboxes: &[[f64; 4]], cell: f64) -> Self {
        let mut index = Self {
            cell,
            cells: HashMap::new(),
            wide: Vec::new(),
            len: bboxes.len(),
        };
        for (i, b) in bboxes.iter().enumerate() {
            match index.span(*b) {
                Some((x0, y0, x1, y1)) if (x1 - x0 + 1) as i64 * (y1 - y0 + 1) as i64 <= MAX_CELLS_PER_ITEM => {
                    for x in x0..=x1 {
                        for y in y0..=y1 {
                            index.cells.entry((x, y)).or_default().push(i as u32);
                        }
                    }
                }
                _ => index.wide.push(i as u32),
            }
        }
        index
    }

    fn span(&self, b: [f64; 4]) -> Option<(i32, i32, i32, i32)> {
        if !b.iter().all(|v| v.is_finite()) || b[0] > b[2] || b[1] > b[3] {
            return None;
        }
        let c = |v: f64| (v / self.cell).floor().clamp(-1e6, 1e6) as i32;
        Some((c(b[0]), c(b[1]), c(b[2]), c(b[3])))
    }

    /// Items whose cells meet `b`, ascending (a superset of those whose bbox meets it).
    pub fn query(&self, b: [f64; 4]) -> Vec<usize> {
        let all = || (0..self.len).collect();
        let Some((x0, y0, x1, y1)) = self.span(b) else {
            return all();
        };
        if (x1 - x0 + 1) as i64 * (y1 - y0 + 1) as i64 > MAX_CELLS_PER_QUERY {
            return all();
        }
        let mut out: Vec<usize> = self.wide.iter().map(|&i| i as usize).collect();
        for x in x0..=x1 {
            for y in y0..=y1 {
                if let Some(v) = self.cells.get(&(x, y)) {
                    out.extend(v.iter().map(|&i| i as usize));
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_return_every_item_that_may_meet_the_box() {
        let boxes = [
            [11.9, 46.4, 12.0, 46.5],
            [12.0, 46.4, 12.1, 46.5],
            [-180.0, -90.0, 180.0, 90.0],
            [170.0, 10.0, -170.0, 11.0],
            [50.0, 50.0, 50.5, 50.5],
        ];
        let idx = BboxIndex::new(&boxes, 1.0);
        let q = idx.query([11.95, 46.45, 11.99, 46.46]);
        assert!(q.contains(&0) && q.contains(&2) && q.contains(&3) && !q.contains(&4));
        assert_eq!(idx.query([f64::NAN, 0.0, 1.0, 1.0]).len(), 5);
        assert!(idx.query([50.1, 50.1, 50.2, 50.2]).contains(&4));
    }
}
