//! The status page's map: every scene's footprint (its grid's outline reprojected to
//! lon/lat) and every STAC Item's bbox, drawn as SVG over a lon/lat graticule. No tiles,
//! no network: it works offline and shows only names the API also shows.

use std::fmt::Write;

use crate::dataset::Dataset;
use cogfeed_geo::{Crs, Transformer};

use super::page::escape;

/// Drawing size in SVG units (one map per dataset).
const WIDTH: f64 = 420.0;
const HEIGHT: f64 = 280.0;
/// Outlines drawn per dataset at most (scenes and Items each): a 100 000-Item archive
/// must not make a 100 MB page.
pub const MAX_OUTLINES: usize = 1000;
/// Distinct colours, one per dataset.
const COLOURS: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// One outline in lon/lat.
#[derive(Debug, Clone)]
pub struct Outline {
    pub dataset: usize,
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Item bboxes are dashed, scene grids solid.
    pub dashed: bool,
}

/// Points along the edges of the `w` × `h` rectangle from `(x0, y0)` through `gt`.
fn grid_outline(gt: [f64; 6], w: f64, h: f64, epsg: u32) -> Option<Vec<(f64, f64)>> {
    const STEPS: usize = 8;
    let mut cols = Vec::with_capacity(4 * STEPS);
    let mut rows = Vec::with_capacity(4 * STEPS);
    for k in 0..STEPS {
        let t = k as f64 / STEPS as f64;
        for (c, r) in [(t * w, 0.0), (w, t * h), (w - t * w, h), (0.0, h - t * h)] {
            cols.push(c);
            rows.push(r);
        }
    }
    // Edge order: top, right, bottom, left, each walked in STEPS steps.
    let mut order: Vec<usize> = Vec::with_capacity(4 * STEPS);
    for side in 0..4 {
        for k in 0..STEPS {
            order.push(k * 4 + side);
        }
    }
    let mut xs: Vec<f64> = order
        .iter()
        .map(|&i| gt[0] + cols[i] * gt[1] + rows[i] * gt[2])
        .collect();
    let mut ys: Vec<f64> = order
        .iter()
        .map(|&i| gt[3] + cols[i] * gt[4] + rows[i] * gt[5])
        .collect();
    let src = Crs::from_epsg(epsg).ok()?;
    let wgs = Crs::from_epsg(4326).ok()?;
    Transformer::new(&src, &wgs).transform(&mut xs, &mut ys);
    let pts: Vec<(f64, f64)> = xs
        .into_iter()
        .zip(ys)
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    (pts.len() >= 3).then_some(pts)
}

/// The outlines of every dataset in `datasets`.
pub fn outlines(datasets: &[std::sync::Arc<Dataset>]) -> Vec<Outline> {
    let mut out = Vec::new();
    for (di, ds) in datasets.iter().enumerate() {
        match &ds.map {
            Some(map) => {
                for (i, g) in map.grids.iter().enumerate().take(MAX_OUTLINES) {
                    let t = &g.transform;
                    let gt = [t.c, t.a, t.b, t.f, t.d, t.e];
                    if let Some(points) = grid_outline(gt, g.width as f64, g.height as f64, g.crs.code()) {
                        let name = ds.scenes.get(i).map_or_else(String::new, |s| s.name.clone());
                        out.push(Outline {
                            dataset: di,
                            name,
                            points,
                            dashed: false,
                        });
                    }
                }
                for (id, b) in map.item_boxes().take(MAX_OUTLINES) {
                    out.push(Outline {
                        dataset: di,
                        name: id.to_string(),
                        points: vec![(b[0], b[1]), (b[2], b[1]), (b[2], b[3]), (b[0], b[3])],
                        dashed: true,
                    });
                }
            }
            None => {
                for s in ds.scenes.iter().take(MAX_OUTLINES) {
                    let Some(object) = &s.object else { continue };
                    let h = object.cog.header();
                    let (Some(gt), Some(epsg), Some(l0)) = (h.geo.geotransform, h.geo.epsg, h.levels.first()) else {
                        continue;
                    };
                    if let Some(points) = grid_outline(gt, l0.width as f64, l0.height as f64, epsg) {
                        out.push(Outline {
                            dataset: di,
                            name: s.name.clone(),
                            points,
                            dashed: false,
                        });
                    }
                }
            }
        }
    }
    out
}

/// Graticule spacing: the smallest step that draws at most 8 lines over `span` degrees.
fn graticule_step(span: f64) -> f64 {
    const STEPS: [f64; 13] = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0];
    STEPS.into_iter().find(|s| span / s <= 8.0).unwrap_or(90.0)
}

/// The SVG map of dataset `d`'s outlines (those of `outlines` with `dataset == d`), fitted
/// to their extent.
pub fn svg(outlines: &[Outline], d: usize, name: &str) -> String {
    let outlines: Vec<&Outline> = outlines.iter().filter(|o| o.dataset == d).collect();
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="footprints" data-dataset="{}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="footprints of {}">"#,
        escape(name),
        escape(name)
    );
    s.push_str(r##"<rect width="100%" height="100%" fill="#f7f7f2"/>"##);
    let pts = outlines.iter().flat_map(|o| o.points.iter());
    let (mut w, mut so, mut e, mut n) = (f64::MAX, f64::MAX, f64::MIN, f64::MIN);
    for &(x, y) in pts {
        w = w.min(x);
        e = e.max(x);
        so = so.min(y);
        n = n.max(y);
    }
    if w > e {
        s.push_str(r#"<text x="20" y="40">no georeferenced footprints</text></svg>"#);
        return s;
    }
    // Equirectangular, x shrunk by cos(mid latitude), fitted with a 6 % margin.
    let k = ((so + n) / 2.0).to_radians().cos().max(0.05);
    let (span_x, span_y) = (((e - w) * k).max(1e-6), (n - so).max(1e-6));
    let scale = (WIDTH / span_x).min(HEIGHT / span_y) * 0.88;
    let (cx, cy) = ((w + e) / 2.0, (so + n) / 2.0);
    let px = |lon: f64| WIDTH / 2.0 + (lon - cx) * k * scale;
    let py = |lat: f64| HEIGHT / 2.0 - (lat - cy) * scale;
    let lon_lo = cx - WIDTH / 2.0 / (k * scale);
    let lon_hi = cx + WIDTH / 2.0 / (k * scale);
    let lat_lo = cy - HEIGHT / 2.0 / scale;
    let lat_hi = cy + HEIGHT / 2.0 / scale;
    let step = graticule_step((lon_hi - lon_lo).max(lat_hi - lat_lo));
    let decimals = if step < 0.1 {
        2
    } else if step < 1.0 {
        1
    } else {
        0
    };
    // Labels: no "-0°".
    let tidy = |g: f64| if g.abs() < step * 1e-6 { 0.0 } else { g };
    let mut g = (lon_lo / step).ceil() * step;
    while g <= lon_hi {
        let x = px(g);
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" y1="0" x2="{x:.1}" y2="{HEIGHT}" stroke="#ccc" stroke-width="0.6"/><text x="{:.1}" y="{:.1}" font-size="9" fill="#777">{:.decimals$}°</text>"##,
            x + 2.0,
            HEIGHT - 3.0,
            tidy(g)
        );
        g += step;
    }
    let mut g = (lat_lo / step).ceil() * step;
    while g <= lat_hi {
        let y = py(g);
        let _ = write!(
            s,
            r##"<line x1="0" y1="{y:.1}" x2="{WIDTH}" y2="{y:.1}" stroke="#ccc" stroke-width="0.6"/><text x="2" y="{:.1}" font-size="9" fill="#777">{:.decimals$}°</text>"##,
            y - 2.0,
            tidy(g)
        );
        g += step;
    }
    let colour = COLOURS[d % COLOURS.len()];
    for o in &outlines {
        let points: Vec<String> = o
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let dash = if o.dashed {
            r#" stroke-dasharray="4 3" fill-opacity="0.04""#
        } else {
            r#" fill-opacity="0.15""#
        };
        let _ = write!(
            s,
            r#"<polygon class="footprint" data-dataset="{}" points="{}" fill="{colour}" stroke="{colour}" stroke-width="1.2"{dash}><title>{}: {}</title></polygon>"#,
            escape(name),
            points.join(" "),
            escape(name),
            escape(&o.name),
        );
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_utm_scene_lands_where_it_is() {
        // 10 km square at (500000, 4100000) in UTM 33N: about 15°E, 37°N.
        let pts = grid_outline([500000.0, 10.0, 0.0, 4100000.0, 0.0, -10.0], 1000.0, 1000.0, 32633).unwrap();
        assert_eq!(pts.len(), 32);
        assert!(
            pts.iter()
                .all(|&(x, y)| (14.9..15.2).contains(&x) && (36.9..37.1).contains(&y))
        );
    }

    #[test]
    fn names_are_escaped_and_empty_maps_say_so() {
        let o = Outline {
            dataset: 0,
            name: "<script>".into(),
            points: vec![(0.0, 0.0), (1.0, 0.0), (1.0, 1.0)],
            dashed: false,
        };
        let s = svg(&[o], 0, "a&b");
        assert!(s.contains("&lt;script&gt;") && s.contains("a&amp;b") && !s.contains("<script>"));
        assert!(svg(&[], 0, "x").contains("no georeferenced footprints"));
        assert_eq!(graticule_step(3.0), 0.5);
    }
}
