//! The embedded demo dataset: realistic tiled COGs with label rasters, written without GDAL.
//!
//! Scenes are 4-band uint16 (smooth terrain, sharp-edged fields, sensor noise), 256 px
//! tiles, DEFLATE with horizontal predictor, one 2x overview, georeferenced in UTM 33N.
//! Labels are 1-band uint8 on the same grid and are a pure function of the image
//! ([`label_of`]), so tests can check that labels never drift from their images. The writer
//! produces COG layout: all IFDs and tag arrays first, then tile data, smallest level first.

pub mod configs;
pub mod series;
pub mod stac;

use std::path::{Path, PathBuf};

use cogfeed_tiff::write::{Entry, georeferencing, ifd_len, write_ifd};

use crate::rng::Rng;

/// Size of each demo scene in pixels.
pub const SCENE_SIZE: u32 = 1024;
/// Tile size of the demo scenes.
pub const TILE: u32 = 256;
/// Number of demo scenes.
pub const SCENES: usize = 4;

/// The class of a pixel, from its first band (what the demo labels hold).
pub fn label_of(band1: u16) -> u8 {
    (band1 / 8192) as u8
}

/// Where a written raster lies: EPSG code, top-left corner, pixel size, nodata.
#[derive(Debug, Clone)]
pub struct Georef {
    pub epsg: u16,
    pub x0: f64,
    pub y0: f64,
    pub pixel: f64,
    /// Pixel height when it differs from the width (geographic grids).
    pub pixel_y: Option<f64>,
    pub nodata: Option<f64>,
}

impl Georef {
    /// The demo scenes' grid: UTM 33N, 10 m, no nodata.
    fn demo() -> Self {
        Self {
            epsg: 32633,
            x0: 500_000.0,
            y0: 4_100_000.0,
            pixel: 10.0,
            pixel_y: None,
            nodata: None,
        }
    }
}

/// A raster to write: pixel-interleaved samples.
pub(crate) struct Image {
    width: u32,
    height: u32,
    bands: u32,
    bits: u16,
    data: Vec<u8>,
}

/// Writes the demo dataset (scenes and labels) into `dir`, returning the scene paths.
/// Existing files are left as they are.
pub fn write_demo(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    write_scenes(dir, SCENES, SCENE_SIZE)
}

/// Writes `count` scenes of `size` x `size` pixels (and their labels) into `dir`; existing
/// files are kept.
pub fn write_scenes(dir: &Path, count: usize, size: u32) -> std::io::Result<Vec<PathBuf>> {
    if size == 0 || size > 16384 {
        return Err(std::io::Error::other(format!("scene size {size} (1..=16384)")));
    }
    std::fs::create_dir_all(dir.join("labels"))?;
    let mut paths = Vec::new();
    for s in 0..count {
        let path = dir.join(format!("scene_{s:02}.tif"));
        let label_path = dir.join("labels").join(format!("scene_{s:02}.tif"));
        if !path.exists() || !label_path.exists() {
            let (image, label) = scene(s as u64, size);
            write_cog(&label_path, &label, &Georef::demo())?;
            write_cog(&path, &image, &Georef::demo())?;
        }
        paths.push(path);
    }
    Ok(paths)
}

fn scene(seed: u64, size: u32) -> (Image, Image) {
    let n = size as usize;
    let mut rng = Rng::new(seed.wrapping_mul(0x51_7CC1_B727_220A) + 1);
    let phase: Vec<f64> = (0..8).map(|_| rng.unit() * std::f64::consts::TAU).collect();
    let mut data = vec![0u8; n * n * 8];
    let mut labels = vec![0u8; n * n];
    for y in 0..n {
        for x in 0..n {
            let (fx, fy) = (x as f64, y as f64);
            // Fields: a patchwork of parcels with sharp edges.
            let parcel = ((fx / 97.0 + phase[0]).floor() * 3.0 + (fy / 131.0 + phase[1]).floor()) as i64;
            let parcel = (parcel.rem_euclid(7)) as f64 / 7.0;
            for b in 0..4 {
                let terrain = 0.5 + 0.25 * ((fx / (60.0 + 17.0 * b as f64) + phase[2 + b]).sin() * (fy / 83.0).cos());
                let noise = (rng.unit() - 0.5) * 0.002;
                let v = (0.55 * terrain + 0.4 * parcel + noise).clamp(0.0, 0.999);
                let v = (v * 65535.0) as u16;
                let i = ((y * n + x) * 4 + b) * 2;
                data[i..i + 2].copy_from_slice(&v.to_le_bytes());
                if b == 0 {
                    labels[y * n + x] = label_of(v);
                }
            }
        }
    }
    (
        Image {
            width: size,
            height: size,
            bands: 4,
            bits: 16,
            data,
        },
        Image {
            width: size,
            height: size,
            bands: 1,
            bits: 8,
            data: labels,
        },
    )
}

/// Halves an image by taking every second pixel (nearest neighbour, as GDAL's NEAREST).
fn decimate(img: &Image) -> Image {
    let es = (img.bits / 8) as usize * img.bands as usize;
    let (w, h) = (img.width.div_ceil(2), img.height.div_ceil(2));
    let mut data = Vec::with_capacity(w as usize * h as usize * es);
    for y in 0..h as usize {
        for x in 0..w as usize {
            let i = ((y * 2) * img.width as usize + x * 2) * es;
            data.extend_from_slice(&img.data[i..i + es]);
        }
    }
    Image {
        width: w,
        height: h,
        bands: img.bands,
        bits: img.bits,
        data,
    }
}

/// Compressed tiles of one image: DEFLATE with horizontal differencing, edge tiles padded.
fn tiles(img: &Image) -> Vec<Vec<u8>> {
    let es = (img.bits / 8) as usize;
    let px = es * img.bands as usize;
    let t = TILE as usize;
    let across = img.width.div_ceil(TILE) as usize;
    let down = img.height.div_ceil(TILE) as usize;
    let mut compressor = libdeflater::Compressor::new(libdeflater::CompressionLvl::new(6).unwrap_or_default());
    let mut out = Vec::with_capacity(across * down);
    for ty in 0..down {
        for tx in 0..across {
            let mut tile = vec![0u8; t * t * px];
            for r in 0..t {
                let y = ty * t + r;
                if y >= img.height as usize {
                    break;
                }
                let x0 = tx * t;
                let n = (img.width as usize - x0).min(t);
                let src = (y * img.width as usize + x0) * px;
                tile[r * t * px..r * t * px + n * px].copy_from_slice(&img.data[src..src + n * px]);
            }
            // Predictor 2: difference each sample from the same sample of the previous pixel.
            let samples = img.bands as usize;
            for row in tile.chunks_exact_mut(t * px) {
                for i in (samples..t * samples).rev() {
                    if es == 2 {
                        let cur = u16::from_le_bytes([row[i * 2], row[i * 2 + 1]]);
                        let prev = u16::from_le_bytes([row[(i - samples) * 2], row[(i - samples) * 2 + 1]]);
                        row[i * 2..i * 2 + 2].copy_from_slice(&cur.wrapping_sub(prev).to_le_bytes());
                    } else {
                        row[i] = row[i].wrapping_sub(row[i - samples]);
                    }
                }
            }
            let mut z = vec![0u8; compressor.zlib_compress_bound(tile.len())];
            let len = compressor.zlib_compress(&tile, &mut z).unwrap_or(0);
            z.truncate(len);
            out.push(z);
        }
    }
    out
}

/// Writes a single-band raster of `size` x `size` unsigned `bits`-bit samples (8 or 16,
/// little-endian in `data`) as a COG with one overview, e.g. a label raster.
pub fn write_band(path: &Path, size: u32, bits: u16, data: Vec<u8>) -> std::io::Result<()> {
    if (bits != 8 && bits != 16) || data.len() != size as usize * size as usize * (bits as usize / 8) {
        return Err(std::io::Error::other("write_band: 8 or 16 bits, size x size samples"));
    }
    write_cog(
        path,
        &Image {
            width: size,
            height: size,
            bands: 1,
            bits,
            data,
        },
        &Georef::demo(),
    )
}

/// Writes a single-band `width` × `height` raster of unsigned `bits`-bit samples
/// (little-endian) on `georef`'s grid as a COG with one overview.
pub fn write_georeferenced(
    path: &Path,
    width: u32,
    height: u32,
    bits: u16,
    data: Vec<u8>,
    georef: &Georef,
) -> std::io::Result<()> {
    if (bits != 8 && bits != 16) || data.len() != width as usize * height as usize * (bits as usize / 8) {
        return Err(std::io::Error::other(
            "write_georeferenced: 8 or 16 bits, width x height samples",
        ));
    }
    write_cog(
        path,
        &Image {
            width,
            height,
            bands: 1,
            bits,
            data,
        },
        georef,
    )
}

/// Writes `img` with one overview as a classic little-endian tiled TIFF in COG layout.
fn write_cog(path: &Path, img: &Image, georef: &Georef) -> std::io::Result<()> {
    let levels = [decimate(img)];
    let all: Vec<&Image> = std::iter::once(img).chain(levels.iter()).collect();
    let compressed: Vec<Vec<Vec<u8>>> = all.iter().map(|i| tiles(i)).collect();
    // IFD sizes are fixed by their entry lists; build entries with placeholder offsets first.
    let build = |level: usize, im: &Image, offsets: &[u32], counts: &[u32]| -> Vec<Entry> {
        let b = im.bands as usize;
        let mut e = vec![
            Entry::longs(254, &[if level == 0 { 0 } else { 1 }]),
            Entry::longs(256, &[im.width]),
            Entry::longs(257, &[im.height]),
            Entry::shorts(258, &vec![im.bits; b]),
            Entry::shorts(259, &[8]),
            Entry::shorts(262, &[1]),
            Entry::shorts(277, &[im.bands as u16]),
            Entry::shorts(284, &[1]),
            Entry::shorts(317, &[2]),
            Entry::shorts(322, &[TILE as u16]),
            Entry::shorts(323, &[TILE as u16]),
            Entry::longs(324, offsets),
            Entry::longs(325, counts),
            Entry::shorts(339, &vec![1; b]),
        ];
        if b > 1 {
            e.push(Entry::shorts(338, &vec![0; b - 1]));
        }
        if level == 0 {
            let g = georef;
            let gt = [g.x0, g.pixel, 0.0, g.y0, 0.0, -g.pixel_y.unwrap_or(g.pixel)];
            e.extend(georeferencing(gt, Some(g.epsg as u32)));
        }
        if let Some(nd) = georef.nodata {
            e.push(Entry::ascii(42113, &format!("{nd}")));
        }
        e.sort_by_key(|x| x.tag);
        e
    };
    let header_len: u64 = 8 + all
        .iter()
        .enumerate()
        .map(|(l, im)| {
            let n = compressed[l].len();
            ifd_len(&build(l, im, &vec![0; n], &vec![0; n]))
        })
        .sum::<u64>();
    // Tile data: smallest level first, as COGs do.
    let mut data_offsets: Vec<Vec<u32>> = vec![Vec::new(); all.len()];
    let mut pos = header_len as usize;
    for l in (0..all.len()).rev() {
        for t in &compressed[l] {
            data_offsets[l].push(pos as u32);
            pos += t.len();
        }
    }
    let mut out = Vec::with_capacity(pos);
    out.extend_from_slice(b"II*\0");
    out.extend_from_slice(&8u32.to_le_bytes());
    for (l, im) in all.iter().enumerate() {
        let counts: Vec<u32> = compressed[l].iter().map(|t| t.len() as u32).collect();
        let entries = build(l, im, &data_offsets[l], &counts);
        let start = out.len() as u64;
        let next = if l + 1 < all.len() {
            start + ifd_len(&entries)
        } else {
            0
        };
        write_ifd(&mut out, &entries, start, next);
    }
    for l in (0..all.len()).rev() {
        for t in &compressed[l] {
            out.extend_from_slice(t);
        }
    }
    let tmp = path.with_extension("tif.tmp");
    std::fs::write(&tmp, &out)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_band_one() {
        assert_eq!(label_of(0), 0);
        assert_eq!(label_of(65535), 7);
    }
}
