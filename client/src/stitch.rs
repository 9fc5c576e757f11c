//! Stitched inference: per-sample predictions `[B, K, h, w]` of a grid stream with overlap
//! become one georeferenced COG per scene, written tile by tile as soon as every window
//! that touches a tile has arrived (memory holds only the tiles in progress).
//!
//! The rules (Python's `cogfeed.Stitcher` follows the same):
//! - output grid: the scene's level `level` (scene datasets; layer `image`), or the layer's
//!   grid on map-space datasets (the reference grid scaled by `f = r_0 / r_layer`);
//!   windows land at `(col·f, row·f)`, predictions must be `patch·f` square;
//! - `mean`: weight 1; `cosine`: `sin²(π(i+½)/h) · sin²(π(j+½)/w)`; value = Σw·p / Σw in
//!   f64, written as f32; `center`: the window whose centre is nearest (Chebyshev), ties
//!   to the smaller row, then column, of its origin;
//! - pixels no window covers are NaN (the file's nodata); the parts of padded windows
//!   beyond the scene are dropped; a window seen twice is ignored the second time;
//! - a tile is complete when all the grid's windows that touch it have arrived; `finish`
//!   writes the rest with what they have (counted in `incomplete_tiles`).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use cogfeed_tiff::write::cog::{CogWriter, Georef};

use crate::pb;

/// How overlapping predictions combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blend {
    Mean,
    Cosine,
    Center,
}

impl std::str::FromStr for Blend {
    type Err = StitchError;
    fn from_str(s: &str) -> Result<Self, StitchError> {
        match s {
            "mean" => Ok(Blend::Mean),
            "cosine" => Ok(Blend::Cosine),
            "center" => Ok(Blend::Center),
            other => Err(StitchError::Invalid(format!(
                "unknown blend {other:?} (mean, cosine, center)"
            ))),
        }
    }
}

/// What a stitch needs besides the dataset: the grid stream's geometry.
#[derive(Debug, Clone)]
pub struct StitchOptions {
    /// `image` on scene datasets, a layer name on map-space datasets.
    pub layer: String,
    pub blend: Blend,
    pub patch_size: u32,
    /// The grid stride (`patch_size` when 0).
    pub stride: u32,
    pub level: u32,
    /// Output tile side (a multiple of 16).
    pub tile_size: u64,
}

impl Default for StitchOptions {
    fn default() -> Self {
        Self {
            layer: "image".into(),
            blend: Blend::Cosine,
            patch_size: 256,
            stride: 0,
            level: 0,
            tile_size: 256,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StitchError {
    #[error("stitch: {0}")]
    Invalid(String),
    #[error("stitch: {0}")]
    Io(#[from] std::io::Error),
}

fn invalid(m: String) -> StitchError {
    StitchError::Invalid(m)
}

/// A scene's name as it replaces `{scene}`: a `.tif`/`.tiff` extension dropped and path
/// separators made underscores (map-space scenes are Item ids, whose dots are not
/// extensions). Python's `scene_stem` is the same rule.
pub fn scene_stem(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    let cut = [".tiff", ".tif"]
        .iter()
        .find(|e| lower.ends_with(*e))
        .map_or(name.len(), |e| name.len() - e.len());
    name[..cut].replace(['/', '\\'], "_")
}

/// Windows needed to cover `size` pixels every `stride` (the daemon's grid rule).
pub fn grid_steps(size: u64, patch: u64, stride: u64) -> u64 {
    if size <= patch {
        1
    } else {
        let to_cover = (size - patch).div_ceil(stride) + 1;
        let starting_inside = (size - 1) / stride + 1;
        to_cover.min(starting_inside)
    }
}

/// One output tile in progress.
struct Acc {
    /// Σ w·p per pixel and band (mean, cosine), or the chosen value (center).
    values: Vec<f64>,
    /// Σ w per pixel and band of the finite values only (a NaN or infinite prediction
    /// adds nothing), or 1 where center has chosen a window.
    weight: Vec<f64>,
    /// Center: the chosen window's (distance, row, col) per pixel and band.
    keys: Vec<(f64, u64, u64)>,
    arrived: u32,
}

/// One scene's output.
struct SceneOut {
    writer: CogWriter,
    width: u64,
    height: u64,
    /// Reference (or level) pixels → output pixels.
    f: f64,
    src_size: (u64, u64),
    windows: (u64, u64),
    seen: HashSet<(u64, u64)>,
    expected: Vec<u32>,
    open: HashMap<u64, Acc>,
    written: Vec<bool>,
}

/// Stitches predictions into COGs, one per scene.
pub struct Stitcher {
    info: pb::DatasetInfo,
    out: String,
    opts: StitchOptions,
    scenes: HashMap<u32, SceneOut>,
    bands: Option<usize>,
    finished: Vec<PathBuf>,
    /// Output files by the scene writing each (no two scenes share one).
    paths: HashMap<PathBuf, String>,
    /// Tiles written with windows missing (at `finish`).
    pub incomplete_tiles: u64,
    /// Most output tiles in progress at once.
    pub peak_tiles_in_memory: usize,
}

impl Stitcher {
    /// A stitcher for dataset `info`; `out` may hold `{scene}` (the scene's name without
    /// extension) to write one file per scene.
    pub fn new(info: &pb::DatasetInfo, out: &str, opts: StitchOptions) -> Result<Self, StitchError> {
        let mut opts = opts;
        if opts.stride == 0 {
            opts.stride = opts.patch_size;
        }
        if opts.patch_size == 0 {
            return Err(invalid("patch_size must be positive".into()));
        }
        if info.layers.is_empty() {
            if opts.layer != "image" {
                return Err(invalid(format!(
                    "dataset {} has no layers: stitch layer \"image\", not {:?}",
                    info.name, opts.layer
                )));
            }
        } else if !info.layers.iter().any(|l| l.name == opts.layer) {
            let names: Vec<&str> = info.layers.iter().map(|l| l.name.as_str()).collect();
            return Err(invalid(format!(
                "no layer {:?} (layers: {})",
                opts.layer,
                names.join(", ")
            )));
        }
        if opts.tile_size == 0 || !opts.tile_size.is_multiple_of(16) {
            return Err(invalid(format!(
                "tile_size {} must be a multiple of 16",
                opts.tile_size
            )));
        }
        Ok(Self {
            info: info.clone(),
            out: out.to_string(),
            opts,
            scenes: HashMap::new(),
            bands: None,
            finished: Vec::new(),
            paths: HashMap::new(),
            incomplete_tiles: 0,
            peak_tiles_in_memory: 0,
        })
    }

    /// Scale from window pixels to output pixels.
    fn factor(&self) -> f64 {
        match self.info.layers.iter().find(|l| l.name == self.opts.layer) {
            Some(l) if !self.info.layers.is_empty() => self.info.layers[0].resolution / l.resolution,
            _ => 1.0,
        }
    }

    fn scene(&mut self, index: u32, bands: usize) -> Result<&mut SceneOut, StitchError> {
        if !self.scenes.contains_key(&index) {
            let s = self
                .info
                .scenes
                .get(index as usize)
                .ok_or_else(|| invalid(format!("scene {index} is not in dataset {}", self.info.name)))?;
            if !self.out.contains("{scene}") && (!self.scenes.is_empty() || !self.finished.is_empty()) {
                return Err(invalid(format!(
                    "samples of a second scene ({}) arrived: put {{scene}} in the output path",
                    s.name
                )));
            }
            let level = s
                .levels
                .get(self.opts.level as usize)
                .ok_or_else(|| invalid(format!("scene {} has no level {}", s.name, self.opts.level)))?;
            let l0 = &s.levels[0];
            let f = self.factor();
            let (src_w, src_h) = (level.width, level.height);
            let width = (src_w as f64 * f - 1e-9).ceil().max(1.0) as u64;
            let height = (src_h as f64 * f - 1e-9).ceil().max(1.0) as u64;
            let georef = (s.geotransform.len() == 6).then(|| {
                let g = &s.geotransform;
                // Level scale (scene datasets) times layer scale (map-space).
                let sx = l0.width as f64 / level.width as f64 / f;
                let sy = l0.height as f64 / level.height as f64 / f;
                Georef {
                    geotransform: [g[0], g[1] * sx, g[2] * sy, g[3], g[4] * sx, g[5] * sy],
                    epsg: s.crs.strip_prefix("EPSG:").and_then(|c| c.parse().ok()),
                }
            });
            let path = PathBuf::from(self.out.replace("{scene}", &scene_stem(&s.name)));
            // Two scenes onto one file would write over each other.
            if let Some(other) = self.paths.get(&path) {
                return Err(invalid(format!(
                    "scenes {other} and {} both map to {}: make {{scene}} tell them apart",
                    s.name,
                    path.display()
                )));
            }
            self.paths.insert(path.clone(), s.name.clone());
            let writer = CogWriter::create(&path, width, height, bands, self.opts.tile_size, georef)?;
            let (p, st) = (self.opts.patch_size as u64, self.opts.stride as u64);
            let windows = (grid_steps(src_w, p, st), grid_steps(src_h, p, st));
            let (across, down) = writer.tiles();
            let t = self.opts.tile_size;
            let mut expected = vec![0u32; (across * down) as usize];
            let pw = (p as f64 * f).round() as u64;
            for j in 0..windows.1 {
                for i in 0..windows.0 {
                    let c0 = ((i * st) as f64 * f).round() as u64;
                    let r0 = ((j * st) as f64 * f).round() as u64;
                    let (c1, r1) = ((c0 + pw).min(width), (r0 + pw).min(height));
                    if c0 >= c1 || r0 >= r1 {
                        continue;
                    }
                    for ty in r0 / t..=(r1 - 1) / t {
                        for tx in c0 / t..=(c1 - 1) / t {
                            expected[(ty * across + tx) as usize] += 1;
                        }
                    }
                }
            }
            let n = expected.len();
            self.scenes.insert(
                index,
                SceneOut {
                    writer,
                    width,
                    height,
                    f,
                    src_size: (src_w, src_h),
                    windows,
                    seen: HashSet::new(),
                    expected,
                    open: HashMap::new(),
                    written: vec![false; n],
                },
            );
        }
        self.scenes
            .get_mut(&index)
            .ok_or_else(|| invalid("scene vanished".into()))
    }

    /// Adds predictions `[B, K, h, w]` (row-major f32) for `windows` (one per sample, as in
    /// the batch they came from).
    pub fn add(&mut self, windows: &[pb::Window], preds: &[f32], shape: [usize; 4]) -> Result<(), StitchError> {
        let [b, k, h, w] = shape;
        if b != windows.len() || preds.len() != b * k * h * w || k == 0 {
            return Err(invalid(format!(
                "predictions of shape {shape:?} ({} values) for {} windows",
                preds.len(),
                windows.len()
            )));
        }
        if *self.bands.get_or_insert(k) != k {
            return Err(invalid(format!("{k} prediction channels after {:?}", self.bands)));
        }
        let (p, st, blend, t) = (
            self.opts.patch_size as u64,
            self.opts.stride as u64,
            self.opts.blend,
            self.opts.tile_size,
        );
        let f = self.factor();
        let want = (p as f64 * f).round() as usize;
        if (p as f64 * f - want as f64).abs() > 1e-6 || h != want || w != want {
            return Err(invalid(format!(
                "predictions are {h} x {w}; layer {} of a {p} px patch is {want} x {want}",
                self.opts.layer
            )));
        }
        let wy: Vec<f64> = weights(blend, h);
        let wx: Vec<f64> = weights(blend, w);
        for (s, win) in windows.iter().enumerate() {
            if win.level != self.opts.level {
                return Err(invalid(format!(
                    "a window of level {} in a stitch of level {}",
                    win.level, self.opts.level
                )));
            }
            if win.width as u64 != p || win.height as u64 != p || win.col % st != 0 || win.row % st != 0 {
                return Err(invalid(format!(
                    "window {}x{} at ({}, {}) is not on the grid of patch {p}, stride {st}: stitch a grid stream with the same patch_size and stride",
                    win.width, win.height, win.col, win.row
                )));
            }
            let scene = self.scene(win.scene, k)?;
            let key = (win.col / st, win.row / st);
            if key.0 >= scene.windows.0 || key.1 >= scene.windows.1 || win.col >= scene.src_size.0 {
                return Err(invalid(format!(
                    "window ({}, {}) is outside the scene",
                    win.col, win.row
                )));
            }
            if !scene.seen.insert(key) {
                continue;
            }
            let c0 = (win.col as f64 * scene.f).round() as u64;
            let r0 = (win.row as f64 * scene.f).round() as u64;
            let (c1, r1) = ((c0 + w as u64).min(scene.width), (r0 + h as u64).min(scene.height));
            if c0 >= c1 || r0 >= r1 {
                continue;
            }
            let across = scene.writer.tiles().0;
            let sample = &preds[s * k * h * w..(s + 1) * k * h * w];
            for ty in r0 / t..=(r1 - 1) / t {
                for tx in c0 / t..=(c1 - 1) / t {
                    let index = ty * across + tx;
                    let acc = scene.open.entry(index).or_insert_with(|| Acc::new(blend, t, k));
                    let (y0, y1) = ((ty * t).max(r0), ((ty + 1) * t).min(r1));
                    let (x0, x1) = ((tx * t).max(c0), ((tx + 1) * t).min(c1));
                    for y in y0..y1 {
                        let i = (y - r0) as usize;
                        for x in x0..x1 {
                            let j = (x - c0) as usize;
                            let px = ((y - ty * t) * t + (x - tx * t)) as usize;
                            match blend {
                                Blend::Center => {
                                    let cy = r0 as f64 + (h as f64 - 1.0) / 2.0;
                                    let cx = c0 as f64 + (w as f64 - 1.0) / 2.0;
                                    let d = (y as f64 - cy).abs().max((x as f64 - cx).abs());
                                    let cand = (d, r0, c0);
                                    for c in 0..k {
                                        let v = sample[(c * h + i) * w + j];
                                        let q = px * k + c;
                                        if v.is_finite() && (acc.weight[q] == 0.0 || cand < acc.keys[q]) {
                                            acc.keys[q] = cand;
                                            acc.weight[q] = 1.0;
                                            acc.values[q] = v as f64;
                                        }
                                    }
                                }
                                _ => {
                                    let wt = wy[i] * wx[j];
                                    for c in 0..k {
                                        let v = sample[(c * h + i) * w + j];
                                        if v.is_finite() {
                                            let q = px * k + c;
                                            acc.weight[q] += wt;
                                            acc.values[q] += wt * v as f64;
                                        }
                                    }
                                }
                            }
                        }
                    }
                    acc.arrived += 1;
                    if acc.arrived >= scene.expected[index as usize] {
                        let acc = scene.open.remove(&index).unwrap_or_else(|| Acc::new(blend, t, k));
                        scene.written[index as usize] = true;
                        scene.writer.put(tx, ty, acc.finish(blend, k))?;
                    }
                }
            }
            self.peak_tiles_in_memory = self
                .peak_tiles_in_memory
                .max(self.scenes.values().map(|s| s.open.len()).sum());
        }
        Ok(())
    }

    /// Writes every tile left (incomplete ones with what they have) and lays out the files.
    pub fn finish(mut self) -> Result<Vec<PathBuf>, StitchError> {
        let (blend, t) = (self.opts.blend, self.opts.tile_size);
        let k = self.bands.unwrap_or(1);
        let mut scenes: Vec<(u32, SceneOut)> = self.scenes.drain().collect();
        scenes.sort_by_key(|(i, _)| *i);
        for (_, mut scene) in scenes {
            let across = scene.writer.tiles().0;
            for index in 0..scene.written.len() as u64 {
                if scene.written[index as usize] {
                    continue;
                }
                let acc = match scene.open.remove(&index) {
                    Some(a) => {
                        self.incomplete_tiles += 1;
                        a
                    }
                    None => {
                        if scene.expected[index as usize] > 0 {
                            self.incomplete_tiles += 1;
                        }
                        Acc::new(blend, t, k)
                    }
                };
                scene.writer.put(index % across, index / across, acc.finish(blend, k))?;
            }
            self.finished.push(scene.writer.finish()?);
        }
        Ok(self.finished)
    }
}

/// Per-row (or column) weights of a prediction `n` pixels long.
fn weights(blend: Blend, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| match blend {
            Blend::Cosine => (std::f64::consts::PI * (i as f64 + 0.5) / n as f64).sin().powi(2),
            _ => 1.0,
        })
        .collect()
}

impl Acc {
    fn new(blend: Blend, t: u64, k: usize) -> Self {
        let n = (t * t) as usize;
        Self {
            values: vec![0.0; n * k],
            weight: vec![0.0; n * k],
            keys: if blend == Blend::Center {
                vec![(f64::MAX, u64::MAX, u64::MAX); n * k]
            } else {
                Vec::new()
            },
            arrived: 0,
        }
    }

    /// The tile's values, NaN where no window brought a finite value.
    fn finish(self, blend: Blend, _k: usize) -> Vec<f32> {
        let mut out = vec![f32::NAN; self.values.len()];
        for (q, &wsum) in self.weight.iter().enumerate() {
            if wsum > 0.0 {
                let v = self.values[q];
                out[q] = if blend == Blend::Center {
                    v as f32
                } else {
                    (v / wsum) as f32
                };
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(size: u32) -> pb::DatasetInfo {
        pb::DatasetInfo {
            name: "t".into(),
            scenes: vec![pb::SceneInfo {
                index: 0,
                name: "s.tif".into(),
                levels: vec![pb::Level {
                    width: size as u64,
                    height: size as u64,
                    block_width: 16,
                    block_height: 16,
                }],
                has_label: false,
                geotransform: vec![100.0, 2.0, 0.0, 200.0, 0.0, -2.0],
                crs: "EPSG:32633".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn window(col: u64, row: u64, p: u32) -> pb::Window {
        pb::Window {
            scene: 0,
            col,
            row,
            width: p,
            height: p,
            level: 0,
            padded: false,
        }
    }

    #[test]
    fn non_finite_predictions_never_erase_finite_ones() {
        let dir = std::env::temp_dir().join(format!("cogfeed-stitch-nan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for blend in [Blend::Mean, Blend::Cosine, Blend::Center] {
            let out = dir.join(format!("nan-{blend:?}.tif"));
            let opts = StitchOptions {
                blend,
                patch_size: 32,
                stride: 16,
                tile_size: 16,
                ..Default::default()
            };
            // 48 px, windows at 0 and 16: the middle tile (1, 1) is covered by all four.
            let mut st = Stitcher::new(&info(48), out.to_str().unwrap(), opts).unwrap();
            let mut bad = vec![f32::NAN; 32 * 32];
            bad[..16].fill(f32::INFINITY);
            st.add(&[window(0, 0, 32)], &bad, [1, 1, 32, 32]).unwrap();
            st.add(&[window(16, 16, 32)], &vec![5.0; 32 * 32], [1, 1, 32, 32])
                .unwrap();
            let acc = &st.scenes[&0].open[&4];
            for q in 0..acc.values.len() {
                let v = match blend {
                    Blend::Center => acc.values[q],
                    _ => acc.values[q] / acc.weight[q],
                };
                assert!((v - 5.0).abs() < 1e-9, "{blend:?}: pixel {q} is {v}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn two_scenes_onto_one_file_are_refused() {
        let dir = std::env::temp_dir().join(format!("cogfeed-stitch-two-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut two = info(32);
        let mut other = two.scenes[0].clone();
        other.index = 1;
        other.name = "s.TIFF".into();
        two.scenes.push(other);
        let out = dir.join("{scene}.tif");
        let opts = StitchOptions {
            patch_size: 32,
            tile_size: 16,
            ..Default::default()
        };
        let mut st = Stitcher::new(&two, out.to_str().unwrap(), opts).unwrap();
        st.add(&[window(0, 0, 32)], &vec![1.0; 32 * 32], [1, 1, 32, 32])
            .unwrap();
        let mut second = window(0, 0, 32);
        second.scene = 1;
        let e = st
            .add(&[second], &vec![1.0; 32 * 32], [1, 1, 32, 32])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("both map to") && e.contains("s.tif") && e.contains("s.TIFF"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn scene_names_keep_their_dots() {
        assert_eq!(scene_stem("scene_00.tif"), "scene_00");
        assert_eq!(scene_stem("a.TIFF"), "a");
        assert_eq!(
            scene_stem("HLS.S30.T33TUM.2024155T100031.v2.0"),
            "HLS.S30.T33TUM.2024155T100031.v2.0"
        );
        assert_eq!(scene_stem("dir/x\\y.tif"), "dir_x_y");
    }

    #[test]
    fn grid_rule_matches_the_daemon() {
        assert_eq!(grid_steps(100, 32, 24), 4);
        assert_eq!(grid_steps(10, 32, 24), 1);
        assert_eq!(grid_steps(64, 32, 32), 2);
    }

    #[test]
    fn tiles_flush_as_their_windows_arrive_and_constant_input_survives_every_blend() {
        let dir = std::env::temp_dir().join(format!("cogfeed-stitch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for blend in [Blend::Mean, Blend::Cosine, Blend::Center] {
            let out = dir.join(format!("{blend:?}.tif"));
            let opts = StitchOptions {
                blend,
                patch_size: 32,
                stride: 24,
                tile_size: 16,
                ..Default::default()
            };
            let mut st = Stitcher::new(&info(100), out.to_str().unwrap(), opts).unwrap();
            let n = grid_steps(100, 32, 24);
            for j in 0..n {
                for i in 0..n {
                    st.add(&[window(i * 24, j * 24, 32)], &vec![7.0; 32 * 32], [1, 1, 32, 32])
                        .unwrap();
                }
            }
            // Row-major windows: at most about two rows of tiles are open at once.
            assert!(st.peak_tiles_in_memory <= 3 * 7, "{}", st.peak_tiles_in_memory);
            let written = st.finish().unwrap();
            assert_eq!(written, vec![out.clone()]);
        }
        let mut st = Stitcher::new(&info(100), dir.join("e.tif").to_str().unwrap(), Default::default()).unwrap();
        assert!(st.add(&[window(0, 0, 256)], &[0.0; 10], [1, 1, 256, 256]).is_err());
        assert!(
            st.add(&[window(3, 0, 256)], &vec![0.0; 256 * 256], [1, 1, 256, 256])
                .is_err()
        );
        assert!("median".parse::<Blend>().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
