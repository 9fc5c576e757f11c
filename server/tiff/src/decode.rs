//! One compressed block (tile or strip) in, its samples out: decompress, undo the predictor,
//! fix byte order, unpack or promote samples. Pure and synchronous; runs on the CPU pool.
//!
//! The result is pixel-interleaved (`rows x cols x samples`) in the level's output type,
//! native byte order. Nothing here allocates more than the block's validated size (plus
//! bounded scratch for streams that hold more than the block).

use std::borrow::Cow;

use super::codec::{self, Compression};
use super::dtype::DType;
use super::error::{TiffError, TiffResult};
use super::header::Level;
use super::ifd::ByteOrder;
use super::image_codecs::{self, BlockShape};
use super::{ccitt, predictor, samples};

/// Shape of block `index` of `level` once decoded.
pub fn block_shape(level: &Level, index: usize) -> BlockShape {
    BlockShape {
        rows: level.block_rows(index) as usize,
        cols: level.block_width as usize,
        samples: level.block_samples(),
    }
}

/// Decodes block `index` of `level` (overview number `level_no`, for messages) from its
/// compressed bytes.
pub fn decode_block(level: &Level, level_no: usize, index: usize, raw: &[u8]) -> TiffResult<Vec<u8>> {
    decode_block_rows(level, level_no, index, raw, usize::MAX)
}

/// Whether [`decode_block_rows`] stops early for `level`'s blocks (its codec can stop after
/// the rows asked for: Deflate or none, whole-byte samples, no bit reversal); else a
/// row-limited decode costs a whole one.
pub fn decodes_rows(level: &Level) -> bool {
    matches!(level.compression, Compression::Deflate | Compression::None)
        && !level.lsb_fill
        && level.storage.bits.is_multiple_of(8)
        && check_supported(level).is_ok()
}

/// The top `rows` rows of block `index` of `level` (all of them when the block has fewer),
/// laid out as [`decode_block`]'s result, cut after those rows. Where [`decodes_rows`] holds,
/// only those rows are inflated and unpredicted (a block's top 64 of 1024 rows cost about a
/// sixteenth of its decode); elsewhere the block is decoded whole and cut.
pub fn decode_block_rows(level: &Level, level_no: usize, index: usize, raw: &[u8], rows: usize) -> TiffResult<Vec<u8>> {
    check_supported(level)?;
    let whole = block_shape(level, index);
    if rows < whole.rows && !decodes_rows(level) {
        let mut decoded = decode_block(level, level_no, index, raw)?;
        decoded.truncate(rows * whole.cols * whole.samples * level.dtype.size());
        return Ok(decoded);
    }
    let shape = BlockShape {
        rows: whole.rows.min(rows),
        ..whole
    };
    let prefix = shape.rows < whole.rows;
    let corrupt = |detail: String| TiffError::CorruptBlock {
        kind: level.block_kind(),
        index,
        level: level_no,
        detail,
    };
    let raw: Cow<[u8]> = if level.lsb_fill
        && !matches!(
            level.compression,
            Compression::Jpeg | Compression::Webp | Compression::Lerc
        ) {
        let mut v = raw.to_vec();
        samples::reverse_bits(&mut v);
        Cow::Owned(v)
    } else {
        Cow::Borrowed(raw)
    };
    match level.compression {
        Compression::Jpeg => {
            return image_codecs::decode_jpeg(
                &raw,
                level.jpeg_tables.as_deref(),
                level.photometric == 6,
                level.ycbcr_subsampling != (1, 1),
                shape,
            )
            .map_err(corrupt);
        }
        Compression::Webp => return image_codecs::decode_webp(&raw, shape).map_err(corrupt),
        Compression::Lerc => {
            let limit = shape.rows * shape.cols * shape.samples * level.dtype.size() * 2 + (1 << 20);
            return image_codecs::decode_lerc(&raw, level.lerc_extra, level.dtype, shape, limit).map_err(corrupt);
        }
        _ => {}
    }
    let row_bytes = level.stored_row_bytes() as usize;
    let mut stored = vec![0u8; shape.rows * row_bytes];
    let produced = match level.compression {
        Compression::None => codec::copy(&raw, &mut stored),
        Compression::Deflate if prefix => codec::inflate_prefix(&raw, &mut stored),
        Compression::Deflate => codec::inflate(&raw, &mut stored),
        Compression::Zstd => codec::unzstd(&raw, &mut stored),
        Compression::Lzw => codec::unlzw(&raw, &mut stored),
        Compression::PackBits => codec::unpackbits(&raw, &mut stored),
        Compression::Lzma => codec::unlzma(&raw, &mut stored),
        Compression::CcittRle | Compression::CcittFax3 | Compression::CcittFax4 => {
            ccitt::decode(level.compression, &raw, shape.cols, shape.rows, &mut stored)
        }
        other => return Err(TiffError::Unsupported(format!("compression {}", other.name()))),
    }
    .map_err(corrupt)?;
    if produced < stored.len() {
        let how = if level.compression == Compression::None {
            "stored"
        } else {
            "decoded"
        };
        return Err(corrupt(format!("{produced} of {} bytes {how}", stored.len())));
    }
    finish_samples(level, shape, row_bytes, stored)
}

/// Predictor, byte order and sample conversion on a decompressed block.
fn finish_samples(level: &Level, shape: BlockShape, row_bytes: usize, mut stored: Vec<u8>) -> TiffResult<Vec<u8>> {
    let bits = level.storage.bits as usize;
    let big = level.order == ByteOrder::Big;
    let per_row = shape.cols * shape.samples;
    let byte_aligned = bits.is_multiple_of(8);
    let width = bits / 8;
    if byte_aligned && width > 1 && big && level.predictor != 3 {
        if width == 3 {
            // 24-bit samples are widened below from file order.
        } else {
            let comp = if matches!(level.dtype, DType::C64 | DType::C128) {
                width / 2
            } else {
                width
            };
            samples::swap_components(&mut stored, comp);
        }
    }
    match level.predictor {
        1 => {}
        2 => {
            for row in stored.chunks_exact_mut(row_bytes) {
                predictor::undo_horizontal(row, shape.samples, width);
            }
        }
        3 => {
            let mut scratch = vec![0u8; row_bytes];
            for row in stored.chunks_exact_mut(row_bytes) {
                predictor::undo_float(row, shape.samples, width, &mut scratch);
            }
        }
        _ => {}
    }
    let native_order_after_predictor = level.predictor == 3;
    Ok(match (level.dtype, bits) {
        (_, b) if level.storage.is_native() && b % 8 == 0 => stored,
        (DType::F32, 16) => samples::widen_f16(&stored),
        (DType::F32, 24) => samples::widen_f24(&stored, big && !native_order_after_predictor),
        // GDAL reads 24-bit integers most significant byte first from little-endian files
        // (and libtiff swaps the triples of big-endian ones).
        (DType::U32, 24) => samples::widen_u24(&stored, !big),
        (DType::U8, _) => samples::unpack_bits(&stored, shape.rows, per_row, bits, 1),
        (DType::U16, _) => samples::unpack_bits(&stored, shape.rows, per_row, bits, 2),
        (DType::U32, _) => samples::unpack_bits(&stored, shape.rows, per_row, bits, 4),
        (other, _) => {
            return Err(TiffError::Unsupported(format!(
                "{bits}-bit samples as {}",
                other.name()
            )));
        }
    })
}

/// Rejects combinations no decoder here handles, before any data is read.
pub fn check_supported(level: &Level) -> TiffResult<()> {
    let bits = level.storage.bits;
    match level.compression {
        Compression::Other(_) | Compression::OldJpeg => {
            return Err(TiffError::Unsupported(format!(
                "compression {}",
                level.compression.name()
            )));
        }
        Compression::Jpeg | Compression::Webp if bits != 8 => {
            return Err(TiffError::Unsupported(format!(
                "{bits}-bit {}",
                level.compression.name()
            )));
        }
        Compression::CcittRle | Compression::CcittFax3 | Compression::CcittFax4 if !ccitt::AVAILABLE => {
            return Err(TiffError::Unsupported(format!(
                "compression {}",
                level.compression.name()
            )));
        }
        Compression::CcittRle | Compression::CcittFax3 | Compression::CcittFax4
            if bits != 1 || level.block_samples() != 1 =>
        {
            return Err(TiffError::Unsupported(format!(
                "{} with {bits}-bit samples",
                level.compression.name()
            )));
        }
        _ => {}
    }
    match level.predictor {
        1 => {}
        2 if matches!(bits, 8 | 16 | 32 | 64) => {}
        3 if level.storage.format == 3 && matches!(bits, 16 | 24 | 32 | 64) => {}
        p => {
            return Err(TiffError::Unsupported(format!("predictor {p} with {bits}-bit samples")));
        }
    }
    if level.photometric == 6 && level.compression != Compression::Jpeg && level.ycbcr_subsampling != (1, 1) {
        return Err(TiffError::Unsupported("subsampled YCbCr without JPEG".into()));
    }
    Ok(())
}
