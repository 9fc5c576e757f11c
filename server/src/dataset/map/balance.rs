//! Class-balanced sampling (`[datasets.balance]`, the `balanced` sampler).
//!
//! Each drawable reference grid is cut into cells of `cell_size` pixels. A cell's class
//! histogram is counted once from the class layer read at `samples_per_cell` pixels across
//! a cell (nearest, so the warp reads the label's overviews), and the histograms are kept
//! on disk per dataset version (`ClassIndex`), so a restart reads them back.
//!
//! The draw: cell `c` with probability ∝ `w_c = Σ_k m_k · n_ck` (n_ck: the cell's pixels of
//! class k), then a window in it. The class multipliers `m_k` are fitted by iterative
//! proportional scaling so that the expected class shares of the drawn pixels,
//! `a_k = Σ_c w_c n_ck / Σ_c w_c n_c`, meet the targets as closely as the cells allow
//! (a class never seen alone in a cell cannot be isolated). Weights are integers, so a
//! draw is exact integer arithmetic: the same on every machine.

use serde::{Deserialize, Serialize};

use crate::config::BalanceConfig;
use crate::sampler::WeightedCells;

/// Default cell side, reference pixels.
pub const DEFAULT_CELL: u32 = 256;
/// Default class-layer samples across a cell.
pub const DEFAULT_SAMPLES: u32 = 16;
/// Most distinct classes a class layer may hold.
pub const MAX_CLASSES: usize = 1024;
/// Fitting rounds of the class multipliers.
const FIT_ROUNDS: usize = 2000;

/// What the proportions are.
#[derive(Debug, Clone, PartialEq)]
pub enum Targets {
    /// Listed classes and their shares; the others share the rest naturally.
    Proportions(Vec<(i64, f64)>),
    /// Every class present gets an equal share.
    Inverse,
}

/// `[datasets.balance]`, resolved against the layers.
#[derive(Debug, Clone, PartialEq)]
pub struct BalanceRule {
    /// Index of the class layer.
    pub layer: usize,
    pub targets: Targets,
    pub cell: u32,
    pub samples: u32,
    pub ignore: Vec<i64>,
}

impl BalanceRule {
    /// Checks `c` against the layer names (and which of them are time series).
    pub fn new(c: &BalanceConfig, layers: &[(String, bool)]) -> Result<Self, String> {
        let layer = layers
            .iter()
            .position(|(n, _)| n == &c.layer)
            .ok_or_else(|| format!("balance.layer {:?} is not one of the layers", c.layer))?;
        if layers[layer].1 {
            return Err(format!(
                "balance.layer {:?} is a time series; classes have one date",
                c.layer
            ));
        }
        let targets = match (c.weights.as_deref(), c.proportions.is_empty()) {
            (Some("inverse"), true) => Targets::Inverse,
            (Some(w), true) => return Err(format!("balance.weights {w:?} (inverse)")),
            (Some(_), false) => return Err("balance: give proportions or weights, not both".into()),
            (None, true) => return Err("balance needs proportions or weights = \"inverse\"".into()),
            (None, false) => {
                let mut v = Vec::with_capacity(c.proportions.len());
                for (k, &p) in &c.proportions {
                    let class: i64 = k
                        .trim()
                        .parse()
                        .map_err(|_| format!("balance.proportions: {k:?} is not an integer class"))?;
                    if !(p.is_finite() && (0.0..=1.0).contains(&p)) {
                        return Err(format!("balance.proportions: class {class} has {p}, not in [0, 1]"));
                    }
                    v.push((class, p));
                }
                let sum: f64 = v.iter().map(|x| x.1).sum();
                if sum > 1.0 + 1e-9 {
                    return Err(format!("balance.proportions add up to {sum}, over 1"));
                }
                Targets::Proportions(v)
            }
        };
        let cell = c.cell_size.unwrap_or(DEFAULT_CELL);
        let samples = c.samples_per_cell.unwrap_or(DEFAULT_SAMPLES);
        if cell == 0 || !(1..=256).contains(&samples) || samples > cell {
            return Err(format!(
                "balance: cell_size {cell} and samples_per_cell {samples} (1..=256, at most cell_size)"
            ));
        }
        Ok(Self {
            layer,
            targets,
            cell,
            samples,
            ignore: c.ignore.clone(),
        })
    }
}

/// Per-cell class counts of one dataset version: what is kept on disk.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClassIndex {
    /// Dataset version and rule this index belongs to.
    pub key: String,
    /// Classes, ascending.
    pub classes: Vec<i64>,
    /// Cells: scene, column, row, width, height (reference pixels).
    pub cells: Vec<[u64; 5]>,
    /// `cells.len() × classes.len()` counts, row-major.
    pub counts: Vec<u32>,
}

impl ClassIndex {
    fn row(&self, c: usize) -> &[u32] {
        let k = self.classes.len();
        &self.counts[c * k..(c + 1) * k]
    }
}

/// One class's shares: natural (uniform draws over counted pixels), target, and expected
/// under the fitted weights.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassShare {
    pub class: i64,
    pub natural: f64,
    pub target: f64,
    pub expected: f64,
}

/// A fitted balance: the shares and the weighted cells.
#[derive(Debug, Clone)]
pub struct Balance {
    /// Index of the class layer.
    pub layer: usize,
    pub shares: Vec<ClassShare>,
    pub cells: std::sync::Arc<WeightedCells>,
}

/// Classes `targets` gives a share that no drawable cell holds (their share cannot be
/// served: it goes to the other classes), with the share asked for.
pub fn absent_classes(index: &ClassIndex, targets: &Targets) -> Vec<(i64, f64)> {
    match targets {
        Targets::Inverse => Vec::new(),
        Targets::Proportions(listed) => listed
            .iter()
            .filter(|(class, share)| *share > 0.0 && !index.classes.contains(class))
            .copied()
            .collect(),
    }
}

/// The weights that bring `index`'s class shares to `targets`.
pub fn fit(index: &ClassIndex, targets: &Targets) -> Result<Balance, String> {
    let k = index.classes.len();
    let n = index.cells.len();
    if k == 0 {
        return Err("the class layer holds no counted class under any drawable grid".into());
    }
    let mut natural = vec![0f64; k];
    for c in 0..n {
        for (j, &v) in index.row(c).iter().enumerate() {
            natural[j] += v as f64;
        }
    }
    let all: f64 = natural.iter().sum();
    natural.iter_mut().for_each(|v| *v /= all);
    let target: Vec<f64> = match targets {
        Targets::Inverse => vec![1.0 / k as f64; k],
        Targets::Proportions(listed) => {
            let share = |class: i64| listed.iter().find(|(c, _)| *c == class).map(|x| x.1);
            let listed_sum: f64 = listed.iter().map(|x| x.1).sum();
            let rest_natural: f64 = (0..k)
                .filter(|&j| share(index.classes[j]).is_none())
                .map(|j| natural[j])
                .sum();
            (0..k)
                .map(|j| match share(index.classes[j]) {
                    Some(p) => p,
                    None if rest_natural > 0.0 => (1.0 - listed_sum).max(0.0) * natural[j] / rest_natural,
                    None => 0.0,
                })
                .collect()
        }
    };
    let target_sum: f64 = target.iter().sum();
    if target_sum <= 0.0 {
        return Err("balance: the target proportions give no present class a share".into());
    }
    let target: Vec<f64> = target.iter().map(|t| t / target_sum).collect();
    // Iterative proportional scaling of the class multipliers.
    let mut m: Vec<f64> = (0..k)
        .map(|j| if natural[j] > 0.0 { target[j] / natural[j] } else { 0.0 })
        .collect();
    let expected_of = |m: &[f64]| -> (Vec<f64>, Vec<f64>) {
        let mut weights = Vec::with_capacity(n);
        let mut drawn = vec![0f64; k];
        for c in 0..n {
            let row = index.row(c);
            let w: f64 = row.iter().zip(m).map(|(&v, &mj)| v as f64 * mj).sum();
            weights.push(w);
            for (j, &v) in row.iter().enumerate() {
                drawn[j] += w * v as f64;
            }
        }
        let total: f64 = drawn.iter().sum();
        if total > 0.0 {
            drawn.iter_mut().for_each(|v| *v /= total);
        }
        (weights, drawn)
    };
    let mut previous = f64::INFINITY;
    for _ in 0..FIT_ROUNDS {
        let (_, a) = expected_of(&m);
        let mut worst = 0f64;
        for j in 0..k {
            if a[j] > 0.0 && target[j] > 0.0 {
                m[j] *= target[j] / a[j];
            } else if target[j] == 0.0 {
                m[j] = 0.0;
            }
            worst = worst.max((a[j] - target[j]).abs());
        }
        // Keep the multipliers in range (only their ratios matter).
        let top = m.iter().cloned().fold(0f64, f64::max);
        if top > 0.0 {
            m.iter_mut().for_each(|v| *v /= top);
        }
        // Met, or as close as the cells allow.
        if worst < 1e-7 || (previous - worst).abs() < 1e-10 {
            break;
        }
        previous = worst;
    }
    let (weights, expected) = expected_of(&m);
    // Integer weights: the draw is exact integer arithmetic.
    let top = weights.iter().cloned().fold(0f64, f64::max);
    if top <= 0.0 {
        return Err("balance: no cell holds a class with a target share".into());
    }
    let mut cells = Vec::new();
    let mut cumulative = Vec::new();
    let mut sum = 0u64;
    for (c, w) in weights.iter().enumerate() {
        let q = (w / top * (1u64 << 40) as f64).round() as u64;
        if q > 0 {
            sum += q;
            cells.push(index.cells[c]);
            cumulative.push(sum);
        }
    }
    Ok(Balance {
        layer: 0,
        shares: (0..k)
            .map(|j| ClassShare {
                class: index.classes[j],
                natural: natural[j],
                target: target[j],
                expected: expected[j],
            })
            .collect(),
        cells: std::sync::Arc::new(WeightedCells { cells, cumulative }),
    })
}

/// Counts one scene's classes: `values` is the class layer at `samples` pixels across
/// each cell, `cols × rows` cells, over a grid `width × height` reference pixels.
pub struct SceneClasses<'a> {
    pub scene: u64,
    pub values: &'a [f64],
    pub width: u64,
    pub height: u64,
}

/// Builds an index from per-scene class samples.
pub fn count(rule: &BalanceRule, nodata: f64, key: String, scenes: &[SceneClasses<'_>]) -> Result<ClassIndex, String> {
    let (cell, s) = (u64::from(rule.cell), u64::from(rule.samples));
    let mut classes = std::collections::BTreeMap::<i64, usize>::new();
    // Each counted cell and its (class, count) pairs.
    type Histogram = Vec<(i64, u32)>;
    let mut per_cell: Vec<([u64; 5], Histogram)> = Vec::new();
    for sc in scenes {
        let (cols, rows) = (sc.width.div_ceil(cell), sc.height.div_ceil(cell));
        let across = (cols * s) as usize;
        for cr in 0..rows {
            for cc in 0..cols {
                let (c0, r0) = (cc * cell, cr * cell);
                let (cw, ch) = (cell.min(sc.width - c0), cell.min(sc.height - r0));
                let mut hist: Vec<(i64, u32)> = Vec::new();
                for sy in 0..s {
                    // Samples whose centre lies outside the grid are not the cell's.
                    if ((sy as f64 + 0.5) * cell as f64 / s as f64) >= ch as f64 {
                        continue;
                    }
                    for sx in 0..s {
                        if ((sx as f64 + 0.5) * cell as f64 / s as f64) >= cw as f64 {
                            continue;
                        }
                        let p = (cr * s + sy) as usize * across + (cc * s + sx) as usize;
                        let Some(&v) = sc.values.get(p) else { continue };
                        if !v.is_finite() || v == nodata || v.fract() != 0.0 {
                            continue;
                        }
                        let class = v as i64;
                        if rule.ignore.contains(&class) {
                            continue;
                        }
                        if !classes.contains_key(&class) {
                            if classes.len() == MAX_CLASSES {
                                return Err(format!("the class layer holds over {MAX_CLASSES} classes"));
                            }
                            classes.insert(class, 0);
                        }
                        match hist.iter_mut().find(|h| h.0 == class) {
                            Some(h) => h.1 += 1,
                            None => hist.push((class, 1)),
                        }
                    }
                }
                if !hist.is_empty() {
                    per_cell.push(([sc.scene, c0, r0, cw, ch], hist));
                }
            }
        }
    }
    for (i, v) in classes.values_mut().enumerate() {
        *v = i;
    }
    let k = classes.len();
    let mut counts = vec![0u32; per_cell.len() * k];
    for (c, (_, hist)) in per_cell.iter().enumerate() {
        for &(class, n) in hist {
            counts[c * k + classes[&class]] = n;
        }
    }
    Ok(ClassIndex {
        key,
        classes: classes.into_keys().collect(),
        cells: per_cell.into_iter().map(|x| x.0).collect(),
        counts,
    })
}

/// Reads the index at `path` when it belongs to `key`.
pub fn load(path: &std::path::Path, key: &str) -> Option<ClassIndex> {
    let bytes = std::fs::read(path).ok()?;
    let index: ClassIndex = serde_json::from_slice(&bytes).ok()?;
    let k = index.classes.len();
    (index.key == key && index.counts.len() == index.cells.len() * k).then_some(index)
}

/// Writes `index` to `path`.
pub fn save(path: &std::path::Path, index: &ClassIndex) -> std::io::Result<()> {
    super::plan_index::write_atomically(path, &serde_json::to_vec(index).map_err(std::io::Error::other)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(cells: &[&[u32]], classes: &[i64]) -> ClassIndex {
        ClassIndex {
            key: "k".into(),
            classes: classes.to_vec(),
            cells: (0..cells.len() as u64).map(|i| [0, i * 10, 0, 10, 10]).collect(),
            counts: cells.iter().flat_map(|c| c.iter().copied()).collect(),
        }
    }

    #[test]
    fn pure_cells_meet_any_target_exactly() {
        // Class 2 is 1 % of the pixels, but alone in its cell: any share is reachable.
        let ix = index(&[&[99, 0], &[0, 1], &[100, 0]], &[1, 2]);
        let b = fit(&ix, &Targets::Proportions(vec![(2, 0.5)])).unwrap();
        assert!((b.shares[1].natural - 1.0 / 200.0).abs() < 1e-12);
        assert!((b.shares[1].expected - 0.5).abs() < 1e-6, "{:?}", b.shares);
        assert!((b.shares[0].expected - 0.5).abs() < 1e-6);
    }

    #[test]
    fn mixed_cells_get_as_close_as_they_allow() {
        // Class 2 never appears without class 1 being twice as common: at most 1/3.
        let ix = index(&[&[20, 10], &[50, 0]], &[1, 2]);
        let b = fit(&ix, &Targets::Inverse).unwrap();
        assert!((b.shares[1].expected - 1.0 / 3.0).abs() < 1e-3, "{:?}", b.shares);
    }

    #[test]
    fn a_target_for_an_absent_class_is_reported() {
        let ix = index(&[&[10, 0], &[0, 10]], &[1, 2]);
        let absent = absent_classes(&ix, &Targets::Proportions(vec![(2, 0.5), (99, 0.25), (98, 0.0)]));
        assert_eq!(absent, vec![(99, 0.25)]);
        assert!(absent_classes(&ix, &Targets::Inverse).is_empty());
    }

    #[test]
    fn a_zero_target_removes_its_pure_cells() {
        let ix = index(&[&[10, 0], &[0, 10], &[5, 5]], &[1, 2]);
        let b = fit(&ix, &Targets::Proportions(vec![(2, 0.0)])).unwrap();
        assert_eq!(b.cells.cells.len(), 2, "the pure class-2 cell cannot be drawn");
        assert!(b.shares[1].expected < 0.5);
    }

    #[test]
    fn draws_follow_the_integer_weights() {
        let ix = index(&[&[10, 0], &[0, 10]], &[1, 2]);
        let b = fit(&ix, &Targets::Proportions(vec![(1, 0.25), (2, 0.75)])).unwrap();
        let w = &b.cells;
        let total = w.total();
        let mut r = crate::rng::Rng::new(7);
        let n = 40_000;
        let second = (0..n).filter(|_| w.at(r.below(total))[1] == 10).count();
        assert!((second as f64 / n as f64 - 0.75).abs() < 0.01, "{second}");
    }

    #[test]
    fn counting_skips_nodata_ignored_and_outside_samples() {
        let rule = BalanceRule {
            layer: 0,
            targets: Targets::Inverse,
            cell: 4,
            samples: 2,
            ignore: vec![9],
        };
        // A 6 x 4 grid: 2 x 1 cells, the second only 2 pixels wide (its right samples
        // fall outside). Samples: 4 across, 2 down.
        let values = [1.0, 1.0, 2.0, 7.0, 255.0, 9.0, 2.0, 7.0];
        let sc = SceneClasses {
            scene: 3,
            values: &values,
            width: 6,
            height: 4,
        };
        let ix = count(&rule, 255.0, "k".into(), &[sc]).unwrap();
        assert_eq!(ix.classes, vec![1, 2]);
        assert_eq!(ix.cells, vec![[3, 0, 0, 4, 4], [3, 4, 0, 2, 4]]);
        assert_eq!(ix.counts, vec![2, 0, 0, 2]);
    }

    #[test]
    fn rules_are_checked() {
        let layers = vec![("image".to_string(), false), ("label".to_string(), false)];
        let mut c = BalanceConfig {
            layer: "label".into(),
            ..Default::default()
        };
        assert!(BalanceRule::new(&c, &layers).is_err(), "needs a target");
        c.weights = Some("inverse".into());
        assert_eq!(BalanceRule::new(&c, &layers).unwrap().layer, 1);
        c.proportions.insert("3".into(), 0.5);
        assert!(BalanceRule::new(&c, &layers).is_err(), "both");
        c.weights = None;
        c.proportions.insert("4".into(), 0.6);
        assert!(BalanceRule::new(&c, &layers).is_err(), "over 1");
        c.proportions.clear();
        c.proportions.insert("x".into(), 0.5);
        assert!(BalanceRule::new(&c, &layers).is_err(), "not a class");
    }
}
