//! GeoTIFF georeferencing and GDAL's private tags: geotransform, EPSG code, nodata and
//! per-band scale/offset.

use serde::Serialize;

use super::ifd::{Ifd, StepResult, Values};

const MODEL_PIXEL_SCALE: u16 = 33550;
const MODEL_TIEPOINT: u16 = 33922;
const MODEL_TRANSFORMATION: u16 = 34264;
const GEO_KEY_DIRECTORY: u16 = 34735;
const GDAL_METADATA: u16 = 42112;
const GDAL_NODATA: u16 = 42113;

const GT_RASTER_TYPE_KEY: u16 = 1025;
const GEOGRAPHIC_TYPE_KEY: u16 = 2048;
const PROJECTED_CS_TYPE_KEY: u16 = 3072;

/// Georeferencing of the full-resolution image.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Geo {
    /// GDAL-style affine geotransform `[x0, dx, rx, y0, ry, dy]`.
    pub geotransform: Option<[f64; 6]>,
    /// EPSG code of the projected or geographic CRS, when the file names one.
    pub epsg: Option<u32>,
    /// GDAL_NODATA as written (may be "nan").
    pub nodata: Option<String>,
    /// Per-band scale from GDAL_METADATA (None where absent).
    pub scales: Vec<Option<f64>>,
    /// Per-band offset from GDAL_METADATA.
    pub offsets: Vec<Option<f64>>,
}

impl Geo {
    /// The nodata value as a number, when it parses as one.
    pub fn nodata_value(&self) -> Option<f64> {
        let s = self.nodata.as_deref()?.trim();
        match s.to_ascii_lowercase().as_str() {
            "nan" | "-nan" => Some(f64::NAN),
            "inf" => Some(f64::INFINITY),
            "-inf" => Some(f64::NEG_INFINITY),
            _ => s.parse().ok(),
        }
    }
}

/// Reads the georeferencing tags of `ifd`. Inconsistent GeoTIFF tags are ignored, not fatal:
/// pixels stay readable.
pub fn parse_geo(v: &Values<'_>, ifd: &Ifd) -> StepResult<Geo> {
    let mut keys: Vec<(u16, u16)> = Vec::new();
    if let Some(e) = ifd.entry(GEO_KEY_DIRECTORY) {
        let dir = v.u64s(e)?;
        if dir.len() >= 4 {
            let n = dir[3] as usize;
            for k in dir[4..].chunks_exact(4).take(n) {
                // Only values stored directly in the directory (location 0) are used here.
                if k[1] == 0 {
                    keys.push((k[0] as u16, k[3] as u16));
                }
            }
        }
    }
    let key = |id: u16| keys.iter().find(|k| k.0 == id).map(|k| k.1);
    let epsg = key(PROJECTED_CS_TYPE_KEY)
        .or_else(|| key(GEOGRAPHIC_TYPE_KEY))
        .filter(|&c| c != 0 && c != 32767)
        .map(u32::from);
    let pixel_is_point = key(GT_RASTER_TYPE_KEY) == Some(2);

    let f64s = |t: u16| -> StepResult<Option<Vec<f64>>> {
        match ifd.entry(t) {
            Some(e) => v.f64s(e).map(Some),
            None => Ok(None),
        }
    };
    let mut geotransform = None;
    if let Some(m) = f64s(MODEL_TRANSFORMATION)?.filter(|m| m.len() >= 16) {
        geotransform = Some([m[3], m[0], m[1], m[7], m[4], m[5]]);
    } else if let (Some(tie), Some(scale)) = (f64s(MODEL_TIEPOINT)?, f64s(MODEL_PIXEL_SCALE)?)
        && tie.len() >= 6
        && scale.len() >= 2
    {
        let (i, j, x, y) = (tie[0], tie[1], tie[3], tie[4]);
        let (sx, sy) = (scale[0], scale[1]);
        geotransform = Some([x - i * sx, sx, 0.0, y + j * sy, 0.0, -sy]);
    }
    if pixel_is_point && let Some(gt) = geotransform.as_mut() {
        // GDAL reports the corner of the pixel, not its centre.
        gt[0] -= 0.5 * gt[1] + 0.5 * gt[2];
        gt[3] -= 0.5 * gt[4] + 0.5 * gt[5];
    }
    let nodata = match ifd.entry(GDAL_NODATA) {
        Some(e) => Some(v.ascii(e)?.trim().to_string()).filter(|s| !s.is_empty()),
        None => None,
    };
    let (scales, offsets) = match ifd.entry(GDAL_METADATA) {
        Some(e) => scale_offset(&v.ascii(e)?),
        None => (Vec::new(), Vec::new()),
    };
    Ok(Geo {
        geotransform,
        epsg,
        nodata,
        scales,
        offsets,
    })
}

/// Extracts `<Item ... sample="N" role="scale|offset">value</Item>` from GDAL_METADATA XML.
fn scale_offset(xml: &str) -> (Vec<Option<f64>>, Vec<Option<f64>>) {
    let mut scales = Vec::new();
    let mut offsets = Vec::new();
    for item in xml.split("<Item").skip(1) {
        let Some(close) = item.find('>') else { continue };
        let attrs = &item[..close];
        let attr = |name: &str| {
            let pat = format!("{name}=\"");
            let start = attrs.find(&pat)? + pat.len();
            let end = attrs[start..].find('"')? + start;
            Some(attrs[start..end].to_string())
        };
        let target = match attr("role").as_deref() {
            Some("scale") => &mut scales,
            Some("offset") => &mut offsets,
            _ => continue,
        };
        let Some(sample) = attr("sample").and_then(|s| s.parse::<usize>().ok()) else {
            continue;
        };
        if sample > 4096 {
            continue;
        }
        let body = &item[close + 1..];
        let value = body
            .find("</Item>")
            .and_then(|end| body[..end].trim().parse::<f64>().ok());
        if target.len() <= sample {
            target.resize(sample + 1, None);
        }
        target[sample] = value;
    }
    (scales, offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_gdal_metadata_scale_offset() {
        let xml = r#"<GDALMetadata>
  <Item name="OFFSET" sample="0" role="offset">-10</Item>
  <Item name="SCALE" sample="0" role="scale">0.5</Item>
  <Item name="SCALE" sample="2" role="scale">2</Item>
  <Item name="AREA_OR_POINT">Area</Item>
</GDALMetadata>"#;
        let (s, o) = scale_offset(xml);
        assert_eq!(s, vec![Some(0.5), None, Some(2.0)]);
        assert_eq!(o, vec![Some(-10.0)]);
    }

    #[test]
    fn nodata_parses() {
        let g = Geo {
            nodata: Some("nan".into()),
            ..Default::default()
        };
        assert!(g.nodata_value().unwrap().is_nan());
        let g = Geo {
            nodata: Some("-9999".into()),
            ..Default::default()
        };
        assert_eq!(g.nodata_value(), Some(-9999.0));
    }
}
