//! Locality-ordered epochs (`order = "local"`): the samples a plan defines, dealt so that
//! samples sharing source tiles come close together.
//!
//! An epoch's samples are grouped by the block of the reference grid they start in (a
//! block is a tile of the scene, or a square of tiles when the archive has too many to
//! list). Scenes on one grid (the dates of one tile of a time series) share their groups:
//! a group holds the block's samples of every such scene, which read the same tiles. Each group is cut into `visits` chunks, the chunks are shuffled by the seed and
//! laid end to end, and that sequence is read by `open_blocks` lanes side by side: the
//! `j`-th sample comes from lane `perm_round(j mod open)` at round `j / open`, with a
//! seeded permutation of the lanes per round. So about `open_blocks` groups are open at any
//! time and each batch is dealt across them.
//!
//! What stays the same as the plan's own order:
//! - `aligned`, `grid`, `points`: exactly the same multiset of windows (a bijection of the
//!   plan's natural indices; each group's members in a seeded permutation);
//! - `random`: the same law: each block's count is the multinomial count `random`'s
//!   `samples_per_epoch` uniform draws give it, and positions are uniform inside the block.
//!
//! Owns the grouping and the deal, both pure functions of (plan, seed, epoch, spec). Must
//! never materialise the epoch: memory is proportional to the number of groups and chunks
//! (see [`LocalOrder::bytes`]), never to the epoch's length.

use super::{Feistel, SamplerKind, SceneGrid, binomial, grid_steps};
use crate::rng;

/// How an epoch is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// The plan's own order (a seeded permutation or independent draws).
    #[default]
    Random,
    /// Samples sharing source tiles served close together.
    Local(LocalSpec),
}

/// The dial of a locality-ordered epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalSpec {
    /// Groups served side by side (≥ 1).
    pub open_blocks: u32,
    /// Times each group is opened per epoch (≥ 1; each visit serves a seeded share).
    pub visits: u32,
}

/// Most groups listed: past this, blocks are widened (2×2 tiles, 4×4, ...).
const MAX_GROUPS: u64 = 1 << 18;
/// Most chunks (groups × visits) dealt.
const MAX_CHUNKS: u64 = 1 << 20;
/// Largest `open_blocks` and `visits` accepted.
pub const MAX_OPEN_BLOCKS: u32 = 4096;
pub const MAX_VISITS: u32 = 64;

/// What the `j`-th sample of a local order is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member {
    /// The plan's natural index (before its own permutation): aligned, grid, points.
    Natural(u64),
    /// A drawn window origin: scene, column, row (random).
    At(usize, u64, u64),
}

/// The units of one grid the groups tile: window origins (random) or window indices
/// (aligned, grid), the same in each of the grid's scenes.
#[derive(Debug, Clone)]
struct Space {
    units_w: u64,
    units_h: u64,
    cell_w: u64,
    cell_h: u64,
    groups_across: u64,
    first_group: u64,
    /// The scenes on this grid and the natural index of each one's first unit.
    scenes: Vec<(usize, u64)>,
}

#[derive(Debug, Clone)]
enum Groups {
    /// random: block counts drawn multinomially, positions uniform inside.
    Draws { spaces: Vec<Space>, counts: Vec<u64> },
    /// aligned, grid: every window of the block.
    Windows { spaces: Vec<Space> },
    /// points: centre indices sorted by block; `starts[g]..starts[g+1]` is group `g`.
    Points { order: Vec<u32>, starts: Vec<u64> },
}

/// A locality order of one epoch.
#[derive(Debug, Clone)]
pub struct LocalOrder {
    groups: Groups,
    /// Chunks in dealing order, `group << 8 | visit`.
    chunks: Vec<u64>,
    /// Running sums of the chunks' sizes.
    ends: Vec<u64>,
    visits: u64,
    open: u64,
    len: u64,
    key: u64,
}

/// What the plan tells the order.
pub struct Basis<'a> {
    pub kind: SamplerKind,
    pub scenes: &'a [SceneGrid],
    /// Scene → grid: scenes with one id lie on one grid (equal `SceneGrid`s) and share
    /// groups. None: every scene its own.
    pub grid_ids: Option<&'a [u32]>,
    pub patch: u64,
    pub stride: u64,
    pub len: u64,
    pub key: u64,
    /// points: each centre's scene, column and row.
    pub centres: Option<&'a [(usize, [u64; 3])]>,
}

impl LocalOrder {
    /// Groups the plan's epoch and deals it, or says why it cannot.
    pub fn new(b: &Basis, spec: LocalSpec) -> Result<Self, String> {
        if spec.open_blocks == 0 || spec.open_blocks > MAX_OPEN_BLOCKS {
            return Err(format!(
                "open_blocks {} is not in 1..={MAX_OPEN_BLOCKS}",
                spec.open_blocks
            ));
        }
        if spec.visits == 0 || spec.visits > MAX_VISITS {
            return Err(format!("visits {} is not in 1..={MAX_VISITS}", spec.visits));
        }
        let visits = spec.visits as u64;
        let groups = match b.kind {
            SamplerKind::Random | SamplerKind::Aligned | SamplerKind::Grid => {
                let mut widen = 1u64;
                let spaces = loop {
                    let spaces = spaces(b, widen);
                    let n = spaces.last().map_or(0, |s| s.first_group + groups_of(s));
                    if (n <= MAX_GROUPS && n.saturating_mul(visits) <= MAX_CHUNKS) || widen >= 1 << 40 {
                        break spaces;
                    }
                    widen *= 2;
                };
                // Widening merges the blocks of a scene, never scenes: an archive of many
                // small scenes on distinct grids can stay past the cap. Refuse it before
                // the chunks are made (their memory is bounded, whatever the request).
                let n = spaces.last().map_or(0, |s| s.first_group + groups_of(s));
                if n.saturating_mul(visits) > MAX_CHUNKS {
                    return Err(format!(
                        "{n} groups × {visits} visits is over {MAX_CHUNKS} chunks (scenes on distinct grids are groups of their own): lower visits, or use order = \"random\""
                    ));
                }
                if b.kind == SamplerKind::Random {
                    let sizes: Vec<u64> = spaces
                        .iter()
                        .flat_map(|s| {
                            (0..groups_of(s)).map(move |k| rect(s, k).2 * rect(s, k).3 * s.scenes.len() as u64)
                        })
                        .collect();
                    let mut r = rng::Rng::new(rng::key(&[b.key, 0xC0]));
                    let counts = binomial::multinomial(&mut r, b.len, &sizes);
                    Groups::Draws { spaces, counts }
                } else {
                    Groups::Windows { spaces }
                }
            }
            SamplerKind::Points => {
                let centres = b.centres.ok_or("a points plan without points")?;
                let block = |c: &[u64; 3]| {
                    let s = &b.scenes[c[0] as usize];
                    let grid = b
                        .grid_ids
                        .and_then(|g| g.get(c[0] as usize))
                        .map_or(c[0], |&g| g as u64);
                    (grid, c[2] / s.block_height.max(1), c[1] / s.block_width.max(1))
                };
                let mut order: Vec<u32> = (0..centres.len() as u32).collect();
                order.sort_by_key(|&i| block(&centres[i as usize].1));
                let mut starts = vec![0u64];
                for w in 1..order.len() {
                    if block(&centres[order[w - 1] as usize].1) != block(&centres[order[w] as usize].1) {
                        starts.push(w as u64);
                    }
                }
                starts.push(order.len() as u64);
                if (starts.len() as u64 - 1).saturating_mul(visits) > MAX_CHUNKS {
                    return Err(format!(
                        "{} point blocks × {visits} visits is over {MAX_CHUNKS} chunks: lower visits",
                        starts.len() - 1
                    ));
                }
                Groups::Points { order, starts }
            }
            SamplerKind::Balanced => {
                return Err(
                    "order = \"local\" serves the random, aligned, grid and points samplers (balanced: not yet)".into(),
                );
            }
        };
        let mut order = Self {
            groups,
            chunks: Vec::new(),
            ends: Vec::new(),
            visits,
            open: (spec.open_blocks as u64).min(b.len.max(1)),
            len: b.len,
            key: b.key,
        };
        let mut chunks = Vec::new();
        for g in 0..order.group_count() {
            let c = order.count(g);
            for v in 0..visits.min(c) {
                chunks.push(g << 8 | v);
            }
        }
        let mut r = rng::Rng::new(rng::key(&[b.key, 0xC1]));
        for i in (1..chunks.len()).rev() {
            chunks.swap(i, r.below(i as u64 + 1) as usize);
        }
        let mut total = 0u64;
        order.ends = chunks
            .iter()
            .map(|&ch| {
                let (first, end) = order.chunk_members(ch);
                total += end - first;
                total
            })
            .collect();
        order.chunks = chunks;
        if total != b.len {
            return Err(format!("the local order holds {total} samples, the plan {}", b.len));
        }
        Ok(order)
    }

    /// Bytes this order holds.
    pub fn bytes(&self) -> u64 {
        let groups = match &self.groups {
            Groups::Draws { spaces, counts } => space_bytes(spaces) + counts.len() * 8,
            Groups::Windows { spaces } => space_bytes(spaces),
            Groups::Points { order, starts } => order.len() * 4 + starts.len() * 8,
        };
        (groups + self.chunks.len() * 16) as u64
    }

    /// Groups the epoch's samples fall in (at most: some may be empty).
    pub fn group_count(&self) -> u64 {
        match &self.groups {
            Groups::Draws { spaces, .. } | Groups::Windows { spaces } => {
                spaces.last().map_or(0, |s| s.first_group + groups_of(s))
            }
            Groups::Points { starts, .. } => starts.len() as u64 - 1,
        }
    }

    /// The group of the `j`-th sample (for diversity figures and tests).
    pub fn group_of(&self, j: u64) -> u64 {
        let ci = self.ends.partition_point(|&e| e <= self.deal(j));
        self.chunks[ci.min(self.chunks.len() - 1)] >> 8
    }

    /// The `j`-th sample (`j < len`).
    pub fn member(&self, j: u64) -> Member {
        let s = self.deal(j);
        let ci = self
            .ends
            .partition_point(|&e| e <= s)
            .min(self.chunks.len().saturating_sub(1));
        let start = if ci == 0 { 0 } else { self.ends[ci - 1] };
        let chunk = self.chunks.get(ci).copied().unwrap_or(0);
        let (first, _) = self.chunk_members(chunk);
        self.resolve(chunk >> 8, first + (s - start))
    }

    /// Position in the chunk sequence of the `j`-th sample: lanes of `q` or `q + 1`
    /// consecutive positions, read one per round in a seeded order of lanes.
    fn deal(&self, j: u64) -> u64 {
        let lanes = self.open;
        let (q, rem) = (self.len / lanes, self.len % lanes);
        let (round, slot, width) = if j < q * lanes {
            (j / lanes, j % lanes, lanes)
        } else {
            (q, j - q * lanes, rem)
        };
        let lane = Feistel::new(width, rng::key(&[self.key, round, 0xC2])).apply(slot);
        lane * q + lane.min(rem) + round
    }

    fn count(&self, g: u64) -> u64 {
        match &self.groups {
            Groups::Draws { counts, .. } => counts[g as usize],
            Groups::Windows { spaces } => {
                let s = space_of(spaces, g);
                let (_, _, w, h) = rect(s, g - s.first_group);
                w * h * s.scenes.len() as u64
            }
            Groups::Points { starts, .. } => starts[g as usize + 1] - starts[g as usize],
        }
    }

    /// Members `first..end` of the group's seeded order a chunk serves.
    fn chunk_members(&self, chunk: u64) -> (u64, u64) {
        let (g, v) = (chunk >> 8, chunk & 0xFF);
        let c = self.count(g) as u128;
        let n = (self.visits as u128).min(c).max(1);
        ((c * v as u128 / n) as u64, (c * (v as u128 + 1) / n) as u64)
    }

    /// Member `m` of group `g`.
    fn resolve(&self, g: u64, m: u64) -> Member {
        let shuffled = |count: u64| Feistel::new(count, rng::key(&[self.key, g, 0xC3])).apply(m);
        match &self.groups {
            Groups::Draws { spaces, .. } => {
                let s = space_of(spaces, g);
                let (x0, y0, w, h) = rect(s, g - s.first_group);
                let mut r = rng::Rng::new(rng::key(&[self.key, g, m, 0xC4]));
                // Uniform over the group's scenes (one grid: equal areas), then inside.
                let scene = s.scenes[r.below(s.scenes.len() as u64) as usize].0;
                let x = x0 + r.below(w.max(1));
                let y = y0 + r.below(h.max(1));
                Member::At(scene, x, y)
            }
            Groups::Windows { spaces } => {
                let s = space_of(spaces, g);
                let (x0, y0, w, h) = rect(s, g - s.first_group);
                let k = shuffled(w * h * s.scenes.len() as u64);
                let (area, (_, first)) = (w * h, s.scenes[(k / (w * h)) as usize]);
                let k = k % area;
                Member::Natural(first + (y0 + k / w) * s.units_w + x0 + k % w)
            }
            Groups::Points { order, starts } => {
                let first = starts[g as usize];
                let k = shuffled(starts[g as usize + 1] - first);
                Member::Natural(order[(first + k) as usize] as u64)
            }
        }
    }
}

/// Each grid's units, blocks and scenes (`widen` tiles a side per block), grids in the
/// order of their first scene.
fn spaces(b: &Basis, widen: u64) -> Vec<Space> {
    let (p, stride) = (b.patch.max(1), b.stride.max(1));
    let mut out: Vec<Space> = Vec::new();
    // Grid id → its space in `out`.
    let mut index = std::collections::HashMap::new();
    let mut first_natural = 0u64;
    for (i, s) in b.scenes.iter().enumerate() {
        let bw = s.block_width.max(1).saturating_mul(widen);
        let bh = s.block_height.max(1).saturating_mul(widen);
        let (units_w, units_h, cell_w, cell_h) = match b.kind {
            SamplerKind::Random => (
                (s.width + 1).saturating_sub(p),
                (s.height + 1).saturating_sub(p),
                bw,
                bh,
            ),
            SamplerKind::Aligned => (s.width / p, s.height / p, (bw / p).max(1), (bh / p).max(1)),
            _ => (
                grid_steps(s.width, p, stride),
                grid_steps(s.height, p, stride),
                (bw / stride).max(1),
                (bh / stride).max(1),
            ),
        };
        let grid = b.grid_ids.and_then(|g| g.get(i)).map(|&g| g as u64);
        // A shared grid only where the scenes really are alike (else: a space of its own).
        let shared = grid.and_then(|g| index.get(&g).copied()).filter(|&k: &usize| {
            let o: &Space = &out[k];
            (o.units_w, o.units_h, o.cell_w, o.cell_h) == (units_w, units_h, cell_w, cell_h)
        });
        match shared {
            Some(k) => out[k].scenes.push((i, first_natural)),
            None => {
                if let Some(g) = grid {
                    index.entry(g).or_insert(out.len());
                }
                out.push(Space {
                    units_w,
                    units_h,
                    cell_w,
                    cell_h,
                    groups_across: units_w.div_ceil(cell_w),
                    first_group: 0,
                    scenes: vec![(i, first_natural)],
                });
            }
        }
        first_natural += units_w * units_h;
    }
    let mut first_group = 0;
    for space in &mut out {
        space.first_group = first_group;
        first_group += groups_of(space);
    }
    out
}

fn space_bytes(spaces: &[Space]) -> usize {
    spaces.iter().map(|s| size_of::<Space>() + s.scenes.len() * 16).sum()
}

fn groups_of(s: &Space) -> u64 {
    s.groups_across * s.units_h.div_ceil(s.cell_h)
}

/// The space holding group `g`.
fn space_of(spaces: &[Space], g: u64) -> &Space {
    let i = spaces.partition_point(|s| s.first_group <= g).saturating_sub(1);
    &spaces[i]
}

/// Block `k` of a scene: first unit column and row, width and height in units.
fn rect(s: &Space, k: u64) -> (u64, u64, u64, u64) {
    let (gx, gy) = (k % s.groups_across.max(1), k / s.groups_across.max(1));
    let (x0, y0) = (gx * s.cell_w, gy * s.cell_h);
    (x0, y0, s.cell_w.min(s.units_w - x0), s.cell_h.min(s.units_h - y0))
}

#[cfg(test)]
mod tests {
    use super::super::{Plan, PlanSpec, WindowSpec};
    use super::*;
    use std::collections::HashSet;
    use std::sync::Arc;

    fn grid(w: u64, h: u64) -> SceneGrid {
        tiled(w, h, 256)
    }

    fn tiled(w: u64, h: u64, block: u64) -> SceneGrid {
        SceneGrid {
            width: w,
            height: h,
            block_width: block,
            block_height: block,
        }
    }

    fn spec(kind: SamplerKind, patch: u32, stride: u32, n: u64) -> PlanSpec {
        PlanSpec {
            kind,
            patch,
            stride,
            level: 0,
            seed: 5,
            epoch: 2,
            samples_per_epoch: n,
        }
    }

    fn local(open_blocks: u32, visits: u32) -> Order {
        Order::Local(LocalSpec { open_blocks, visits })
    }

    fn windows(plan: &Plan) -> Vec<(u32, u64, u64)> {
        (0..plan.len())
            .map(|i| plan.window(i))
            .map(|w| (w.scene, w.col, w.row))
            .collect()
    }

    fn scenes() -> Vec<SceneGrid> {
        vec![grid(1024, 1024), grid(700, 300), grid(40, 2000)]
    }

    /// aligned, grid and points: the local order is a reordering of the plan's own
    /// windows, whatever the dial.
    #[test]
    fn finite_samplers_keep_their_multiset() {
        let centres: Arc<Vec<(usize, [u64; 3])>> = Arc::new(
            (0..900u64)
                .map(|k| (k as usize, [k % 2, (k * 37) % 700, (k * 91) % 300]))
                .collect(),
        );
        let plans = [
            // aligned windows are whole tiles: 32 px tiles give it 1,000-odd windows.
            Plan::new(
                spec(SamplerKind::Aligned, 32, 32, 0),
                scenes().iter().map(|s| tiled(s.width, s.height, 32)).collect(),
            )
            .unwrap(),
            Plan::new(spec(SamplerKind::Grid, 48, 20, 0), scenes()).unwrap(),
            Plan::points(spec(SamplerKind::Points, 16, 16, 0), scenes(), centres).unwrap(),
        ];
        for plan in plans {
            let mut want = windows(&plan);
            want.sort_unstable();
            for (open, visits) in [(1, 1), (4, 1), (16, 3), (4096, 64)] {
                let ordered = plan.clone().with_order(local(open, visits)).unwrap();
                assert_eq!(ordered.len(), plan.len());
                let mut got = windows(&ordered);
                assert_ne!(got, windows(&plan), "{:?} open {open}: not reordered", plan.kind());
                got.sort_unstable();
                assert_eq!(got, want, "{:?} open {open} visits {visits}", plan.kind());
            }
            if plan.kind() == SamplerKind::Points {
                let ordered = plan.clone().with_order(local(4, 2)).unwrap();
                for i in 0..ordered.len() {
                    let w = ordered.window(i);
                    let p = ordered.point_of(i).unwrap();
                    // The point's centre is the window's: k % 2 is its scene.
                    assert_eq!(w.scene as usize, p % 2);
                }
            }
        }
    }

    /// The order is a pure function of the plan and the dial.
    #[test]
    fn the_order_is_deterministic_and_seeded() {
        let plan = Plan::new(spec(SamplerKind::Random, 32, 32, 3000), scenes()).unwrap();
        let a = windows(&plan.clone().with_order(local(8, 2)).unwrap());
        assert_eq!(a, windows(&plan.clone().with_order(local(8, 2)).unwrap()));
        assert_ne!(a, windows(&plan.clone().with_order(local(8, 1)).unwrap()));
        let mut other = spec(SamplerKind::Random, 32, 32, 3000);
        other.seed = 6;
        let b = windows(&Plan::new(other, scenes()).unwrap().with_order(local(8, 2)).unwrap());
        assert_ne!(a, b);
    }

    /// Counts of origins in the cells of a fixed 8 x 8 partition of each scene's origin
    /// space (not aligned with the blocks), and the chi-square against the uniform law.
    fn chi_square(plan: &Plan, scenes: &[SceneGrid], patch: u64) -> (f64, usize) {
        let total: u64 = scenes
            .iter()
            .map(|s| (s.width - patch + 1) * (s.height - patch + 1))
            .sum();
        let mut cells = std::collections::HashMap::new();
        for i in 0..plan.len() {
            let w = plan.window(i);
            let s = &scenes[w.scene as usize];
            let (ow, oh) = (s.width - patch + 1, s.height - patch + 1);
            *cells.entry((w.scene, w.col * 8 / ow, w.row * 8 / oh)).or_insert(0u64) += 1;
        }
        let mut chi = 0.0;
        let mut df = 0;
        for (k, s) in scenes.iter().enumerate() {
            let (ow, oh) = (s.width - patch + 1, s.height - patch + 1);
            for cy in 0..8u64 {
                for cx in 0..8u64 {
                    let w = (0..ow).filter(|x| x * 8 / ow == cx).count() as u64;
                    let h = (0..oh).filter(|y| y * 8 / oh == cy).count() as u64;
                    let expected = plan.len() as f64 * (w * h) as f64 / total as f64;
                    let seen = cells.get(&(k as u32, cx, cy)).copied().unwrap_or(0) as f64;
                    chi += (seen - expected).powi(2) / expected;
                    df += 1;
                }
            }
        }
        (chi, df - 1)
    }

    /// random: the local order's origins follow the same uniform law as random's own
    /// draws (chi-square over 191 cells at p = 0.001, several seeds and dials), and the
    /// plain order passes the same test.
    #[test]
    fn random_keeps_its_law() {
        let scenes = scenes();
        for seed in 0..4u64 {
            let mut s = spec(SamplerKind::Random, 32, 32, 40_000);
            s.seed = seed;
            let plan = Plan::new(s, scenes.clone()).unwrap();
            let (chi, df) = chi_square(&plan, &scenes, 32);
            // df 191: the 0.001 quantile is about 260.
            assert!(chi < 260.0, "random: chi {chi} df {df}");
            for (open, visits) in [(1, 1), (16, 4)] {
                let ordered = plan.clone().with_order(local(open, visits)).unwrap();
                let (chi, df) = chi_square(&ordered, &scenes, 32);
                assert!(chi < 260.0, "local {open}/{visits} seed {seed}: chi {chi} df {df}");
                assert!(windows(&ordered).iter().all(|&(k, c, r)| {
                    let g = &scenes[k as usize];
                    c + 32 <= g.width && r + 32 <= g.height
                }));
            }
        }
    }

    /// Scenes on one grid (the dates of a tile) share their groups: fewer groups, a group's
    /// samples from every such scene at one block, the same multiset (grid) and law (random).
    #[test]
    fn scenes_on_one_grid_share_their_groups() {
        let scenes = vec![grid(1024, 1024), grid(1024, 1024), grid(700, 300), grid(1024, 1024)];
        let ids = vec![0, 0, 1, 0];
        let plan = Plan::new(spec(SamplerKind::Grid, 64, 64, 0), scenes.clone()).unwrap();
        let own = plan.clone().with_order(local(1, 1)).unwrap();
        let shared = plan
            .clone()
            .sharing_grids(Arc::new(ids.clone()))
            .with_order(local(1, 1))
            .unwrap();
        assert_eq!(own.local_order().unwrap().group_count(), 16 * 3 + 6);
        assert_eq!(shared.local_order().unwrap().group_count(), 16 + 6);
        let (mut a, mut b) = (windows(&plan), windows(&shared));
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "the same windows");
        // One lane: the samples come group by group, each a block of one grid.
        let order = shared.local_order().unwrap();
        let mut runs: Vec<(u64, Vec<WindowSpec>)> = Vec::new();
        for j in 0..shared.len() {
            let g = order.group_of(j);
            match runs.last_mut() {
                Some((last, ws)) if *last == g => ws.push(shared.window(j)),
                _ => runs.push((g, vec![shared.window(j)])),
            }
        }
        assert_eq!(runs.len(), 22, "each group served once, whole");
        for (_, group) in &runs {
            let blocks: HashSet<_> = group.iter().map(|w| (w.col / 256, w.row / 256)).collect();
            let in_scenes: HashSet<_> = group.iter().map(|w| w.scene).collect();
            assert_eq!(blocks.len(), 1, "one block per group");
            if !in_scenes.contains(&2) {
                assert_eq!(
                    (in_scenes, group.len()),
                    (HashSet::from([0, 1, 3]), 48),
                    "every date of the block"
                );
            }
        }
        let mut s = spec(SamplerKind::Random, 32, 32, 40_000);
        s.seed = 9;
        let random = Plan::new(s, scenes.clone()).unwrap().sharing_grids(Arc::new(ids));
        for (open, visits) in [(1, 1), (8, 3)] {
            let ordered = random.clone().with_order(local(open, visits)).unwrap();
            let (chi, df) = chi_square(&ordered, &scenes, 32);
            // df 255: the 0.001 quantile is about 335.
            assert!(chi < 340.0, "shared grids, local {open}/{visits}: chi {chi} df {df}");
        }
    }

    /// Many small scenes on distinct grids cannot be widened below the cap: the order is
    /// refused before its chunks exist, and accepted with fewer visits.
    #[test]
    fn too_many_groups_are_refused_before_they_are_made() {
        let scenes: Vec<SceneGrid> = (0..300_000).map(|_| grid(64, 64)).collect();
        let plan = Plan::new(spec(SamplerKind::Grid, 64, 64, 0), scenes).unwrap();
        let e = plan.clone().with_order(local(4, 8)).unwrap_err();
        assert!(e.contains("300000 groups × 8 visits"), "{e}");
        let ok = plan.with_order(local(4, 2)).unwrap();
        assert!(ok.order_bytes() < 64 << 20, "{}", ok.order_bytes());
    }

    /// Consecutive samples share blocks: with `open_blocks` lanes, a batch of 16 touches
    /// at most open + 1 groups (a lane may cross into its next chunk), where random's own
    /// order touches nearly 16; and the whole epoch opens each group about `visits` times.
    #[test]
    fn batches_come_from_the_open_blocks() {
        let plan = Plan::new(spec(SamplerKind::Random, 32, 32, 20_000), scenes()).unwrap();
        for (open, visits) in [(1u64, 1u64), (4, 1), (4, 3)] {
            let ordered = plan.clone().with_order(local(open as u32, visits as u32)).unwrap();
            let order = ordered.local_order().unwrap();
            let mut worst = 0;
            for b in 0..(plan.len() / 16) {
                let mut g: Vec<u64> = (b * 16..b * 16 + 16).map(|j| order.group_of(j)).collect();
                g.sort_unstable();
                g.dedup();
                worst = worst.max(g.len() as u64);
            }
            assert!(worst <= 2 * open + 1, "open {open}: a batch touched {worst} groups");
            // Lanes read in order: per lane, the group changes only between chunks.
            let lanes: Vec<Vec<u64>> = (0..open)
                .map(|l| {
                    let mut seen: Vec<(u64, u64)> = Vec::new();
                    for j in 0..plan.len() {
                        let s = order.deal(j);
                        let q = plan.len() / open;
                        let rem = plan.len() % open;
                        let lane = if s < rem * (q + 1) {
                            s / (q + 1)
                        } else {
                            rem + (s - rem * (q + 1)) / q.max(1)
                        };
                        if lane == l {
                            seen.push((s, order.group_of(j)));
                        }
                    }
                    seen.sort_unstable();
                    seen.into_iter().map(|x| x.1).collect()
                })
                .collect();
            let opened: u64 = lanes
                .iter()
                .map(|l| 1 + l.windows(2).filter(|w| w[0] != w[1]).count() as u64)
                .sum();
            let groups = order.group_count();
            assert!(
                opened <= groups * visits + open,
                "open {open} visits {visits}: {opened} openings of {groups} groups"
            );
        }
    }

    #[test]
    fn the_dial_and_balanced_are_checked() {
        let plan = Plan::new(spec(SamplerKind::Random, 32, 32, 100), scenes()).unwrap();
        for bad in [
            local(0, 1),
            local(1, 0),
            local(MAX_OPEN_BLOCKS + 1, 1),
            local(1, MAX_VISITS + 1),
        ] {
            assert!(plan.clone().with_order(bad).is_err());
        }
        assert!(plan.clone().with_order(Order::Random).unwrap().local_order().is_none());
    }

    /// An archive of many small tiles is grouped in wider blocks, never past the cap.
    #[test]
    fn many_blocks_are_widened_within_the_cap() {
        let tiny = SceneGrid {
            width: 100_000,
            height: 100_000,
            block_width: 16,
            block_height: 16,
        };
        let plan = Plan::new(spec(SamplerKind::Random, 8, 8, 1_000_000), vec![tiny; 4]).unwrap();
        let ordered = plan.with_order(local(16, 4)).unwrap();
        let order = ordered.local_order().unwrap();
        assert!(order.group_count() <= MAX_GROUPS);
        assert!(order.bytes() < 64 << 20, "{} bytes", order.bytes());
        let _ = ordered.window(999_999);
    }
}
