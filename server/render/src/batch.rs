//! From a received `Batch` to a [`Preview`]: which layer and bands make the composite, which
//! layer is the class overlay, what no data is, and each sample's caption. Python's
//! `cogfeed.preview` follows the same rules:
//! - composite: `Options::layer`, else the batch's first layer (`image` on scene datasets);
//!   bands by asset name (map-space layers) or 1-based channel number; by default
//!   B04/B03/B02 when the layer has them, else channels 1–3, else channel 1 (grey); values
//!   equal to the layer's nodata are no data;
//! - classes: `Options::classes`, else a layer named `label` (map-space, its nodata
//!   skipped) or the scene dataset's label tensor; `Some("")` draws none;
//! - captions: map-space samples show the drawn Item (else the first; `+n` for the
//!   `items` beyond one), the date and CRS, and the
//!   footprint's upper-left corner and width in CRS units; scene samples their scene name
//!   and window.

use cogfeed_proto::v1 as pb;

use crate::{Classes, Preview, RenderError};

/// What to draw.
#[derive(Debug, Clone)]
pub struct Options {
    /// Layer of the composite (default: the first).
    pub layer: Option<String>,
    /// Bands of the composite: asset names or 1-based channel numbers (1 or 3 of them).
    pub rgb: Vec<String>,
    /// Layer drawn as classes (default: `label` when present; empty: none).
    pub classes: Option<String>,
    /// Lower and upper stretch percentiles (2, 98 by default).
    pub percentiles: (f64, f64),
}

impl Default for Options {
    fn default() -> Self {
        Self {
            layer: None,
            rgb: Vec::new(),
            classes: None,
            percentiles: (2.0, 98.0),
        }
    }
}

fn shape_err(m: String) -> RenderError {
    RenderError::Shape(m)
}

/// `t` at its last time step when it is a time layer `[B, T, C, H, W]` (the drawn date
/// for `time_rule = "latest"`), else `t` itself.
fn last_step(t: &pb::Tensor) -> pb::Tensor {
    let s: Vec<usize> = t.shape.iter().map(|&d| d.max(0) as usize).collect();
    let [n, steps, c, h, w] = s[..] else {
        return t.clone();
    };
    let values = n * steps * c * h * w;
    if values == 0 || !t.data.len().is_multiple_of(values) {
        return t.clone();
    }
    let step = c * h * w * (t.data.len() / values);
    let mut data = Vec::with_capacity(n * step);
    for sample in 0..n {
        let at = (sample * steps + steps - 1) * step;
        data.extend_from_slice(&t.data[at..at + step]);
    }
    pb::Tensor {
        dtype: t.dtype.clone(),
        shape: vec![n as i64, c as i64, h as i64, w as i64],
        data: data.into(),
    }
}

/// Time layers of `b` cut to their last step (previews draw one date).
fn last_steps(b: &pb::Batch) -> pb::Batch {
    let mut b = b.clone();
    if let Some(t) = b.image.as_mut() {
        *t = last_step(t);
    }
    for l in &mut b.layers {
        if let Some(t) = l.tensor.as_mut() {
            *t = last_step(t);
        }
    }
    b
}

/// The batch's arrays by name, in order: map-space layers, or `image` and `label`.
fn arrays(b: &pb::Batch) -> Vec<(&str, &pb::Tensor)> {
    let mut out = Vec::new();
    if let Some(image) = &b.image {
        let name = if b.image_layer.is_empty() {
            "image"
        } else {
            b.image_layer.as_str()
        };
        out.push((name, image));
    }
    if let Some(label) = &b.label {
        out.push(("label", label));
    }
    for l in &b.layers {
        if let Some(t) = &l.tensor {
            out.push((l.name.as_str(), t));
        }
    }
    out
}

/// The values of `t` as f32 (`nodata` and NaN as NaN); float16/bfloat16 are refused.
pub fn values_f32(t: &pb::Tensor, nodata: Option<f64>) -> Result<Vec<f32>, RenderError> {
    let d = &t.data[..];
    macro_rules! conv {
        ($ty:ty) => {{
            const N: usize = std::mem::size_of::<$ty>();
            d.chunks_exact(N)
                .map(|c| {
                    let mut a = [0u8; N];
                    a.copy_from_slice(c);
                    let v = <$ty>::from_le_bytes(a) as f64;
                    if Some(v) == nodata || v.is_nan() {
                        f32::NAN
                    } else {
                        v as f32
                    }
                })
                .collect()
        }};
    }
    let v: Vec<f32> = match t.dtype.as_str() {
        "uint8" => conv!(u8),
        "int8" => conv!(i8),
        "uint16" => conv!(u16),
        "int16" => conv!(i16),
        "uint32" => conv!(u32),
        "int32" => conv!(i32),
        "float32" => conv!(f32),
        "float64" => conv!(f64),
        other => {
            return Err(shape_err(format!(
                "{other} layers are not drawn (stream them as native or float32)"
            )));
        }
    };
    let want: i64 = t.shape.iter().product();
    if want < 0 || v.len() as i64 != want {
        return Err(shape_err(format!("{} values for shape {:?}", v.len(), t.shape)));
    }
    Ok(v)
}

/// `[B, C, H, W]` (or `[B, H, W]` as one channel) of a tensor.
pub fn dims(t: &pb::Tensor) -> Result<[usize; 4], RenderError> {
    let s: Vec<usize> = t.shape.iter().map(|&d| d.max(0) as usize).collect();
    match s[..] {
        [b, c, h, w] => Ok([b, c, h, w]),
        [b, h, w] => Ok([b, 1, h, w]),
        _ => Err(shape_err(format!("cannot draw a tensor of shape {:?}", t.shape))),
    }
}

/// The composite's channel indices (0-based) in a layer of `channels` with `names`.
fn pick_bands(rgb: &[String], names: &[String], channels: usize) -> Result<Vec<usize>, RenderError> {
    if rgb.is_empty() {
        let default: Vec<usize> = ["B04", "B03", "B02"]
            .iter()
            .filter_map(|n| names.iter().position(|x| x == n))
            .filter(|&i| i < channels)
            .collect();
        return Ok(if default.len() == 3 {
            default
        } else if channels >= 3 {
            vec![0, 1, 2]
        } else {
            vec![0]
        });
    }
    if rgb.len() != 1 && rgb.len() != 3 {
        return Err(shape_err(format!("give 1 or 3 bands, not {}", rgb.len())));
    }
    rgb.iter()
        .map(|b| {
            if let Some(i) = names.iter().position(|n| n == b).filter(|&i| i < channels) {
                return Ok(i);
            }
            match b.parse::<usize>() {
                Ok(i) if (1..=channels).contains(&i) => Ok(i - 1),
                _ => Err(shape_err(format!(
                    "no band {b:?} (bands: {}; or 1..={channels})",
                    if names.is_empty() {
                        "unnamed".to_string()
                    } else {
                        names.join(", ")
                    }
                ))),
            }
        })
        .collect()
}

/// Caption lines of sample `i`.
pub fn caption(info: &pb::DatasetInfo, b: &pb::Batch, i: usize) -> Vec<String> {
    if let Some(s) = b.samples.get(i) {
        let mut first = if s.drawn.is_empty() {
            s.items.first().cloned().unwrap_or_default()
        } else {
            s.drawn.clone()
        };
        if s.items.len() > 1 {
            first.push_str(&format!(" +{}", s.items.len() - 1));
        }
        let date: String = s.datetime.chars().take(10).collect();
        let mut lines = vec![first, format!("{date} {}", s.crs).trim().to_string()];
        if let [x0, _, x1, y1] = s.bounds[..] {
            lines.push(format!("{x0:.0},{y1:.0} {:.0}m", x1 - x0));
        }
        return lines;
    }
    match b.windows.get(i) {
        Some(w) => {
            let name = info
                .scenes
                .get(w.scene as usize)
                .map_or_else(|| format!("scene {}", w.scene), |s| s.name.clone());
            vec![name, format!("col {} row {} L{}", w.col, w.row, w.level)]
        }
        None => Vec::new(),
    }
}

/// The preview of `b` (a batch of dataset `info`).
pub fn preview(info: &pb::DatasetInfo, b: &pb::Batch, o: &Options) -> Result<Preview, RenderError> {
    let b = &last_steps(b);
    let all = arrays(b);
    let layer_info = |name: &str| info.layers.iter().find(|l| l.name == name);
    let (name, tensor) = match &o.layer {
        Some(want) => *all
            .iter()
            .find(|(n, _)| n == want)
            .ok_or_else(|| shape_err(format!("no layer {want:?} in the batch")))?,
        None => *all
            .first()
            .ok_or_else(|| shape_err("the batch holds no arrays".into()))?,
    };
    let [samples, channels, height, width] = dims(tensor)?;
    if channels == 0 {
        return Err(shape_err(format!("layer {name} has no channels")));
    }
    let li = layer_info(name);
    let names = li.map(|l| l.assets.clone()).unwrap_or_default();
    let picked = pick_bands(&o.rgb, &names, channels)?;
    let values = values_f32(tensor, li.map(|l| l.nodata))?;
    let plane = height * width;
    let channels_out = picked
        .iter()
        .map(|&c| {
            let mut out = Vec::with_capacity(samples * plane);
            for s in 0..samples {
                let at = (s * channels + c) * plane;
                out.extend_from_slice(&values[at..at + plane]);
            }
            out
        })
        .collect();
    let class_name = match &o.classes {
        Some(n) if n.is_empty() => None,
        Some(n) => Some(n.as_str()),
        None => all.iter().map(|(n, _)| *n).find(|n| *n == "label" && *n != name),
    };
    let classes = match class_name {
        None => None,
        Some(cn) => {
            let t = all
                .iter()
                .find(|(n, _)| *n == cn)
                .map(|(_, t)| *t)
                .ok_or_else(|| shape_err(format!("no layer {cn:?} in the batch")))?;
            let [cb, c, ch, cw] = dims(t)?;
            if cb != samples || c == 0 {
                return Err(shape_err(format!(
                    "{cn} holds {cb} samples of {c} channels, not {samples} of at least one"
                )));
            }
            let v = values_f32(t, None)?;
            let plane = ch * cw;
            // First channel of each sample.
            let values = (0..samples)
                .flat_map(|s| v[s * c * plane..s * c * plane + plane].iter().map(|x| *x as i64))
                .collect();
            Some(Classes {
                height: ch,
                width: cw,
                values,
                nodata: layer_info(cn).map(|l| l.nodata as i64),
            })
        }
    };
    Ok(Preview {
        samples,
        height,
        width,
        channels: channels_out,
        percentiles: o.percentiles,
        classes,
        captions: (0..samples).map(|i| caption(info, b, i)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(dtype: &str, shape: &[i64], data: Vec<u8>) -> pb::Tensor {
        pb::Tensor {
            dtype: dtype.into(),
            shape: shape.to_vec(),
            data: data.into(),
        }
    }

    #[test]
    fn band_names_beyond_the_tensor_are_errors_not_panics() {
        let info = pb::DatasetInfo {
            layers: vec![pb::LayerInfo {
                name: "image".into(),
                assets: vec!["B02".into(), "B03".into(), "B04".into(), "B08".into()],
                ..Default::default()
            }],
            ..Default::default()
        };
        let b = pb::Batch {
            image: Some(tensor("uint8", &[1, 2, 2, 2], vec![1; 8])),
            image_layer: "image".into(),
            ..Default::default()
        };
        // Default bands: B04 is channel 3 of a 2-channel tensor: not used; grey from channel 1.
        let p = preview(&info, &b, &Options::default()).unwrap();
        assert_eq!(p.channels.len(), 1);
        let o = Options {
            rgb: vec!["B08".into()],
            ..Default::default()
        };
        assert!(preview(&info, &b, &o).is_err());
        let empty = pb::Batch {
            image: Some(tensor("uint8", &[1, 0, 2, 2], vec![])),
            ..Default::default()
        };
        assert!(preview(&info, &empty, &Options::default()).is_err());
        let f16 = pb::Batch {
            image: Some(tensor("float16", &[1, 1, 1, 1], vec![0, 0])),
            ..Default::default()
        };
        assert!(preview(&info, &f16, &Options::default()).is_err());
    }
}
