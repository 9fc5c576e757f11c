//! Window plans: which window is the i-th sample of an epoch, and which samples a rank gets.
//!
//! Pure and deterministic: a plan is a function of (scene sizes, sampler, patch size,
//! stride, level, seed, epoch); nothing is materialised, so an epoch of 10^9 samples costs
//! no memory.
//! - `aligned`: windows on the scene's tile grid (patch = k x k tiles, whole windows only),
//!   visited in a seeded permutation (a keyed Feistel network with cycle walking).
//! - `random`: `samples_per_epoch` draws, uniform over every valid pixel offset of every
//!   scene.
//! - `grid`: a stride cover of every scene in scene/row/column order; windows that run past
//!   the right or bottom edge are padded with the fill value.
//! - `points`: one window centred on each of a list of points (scene, column, row), every
//!   point once per epoch in a seeded permutation.
//! - `balanced`: `samples_per_epoch` draws of a cell by integer weight (class balance,
//!   `stacset::balance`), then a window in the cell: uniform over the offsets inside it,
//!   or, for a patch wider than the cell, centred on a uniform pixel of it.
//!
//! Ranks: rank r of W takes, at each global step of `B x W` samples, the r-th run of `B`.
//! Every rank gets `floor((N - cursor) / (B x W))` batches (the tail of fewer than `B x W`
//! samples is dropped, so no DDP rank waits at the epoch end). The cursor is a global
//! sample offset, so a job can resume with another world size.

use crate::rng;

mod binomial;
mod choice;
mod feistel;
mod local;
mod share;

pub use choice::OrderChoice;
use feistel::Feistel;
pub use local::{LocalOrder, LocalSpec, Member, Order};
pub use share::Share;

/// The kind of sampler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplerKind {
    Aligned,
    Random,
    Grid,
    Points,
    Balanced,
}

/// A point to centre a window on: scene, column, row (pixels of the scene's grid).
pub type PointCentre = [u64; 3];

/// Cells drawn by integer weight.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightedCells {
    /// Scene, column, row, width, height of each drawable cell.
    pub cells: Vec<[u64; 5]>,
    /// Running sums of the weights (last = total).
    pub cumulative: Vec<u64>,
}

impl WeightedCells {
    /// The cell a uniform `u` in `0..total` falls in.
    pub fn at(&self, u: u64) -> [u64; 5] {
        let i = self.cumulative.partition_point(|&c| c <= u);
        self.cells[i.min(self.cells.len() - 1)]
    }

    /// Sum of the weights.
    pub fn total(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }
}

/// One window of one scene.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSpec {
    pub scene: u32,
    pub col: u64,
    pub row: u64,
    pub width: u32,
    pub height: u32,
    pub level: u32,
    /// Part of the window lies outside the scene.
    pub padded: bool,
}

/// Geometry of one scene at the plan's level.
#[derive(Debug, Clone, Copy)]
pub struct SceneGrid {
    pub width: u64,
    pub height: u64,
    pub block_width: u64,
    pub block_height: u64,
}

/// Everything a plan depends on.
#[derive(Debug, Clone)]
pub struct PlanSpec {
    pub kind: SamplerKind,
    pub patch: u32,
    pub stride: u32,
    pub level: u32,
    pub seed: u64,
    pub epoch: u64,
    pub samples_per_epoch: u64,
}

/// The samples of one epoch.
#[derive(Debug, Clone)]
pub struct Plan {
    spec: PlanSpec,
    scenes: Vec<SceneGrid>,
    /// Cumulative window (or position) counts per scene.
    cumulative: Vec<u64>,
    len: u64,
    permutation: Option<Feistel>,
    /// `points`: the centres, in the dataset's point order (after any split filter).
    centres: Option<std::sync::Arc<Vec<(usize, PointCentre)>>>,
    /// `balanced`: the weighted cells.
    cells: Option<std::sync::Arc<WeightedCells>>,
    /// `order = "local"`: the epoch's samples grouped by block and dealt (None: the
    /// plan's own order).
    local: Option<std::sync::Arc<LocalOrder>>,
    /// Scene → grid id, where scenes share a grid (a locality order groups them together).
    grid_ids: Option<std::sync::Arc<Vec<u32>>>,
}

impl Plan {
    /// Builds a plan, or says why the parameters do not fit the scenes.
    pub fn new(spec: PlanSpec, scenes: Vec<SceneGrid>) -> Result<Self, String> {
        let p = spec.patch as u64;
        if p == 0 {
            return Err("patch_size must be positive".into());
        }
        if scenes.is_empty() {
            return Err("dataset has no scenes".into());
        }
        let mut cumulative = Vec::with_capacity(scenes.len());
        let mut total = 0u64;
        for (i, s) in scenes.iter().enumerate() {
            let count = match spec.kind {
                SamplerKind::Aligned => {
                    if !p.is_multiple_of(s.block_width) || !p.is_multiple_of(s.block_height) {
                        return Err(format!(
                            "aligned windows need a patch size that is a multiple of the {}x{} tile size (scene {i})",
                            s.block_width, s.block_height
                        ));
                    }
                    (s.width / p) * (s.height / p)
                }
                SamplerKind::Random => {
                    if p > s.width || p > s.height {
                        return Err(format!(
                            "patch size {p} is larger than scene {i} ({}x{} at level {})",
                            s.width, s.height, spec.level
                        ));
                    }
                    (s.width - p + 1) * (s.height - p + 1)
                }
                SamplerKind::Grid => {
                    let stride = spec.stride as u64;
                    if stride == 0 {
                        return Err("stride must be positive".into());
                    }
                    grid_steps(s.width, p, stride) * grid_steps(s.height, p, stride)
                }
                SamplerKind::Points => return Err("the points sampler needs a dataset with points".into()),
                SamplerKind::Balanced => {
                    return Err("the balanced sampler needs a map-space dataset with [datasets.balance]".into());
                }
            };
            total = total.saturating_add(count);
            cumulative.push(total);
        }
        if total == 0 {
            return Err(format!(
                "patch size {p} yields no window in any scene at level {}",
                spec.level
            ));
        }
        let len = match spec.kind {
            SamplerKind::Random => draws_per_epoch(&spec, &scenes),
            _ => total,
        };
        let permutation =
            (spec.kind == SamplerKind::Aligned).then(|| Feistel::new(total, rng::key(&[spec.seed, spec.epoch, 0xA1])));
        Ok(Self {
            spec,
            scenes,
            cumulative,
            len,
            permutation,
            centres: None,
            cells: None,
            local: None,
            grid_ids: None,
        })
    }

    /// A `balanced` plan: `samples_per_epoch` (default: as many as non-overlapping
    /// patches) weighted draws of `cells`.
    pub fn balanced(
        spec: PlanSpec,
        scenes: Vec<SceneGrid>,
        cells: std::sync::Arc<WeightedCells>,
    ) -> Result<Self, String> {
        let p = spec.patch as u64;
        if p == 0 {
            return Err("patch_size must be positive".into());
        }
        if cells.total() == 0 {
            return Err("no cell has a class with a target share".into());
        }
        if let Some(c) = cells.cells.iter().find(|c| c[0] as usize >= scenes.len()) {
            return Err(format!("a cell names scene {}, past the dataset's scenes", c[0]));
        }
        let len = draws_per_epoch(&spec, &scenes);
        Ok(Self {
            spec: PlanSpec {
                kind: SamplerKind::Balanced,
                ..spec
            },
            cumulative: vec![len],
            scenes,
            len,
            permutation: None,
            centres: None,
            cells: Some(cells),
            local: None,
            grid_ids: None,
        })
    }

    /// A window in a cell drawn by weight with `r`.
    fn balanced_draw(&self, r: &mut rng::Rng) -> (usize, u64, u64) {
        let Some(cells) = &self.cells else {
            return (0, 0, 0);
        };
        let [scene, c0, r0, cw, ch] = cells.at(r.below(cells.total().max(1)));
        let p = self.spec.patch as u64;
        let s = &self.scenes[scene as usize];
        let mut place = |start: u64, extent: u64, size: u64| {
            let at = if extent >= p {
                start + r.below(extent - p + 1)
            } else {
                (start + r.below(extent.max(1))).saturating_sub(p / 2)
            };
            at.min(size.saturating_sub(p))
        };
        let col = place(c0, cw, s.width);
        let row = place(r0, ch, s.height);
        (scene as usize, col, row)
    }

    /// A `points` plan: one window centred on each of `centres` (point index, centre),
    /// visited once per epoch in a seeded permutation.
    pub fn points(
        spec: PlanSpec,
        scenes: Vec<SceneGrid>,
        centres: std::sync::Arc<Vec<(usize, PointCentre)>>,
    ) -> Result<Self, String> {
        if spec.patch == 0 {
            return Err("patch_size must be positive".into());
        }
        if centres.is_empty() {
            return Err("no point lies in the dataset's grids (or in the requested split)".into());
        }
        if let Some(&(_, [s, ..])) = centres.iter().find(|(_, c)| c[0] as usize >= scenes.len()) {
            return Err(format!("a point names scene {s}, past the dataset's scenes"));
        }
        let len = centres.len() as u64;
        Ok(Self {
            permutation: Some(Feistel::new(len, rng::key(&[spec.seed, spec.epoch, 0xA7]))),
            cells: None,
            spec: PlanSpec {
                kind: SamplerKind::Points,
                ..spec
            },
            cumulative: vec![len],
            scenes,
            len,
            centres: Some(centres),
            local: None,
            grid_ids: None,
        })
    }

    /// `points`: the index (in the dataset's points) of sample `i`'s point.
    pub fn point_of(&self, i: u64) -> Option<usize> {
        let centres = self.centres.as_ref()?;
        let n = self.natural_index(i);
        centres.get(n as usize).map(|c| c.0)
    }

    /// The epoch this plan draws.
    pub fn epoch(&self) -> u64 {
        self.spec.epoch
    }

    /// Samples in the epoch.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty epoch (never: `new` refuses those).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn locate(&self, n: u64) -> (usize, u64) {
        let scene = self.cumulative.partition_point(|&c| c <= n);
        let before = if scene == 0 { 0 } else { self.cumulative[scene - 1] };
        (scene, n - before)
    }

    /// The order this plan serves in, `order = "local"` replacing its own: the same
    /// samples (or, for `random`, the same law), grouped by block. Says why when the
    /// sampler or the dial does not allow it.
    pub fn with_order(mut self, order: Order) -> Result<Self, String> {
        let Order::Local(spec) = order else {
            self.local = None;
            return Ok(self);
        };
        let local = LocalOrder::new(
            &local::Basis {
                kind: self.spec.kind,
                scenes: &self.scenes,
                patch: self.spec.patch as u64,
                stride: self.spec.stride as u64,
                len: self.len,
                key: rng::key(&[self.spec.seed, self.spec.epoch, 0xC5]),
                centres: self.centres.as_deref().map(|c| c.as_slice()),
                grid_ids: self.grid_ids.as_deref().map(|g| g.as_slice()),
            },
            spec,
        )?;
        self.local = Some(std::sync::Arc::new(local));
        Ok(self)
    }

    /// Pixels of the largest tile block of the plan's scenes (at its level).
    pub fn largest_block(&self) -> u64 {
        self.scenes
            .iter()
            .map(|s| s.block_width.saturating_mul(s.block_height))
            .max()
            .unwrap_or(0)
    }

    /// Tells the plan which scenes lie on one grid (`ids[scene]`, equal for the dates of
    /// one tile): a locality order then groups their samples together. Set before
    /// [`with_order`](Self::with_order); ignored when the lengths differ.
    pub fn sharing_grids(mut self, ids: std::sync::Arc<Vec<u32>>) -> Self {
        self.grid_ids = (ids.len() == self.scenes.len()).then_some(ids);
        self
    }

    /// The locality order, when the plan has one.
    pub fn local_order(&self) -> Option<&LocalOrder> {
        self.local.as_deref()
    }

    /// Bytes the plan holds beside its inputs (the locality order's groups and chunks).
    pub fn order_bytes(&self) -> u64 {
        self.local.as_ref().map_or(0, |l| l.bytes())
    }

    /// The natural index (aligned: window; grid: cover position; points: centre) of
    /// sample `i`, through the plan's permutation or its locality order.
    fn natural_index(&self, i: u64) -> u64 {
        match self.local.as_ref().map(|l| l.member(i)) {
            Some(Member::Natural(n)) => n,
            Some(Member::At(..)) => i,
            None => self.permutation.as_ref().map_or(i, |f| f.apply(i)),
        }
    }

    /// Scene, column and row of natural index `n` (aligned, grid, points).
    fn natural_window(&self, n: u64) -> (usize, u64, u64) {
        let p = self.spec.patch as u64;
        match self.spec.kind {
            SamplerKind::Points => {
                let c = self
                    .centres
                    .as_ref()
                    .and_then(|c| c.get(n as usize))
                    .map_or([0; 3], |c| c.1);
                // Centred (the centre pixel is the one right of and below the middle for an
                // even patch); a window that would start before the grid starts at its edge.
                (c[0] as usize, c[1].saturating_sub(p / 2), c[2].saturating_sub(p / 2))
            }
            SamplerKind::Aligned => {
                let (scene, k) = self.locate(n);
                let across = self.scenes[scene].width / p;
                (scene, (k % across) * p, (k / across) * p)
            }
            _ => {
                let (scene, k) = self.locate(n);
                let s = &self.scenes[scene];
                let stride = self.spec.stride as u64;
                let across = grid_steps(s.width, p, stride);
                (scene, (k % across) * stride, (k / across) * stride)
            }
        }
    }

    /// The `i`-th sample of the epoch (`i < len`).
    pub fn window(&self, i: u64) -> WindowSpec {
        let p = self.spec.patch as u64;
        let (scene, col, row) = match (self.spec.kind, self.local.as_ref().map(|l| l.member(i))) {
            (_, Some(Member::At(scene, col, row))) => (scene, col, row),
            (SamplerKind::Points | SamplerKind::Aligned | SamplerKind::Grid, _) => {
                self.natural_window(self.natural_index(i))
            }
            (SamplerKind::Random, _) => {
                let total = *self.cumulative.last().unwrap_or(&1);
                let mut r = rng::Rng::new(rng::key(&[self.spec.seed, self.spec.epoch, i, 0xB2]));
                let (scene, k) = self.locate(r.below(total));
                let across = self.scenes[scene].width - p + 1;
                (scene, k % across, k / across)
            }
            (SamplerKind::Balanced, _) => self.balanced_draw(&mut rng::Rng::new(rng::key(&[
                self.spec.seed,
                self.spec.epoch,
                i,
                0xE5,
            ]))),
        };
        let s = &self.scenes[scene];
        WindowSpec {
            scene: scene as u32,
            col,
            row,
            width: self.spec.patch,
            height: self.spec.patch,
            level: self.spec.level,
            padded: col + p > s.width || row + p > s.height,
        }
    }

    /// Draw `attempt` for sample `i`: the plan's own window first, then, when a sample is
    /// rejected (split, valid fraction), seeded redraws of the same kind: uniform over every
    /// valid offset (random) or every tile-aligned window (aligned). A grid is a cover and
    /// has no redraw (None). Pure: the same (seed, epoch, i, attempt) give the same window.
    pub fn attempt(&self, i: u64, attempt: u32) -> Option<WindowSpec> {
        if attempt == 0 {
            return Some(self.window(i));
        }
        let p = self.spec.patch as u64;
        let total = *self.cumulative.last()?;
        let mut r = rng::Rng::new(rng::key(&[self.spec.seed, self.spec.epoch, i, attempt as u64, 0xD4]));
        let (scene, col, row) = match self.spec.kind {
            SamplerKind::Grid | SamplerKind::Points => return None,
            SamplerKind::Balanced => self.balanced_draw(&mut r),
            SamplerKind::Random => {
                let (scene, k) = self.locate(r.below(total));
                let across = self.scenes[scene].width - p + 1;
                (scene, k % across, k / across)
            }
            SamplerKind::Aligned => {
                let (scene, k) = self.locate(r.below(total));
                let across = self.scenes[scene].width / p;
                (scene, (k % across) * p, (k / across) * p)
            }
        };
        let s = &self.scenes[scene];
        Some(WindowSpec {
            scene: scene as u32,
            col,
            row,
            width: self.spec.patch,
            height: self.spec.patch,
            level: self.spec.level,
            padded: col + p > s.width || row + p > s.height,
        })
    }

    /// The kind of sampler.
    pub fn kind(&self) -> SamplerKind {
        self.spec.kind
    }

    /// Seed for the augmentation of sample `i`.
    pub fn augment_key(&self, i: u64) -> u64 {
        rng::key(&[self.spec.seed, self.spec.epoch, i, 0xC3])
    }
}

/// Samples of a drawing plan (random, balanced): `samples_per_epoch`, or as many draws as
/// there are non-overlapping patches.
fn draws_per_epoch(spec: &PlanSpec, scenes: &[SceneGrid]) -> u64 {
    if spec.samples_per_epoch > 0 {
        return spec.samples_per_epoch;
    }
    let p = u64::from(spec.patch.max(1));
    scenes
        .iter()
        .map(|s| (s.width / p) * (s.height / p))
        .sum::<u64>()
        .max(1)
}

/// Windows needed to cover `size` pixels with `patch`-wide windows every `stride` pixels:
/// enough to reach the last pixel, and never one that starts past it (a stride wider than
/// the patch leaves gaps, it never plans an empty window).
fn grid_steps(size: u64, patch: u64, stride: u64) -> u64 {
    if size <= patch {
        1
    } else {
        let to_cover = (size - patch).div_ceil(stride) + 1;
        let starting_inside = (size - 1) / stride + 1;
        to_cover.min(starting_inside)
    }
}

/// How a mixture deals its samples to its parts: each period of `Σ quotas` samples holds
/// exactly `quotas[p]` of part `p`, at seeded places per period, and each part's samples
/// come in its own order (the part's `n`-th sample is its plan's `n`-th). Pure in
/// (seed, epoch, i).
#[derive(Debug, Clone)]
pub struct Interleave {
    quotas: Vec<u64>,
    /// Running sums of the quotas.
    ends: Vec<u64>,
    seed: u64,
    epoch: u64,
}

impl Interleave {
    /// Quotas per period (each at least 1).
    pub fn new(quotas: Vec<u64>, seed: u64, epoch: u64) -> Result<Self, String> {
        if quotas.is_empty() || quotas.contains(&0) {
            return Err("every part needs a positive quota".into());
        }
        let ends = quotas
            .iter()
            .scan(0u64, |sum, &q| {
                *sum += q;
                Some(*sum)
            })
            .collect();
        Ok(Self {
            quotas,
            ends,
            seed,
            epoch,
        })
    }

    /// Samples per period.
    pub fn period(&self) -> u64 {
        self.ends.last().copied().unwrap_or(1)
    }

    /// Sample `i`'s part and how many of that part's samples come before it. The parts'
    /// places in period `c` are a seeded permutation; a part's samples take its numbers in
    /// the order of their places, so each part is read in its own order.
    pub fn locate(&self, i: u64) -> (usize, u64) {
        let period = self.period();
        let cycle = i / period;
        let order = Feistel::new(period, rng::key(&[self.seed, self.epoch, cycle, 0xF1]));
        let part_at = |x: u64| self.ends.partition_point(|&e| e <= order.apply(x));
        let x = i % period;
        let part = part_at(x);
        // At most one period (≤ 1000 places) of a cheap bijection per sample.
        let before = (0..x).filter(|&y| part_at(y) == part).count() as u64;
        (part, cycle * self.quotas[part] + before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn grid(w: u64, h: u64) -> SceneGrid {
        SceneGrid {
            width: w,
            height: h,
            block_width: 256,
            block_height: 256,
        }
    }

    fn spec(kind: SamplerKind, patch: u32) -> PlanSpec {
        PlanSpec {
            kind,
            patch,
            stride: patch,
            level: 0,
            seed: 7,
            epoch: 0,
            samples_per_epoch: 0,
        }
    }

    #[test]
    fn aligned_is_a_permutation_of_every_window() {
        let plan = Plan::new(spec(SamplerKind::Aligned, 256), vec![grid(1024, 1024), grid(512, 768)]).unwrap();
        assert_eq!(plan.len(), 16 + 6);
        let mut seen: Vec<_> = (0..plan.len()).map(|i| plan.window(i)).collect();
        assert!(seen.iter().all(|w| w.col % 256 == 0 && w.row % 256 == 0 && !w.padded));
        let first: Vec<_> = seen.iter().take(5).cloned().collect();
        seen.sort_by_key(|w| (w.scene, w.row, w.col));
        seen.dedup();
        assert_eq!(seen.len(), 22);
        let other_epoch = Plan::new(
            PlanSpec {
                epoch: 1,
                ..spec(SamplerKind::Aligned, 256)
            },
            vec![grid(1024, 1024), grid(512, 768)],
        )
        .unwrap();
        let first_other: Vec<_> = (0..5).map(|i| other_epoch.window(i)).collect();
        assert_ne!(first, first_other, "epochs are shuffled differently");
    }

    #[test]
    fn grid_covers_with_padding() {
        let plan = Plan::new(spec(SamplerKind::Grid, 300), vec![grid(1000, 600)]).unwrap();
        assert_eq!(plan.len(), 4 * 2);
        let last = plan.window(plan.len() - 1);
        assert_eq!((last.col, last.row, last.padded), (900, 300, true));
        assert!(!plan.window(0).padded);
    }

    #[test]
    fn a_stride_wider_than_the_scene_plans_no_empty_window() {
        let plan = Plan::new(
            PlanSpec {
                stride: 1024,
                ..spec(SamplerKind::Grid, 256)
            },
            vec![grid(1024, 1024)],
        )
        .unwrap();
        assert_eq!(plan.len(), 1);
        assert_eq!((plan.window(0).col, plan.window(0).row), (0, 0));
    }

    proptest::proptest! {
        /// Every planned grid window starts inside its scene (it holds at least one pixel
        /// of data), and consecutive windows are one stride apart.
        #[test]
        fn every_grid_window_is_readable(
            patch in 1u32..600,
            stride in 1u32..1500,
            w in 1u64..3000,
            h in 1u64..3000,
        ) {
            let plan = Plan::new(PlanSpec { stride, ..spec(SamplerKind::Grid, patch) }, vec![grid(w, h)]).unwrap();
            proptest::prop_assert!(!plan.is_empty());
            for i in 0..plan.len().min(5000) {
                let win = plan.window(i);
                proptest::prop_assert!(win.col < w && win.row < h, "window {i} at {},{} of {w}x{h}", win.col, win.row);
                proptest::prop_assert_eq!(win.col % stride as u64, 0);
                proptest::prop_assert_eq!(win.padded, win.col + patch as u64 > w || win.row + patch as u64 > h);
            }
            // The last pixel is covered when the stride does not skip it.
            if stride <= patch {
                let last = plan.window(plan.len() - 1);
                proptest::prop_assert!(last.col + patch as u64 >= w && last.row + patch as u64 >= h);
            }
        }
    }

    #[test]
    fn redraws_are_pure_and_of_the_plans_kind() {
        let scenes = vec![grid(1024, 1024), grid(512, 768)];
        let aligned = Plan::new(spec(SamplerKind::Aligned, 256), scenes.clone()).unwrap();
        let random = Plan::new(spec(SamplerKind::Random, 100), scenes.clone()).unwrap();
        for i in 0..aligned.len() {
            assert_eq!(aligned.attempt(i, 0), Some(aligned.window(i)));
            for k in 1..5 {
                let w = aligned.attempt(i, k).unwrap();
                assert_eq!(Some(w), aligned.attempt(i, k));
                assert!(w.col.is_multiple_of(256) && w.row.is_multiple_of(256) && !w.padded);
                let s = scenes[w.scene as usize];
                let r = random.attempt(i, k).unwrap();
                let rs = scenes[r.scene as usize];
                assert!(w.col + 256 <= s.width && r.col + 100 <= rs.width && r.row + 100 <= rs.height);
            }
        }
        assert_ne!(random.attempt(3, 1), random.attempt(3, 2));
        let g = Plan::new(spec(SamplerKind::Grid, 256), scenes).unwrap();
        assert_eq!(g.attempt(0, 1), None);
    }

    #[test]
    fn random_windows_fit() {
        let plan = Plan::new(
            PlanSpec {
                samples_per_epoch: 500,
                ..spec(SamplerKind::Random, 100)
            },
            vec![grid(300, 200)],
        )
        .unwrap();
        for i in 0..500 {
            let w = plan.window(i);
            assert!(w.col + 100 <= 300 && w.row + 100 <= 200);
        }
        assert!(Plan::new(spec(SamplerKind::Random, 400), vec![grid(300, 200)]).is_err());
        assert!(Plan::new(spec(SamplerKind::Aligned, 100), vec![grid(300, 200)]).is_err());
    }

    #[test]
    fn an_interleave_meets_its_quotas_and_numbers_each_part_in_order() {
        let mix = Interleave::new(vec![7, 2, 1], 5, 3).unwrap();
        let mut seen = [Vec::new(), Vec::new(), Vec::new()];
        for i in 0..100 {
            let (p, n) = mix.locate(i);
            seen[p].push(n);
        }
        // 10 periods: exactly 70, 20, 10, and each part's samples 0, 1, 2, ... in order.
        for (p, want) in [70u64, 20, 10].into_iter().enumerate() {
            assert_eq!(seen[p], (0..want).collect::<Vec<_>>());
        }
        // Seeded places: periods differ.
        let parts: Vec<usize> = (0..100).map(|i| mix.locate(i).0).collect();
        assert_ne!(parts[..10], parts[10..20]);
        assert!(Interleave::new(vec![1, 0], 0, 0).is_err());
    }

    proptest! {
        #[test]
        fn feistel_is_a_bijection(n in 1u64..3000, seed in any::<u64>()) {
            let f = Feistel::new(n, seed);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let x = f.apply(i);
                prop_assert!(x < n);
                prop_assert!(!seen[x as usize]);
                seen[x as usize] = true;
            }
        }

        #[test]
        fn ranks_partition_the_epoch(n in 1u64..500, batch in 1u64..9, world in 1u64..5, cursor_steps in 0u64..4, keep_tail: bool) {
            let cursor = (cursor_steps * batch * world).min(n);
            let mut all = Vec::new();
            let mut counts = Vec::new();
            for rank in 0..world {
                let s = Share { batch, rank, world, cursor, epoch_len: n, keep_tail };
                counts.push(s.batches());
                for k in 0..s.batches() {
                    let b = s.samples(k);
                    prop_assert!(!b.is_empty() && b.end - b.start <= batch);
                    all.extend(b);
                }
            }
            let full = (n - cursor) / (batch * world);
            prop_assert!(counts.iter().all(|&c| c == full || (keep_tail && c == full + 1)), "{:?}", counts);
            let expected_len = if keep_tail { n - cursor } else { full * batch * world };
            all.sort_unstable();
            prop_assert_eq!(all.len() as u64, expected_len);
            prop_assert!(all.windows(2).all(|w| w[0] + 1 == w[1]), "no gaps, no duplicates");
            if let Some(&first) = all.first() { prop_assert_eq!(first, cursor); }
        }

        #[test]
        fn resume_with_other_world_size_covers_the_rest(n in 10u64..400, batch in 1u64..6, w1 in 1u64..4, w2 in 1u64..4, steps in 0u64..3) {
            // First run: `steps` global steps with world w1; then resume from its cursor with w2.
            let first = Share { batch, rank: 0, world: w1, cursor: 0, epoch_len: n, keep_tail: false };
            let steps = steps.min(first.batches());
            let cursor = if steps == 0 { 0 } else { first.cursor_after(steps - 1) };
            let mut seen: Vec<u64> = (0..cursor).collect();
            for rank in 0..w2 {
                let s = Share { batch, rank, world: w2, cursor, epoch_len: n, keep_tail: false };
                for k in 0..s.batches() { seen.extend(s.samples(k)); }
            }
            seen.sort_unstable();
            let before = seen.len();
            seen.dedup();
            prop_assert_eq!(before, seen.len(), "nothing repeated");
            prop_assert!(n - (seen.len() as u64) < batch * w2, "only a tail smaller than one step is dropped");
        }

        #[test]
        fn a_kept_tail_resumes_exactly_once(n in 10u64..400, batch in 1u64..6, w1 in 1u64..4, w2 in 1u64..4, steps in 0u64..200) {
            // Stop anywhere (the tail step included), resume with another world size.
            let first = Share { batch, rank: 0, world: w1, cursor: 0, epoch_len: n, keep_tail: true };
            let steps = steps.min(first.batches());
            let cursor = if steps == 0 { 0 } else { first.cursor_after(steps - 1) };
            let mut seen: Vec<u64> = (0..cursor).collect();
            for rank in 0..w2 {
                let s = Share { batch, rank, world: w2, cursor, epoch_len: n, keep_tail: true };
                for k in 0..s.batches() { seen.extend(s.samples(k)); }
            }
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..n).collect::<Vec<_>>());
        }
    }
}
