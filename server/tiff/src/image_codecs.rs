//! Image codecs inside TIFF blocks: JPEG (with shared tables, YCbCr returned as RGB), WebP
//! and LERC (plain, with Deflate or with Zstandard). Each returns the block's samples,
//! pixel-interleaved, in the output type.

use zune_jpeg::JpegDecoder;
use zune_jpeg::zune_core::colorspace::ColorSpace;
use zune_jpeg::zune_core::options::DecoderOptions;

use lerc_core::PixelData;

use super::codec;
use super::dtype::DType;

/// Geometry a decoded block must have.
#[derive(Debug, Clone, Copy)]
pub struct BlockShape {
    /// Rows of the block.
    pub rows: usize,
    /// Columns of the block (pixels per row).
    pub cols: usize,
    /// Samples per pixel.
    pub samples: usize,
}

impl BlockShape {
    fn pixels(&self) -> usize {
        self.rows * self.cols
    }
}

/// Copies a `src_cols` x `src_rows` image with `src_samples` per pixel into a block of
/// `shape`, keeping the first `shape.samples` samples of each pixel; the rest stays zero.
fn fit(src: &[u8], src_rows: usize, src_cols: usize, src_samples: usize, shape: BlockShape) -> Vec<u8> {
    if src_rows == shape.rows && src_cols == shape.cols && src_samples == shape.samples {
        return src.to_vec();
    }
    let mut out = vec![0u8; shape.pixels() * shape.samples];
    let keep = src_samples.min(shape.samples);
    for r in 0..src_rows.min(shape.rows) {
        for c in 0..src_cols.min(shape.cols) {
            let s = (r * src_cols + c) * src_samples;
            let d = (r * shape.cols + c) * shape.samples;
            out[d..d + keep].copy_from_slice(&src[s..s + keep]);
        }
    }
    out
}

/// A JPEG tile or strip; `tables` is the JPEGTables tag (an abbreviated stream of tables).
/// `ycbcr` says the TIFF declares YCbCr photometric (then the result is converted to RGB,
/// as GDAL returns it); otherwise the components come back as stored.
///
/// Chroma-subsampled YCbCr goes through `jpeg-decoder`, whose upsampling matches libjpeg's
/// ("fancy" triangle filter) closely; `zune-jpeg` is faster but differs by up to ~20 levels
/// on sharp chroma edges there.
pub fn decode_jpeg(
    data: &[u8],
    tables: Option<&[u8]>,
    ycbcr: bool,
    subsampled: bool,
    shape: BlockShape,
) -> Result<Vec<u8>, String> {
    let merged;
    let stream: &[u8] = match tables {
        Some(t) if t.len() >= 4 && data.len() >= 2 && data[..2] == [0xFF, 0xD8] => {
            // Tables without their EOI, then the block without its SOI.
            let t_end = if t[t.len() - 2..] == [0xFF, 0xD9] {
                t.len() - 2
            } else {
                t.len()
            };
            let mut m = Vec::with_capacity(t_end + data.len());
            m.extend_from_slice(&t[..t_end]);
            m.extend_from_slice(&data[2..]);
            merged = m;
            &merged
        }
        _ => data,
    };
    if ycbcr && subsampled && shape.samples == 3 {
        return decode_jpeg_subsampled(stream, shape);
    }
    let options = DecoderOptions::new_fast()
        .set_max_width(shape.cols.max(1) * 2 + 64)
        .set_max_height(shape.rows.max(1) * 2 + 64)
        .set_strict_mode(false);
    let mut decoder = JpegDecoder::new_with_options(stream, options);
    decoder.decode_headers().map_err(|e| format!("jpeg: {e:?}"))?;
    let input = decoder.get_input_colorspace().unwrap_or(ColorSpace::Unknown);
    let out_space = match (input, shape.samples) {
        (ColorSpace::Luma, _) => ColorSpace::Luma,
        (ColorSpace::YCbCr, 3) if ycbcr => ColorSpace::RGB,
        // RGB photometric: libtiff does no colour conversion.
        (ColorSpace::YCbCr, 3) => ColorSpace::YCbCr,
        (ColorSpace::RGB, 3) => ColorSpace::RGB,
        (ColorSpace::CMYK | ColorSpace::YCCK, 4) => ColorSpace::CMYK,
        (other, n) => return Err(format!("jpeg: {n} samples stored as {other:?}")),
    };
    decoder.set_options(options.jpeg_set_out_colorspace(out_space));
    let pixels = decoder.decode().map_err(|e| format!("jpeg: {e:?}"))?;
    let (w, h) = decoder.dimensions().ok_or("jpeg: no dimensions")?;
    let comps = out_space.num_components();
    if pixels.len() < w * h * comps {
        return Err("jpeg: short image".into());
    }
    Ok(fit(&pixels, h, w, comps, shape))
}

fn decode_jpeg_subsampled(stream: &[u8], shape: BlockShape) -> Result<Vec<u8>, String> {
    let mut decoder = jpeg_decoder::Decoder::new(stream);
    decoder.set_max_decoding_buffer_size((shape.cols * 2 + 64) * (shape.rows * 2 + 64) * 4);
    let pixels = decoder.decode().map_err(|e| format!("jpeg: {e}"))?;
    let info = decoder.info().ok_or("jpeg: no image info")?;
    let comps = info.pixel_format.pixel_bytes();
    let (w, h) = (info.width as usize, info.height as usize);
    if pixels.len() < w * h * comps {
        return Err("jpeg: short image".into());
    }
    Ok(fit(&pixels, h, w, comps, shape))
}

/// A WebP tile (RGB or RGBA, lossy or lossless).
pub fn decode_webp(data: &[u8], shape: BlockShape) -> Result<Vec<u8>, String> {
    let mut decoder = image_webp::WebPDecoder::new(std::io::Cursor::new(data)).map_err(|e| format!("webp: {e}"))?;
    let (w, h) = decoder.dimensions();
    if w as usize > shape.cols * 2 + 64 || h as usize > shape.rows * 2 + 64 {
        return Err(format!(
            "webp: image of {w}x{h} in a {}x{} block",
            shape.cols, shape.rows
        ));
    }
    let comps = if decoder.has_alpha() { 4 } else { 3 };
    let mut buf = vec![0u8; w as usize * h as usize * comps];
    decoder.read_image(&mut buf).map_err(|e| format!("webp: {e}"))?;
    let mut out = fit(&buf, h as usize, w as usize, comps, shape);
    if comps == 3 && shape.samples == 4 {
        // The encoder drops an all-opaque alpha channel; libwebp hands it back as 255.
        for px in out.chunks_exact_mut(4) {
            px[3] = 255;
        }
    }
    Ok(out)
}

/// A LERC blob, after the optional extra Deflate (1) or Zstandard (2) layer.
pub fn decode_lerc(data: &[u8], extra: u64, dtype: DType, shape: BlockShape, limit: usize) -> Result<Vec<u8>, String> {
    let unpacked;
    let blob: &[u8] = match extra {
        0 => data,
        1 => {
            let hint = shape.pixels() * shape.samples * dtype.size() + 4096;
            unpacked = codec::inflate_unknown(data, hint, limit)?;
            &unpacked
        }
        2 => {
            unpacked = codec::unzstd_unknown(data, limit)?;
            &unpacked
        }
        other => return Err(format!("lerc: unknown additional compression {other}")),
    };
    // Sizes come from the blob's header and are checked against the block before any
    // pixel is decoded, so a hostile blob cannot make us allocate more than the block.
    let first = lerc_reader::inspect_first(blob).map_err(|e| format!("lerc: {e}"))?;
    let bands = lerc_reader::get_band_count(blob).map_err(|e| format!("lerc: {e}"))?;
    let (w, h, depth) = (first.width as usize, first.height as usize, first.depth as usize);
    if w != shape.cols || h != shape.rows || depth.saturating_mul(bands) != shape.samples {
        return Err(format!(
            "lerc: blob of {w}x{h}x{depth}x{bands} in a block of {}x{}x{}",
            shape.cols, shape.rows, shape.samples
        ));
    }
    let decoded = lerc_reader::decode_band_set(blob).map_err(|e| format!("lerc: {e}"))?;
    let (_, planes, masks) = decoded.into_parts();
    let es = dtype.size();
    let plane_values = w * h * depth;
    let mut out = vec![0u8; plane_values * bands * es];
    for (b, (plane, mask)) in planes.into_iter().zip(masks).enumerate() {
        let bytes: Vec<u8> = match (dtype, plane) {
            (DType::U8, PixelData::U8(v)) => v,
            (DType::I8, PixelData::I8(v)) => bytemuck::cast_slice(&v).to_vec(),
            (DType::U16, PixelData::U16(v)) => bytemuck::cast_slice(&v).to_vec(),
            (DType::I16, PixelData::I16(v)) => bytemuck::cast_slice(&v).to_vec(),
            (DType::U32, PixelData::U32(v)) => bytemuck::cast_slice(&v).to_vec(),
            (DType::I32, PixelData::I32(v)) => bytemuck::cast_slice(&v).to_vec(),
            (DType::F32, PixelData::F32(mut v)) => {
                // Invalid pixels of float rasters read as NaN, as libtiff reports them.
                mask_with(&mut v, mask.as_deref(), depth, f32::NAN);
                bytemuck::cast_slice(&v).to_vec()
            }
            (DType::F64, PixelData::F64(mut v)) => {
                mask_with(&mut v, mask.as_deref(), depth, f64::NAN);
                bytemuck::cast_slice(&v).to_vec()
            }
            (want, got) => {
                return Err(format!(
                    "lerc: blob of {} samples in a block of {}",
                    got.data_type().name(),
                    want.name()
                ));
            }
        };
        if bytes.len() != plane_values * es {
            return Err(format!("lerc: band {b} decoded to {} bytes", bytes.len()));
        }
        if bands == 1 {
            return Ok(bytes);
        }
        // LERC stores bands one after another; TIFF blocks interleave them.
        for p in 0..plane_values {
            let d = (p * bands + b) * es;
            out[d..d + es].copy_from_slice(&bytes[p * es..(p + 1) * es]);
        }
    }
    Ok(out)
}

/// Sets every sample of the pixels `mask` marks invalid to `nan`.
fn mask_with<T: Copy>(values: &mut [T], mask: Option<&[u8]>, depth: usize, nan: T) {
    let Some(mask) = mask else { return };
    for (p, &valid) in mask.iter().enumerate() {
        if valid == 0 {
            for v in values.iter_mut().skip(p * depth).take(depth) {
                *v = nan;
            }
        }
    }
}
