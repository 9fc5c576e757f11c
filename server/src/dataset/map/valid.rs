//! The valid fraction of a sample: the share of the reference layer's pixels (of the time
//! steps that hold a date; a sample with none has 0) where some band holds data, that is differs from the layer's nodata value,
//! and, with a mask layer, whose class there is not one of the invalid classes. The mask
//! layer's pixel under a reference pixel is the one holding its centre (the layers share
//! the footprint, so that is exact for any pair of resolutions).
//!
//! A direct computation over the delivered tensors gives the same number: that is how the
//! tests check it.

use cogfeed_geo::warp::{NodataTest, samples_to_f64, validity};
use cogfeed_tiff::DType;

/// `[datasets.sampling]`, resolved against the layers.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidRule {
    /// Least valid fraction of a kept sample (None: every sample is kept, the fraction is
    /// still reported).
    pub min: Option<f64>,
    /// Index of the mask layer.
    pub mask_layer: Option<usize>,
    pub invalid_classes: Vec<f64>,
    /// Data-reading draws per sample before the stream fails.
    pub max_attempts: u32,
    /// Draws whose time layers miss a step are redrawn.
    pub require_full_series: bool,
}

/// A layer's bytes and geometry, as delivered: `[T, C, H, W]` (T = 1 without time).
#[derive(Debug, Clone, Copy)]
pub struct LayerView<'a> {
    pub bytes: &'a [u8],
    pub dtype: DType,
    pub steps: usize,
    pub bands: usize,
    pub height: usize,
    pub width: usize,
    pub nodata: f64,
    /// Which steps hold a date (None: all).
    pub present: Option<&'a [bool]>,
}

/// Per pixel of `mask`'s first band, whether its class is invalid.
fn invalid_pixels(mask: &LayerView<'_>, classes: &[f64]) -> Vec<bool> {
    let plane = mask.height * mask.width;
    let n = (plane * mask.dtype.size()).min(mask.bytes.len());
    samples_to_f64(mask.dtype, &mask.bytes[..n])
        .iter()
        .map(|v| classes.iter().any(|c| v == c))
        .collect()
}

/// The valid fraction of `reference` (None when it holds no pixel), with `mask` and the
/// classes that make a pixel invalid.
pub fn fraction(reference: &LayerView<'_>, mask: Option<(&LayerView<'_>, &[f64])>) -> Option<f64> {
    let (h, w) = (reference.height, reference.width);
    let plane = h * w;
    if plane * reference.steps == 0
        || reference.bytes.len() < plane * reference.steps * reference.bands * reference.dtype.size()
    {
        return None;
    }
    let present = |t: usize| reference.present.is_none_or(|p| p.get(t).copied().unwrap_or(false));
    let total = plane * (0..reference.steps).filter(|&t| present(t)).count();
    if total == 0 {
        return Some(0.0);
    }
    let invalid = mask.map(|(m, classes)| (invalid_pixels(m, classes), m.height, m.width));
    let masked = |p: usize| -> bool {
        match &invalid {
            None => false,
            Some((bad, mh, mw)) => {
                let (r, c) = (p / w, p % w);
                let mr = ((r as f64 + 0.5) * *mh as f64 / h as f64) as usize;
                let mc = ((c as f64 + 0.5) * *mw as f64 / w as f64) as usize;
                bad.get(mr.min(mh.saturating_sub(1)) * mw + mc.min(mw.saturating_sub(1)))
                    .copied()
                    .unwrap_or(false)
            }
        }
    };
    // One step at a time, its nodata tests decided once (a vectorisable pass per band).
    let tests = vec![NodataTest::new(reference.dtype, Some(reference.nodata)); reference.bands];
    let step_bytes = reference.bands * plane * reference.dtype.size();
    let mut valid = 0usize;
    for t in (0..reference.steps).filter(|&t| present(t)) {
        let values = samples_to_f64(reference.dtype, &reference.bytes[t * step_bytes..(t + 1) * step_bytes]);
        let data = validity(&values, plane, &tests);
        valid += match &invalid {
            None => data.iter().filter(|&&d| d).count(),
            Some(_) => data.iter().enumerate().filter(|&(p, &d)| d && !masked(p)).count(),
        };
    }
    Some(valid as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(bytes: &[u8], bands: usize, h: usize, w: usize, nodata: f64) -> LayerView<'_> {
        LayerView {
            bytes,
            dtype: DType::U8,
            steps: 1,
            bands,
            height: h,
            width: w,
            nodata,
            present: None,
        }
    }

    #[test]
    fn counts_pixels_with_some_band_of_data() {
        // 2 bands, 2 x 2: pixel 0 empty in both bands, pixel 1 empty in one.
        let bytes = [0, 0, 5, 5, 0, 7, 5, 5];
        assert_eq!(fraction(&view(&bytes, 2, 2, 2, 0.0), None), Some(0.75));
    }

    #[test]
    fn counts_only_the_steps_that_hold_a_date() {
        // uint16, 2 steps of 1 band, 1 x 3; nodata 7; the second step has no date.
        let samples: [u16; 6] = [7, 1, 2, 3, 7, 7];
        let bytes: Vec<u8> = samples.iter().flat_map(|v| v.to_le_bytes()).collect();
        let present = [true, false];
        let v = LayerView {
            bytes: &bytes,
            dtype: DType::U16,
            steps: 2,
            bands: 1,
            height: 1,
            width: 3,
            nodata: 7.0,
            present: Some(&present),
        };
        assert_eq!(fraction(&v, None), Some(2.0 / 3.0));
        let all = LayerView { present: None, ..v };
        assert_eq!(fraction(&all, None), Some(3.0 / 6.0));
    }

    #[test]
    fn a_coarser_mask_covers_its_pixels_centres() {
        let bytes = [1u8; 16];
        // 2 x 2 mask over 4 x 4: the top-left mask pixel (class 9) hides 4 pixels.
        let mask = [9u8, 4, 4, 4];
        let m = view(&mask, 1, 2, 2, 255.0);
        assert_eq!(
            fraction(&view(&bytes, 1, 4, 4, 0.0), Some((&m, &[9.0, 8.0]))),
            Some(0.75)
        );
    }
}
