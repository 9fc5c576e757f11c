//! Windows: which blocks a pixel window touches, and pasting decoded blocks into the
//! band-major output raster. Pure; no I/O, no decoding.

use super::dtype::DType;
use super::error::{TiffError, TiffResult};
use super::header::{Level, Planar};

/// A pixel window at one level, with an optional band subset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowRequest {
    /// 0 = full resolution, 1 = largest overview, ...
    pub level: usize,
    /// First column of the window, in pixels of the level.
    pub col: u64,
    /// First row of the window, in pixels of the level.
    pub row: u64,
    /// Width of the window, in pixels.
    pub width: u64,
    /// Height of the window, in pixels.
    pub height: u64,
    /// 0-based band indices, in output order; None = all bands.
    pub bands: Option<Vec<usize>>,
}

/// Decoded pixels, band-major: `bands x height x width`, native byte order.
#[derive(Debug, Clone, PartialEq)]
pub struct Raster {
    /// Sample type of `data`.
    pub dtype: DType,
    /// Number of bands.
    pub bands: usize,
    /// Height, in pixels.
    pub height: usize,
    /// Width, in pixels.
    pub width: usize,
    /// Samples `bands × height × width`, native byte order, `dtype.size()` bytes each.
    pub data: Vec<u8>,
}

/// Checks `req` against `level` and returns the 0-based source bands it reads.
pub fn validate(level: &Level, req: &WindowRequest, max_bytes: u64) -> TiffResult<Vec<usize>> {
    let bad = |m: String| Err(TiffError::InvalidRequest(m));
    if req.width == 0 || req.height == 0 {
        return bad(format!("empty window {}x{}", req.width, req.height));
    }
    let right = req.col.checked_add(req.width);
    let bottom = req.row.checked_add(req.height);
    if right.is_none_or(|r| r > level.width) || bottom.is_none_or(|b| b > level.height) {
        return bad(format!(
            "window {},{} {}x{} outside the {}x{} image at level {}",
            req.col, req.row, req.width, req.height, level.width, level.height, req.level
        ));
    }
    let bands: Vec<usize> = match &req.bands {
        None => (0..level.bands).collect(),
        Some(b) if b.is_empty() => return bad("empty band list".into()),
        Some(b) => b.clone(),
    };
    if let Some(&b) = bands.iter().find(|&&b| b >= level.bands) {
        return bad(format!("band {} of a {}-band image", b + 1, level.bands));
    }
    let bytes = req
        .width
        .saturating_mul(req.height)
        .saturating_mul(bands.len() as u64)
        .saturating_mul(level.dtype.size() as u64);
    if bytes > max_bytes {
        return Err(TiffError::TooLarge(format!(
            "window of {bytes} bytes (limit {max_bytes})"
        )));
    }
    Ok(bands)
}

/// Indices of the blocks that hold the window's pixels of `bands`.
pub fn blocks_for(level: &Level, req: &WindowRequest, bands: &[usize]) -> Vec<usize> {
    let across = level.blocks_across();
    let per_plane = level.blocks_per_plane();
    let bx0 = req.col / level.block_width;
    let bx1 = (req.col + req.width - 1) / level.block_width;
    let by0 = req.row / level.block_height;
    let by1 = (req.row + req.height - 1) / level.block_height;
    let planes: Vec<u64> = match level.planar {
        Planar::Chunky => vec![0],
        Planar::Separate => {
            let mut p: Vec<u64> = bands.iter().map(|&b| b as u64).collect();
            p.sort_unstable();
            p.dedup();
            p
        }
    };
    let mut out = Vec::new();
    for plane in planes {
        for by in by0..=by1 {
            for bx in bx0..=bx1 {
                out.push((plane * per_plane + by * across + bx) as usize);
            }
        }
    }
    out
}

/// Copies the window's part of decoded block `index` into `out`.
pub fn paste(level: &Level, index: usize, block: &[u8], req: &WindowRequest, bands: &[usize], out: &mut Raster) {
    let planes = Planes {
        width: out.width,
        height: out.height,
        data: &mut out.data,
    };
    paste_into(level, index, block, req, bands, planes);
}

/// A band-major output being filled in place: `height x width` samples per band over
/// `data` (a raster's buffer, or a sample's slice of a batch's buffer).
pub struct Planes<'a> {
    /// Width of each band plane, in pixels.
    pub width: usize,
    /// Height of each band plane, in pixels.
    pub height: usize,
    /// The buffer: `bands × height × width` samples of the level's type, native byte order.
    pub data: &'a mut [u8],
}

/// [`paste`] into any band-major buffer.
pub fn paste_into(level: &Level, index: usize, block: &[u8], req: &WindowRequest, bands: &[usize], out: Planes<'_>) {
    let es = level.dtype.size();
    let per_plane = level.blocks_per_plane() as usize;
    let plane = index / per_plane;
    let within = index % per_plane;
    let across = level.blocks_across() as usize;
    let (bw, bh) = (level.block_width as usize, level.block_height as usize);
    let x0 = (within % across) * bw;
    let y0 = (within / across) * bh;
    let rows = level.block_rows(index) as usize;
    let spp = level.block_samples();
    let (col, row) = (req.col as usize, req.row as usize);
    let xs = x0.max(col);
    let xe = (x0 + bw).min(col + req.width as usize).min(level.width as usize);
    let ys = y0.max(row);
    let ye = (y0 + rows).min(row + req.height as usize);
    if xs >= xe || ys >= ye {
        return;
    }
    let n = xe - xs;
    let band_stride = out.width * out.height * es;
    let all_in_order = bands.len() == spp && bands.iter().enumerate().all(|(i, &b)| i == b);
    if level.planar == Planar::Chunky && all_in_order && (2..=4).contains(&spp) {
        // One pass over each source row, writing every band plane (the common case).
        let mut planes: Vec<&mut [u8]> = out.data.chunks_exact_mut(band_stride).collect();
        let rows = RowGeometry {
            ys,
            ye,
            y0,
            x_off: xs - x0,
            block_width: bw,
            dst_row: row,
            dst_col: xs - col,
            dst_width: out.width,
            n,
        };
        let done = match es {
            1 => split_rows::<u8>(block, &mut planes, &rows),
            2 => split_rows::<u16>(block, &mut planes, &rows),
            4 => split_rows::<u32>(block, &mut planes, &rows),
            _ => false,
        };
        if done {
            return;
        }
    }
    for (ob, &sb) in bands.iter().enumerate() {
        let sample = match level.planar {
            Planar::Chunky => sb,
            Planar::Separate if sb == plane => 0,
            Planar::Separate => continue,
        };
        for y in ys..ye {
            let src_start = ((y - y0) * bw + (xs - x0)) * spp * es;
            let src_end = src_start + n * spp * es;
            let dst = ob * band_stride + ((y - row) * out.width + (xs - col)) * es;
            let (Some(src), Some(dst)) = (block.get(src_start..src_end), out.data.get_mut(dst..dst + n * es)) else {
                continue;
            };
            copy_samples(src, dst, spp, sample, es);
        }
    }
}

/// Where the rows of one block go in the output planes.
struct RowGeometry {
    ys: usize,
    ye: usize,
    y0: usize,
    x_off: usize,
    block_width: usize,
    dst_row: usize,
    dst_col: usize,
    dst_width: usize,
    n: usize,
}

/// De-interleaves the rows of a 2- to 4-sample pixel-interleaved block into band planes in
/// one pass per row; false when alignment does not allow typed access (the caller falls back).
fn split_rows<T: bytemuck::Pod>(block: &[u8], planes: &mut [&mut [u8]], g: &RowGeometry) -> bool {
    let spp = planes.len();
    let Ok(src) =
        bytemuck::try_cast_slice::<u8, T>(&block[..block.len() / std::mem::size_of::<T>() * std::mem::size_of::<T>()])
    else {
        return false;
    };
    let mut typed: Vec<&mut [T]> = Vec::with_capacity(spp);
    for p in planes.iter_mut() {
        match bytemuck::try_cast_slice_mut::<u8, T>(p) {
            Ok(t) => typed.push(t),
            Err(_) => return false,
        }
    }
    let n = g.n;
    for y in g.ys..g.ye {
        let s0 = ((y - g.y0) * g.block_width + g.x_off) * spp;
        let Some(s) = src.get(s0..s0 + n * spp) else {
            continue;
        };
        let d0 = (y - g.dst_row) * g.dst_width + g.dst_col;
        let r = d0..d0 + n;
        if typed.iter().any(|p| p.len() < r.end) {
            continue;
        }
        match &mut typed[..] {
            [a, b] => {
                for ((px, a), b) in s.chunks_exact(2).zip(a[r.clone()].iter_mut()).zip(b[r].iter_mut()) {
                    (*a, *b) = (px[0], px[1]);
                }
            }
            [a, b, c] => {
                for (((px, a), b), c) in s
                    .chunks_exact(3)
                    .zip(a[r.clone()].iter_mut())
                    .zip(b[r.clone()].iter_mut())
                    .zip(c[r].iter_mut())
                {
                    (*a, *b, *c) = (px[0], px[1], px[2]);
                }
            }
            [a, b, c, e] => {
                for ((((px, a), b), c), e) in s
                    .chunks_exact(4)
                    .zip(a[r.clone()].iter_mut())
                    .zip(b[r.clone()].iter_mut())
                    .zip(c[r.clone()].iter_mut())
                    .zip(e[r].iter_mut())
                {
                    (*a, *b, *c, *e) = (px[0], px[1], px[2], px[3]);
                }
            }
            _ => return false,
        }
    }
    true
}

/// Copies sample `sample` of every `spp`-sample pixel in `src` to consecutive `dst` slots.
fn copy_samples(src: &[u8], dst: &mut [u8], spp: usize, sample: usize, es: usize) {
    if spp == 1 {
        dst.copy_from_slice(src);
        return;
    }
    fn typed<T: bytemuck::Pod>(src: &[u8], dst: &mut [u8], spp: usize, sample: usize) -> bool {
        match (
            bytemuck::try_cast_slice::<u8, T>(src),
            bytemuck::try_cast_slice_mut::<u8, T>(dst),
        ) {
            (Ok(s), Ok(d)) => {
                for (px, out) in s.chunks_exact(spp).zip(d.iter_mut()) {
                    *out = px[sample];
                }
                true
            }
            _ => false,
        }
    }
    let done = match es {
        1 => typed::<u8>(src, dst, spp, sample),
        2 => typed::<u16>(src, dst, spp, sample),
        4 => typed::<u32>(src, dst, spp, sample),
        8 => typed::<u64>(src, dst, spp, sample),
        16 => typed::<u128>(src, dst, spp, sample),
        _ => false,
    };
    if !done {
        for (i, out) in dst.chunks_exact_mut(es).enumerate() {
            let s = (i * spp + sample) * es;
            out.copy_from_slice(&src[s..s + es]);
        }
    }
}
