//! Pictures of batches as PNG, shared by the daemon's status page and
//! `cogfeed-client preview` (rasters for GIS tools are written by `cogfeed_tiff::write`):
//! a grid of samples, each an RGB (or grey) composite with a percentile stretch, the class
//! layer beside it as a coloured overlay, captions under it, and a legend of the classes.
//!
//! The rules are exact so the Python client (`cogfeed.preview`) draws the same pixels:
//! - a time layer `[B, T, C, H, W]` is drawn at its last step (the drawn date under
//!   `time_rule = "latest"`);
//! - stretch: per channel over the whole batch, ignoring NaN (no data); `lo`/`hi` are the
//!   sorted finite values at index `floor(p/100 · (n − 1))`; a value maps to
//!   `clamp(floor((v − lo)/(hi − lo) · 255 + 0.5), 0, 255)` (0 when `hi ≤ lo`), NaN to 0;
//! - a sample of `H × W` is drawn `s` times larger, `s = max(1, 128 / max(H, W))` (integer
//!   division); panel pixel `(y, x)` shows source pixel `(y·H / (H·s), x·W / (W·s))`, and
//!   the class layer `[Hm, Wm]` is sampled the same way onto the panel (nearest);
//! - overlay: `(rgb + colour + 1) / 2` per channel with [`PALETTE`]`[class % 20]`, none on
//!   the class layer's nodata;
//! - layout: [`MARGIN`] around and between cells, `ceil(sqrt(B))` cells a row, [`GAP`]
//!   between a cell's panels, captions in the 8 × 8 `font8x8` glyphs, [`LINE`] px a line,
//!   clipped to the cell's width; the legend lists the classes present, ascending.

#![deny(missing_docs)]

pub mod batch;

use thiserror::Error;

/// Pixels around the picture and between cells.
pub const MARGIN: usize = 8;
/// Pixels between the panels of one cell.
pub const GAP: usize = 4;
/// Height of one caption or legend line (8 px glyphs, 2 px leading).
pub const LINE: usize = 10;
/// Smallest drawn side a sample is enlarged to (by an integer factor).
pub const MIN_SIDE: usize = 128;
/// Background colour (RGB).
pub const BACKGROUND: [u8; 3] = [24, 24, 24];
/// Text colour (RGB).
pub const TEXT: [u8; 3] = [230, 230, 230];
/// Classes listed in the legend at most.
pub const MAX_LEGEND: usize = 32;
/// Largest picture drawn, in pixels (a hostile batch cannot ask for more).
pub const MAX_PIXELS: usize = 64 << 20;

/// Class colours, `class % 20` (the "tab20" qualitative palette).
pub const PALETTE: [[u8; 3]; 20] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
    [188, 189, 34],
    [23, 190, 207],
    [174, 199, 232],
    [255, 187, 120],
    [152, 223, 138],
    [255, 152, 150],
    [197, 176, 213],
    [196, 156, 148],
    [247, 182, 210],
    [199, 199, 199],
    [219, 219, 141],
    [158, 218, 229],
];

/// What cannot be drawn.
#[derive(Debug, Error)]
pub enum RenderError {
    /// A batch or preview that cannot be drawn as given (shapes, layers, bands); the message says why.
    #[error("preview: {0}")]
    Shape(String),
    /// The picture would have this many pixels, more than [`MAX_PIXELS`].
    #[error("preview: the picture would be {0} pixels, more than {MAX_PIXELS}")]
    TooLarge(usize),
    /// The PNG encoder failed.
    #[error("preview: PNG encoding failed: {0}")]
    Png(#[from] png::EncodingError),
}

/// A class layer drawn over the composite: `[B, Hm, Wm]` class numbers.
#[derive(Debug, Clone)]
pub struct Classes {
    /// Height `Hm` of each sample's class layer, in pixels.
    pub height: usize,
    /// Width `Wm` of each sample's class layer, in pixels.
    pub width: usize,
    /// Class numbers `[B, Hm, Wm]`, row-major per sample.
    pub values: Vec<i64>,
    /// The class that means "no label" (not overlaid, not in the legend).
    pub nodata: Option<i64>,
}

/// One batch to draw.
#[derive(Debug, Clone)]
pub struct Preview {
    /// Number of samples `B`.
    pub samples: usize,
    /// Height `H` of each sample, in pixels.
    pub height: usize,
    /// Width `W` of each sample, in pixels.
    pub width: usize,
    /// One (grey) or three (red, green, blue) channels, each `[B, H, W]`; NaN = no data.
    pub channels: Vec<Vec<f32>>,
    /// Lower and upper stretch percentiles (2, 98 by default).
    pub percentiles: (f64, f64),
    /// Class layer drawn as a coloured overlay beside the composite (None: none).
    pub classes: Option<Classes>,
    /// Caption lines per sample (empty: none).
    pub captions: Vec<Vec<String>>,
}

/// An 8-bit RGB picture, row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picture {
    /// Width, in pixels.
    pub width: usize,
    /// Height, in pixels.
    pub height: usize,
    /// Pixels row by row, three bytes (red, green, blue) each: `height × width × 3`.
    pub rgb: Vec<u8>,
}

impl Picture {
    fn new(width: usize, height: usize) -> Self {
        let mut rgb = Vec::with_capacity(width * height * 3);
        for _ in 0..width * height {
            rgb.extend_from_slice(&BACKGROUND);
        }
        Self { width, height, rgb }
    }

    fn put(&mut self, x: usize, y: usize, c: [u8; 3]) {
        if x < self.width && y < self.height {
            let i = (y * self.width + x) * 3;
            self.rgb[i..i + 3].copy_from_slice(&c);
        }
    }

    /// Draws `text` from `(x, y)`, at most `max_chars` glyphs; other than printable ASCII
    /// shows as `?`.
    fn text(&mut self, x: usize, y: usize, text: &str, max_chars: usize) {
        for (k, ch) in text.chars().take(max_chars).enumerate() {
            let code = if (' '..='~').contains(&ch) {
                ch as usize
            } else {
                '?' as usize
            };
            let glyph = font8x8::legacy::BASIC_LEGACY[code];
            for (r, bits) in glyph.iter().enumerate() {
                for c in 0..8 {
                    if bits >> c & 1 == 1 {
                        self.put(x + k * 8 + c, y + r, TEXT);
                    }
                }
            }
        }
    }

    /// PNG bytes of the picture.
    pub fn to_png(&self) -> Result<Vec<u8>, RenderError> {
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, self.width as u32, self.height as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Fast);
        let mut w = enc.write_header()?;
        w.write_image_data(&self.rgb)?;
        w.finish()?;
        Ok(out)
    }
}

/// `lo`/`hi` of one channel: the finite values at the percentile ranks.
pub fn stretch_bounds(values: &[f32], percentiles: (f64, f64)) -> Option<(f64, f64)> {
    let mut v: Vec<f32> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_unstable_by(f32::total_cmp);
    let at = |p: f64| {
        let i = ((p.clamp(0.0, 100.0) / 100.0) * (v.len() - 1) as f64).floor() as usize;
        v[i.min(v.len() - 1)] as f64
    };
    Some((at(percentiles.0), at(percentiles.1)))
}

/// A value on the 0–255 scale between `lo` and `hi`.
pub fn stretch(v: f32, (lo, hi): (f64, f64)) -> u8 {
    if !v.is_finite() || hi <= lo {
        return 0;
    }
    ((v as f64 - lo) / (hi - lo) * 255.0 + 0.5).floor().clamp(0.0, 255.0) as u8
}

/// The enlargement factor for an `h × w` sample.
pub fn scale_of(h: usize, w: usize) -> usize {
    (MIN_SIDE / h.max(w).max(1)).max(1)
}

/// Draws `p`.
pub fn render(p: &Preview) -> Result<Picture, RenderError> {
    let (b, h, w) = (p.samples, p.height, p.width);
    if b == 0 || h == 0 || w == 0 {
        return Err(RenderError::Shape("an empty batch has nothing to draw".into()));
    }
    if p.channels.len() != 1 && p.channels.len() != 3 {
        return Err(RenderError::Shape(format!("1 or 3 channels, not {}", p.channels.len())));
    }
    let s = scale_of(h, w);
    let (ph, pw) = (h.saturating_mul(s), w.saturating_mul(s));
    let panels = if p.classes.is_some() { 2 } else { 1 };
    let cell_w = pw.saturating_mul(panels).saturating_add((panels - 1) * GAP);
    let lines = p.captions.iter().map(Vec::len).max().unwrap_or(0);
    let cell_h = ph.saturating_add(if lines > 0 { 2 + lines * LINE } else { 0 });
    let cols = (b as f64).sqrt().ceil() as usize;
    let rows = b.div_ceil(cols);
    let width = MARGIN.saturating_add(cols.saturating_mul(cell_w.saturating_add(MARGIN)));
    let legend: Vec<i64> = p.classes.as_ref().map(present_classes).unwrap_or_default();
    let legend_rows = legend_layout(&legend, width).last().map_or(0, |e| e.row + 1);
    let height = rows
        .saturating_mul(cell_h.saturating_add(MARGIN))
        .saturating_add(MARGIN + legend_rows * (LINE + 2) + usize::from(legend_rows > 0) * MARGIN);
    let total = width.saturating_mul(height);
    if total > MAX_PIXELS {
        return Err(RenderError::TooLarge(total));
    }
    let plane = h * w;
    if let Some(c) = p.channels.iter().find(|c| c.len() != b * plane) {
        return Err(RenderError::Shape(format!(
            "a channel holds {} values, not {b} x {h} x {w}",
            c.len()
        )));
    }
    if let Some(c) = &p.classes
        && (c.height == 0 || c.width == 0 || c.values.len() != b * c.height * c.width)
    {
        return Err(RenderError::Shape(format!(
            "the class layer holds {} values, not {b} x {} x {}",
            c.values.len(),
            c.height,
            c.width
        )));
    }
    let bounds: Vec<Option<(f64, f64)>> = p.channels.iter().map(|c| stretch_bounds(c, p.percentiles)).collect();
    let mut pic = Picture::new(width, height);
    for i in 0..b {
        let x0 = MARGIN + (i % cols) * (cell_w + MARGIN);
        let y0 = MARGIN + (i / cols) * (cell_h + MARGIN);
        for y in 0..ph {
            let sy = y * h / ph;
            for x in 0..pw {
                let sx = x * w / pw;
                let at = i * plane + sy * w + sx;
                let mut rgb = [0u8; 3];
                for (k, c) in p.channels.iter().enumerate() {
                    rgb[k] = bounds[k].map_or(0, |bd| stretch(c[at], bd));
                }
                if p.channels.len() == 1 {
                    rgb = [rgb[0]; 3];
                }
                pic.put(x0 + x, y0 + y, rgb);
                if let Some(cl) = &p.classes {
                    let my = y * cl.height / ph;
                    let mx = x * cl.width / pw;
                    let class = cl.values[i * cl.height * cl.width + my * cl.width + mx];
                    let over = if Some(class) == cl.nodata {
                        rgb
                    } else {
                        let colour = colour_of(class);
                        [0, 1, 2].map(|k| (rgb[k] as u16 + colour[k] as u16).div_ceil(2) as u8)
                    };
                    pic.put(x0 + pw + GAP + x, y0 + y, over);
                }
            }
        }
        if let Some(lines) = p.captions.get(i) {
            for (l, line) in lines.iter().enumerate() {
                pic.text(x0, y0 + ph + 2 + l * LINE, line, cell_w / 8);
            }
        }
    }
    let legend_y = MARGIN + rows * (cell_h + MARGIN);
    for e in legend_layout(&legend, width) {
        let y = legend_y + e.row * (LINE + 2);
        let colour = colour_of(e.class);
        for dy in 0..8 {
            for dx in 0..8 {
                pic.put(e.x + dx, y + dy, colour);
            }
        }
        pic.text(e.x + 10, y, &e.class.to_string(), usize::MAX);
    }
    Ok(pic)
}

/// The palette colour of `class`.
pub fn colour_of(class: i64) -> [u8; 3] {
    PALETTE[class.rem_euclid(PALETTE.len() as i64) as usize]
}

/// Classes present in the layer, ascending, without nodata, at most [`MAX_LEGEND`].
fn present_classes(c: &Classes) -> Vec<i64> {
    let mut v: Vec<i64> = c.values.iter().copied().filter(|v| Some(*v) != c.nodata).collect();
    v.sort_unstable();
    v.dedup();
    v.truncate(MAX_LEGEND);
    v
}

struct LegendEntry {
    class: i64,
    x: usize,
    row: usize,
}

/// Legend entries placed left to right, wrapping at the picture's width: a swatch, 2 px,
/// the class number, 12 px to the next entry.
fn legend_layout(classes: &[i64], width: usize) -> Vec<LegendEntry> {
    let mut out = Vec::with_capacity(classes.len());
    let (mut x, mut row) = (MARGIN, 0);
    for &class in classes {
        let w = 10 + 8 * class.to_string().len();
        if x > MARGIN && x + w > width - MARGIN {
            x = MARGIN;
            row += 1;
        }
        out.push(LegendEntry { class, x, row });
        x += w + 12;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(b: usize, h: usize, w: usize) -> Preview {
        let n = b * h * w;
        Preview {
            samples: b,
            height: h,
            width: w,
            channels: (0..3).map(|k| (0..n).map(|i| (i * (k + 1)) as f32).collect()).collect(),
            percentiles: (2.0, 98.0),
            classes: None,
            captions: vec![vec!["S2A_T32".into(), "2024-06-03".into()]; b],
        }
    }

    #[test]
    fn stretch_uses_the_lower_rank_and_rounds_half_up() {
        let v: Vec<f32> = (0..101).map(|x| x as f32).collect();
        assert_eq!(stretch_bounds(&v, (2.0, 98.0)), Some((2.0, 98.0)));
        assert_eq!(stretch(2.0, (2.0, 98.0)), 0);
        assert_eq!(stretch(98.0, (2.0, 98.0)), 255);
        assert_eq!(stretch(50.0, (2.0, 98.0)), 128);
        assert_eq!(stretch(f32::NAN, (2.0, 98.0)), 0);
        assert_eq!(stretch(5.0, (3.0, 3.0)), 0);
        assert_eq!(stretch_bounds(&[f32::NAN], (2.0, 98.0)), None);
    }

    #[test]
    fn layout_grows_small_patches_and_places_cells_in_a_square() {
        let pic = render(&batch(5, 32, 32)).unwrap();
        // 5 samples: 3 a row, 2 rows; 32 px drawn 4x; two caption lines.
        let cell_h = 128 + 2 + 2 * LINE;
        assert_eq!(pic.width, MARGIN + 3 * (128 + MARGIN));
        assert_eq!(pic.height, MARGIN + 2 * (cell_h + MARGIN));
        // The first pixel of sample 0 is its darkest value.
        assert_eq!(&pic.rgb[(MARGIN * pic.width + MARGIN) * 3..][..3], &[0, 0, 0]);
    }

    #[test]
    fn overlay_blends_the_palette_and_skips_nodata() {
        let mut p = batch(1, 2, 2);
        p.channels = vec![vec![0.0, 0.0, 0.0, 0.0]];
        p.captions.clear();
        p.classes = Some(Classes {
            height: 1,
            width: 2,
            values: vec![1, 255],
            nodata: Some(255),
        });
        let pic = render(&p).unwrap();
        let s = scale_of(2, 2);
        let px = |x: usize, y: usize| &pic.rgb[(y * pic.width + x) * 3..][..3];
        let ox = MARGIN + 2 * s + GAP;
        assert_eq!(px(ox, MARGIN), &[128, 64, 7]);
        assert_eq!(px(ox + 2 * s - 1, MARGIN), &[0, 0, 0]);
        assert!(pic.to_png().unwrap().starts_with(b"\x89PNG"));
    }

    #[test]
    fn bad_shapes_are_errors_not_panics() {
        let mut p = batch(2, 4, 4);
        p.channels[1].pop();
        assert!(render(&p).is_err());
        let mut p = batch(1, 4, 4);
        p.channels.truncate(2);
        assert!(render(&p).is_err());
        assert!(render(&batch(0, 4, 4)).is_err());
        let mut p = batch(1, 4, 4);
        p.classes = Some(Classes {
            height: 0,
            width: 3,
            values: vec![],
            nodata: None,
        });
        assert!(render(&p).is_err());
    }

    #[test]
    fn a_huge_batch_is_refused() {
        let p = Preview {
            samples: 1 << 20,
            height: 1 << 40,
            width: 1 << 40,
            channels: vec![vec![]],
            percentiles: (2.0, 98.0),
            classes: None,
            captions: vec![],
        };
        assert!(matches!(render(&p), Err(RenderError::TooLarge(_))));
    }
}
