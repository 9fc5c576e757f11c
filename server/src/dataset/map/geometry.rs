//! The geometry helpers of map-space planning: densified footprint edges, lon/lat boxes
//! for pruning, reference grids clipped to the AOI, and the test that a footprint lies on
//! a source grid (a copy, not a warp). Pure: no I/O.

use super::*;

/// Densified edges of a `w` × `h` pixel grid, as map points (`steps` segments a side).
pub(super) fn edge_points(t: &Affine, w: f64, h: f64, steps: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut xs, mut ys) = (Vec::with_capacity(4 * (steps + 1)), Vec::with_capacity(4 * (steps + 1)));
    for s in 0..=steps {
        let r = s as f64 / steps as f64;
        for (c, rr) in [(r * w, 0.0), (r * w, h), (0.0, r * h), (w, r * h)] {
            let (x, y) = t.apply(c, rr);
            xs.push(x);
            ys.push(y);
        }
    }
    (xs, ys)
}

pub(super) fn bbox_of(xs: &[f64], ys: &[f64]) -> Option<[f64; 4]> {
    let mut b = [f64::INFINITY, f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY];
    for (&x, &y) in xs.iter().zip(ys) {
        if x.is_finite() && y.is_finite() {
            b = [b[0].min(x), b[1].min(y), b[2].max(x), b[3].max(y)];
        }
    }
    b[0].is_finite().then_some(b)
}

/// Whether an Item's lon/lat `bbox` is lon/lat at all and meets `grid` (its assets' grid in
/// lon/lat), with a margin of 0.01° for rounding and reprojection.
pub(super) fn bbox_meets_grid(bbox: [f64; 4], grid: [f64; 4]) -> bool {
    const MARGIN: f64 = 0.01;
    let lonlat = bbox.iter().all(|v| v.is_finite())
        && bbox[0].abs() <= 180.0 + MARGIN
        && bbox[2].abs() <= 180.0 + MARGIN
        && bbox[1].abs() <= 90.0 + MARGIN
        && bbox[3].abs() <= 90.0 + MARGIN;
    // An antimeridian-crossing bbox (west > east) is taken as meeting.
    let crosses = bbox[0] > bbox[2];
    lonlat
        && (crosses || (bbox[0] <= grid[2] + MARGIN && bbox[2] >= grid[0] - MARGIN))
        && bbox[1] <= grid[3] + MARGIN
        && bbox[3] >= grid[1] - MARGIN
}

/// The EPSG:4326 bbox of a footprint's `bounds` in `crs`, for pruning candidates: corners
/// and edge midpoints, widened by 0.0005° (~50 m; a footprint's edges bulge far less).
pub(super) fn lonlat_bbox(crs: &Crs, bounds: [f64; 4]) -> Option<[f64; 4]> {
    let t = Affine::north_up(bounds[0], bounds[3], 1.0);
    let (mut xs, mut ys) = edge_points(&t, bounds[2] - bounds[0], bounds[3] - bounds[1], 2);
    let wgs = Crs::from_epsg(4326).ok()?;
    Transformer::new(crs, &wgs).transform(&mut xs, &mut ys);
    let b = bbox_of(&xs, &ys)?;
    const MARGIN: f64 = 0.0005;
    Some([b[0] - MARGIN, b[1] - MARGIN, b[2] + MARGIN, b[3] + MARGIN])
}

/// The window of `src`'s full-resolution grid that is exactly `fp` (same CRS, north-up,
/// same pixel size, whole-pixel offset, starting inside the image), when the layer's
/// output is then the source's bytes: same sample type, and source nodata equal to the
/// layer's fill (or none). Every kernel reduces to a copy there, as in GDAL, which warps a
/// translation on pixel boundaries with nearest.
pub(super) fn aligned_window(src: &AssetSource, fp: &Footprint, layer: &LayerSpec) -> Option<WindowSpec> {
    let t = src.transform;
    let res = fp.resolution;
    if src.crs != fp.crs || t.b != 0.0 || t.d != 0.0 || src.dtype != layer.dtype {
        return None;
    }
    let same = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    if !same(t.a, res) || !same(-t.e, res) {
        return None;
    }
    if src.nodata.iter().any(|n| n.is_some_and(|v| v != layer.nodata)) {
        return None;
    }
    let col = (fp.bounds[0] - t.c) / res;
    let row = (t.f - fp.bounds[3]) / res;
    let whole = |v: f64| (v - v.round()).abs() < 1e-6;
    if !whole(col) || !whole(row) || col.round() < 0.0 || row.round() < 0.0 {
        return None;
    }
    let (col, row) = (col.round() as u64, row.round() as u64);
    if col >= src.width || row >= src.height {
        return None;
    }
    Some(WindowSpec {
        scene: 0,
        col,
        row,
        width: u32::try_from(fp.width()).ok()?,
        height: u32::try_from(fp.height()).ok()?,
        level: 0,
        padded: false,
    })
}

/// The part of `g` inside `aoi` (EPSG:4326): the largest box of whole pixels of `g` whose
/// every footprint lies inside the area (the AOI's edges, densified and reprojected, bound
/// it from inside; a pixel the edge cuts is left out). None when no whole pixel fits.
/// Windows drawn on the result lie inside the AOI; aligned windows keep to this box and so
/// may straddle source tiles.
pub(super) fn clip_to_aoi(g: &RefGrid, aoi: [f64; 4]) -> Option<RefGrid> {
    const STEPS: usize = 20;
    let wgs = Crs::from_epsg(4326).ok()?;
    let to_grid = Transformer::new(&wgs, &g.crs);
    let edge = |from: (f64, f64), to: (f64, f64)| -> (Vec<f64>, Vec<f64>) {
        let (mut xs, mut ys): (Vec<f64>, Vec<f64>) = (0..=STEPS)
            .map(|k| {
                let t = k as f64 / STEPS as f64;
                (from.0 + t * (to.0 - from.0), from.1 + t * (to.1 - from.1))
            })
            .unzip();
        to_grid.transform(&mut xs, &mut ys);
        (xs, ys)
    };
    let [w, s, e, n] = aoi;
    let (left, _) = edge((w, s), (w, n));
    let (right, _) = edge((e, s), (e, n));
    let (_, bottom) = edge((w, s), (e, s));
    let (_, top) = edge((w, n), (e, n));
    let finite = |v: &[f64]| v.iter().all(|x| x.is_finite());
    if !(finite(&left) && finite(&right) && finite(&bottom) && finite(&top)) {
        return None;
    }
    let max = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let inner = [max(&left), max(&bottom), min(&right), min(&top)];
    let inv = g.transform.inverse().ok()?;
    let (c0, r0) = inv.apply(inner[0], inner[3]);
    let (c1, r1) = inv.apply(inner[2], inner[1]);
    // Whole pixels inside, with a hair of tolerance for an AOI on pixel edges.
    const EPS: f64 = 1e-6;
    let col0 = (c0.min(c1) - EPS).ceil().max(0.0);
    let row0 = (r0.min(r1) - EPS).ceil().max(0.0);
    let col1 = (c0.max(c1) + EPS).floor().min(g.width as f64);
    let row1 = (r0.max(r1) + EPS).floor().min(g.height as f64);
    if !(col1 > col0 && row1 > row0) {
        return None;
    }
    let (x0, y0) = g.transform.apply(col0, row0);
    Some(RefGrid {
        crs: g.crs.clone(),
        transform: Affine::north_up(x0, y0, g.transform.a),
        width: (col1 - col0) as u64,
        height: (row1 - row0) as u64,
        block: g.block,
    })
}

/// The reference grid of `s` at resolution `res`, in `fixed` or in the asset's own CRS.
pub(super) fn ref_grid(s: &AssetSource, res: f64, fixed: Option<&Crs>) -> std::result::Result<RefGrid, String> {
    let t = s.transform;
    let tile = s.object.cog.header().levels[0].block_width as f64;
    let tile_h = s.object.cog.header().levels[0].block_height as f64;
    let (px, py) = t.pixel_size();
    let block = |tile: f64, p: f64| ((tile * p / res).round() as u64).max(1);
    match fixed {
        Some(crs) if crs != &s.crs => {
            let (mut xs, mut ys) = edge_points(&t, s.width as f64, s.height as f64, 20);
            Transformer::new(&s.crs, crs).transform(&mut xs, &mut ys);
            let b = bbox_of(&xs, &ys).ok_or("its grid does not transform into the dataset's CRS")?;
            let (x0, y1) = ((b[0] / res).floor() * res, (b[3] / res).ceil() * res);
            let (x1, y0) = ((b[2] / res).ceil() * res, (b[1] / res).floor() * res);
            Ok(RefGrid {
                crs: crs.clone(),
                transform: Affine::north_up(x0, y1, res),
                width: ((x1 - x0) / res).round() as u64,
                height: ((y1 - y0) / res).round() as u64,
                block: (block(tile, px), block(tile_h, py)),
            })
        }
        _ => {
            if t.b != 0.0 || t.d != 0.0 || t.a <= 0.0 || t.e >= 0.0 {
                return Err("its reference asset's grid is not north-up; use a fixed crs".into());
            }
            Ok(RefGrid {
                crs: s.crs.clone(),
                transform: Affine::north_up(t.c, t.f, res),
                width: (s.width as f64 * px / res + 1e-9).floor() as u64,
                height: (s.height as f64 * py / res + 1e-9).floor() as u64,
                block: (block(tile, px), block(tile_h, py)),
            })
        }
    }
}
