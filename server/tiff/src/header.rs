//! What a TIFF holds: image levels (full resolution and overviews), masks, block layout,
//! codec settings and GeoTIFF georeferencing, read from the IFDs.
//!
//! Validation happens here, once: dimensions, sample types, block sizes and offset tables
//! are checked against the limits so that nothing later allocates by a hostile number.

use bytes::Bytes;
use serde::Serialize;

use super::codec::Compression;
use super::dtype::{DType, Storage};
use super::error::TiffError;
use super::geo::{Geo, parse_geo};
use super::ifd::{ByteOrder, Ifd, SparseBytes, Step, StepResult, Values, parse_structure};

/// Limits applied while reading headers.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest decoded tile or strip, in bytes.
    pub max_block_bytes: u64,
    /// Largest number of blocks in one IFD.
    pub max_blocks: u64,
    /// Largest number of samples per pixel.
    pub max_bands: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_block_bytes: 256 * 1024 * 1024,
            max_blocks: 16 * 1024 * 1024,
            max_bands: 1024,
        }
    }
}

/// Planar configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Planar {
    /// Samples of a pixel stored together (PlanarConfiguration 1).
    Chunky,
    /// One plane per band (PlanarConfiguration 2).
    Separate,
}

/// One image of the file: full resolution, an overview, or a mask.
#[derive(Debug, Clone)]
pub struct Level {
    /// Position of the IFD in the chain.
    pub ifd_index: usize,
    /// Width, in pixels.
    pub width: u64,
    /// Height, in pixels.
    pub height: u64,
    /// Samples per pixel.
    pub bands: usize,
    /// Block width (tile width, or the image width for strips).
    pub block_width: u64,
    /// Block height (tile height, or rows per strip).
    pub block_height: u64,
    /// Whether blocks are tiles (else strips).
    pub tiled: bool,
    /// How samples are stored (BitsPerSample, SampleFormat).
    pub storage: Storage,
    /// The type a window read returns.
    pub dtype: DType,
    /// Compression of the blocks.
    pub compression: Compression,
    /// Predictor tag: 1 none (the default), 2 horizontal differencing, 3 floating point.
    pub predictor: u16,
    /// How the bands of a block are laid out.
    pub planar: Planar,
    /// PhotometricInterpretation tag (1 BlackIsZero by default, 2 RGB, 6 YCbCr, ...).
    pub photometric: u16,
    /// FillOrder 2 = bits of each byte stored least significant first.
    pub lsb_fill: bool,
    /// Byte order of the file.
    pub order: ByteOrder,
    /// Byte offset of each block (per plane, planes one after another).
    pub offsets: Vec<u64>,
    /// Byte count of each block.
    pub byte_counts: Vec<u64>,
    /// Shared JPEG tables (tag 347).
    pub jpeg_tables: Option<Bytes>,
    /// Extra compression inside LERC blobs: 0 none, 1 deflate, 2 zstd.
    pub lerc_extra: u64,
    /// YCbCr subsampling factors (horizontal, vertical).
    pub ycbcr_subsampling: (u16, u16),
}

impl Level {
    /// Blocks across and down one plane.
    pub fn blocks_across(&self) -> u64 {
        self.width.div_ceil(self.block_width)
    }
    /// Blocks down one plane.
    pub fn blocks_down(&self) -> u64 {
        self.height.div_ceil(self.block_height)
    }
    /// Blocks per plane.
    pub fn blocks_per_plane(&self) -> u64 {
        self.blocks_across() * self.blocks_down()
    }
    /// Samples per pixel inside one block (1 for separate planes).
    pub fn block_samples(&self) -> usize {
        match self.planar {
            Planar::Chunky => self.bands,
            Planar::Separate => 1,
        }
    }
    /// "tile" or "strip", for messages.
    pub fn block_kind(&self) -> &'static str {
        if self.tiled { "tile" } else { "strip" }
    }
    /// Rows actually stored in block `index` (strips at the bottom may be short).
    pub fn block_rows(&self, index: usize) -> u64 {
        if self.tiled {
            return self.block_height;
        }
        let down = (index as u64) % self.blocks_per_plane().max(1) / self.blocks_across();
        let top = down * self.block_height;
        self.block_height.min(self.height.saturating_sub(top))
    }
    /// Bytes of the block as stored after decompression (rows padded to whole bytes).
    pub fn stored_row_bytes(&self) -> u64 {
        (self.block_width * self.block_samples() as u64 * self.storage.bits as u64).div_ceil(8)
    }
    /// Byte range of block `index` in the file, None for an empty (sparse) block.
    pub fn block_range(&self, index: usize) -> Option<std::ops::Range<u64>> {
        let off = *self.offsets.get(index)?;
        let len = *self.byte_counts.get(index)?;
        // Saturating: a hostile offset + length past u64::MAX reads as past the end of the
        // file (a corrupt block), not as a wrapped range (debug builds panicked on it).
        (len > 0 && off > 0).then(|| off..off.saturating_add(len))
    }
}

/// Everything read from the header of one file.
#[derive(Debug, Clone)]
pub struct Header {
    /// Whether the file is BigTIFF (64-bit offsets).
    pub bigtiff: bool,
    /// Byte order of the file.
    pub order: ByteOrder,
    /// Level 0 = full resolution, then overviews from largest to smallest.
    pub levels: Vec<Level>,
    /// Mask images (full resolution first, then mask overviews).
    pub masks: Vec<Level>,
    /// GeoTIFF georeferencing, read from the first IFD.
    pub geo: Geo,
    /// Number of IFDs in the file.
    pub ifd_count: usize,
    /// Number of pages (full-resolution, non-mask IFDs).
    pub pages: usize,
    /// Size of the file in bytes.
    pub object_size: u64,
}

mod tag {
    pub const NEW_SUBFILE_TYPE: u16 = 254;
    pub const IMAGE_WIDTH: u16 = 256;
    pub const IMAGE_LENGTH: u16 = 257;
    pub const BITS_PER_SAMPLE: u16 = 258;
    pub const COMPRESSION: u16 = 259;
    pub const PHOTOMETRIC: u16 = 262;
    pub const FILL_ORDER: u16 = 266;
    pub const STRIP_OFFSETS: u16 = 273;
    pub const SAMPLES_PER_PIXEL: u16 = 277;
    pub const ROWS_PER_STRIP: u16 = 278;
    pub const STRIP_BYTE_COUNTS: u16 = 279;
    pub const PLANAR_CONFIGURATION: u16 = 284;
    pub const PREDICTOR: u16 = 317;
    pub const TILE_WIDTH: u16 = 322;
    pub const TILE_LENGTH: u16 = 323;
    pub const TILE_OFFSETS: u16 = 324;
    pub const TILE_BYTE_COUNTS: u16 = 325;
    pub const SAMPLE_FORMAT: u16 = 339;
    pub const JPEG_TABLES: u16 = 347;
    pub const YCBCR_SUBSAMPLING: u16 = 530;
    pub const LERC_PARAMETERS: u16 = 50674;
}

/// Parses the whole header from the bytes fetched so far, or names the bytes still needed.
pub fn parse_header(src: &SparseBytes, limits: &Limits) -> StepResult<Header> {
    let structure = parse_structure(src)?;
    let v = Values {
        src,
        order: structure.order,
    };
    let mut levels = Vec::new();
    let mut masks = Vec::new();
    let mut pages = 0;
    for (i, ifd) in structure.ifds.iter().enumerate() {
        let subfile = match ifd.entry(tag::NEW_SUBFILE_TYPE) {
            Some(e) => v.u64(e)?,
            None => 0,
        };
        let reduced = subfile & 1 != 0;
        let mask = subfile & 4 != 0;
        if i == 0 {
            if mask {
                return Err(Step::Fail(TiffError::Malformed("the first ifd is a mask".into())));
            }
            levels.push(parse_level(&v, ifd, i, limits)?);
            pages += 1;
        } else if mask {
            // A broken mask must not make the image unreadable.
            match parse_level(&v, ifd, i, limits) {
                Ok(level) => masks.push(level),
                Err(Step::Fail(_)) => {}
                Err(need) => return Err(need),
            }
        } else if reduced {
            match parse_level(&v, ifd, i, limits) {
                Ok(level) if level.bands == levels[0].bands && level.dtype == levels[0].dtype => levels.push(level),
                Ok(_) | Err(Step::Fail(_)) => {}
                Err(need) => return Err(need),
            }
        } else {
            pages += 1;
        }
    }
    // GDAL orders overviews from the largest down.
    levels[1..].sort_by(|a, b| b.width.cmp(&a.width).then(b.height.cmp(&a.height)));
    masks.sort_by_key(|m| std::cmp::Reverse(m.width));
    let geo = parse_geo(&v, &structure.ifds[0])?;
    Ok(Header {
        bigtiff: structure.bigtiff,
        order: structure.order,
        levels,
        masks,
        geo,
        ifd_count: structure.ifds.len(),
        pages,
        object_size: src.size(),
    })
}

fn bad<T>(msg: String) -> StepResult<T> {
    Err(Step::Fail(TiffError::Malformed(msg)))
}

fn required(v: &Values<'_>, ifd: &Ifd, t: u16, name: &str) -> StepResult<u64> {
    match ifd.entry(t) {
        Some(e) => v.u64(e),
        None => bad(format!("missing {name} tag")),
    }
}

fn optional(v: &Values<'_>, ifd: &Ifd, t: u16, default: u64) -> StepResult<u64> {
    match ifd.entry(t) {
        Some(e) => v.u64(e),
        None => Ok(default),
    }
}

/// One value for all samples, or an unsupported mix.
fn uniform(v: &Values<'_>, ifd: &Ifd, t: u16, default: u64, name: &str) -> StepResult<u64> {
    let Some(e) = ifd.entry(t) else {
        return Ok(default);
    };
    let values = v.u64s(e)?;
    let Some(&first) = values.first() else {
        return Ok(default);
    };
    if values.iter().any(|&x| x != first) {
        return Err(Step::Fail(TiffError::Unsupported(format!(
            "different {name} per sample ({values:?})"
        ))));
    }
    Ok(first)
}

fn parse_level(v: &Values<'_>, ifd: &Ifd, index: usize, limits: &Limits) -> StepResult<Level> {
    let width = required(v, ifd, tag::IMAGE_WIDTH, "ImageWidth")?;
    let height = required(v, ifd, tag::IMAGE_LENGTH, "ImageLength")?;
    if width == 0 || height == 0 || width > 1 << 31 || height > 1 << 31 {
        return bad(format!("image size {width}x{height}"));
    }
    let bands = optional(v, ifd, tag::SAMPLES_PER_PIXEL, 1)?;
    if bands == 0 || bands > limits.max_bands {
        return bad(format!("{bands} samples per pixel"));
    }
    let bits = uniform(v, ifd, tag::BITS_PER_SAMPLE, 1, "bits per sample")?;
    let format = uniform(v, ifd, tag::SAMPLE_FORMAT, 1, "sample format")?;
    if bits == 0 || bits > 128 || format > 6 {
        return Err(Step::Fail(TiffError::Unsupported(format!(
            "sample type ({bits} bits, sample format {format})"
        ))));
    }
    let storage = Storage {
        bits: bits as u16,
        format: format as u16,
    };
    let dtype = storage.dtype()?;
    let compression = Compression::from_code(optional(v, ifd, tag::COMPRESSION, 1)? as u16);
    let predictor = optional(v, ifd, tag::PREDICTOR, 1)? as u16;
    let planar = match optional(v, ifd, tag::PLANAR_CONFIGURATION, 1)? {
        1 => Planar::Chunky,
        2 => Planar::Separate,
        p => return bad(format!("planar configuration {p}")),
    };
    let planar = if bands == 1 { Planar::Chunky } else { planar };
    let photometric = optional(v, ifd, tag::PHOTOMETRIC, 1)? as u16;
    let lsb_fill = optional(v, ifd, tag::FILL_ORDER, 1)? == 2;

    let tiled = ifd.entry(tag::TILE_WIDTH).is_some();
    let (block_width, block_height, offsets_tag, counts_tag) = if tiled {
        let tw = required(v, ifd, tag::TILE_WIDTH, "TileWidth")?;
        let th = required(v, ifd, tag::TILE_LENGTH, "TileLength")?;
        if tw == 0 || th == 0 || tw > 1 << 20 || th > 1 << 20 {
            return bad(format!("tile size {tw}x{th}"));
        }
        (tw, th, tag::TILE_OFFSETS, tag::TILE_BYTE_COUNTS)
    } else {
        let rps = optional(v, ifd, tag::ROWS_PER_STRIP, height)?;
        let rps = if rps == 0 { height } else { rps.min(height) };
        (width, rps, tag::STRIP_OFFSETS, tag::STRIP_BYTE_COUNTS)
    };
    let samples_in_block = match planar {
        Planar::Chunky => bands,
        Planar::Separate => 1,
    };
    let block_bytes = block_width
        .saturating_mul(block_height)
        .saturating_mul(samples_in_block)
        .saturating_mul(dtype.size() as u64);
    if block_bytes > limits.max_block_bytes {
        return Err(Step::Fail(TiffError::TooLarge(format!(
            "{} of {block_width}x{block_height} pixels x {samples_in_block} samples ({block_bytes} bytes, limit {})",
            if tiled { "tile" } else { "strip" },
            limits.max_block_bytes
        ))));
    }
    let planes = match planar {
        Planar::Chunky => 1,
        Planar::Separate => bands,
    };
    let blocks = width.div_ceil(block_width) * height.div_ceil(block_height) * planes;
    if blocks > limits.max_blocks {
        return Err(Step::Fail(TiffError::TooLarge(format!(
            "{blocks} blocks in one image (limit {})",
            limits.max_blocks
        ))));
    }
    let (Some(oe), Some(ce)) = (ifd.entry(offsets_tag), ifd.entry(counts_tag)) else {
        return bad("missing block offsets or byte counts".into());
    };
    if oe.count < blocks || ce.count < blocks {
        return bad(format!(
            "{} block offsets and {} byte counts for {blocks} blocks",
            oe.count, ce.count
        ));
    }
    let mut offsets = v.u64s(oe)?;
    let mut byte_counts = v.u64s(ce)?;
    offsets.truncate(blocks as usize);
    byte_counts.truncate(blocks as usize);
    let jpeg_tables = match ifd.entry(tag::JPEG_TABLES) {
        Some(e) => Some(Bytes::copy_from_slice(v.raw(e)?)),
        None => None,
    };
    let lerc_extra = match ifd.entry(tag::LERC_PARAMETERS) {
        Some(e) => v.u64s(e)?.get(1).copied().unwrap_or(0),
        None => 0,
    };
    let ycbcr_subsampling = match ifd.entry(tag::YCBCR_SUBSAMPLING) {
        Some(e) => {
            let s = v.u64s(e)?;
            (
                s.first().copied().unwrap_or(2) as u16,
                s.get(1).copied().unwrap_or(2) as u16,
            )
        }
        None if photometric == 6 => (2, 2),
        None => (1, 1),
    };
    Ok(Level {
        ifd_index: index,
        width,
        height,
        bands: bands as usize,
        block_width,
        block_height,
        tiled,
        storage,
        dtype,
        compression,
        predictor,
        planar,
        photometric,
        lsb_fill,
        order: v.order,
        offsets,
        byte_counts,
        jpeg_tables,
        lerc_extra,
        ycbcr_subsampling,
    })
}
