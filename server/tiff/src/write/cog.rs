//! A Cloud-Optimized GeoTIFF writer for float32 rasters that arrive tile by tile, in any
//! order, with bounded memory: each finished tile is compressed onto a spool file at once,
//! overviews are built as their child tiles finish (2 × 2 mean of the non-NaN values), and
//! `finish` lays the file out as a COG: header, every IFD (full resolution first), then
//! tile data from the smallest overview to full resolution, each level in row-major order.
//!
//! Classic little-endian TIFF (files up to 4 GiB; larger ones are refused with an error),
//! K bands pixel-interleaved, DEFLATE at libdeflate level 4 (as small as level 6 on float32
//! predictions, a little faster; level 1 stores them uncompressed), NaN as GDAL's nodata, and GeoTIFF keys for an EPSG
//! code (projected, or geographic for codes 4000–4999).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::{Entry, georeferencing, ifd_len, write_ifd};

/// Where the raster is on the Earth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Georef {
    /// GDAL geotransform `[x0, dx, rx, y0, ry, dy]`.
    pub geotransform: [f64; 6],
    /// EPSG code written as GeoTIFF keys (4000–4999 geographic, else projected); None writes none.
    pub epsg: Option<u32>,
}

#[derive(Debug)]
struct Level {
    width: u64,
    height: u64,
    across: u64,
    down: u64,
    /// Per tile (row-major): offset and length on the spool.
    spooled: Vec<Option<(u64, u64)>>,
    /// Parent tiles being filled from this level's finished tiles: data and children seen.
    parents: HashMap<u64, (Vec<f32>, u8)>,
}

/// A COG being written.
pub struct CogWriter {
    path: PathBuf,
    spool_path: PathBuf,
    spool: BufWriter<File>,
    spool_len: u64,
    bands: usize,
    tile: u64,
    georef: Option<Georef>,
    levels: Vec<Level>,
    compressor: libdeflater::Compressor,
}

fn io_err(m: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, m)
}

impl std::fmt::Debug for CogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CogWriter")
            .field("path", &self.path)
            .field("bands", &self.bands)
            .field("tile", &self.tile)
            .field("levels", &self.levels.len())
            .finish()
    }
}

impl CogWriter {
    /// A `width` × `height` raster of `bands` float32 bands in `tile`-sized tiles (a multiple
    /// of 16), written to `path` when [`CogWriter::finish`] is called.
    pub fn create(
        path: &Path,
        width: u64,
        height: u64,
        bands: usize,
        tile: u64,
        georef: Option<Georef>,
    ) -> std::io::Result<Self> {
        if width == 0 || height == 0 || bands == 0 || bands > 4096 {
            return Err(io_err(format!(
                "cannot write a {width} x {height} raster of {bands} bands"
            )));
        }
        if tile == 0 || !tile.is_multiple_of(16) || tile > 4096 {
            return Err(io_err(format!(
                "tile size {tile} must be a multiple of 16, at most 4096"
            )));
        }
        let mut levels = Vec::new();
        let (mut w, mut h) = (width, height);
        loop {
            let (across, down) = (w.div_ceil(tile), h.div_ceil(tile));
            let n = across
                .checked_mul(down)
                .filter(|n| *n <= 1 << 26)
                .ok_or_else(|| io_err(format!("{w} x {h} is too many tiles")))?;
            levels.push(Level {
                width: w,
                height: h,
                across,
                down,
                spooled: vec![None; n as usize],
                parents: HashMap::new(),
            });
            if w <= tile && h <= tile {
                break;
            }
            (w, h) = (w.div_ceil(2), h.div_ceil(2));
        }
        check_target(path)?;
        let spool_path = sibling(path, "spool");
        let spool = BufWriter::new(create_new(&spool_path)?);
        Ok(Self {
            path: path.to_path_buf(),
            spool_path,
            spool,
            spool_len: 0,
            bands,
            tile,
            georef,
            levels,
            compressor: libdeflater::Compressor::new(libdeflater::CompressionLvl::new(4).unwrap_or_default()),
        })
    }

    /// Tiles across and down at full resolution.
    pub fn tiles(&self) -> (u64, u64) {
        (self.levels[0].across, self.levels[0].down)
    }

    /// Overview levels (besides full resolution).
    pub fn overviews(&self) -> usize {
        self.levels.len() - 1
    }

    /// Values in one tile: `tile² · bands`, pixel-interleaved.
    pub fn tile_values(&self) -> usize {
        (self.tile * self.tile) as usize * self.bands
    }

    /// Writes full-resolution tile `(tx, ty)`: `tile² · bands` values, pixel-interleaved,
    /// NaN where there is no data (also beyond the raster's edge).
    pub fn put(&mut self, tx: u64, ty: u64, data: Vec<f32>) -> std::io::Result<()> {
        self.put_level(0, tx, ty, data)
    }

    fn put_level(&mut self, l: usize, tx: u64, ty: u64, data: Vec<f32>) -> std::io::Result<()> {
        let lv = &self.levels[l];
        if tx >= lv.across || ty >= lv.down || data.len() != self.tile_values() {
            return Err(io_err(format!(
                "tile ({tx}, {ty}) of level {l} with {} values does not fit",
                data.len()
            )));
        }
        let index = (ty * lv.across + tx) as usize;
        if lv.spooled[index].is_some() {
            return Err(io_err(format!("tile ({tx}, {ty}) of level {l} written twice")));
        }
        let raw: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut z = vec![0u8; self.compressor.zlib_compress_bound(raw.len())];
        let n = self
            .compressor
            .zlib_compress(&raw, &mut z)
            .map_err(|e| io_err(format!("deflate: {e:?}")))?;
        self.spool.write_all(&z[..n])?;
        self.levels[l].spooled[index] = Some((self.spool_len, n as u64));
        self.spool_len += n as u64;
        if l + 1 < self.levels.len() {
            self.add_to_parent(l, tx, ty, &data)?;
        }
        Ok(())
    }

    /// Adds a finished tile of level `l` to its parent; writes the parent once all its
    /// children are in.
    fn add_to_parent(&mut self, l: usize, tx: u64, ty: u64, data: &[f32]) -> std::io::Result<()> {
        let (t, b) = (self.tile as usize, self.bands);
        let (px, py) = (tx / 2, ty / 2);
        let lv = &self.levels[l];
        let parent_across = self.levels[l + 1].across;
        let children = ((2 * px + 2).min(lv.across) - 2 * px) * ((2 * py + 2).min(lv.down) - 2 * py);
        let values = self.tile_values();
        let key = py * parent_across + px;
        let entry = self.levels[l]
            .parents
            .entry(key)
            .or_insert_with(|| (vec![f32::NAN; values], 0));
        let (qx, qy) = ((tx % 2) as usize * t / 2, (ty % 2) as usize * t / 2);
        for y in 0..t / 2 {
            for x in 0..t / 2 {
                for k in 0..b {
                    let (mut sum, mut n) = (0.0f64, 0u32);
                    for (dy, dx) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                        let v = data[((2 * y + dy) * t + 2 * x + dx) * b + k];
                        if !v.is_nan() {
                            sum += v as f64;
                            n += 1;
                        }
                    }
                    entry.0[((qy + y) * t + qx + x) * b + k] = if n > 0 { (sum / n as f64) as f32 } else { f32::NAN };
                }
            }
        }
        entry.1 += 1;
        if entry.1 as u64 == children {
            let (tile, _) = self.levels[l].parents.remove(&key).unwrap_or_default();
            self.put_level(l + 1, px, py, tile)?;
        }
        Ok(())
    }

    /// Lays out the COG at its path (written to a temporary name, then renamed). Every
    /// full-resolution tile must have been put.
    pub fn finish(mut self) -> std::io::Result<PathBuf> {
        if let Some(missing) = self.levels[0].spooled.iter().position(Option::is_none) {
            let across = self.levels[0].across as usize;
            return Err(io_err(format!(
                "tile ({}, {}) was never written",
                missing % across,
                missing / across
            )));
        }
        self.spool.flush()?;
        let layout = self.layout()?;
        let tmp = sibling(&self.path, "partial");
        let written = self.write_to(&tmp, &layout).and_then(|()| {
            // Whatever appeared at the path meanwhile must still be a file to replace.
            check_target(&self.path)?;
            std::fs::rename(&tmp, &self.path)
        });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(&self.spool_path);
            return Err(e);
        }
        let _ = std::fs::remove_file(&self.spool_path);
        Ok(self.path.clone())
    }

    /// Writes the laid-out file to `tmp` (a fresh name beside the target).
    fn write_to(&self, tmp: &Path, layout: &Layout) -> std::io::Result<()> {
        let mut out = BufWriter::new(create_new(tmp)?);
        out.write_all(&layout.head)?;
        let mut spool = File::open(&self.spool_path)?;
        let mut buf = Vec::new();
        for l in (0..self.levels.len()).rev() {
            for &(offset, len) in self.levels[l].spooled.iter().flatten() {
                spool.seek(SeekFrom::Start(offset))?;
                buf.resize(len as usize, 0);
                spool.read_exact(&mut buf)?;
                out.write_all(&buf)?;
            }
        }
        out.flush()?;
        Ok(())
    }

    /// Header and IFDs, with tile offsets for data laid out right after them.
    fn layout(&self) -> std::io::Result<Layout> {
        let ifds: Vec<Vec<Entry>> = (0..self.levels.len())
            .map(|l| self.entries(l, &vec![0; self.levels[l].spooled.len()], &[]))
            .collect();
        let head_len: u64 = 8 + ifds.iter().map(|e| ifd_len(e)).sum::<u64>();
        // Data: smallest level first, each level row-major.
        let mut pos = head_len;
        let mut offsets: Vec<Vec<u32>> = vec![Vec::new(); self.levels.len()];
        let mut counts: Vec<Vec<u32>> = vec![Vec::new(); self.levels.len()];
        for l in (0..self.levels.len()).rev() {
            for &(_, len) in self.levels[l].spooled.iter().flatten() {
                offsets[l].push(pos as u32);
                counts[l].push(len as u32);
                pos += len;
            }
        }
        if pos > u32::MAX as u64 {
            return Err(io_err(format!(
                "the COG would be {pos} bytes: more than classic TIFF's 4 GiB"
            )));
        }
        let mut head = Vec::with_capacity(head_len as usize);
        head.extend_from_slice(b"II*\0");
        head.extend_from_slice(&8u32.to_le_bytes());
        for l in 0..self.levels.len() {
            let entries = self.entries(l, &offsets[l], &counts[l]);
            let start = head.len() as u64;
            let next = if l + 1 < self.levels.len() {
                start + ifd_len(&entries)
            } else {
                0
            };
            write_ifd(&mut head, &entries, start, next);
        }
        Ok(Layout { head })
    }

    fn entries(&self, l: usize, offsets: &[u32], counts: &[u32]) -> Vec<Entry> {
        let lv = &self.levels[l];
        let b = self.bands;
        let n = lv.spooled.len();
        let counts = if counts.is_empty() { vec![0; n] } else { counts.to_vec() };
        let mut e = vec![
            Entry::longs(254, &[u32::from(l > 0)]),
            Entry::longs(256, &[lv.width as u32]),
            Entry::longs(257, &[lv.height as u32]),
            Entry::shorts(258, &vec![32; b]),
            Entry::shorts(259, &[8]),
            Entry::shorts(262, &[1]),
            Entry::shorts(277, &[b as u16]),
            Entry::shorts(284, &[1]),
            Entry::shorts(322, &[self.tile as u16]),
            Entry::shorts(323, &[self.tile as u16]),
            Entry::longs(324, offsets),
            Entry::longs(325, &counts),
            Entry::shorts(339, &vec![3; b]),
            Entry::ascii(42113, "nan"),
        ];
        if b > 1 {
            e.push(Entry::shorts(338, &vec![0; b - 1]));
        }
        if l == 0
            && let Some(g) = &self.georef
        {
            e.extend(georeferencing(g.geotransform, g.epsg));
        }
        e.sort_by_key(|x| x.tag);
        e
    }
}

impl Drop for CogWriter {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.spool_path);
    }
}

struct Layout {
    head: Vec<u8>,
}

/// Refuses a target that exists and is not a regular file (a FIFO, a device, a directory, a
/// symbolic link): renaming over it would replace it, `/dev/full` included.
pub fn check_target(path: &Path) -> std::io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let t = meta.file_type();
    if t.is_file() {
        return Ok(());
    }
    let kind = if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file (a FIFO, a device or a socket)"
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!("output path {} is {kind}: refusing to replace it", path.display()),
    ))
}

/// A fresh name beside `path` for a file of this writer (`.name.tif.<pid>-<n>.<what>`), so
/// two writers, or a stray file from a crash, never share one.
fn sibling(path: &Path, what: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}-{n}.{what}", std::process::id()))
}

/// Creates `path`, which must not exist (never follows or truncates what is there).
fn create_new(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new().write(true).create_new(true).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-tile COG at `path`.
    fn write_one(path: &Path) -> std::io::Result<PathBuf> {
        let mut w = CogWriter::create(path, 16, 16, 1, 16, None)?;
        w.put(0, 0, vec![1.0; w.tile_values()])?;
        w.finish()
    }

    #[test]
    fn only_regular_files_are_replaced_and_nothing_stray_is_left() {
        let dir = std::env::temp_dir().join(format!("cogfeed-target-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("file.tif");
        std::fs::write(&file, b"old").unwrap();
        assert_eq!(write_one(&file).unwrap(), file, "a regular file is replaced");
        let fifo = dir.join("fifo.tif");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        let subdir = dir.join("dir.tif");
        std::fs::create_dir(&subdir).unwrap();
        let link = dir.join("link.tif");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let mut refused = vec![subdir, link.clone()];
        if made.is_ok_and(|s| s.success()) {
            refused.push(fifo);
        }
        for path in &refused {
            let e = write_one(path).unwrap_err().to_string();
            assert!(e.contains("refusing to replace it"), "{}: {e}", path.display());
        }
        assert_eq!(std::fs::read_link(&link).unwrap(), file, "the link is untouched");
        // A target that turns into something else before the rename is refused then.
        let late = dir.join("late.tif");
        let mut w = CogWriter::create(&late, 16, 16, 1, 16, None).unwrap();
        w.put(0, 0, vec![1.0; w.tile_values()]).unwrap();
        std::fs::create_dir(&late).unwrap();
        assert!(w.finish().unwrap_err().to_string().contains("a directory"));
        // Only what was asked for is left: no spool, no partial file.
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut want = vec!["dir.tif", "file.tif", "late.tif", "link.tif"];
        if refused.len() == 3 {
            want.insert(1, "fifo.tif");
        }
        assert_eq!(left, want);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn overviews_are_built_as_children_finish_and_the_layout_is_complete() {
        let dir = std::env::temp_dir().join(format!("cogfeed-cog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.tif");
        // 40 x 20 in 16 px tiles: 3 x 2 tiles, overviews 20 x 10 (2 x 1 tiles) and 10 x 5.
        let mut w = CogWriter::create(&path, 40, 20, 2, 16, None).unwrap();
        assert_eq!((w.tiles(), w.overviews()), ((3, 2), 2));
        for ty in (0..2).rev() {
            for tx in 0..3 {
                let mut t = vec![f32::NAN; w.tile_values()];
                for y in 0..16 {
                    for x in 0..16 {
                        let (gx, gy) = (tx * 16 + x, ty * 16 + y);
                        if gx < 40 && gy < 20 {
                            t[((y * 16 + x) * 2) as usize] = (gy * 40 + gx) as f32;
                            t[((y * 16 + x) * 2 + 1) as usize] = 1.0;
                        }
                    }
                }
                w.put(tx, ty, t).unwrap();
            }
        }
        assert!(w.levels.iter().all(|l| l.parents.is_empty()));
        assert!(w.put(0, 0, vec![0.0; w.tile_values()]).is_err());
        let out = w.finish().unwrap();
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(&bytes[..4], b"II*\0");
        assert!(!dir.join("t.tif.spool").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_tile_is_an_error() {
        let dir = std::env::temp_dir().join(format!("cogfeed-cog-miss-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let w = CogWriter::create(&dir.join("m.tif"), 32, 16, 1, 16, None).unwrap();
        assert!(w.finish().unwrap_err().to_string().contains("never written"));
        assert!(CogWriter::create(&dir.join("x.tif"), 32, 16, 1, 10, None).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
