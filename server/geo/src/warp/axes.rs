//! Kernels over an axis-aligned mapping: when every footprint column maps to one
//! source x range and every row to one y range (same CRS, north-up grids on both sides),
//! the source pixels under a destination pixel and their partial-pixel weights depend on
//! its column alone along x and on its row alone along y, and so do the centre pixel and
//! the bilinear neighbours and weights of a centre. They are computed once per column and
//! once per row ([`AxisSpans`], [`bilinear_axis`]) instead of once per pixel, then
//! `average` and bilinear run over them with the same arithmetic, in the same order, as
//! the per-pixel kernels: the results are bit-identical (tested).
//!
//! Owns the per-axis plans of the kernels; must never change what a pixel's value is.

use super::kernel::{self, Source};

/// One destination column's (or row's) source span: first and one-past-last source index,
/// and where its weights start in [`AxisSpans::weights`].
#[derive(Debug, Clone, Copy)]
struct Span {
    first: usize,
    end: usize,
    at: usize,
}

/// Spans and weights of every column (or row) of a footprint along one axis.
#[derive(Debug, Clone)]
pub struct AxisSpans {
    spans: Vec<Option<Span>>,
    weights: Vec<f64>,
}

impl AxisSpans {
    /// Spans of the `edges.len() - 1` destination pixels whose edges map to `edges` (window
    /// pixels, unsorted pairs allowed), over a source axis of `size` pixels, with GDAL's
    /// margin check at `margin` and its partial-pixel weights (as `kernel::area`).
    pub fn new(edges: &[f64], size: usize, margin: f64) -> Self {
        let n = edges.len().saturating_sub(1);
        let mut spans = Vec::with_capacity(n);
        let mut weights = Vec::with_capacity(n * 3);
        let sz = size as f64;
        let inside = |v: f64| v >= -margin && v - sz <= margin;
        for k in 0..n {
            let (mut lo, mut hi) = (edges[k], edges[k + 1]);
            if !(lo.is_finite() && hi.is_finite() && inside(lo) && inside(hi)) {
                spans.push(None);
                continue;
            }
            if lo > hi {
                std::mem::swap(&mut lo, &mut hi);
            }
            let (first, end) = kernel::span(lo, hi, sz);
            let at = weights.len();
            for i in first..end {
                weights.push(kernel::edge_weight(i, first, end, lo, hi));
            }
            spans.push(Some(Span { first, end, at }));
        }
        Self { spans, weights }
    }

    /// Number of destination pixels along the axis.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether the axis has no destination pixel.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

/// The footprint's corner grid (`(w + 1) × (h + 1)` points, row by row, window pixels) as
/// one x edge per column and one y edge per row, when it is separable: every row holds the
/// same x values and every column the same y values, exactly. None otherwise.
pub fn separable_edges(cx: &[f64], cy: &[f64], w: usize, h: usize) -> Option<(Vec<f64>, Vec<f64>)> {
    separable(cx, cy, w + 1, h + 1)
}

/// [`separable_edges`] for the `w × h` pixel centres: one x per column, one y per row.
pub fn separable_centres(cx: &[f64], cy: &[f64], w: usize, h: usize) -> Option<(Vec<f64>, Vec<f64>)> {
    separable(cx, cy, w, h)
}

/// A `cols × rows` point grid as its x per column and y per row, when it is separable.
fn separable(cx: &[f64], cy: &[f64], cols: usize, rows: usize) -> Option<(Vec<f64>, Vec<f64>)> {
    if cols == 0 || rows == 0 || cx.len() != cols * rows || cy.len() != cx.len() {
        return None;
    }
    let xs = &cx[..cols];
    let same = |a: f64, b: f64| a == b || (a.is_nan() && b.is_nan());
    for i in 0..rows {
        let row = i * cols..(i + 1) * cols;
        let y0 = cy[i * cols];
        if !cx[row.clone()].iter().zip(xs).all(|(&a, &b)| same(a, b)) || !cy[row].iter().all(|&v| same(v, y0)) {
            return None;
        }
    }
    let ys = (0..rows).map(|i| cy[i * cols]).collect();
    Some((xs.to_vec(), ys))
}

/// Per column (or row) of centres at `points` (level pixels) over a window starting at
/// `offset` of `size` pixels: the pixel under the centre and the bilinear neighbour and
/// weight (`kernel::bilinear_axis`); None where the centre lies outside the window.
pub fn bilinear_axis(points: &[f64], offset: f64, size: usize) -> Vec<Option<(usize, (isize, f64))>> {
    points
        .iter()
        .map(|&p| {
            let v = p - offset;
            Some((kernel::centre_index(v, size)?, kernel::bilinear_axis(v)))
        })
        .collect()
}

/// Area-weighted average of the valid source pixels under destination pixel (`col` of
/// `cols`, `row` of `rows`), per band into `out`; false where the pixel gets no value.
/// The same sums in the same order as `kernel::average`.
#[inline]
pub fn average(src: &Source<'_>, cols: &AxisSpans, rows: &AxisSpans, col: usize, row: usize, out: &mut [f64]) -> bool {
    let (Some(sx), Some(sy)) = (cols.spans[col], rows.spans[row]) else {
        return false;
    };
    let wx = &cols.weights[sx.at..sx.at + (sx.end - sx.first)];
    let wys = &rows.weights[sy.at..sy.at + (sy.end - sy.first)];
    let plane = src.width * src.height;
    let mut total = 0.0;
    if out.len() == 1 {
        let mut acc = 0.0;
        for (iy, &wy) in (sy.first..sy.end).zip(wys) {
            let start = iy * src.width + sx.first;
            let end = iy * src.width + sx.end;
            let (valid, values) = (&src.valid[start..end], &src.values[start..end]);
            for ((&ok, &v), &w1) in valid.iter().zip(values).zip(wx) {
                if ok {
                    let w = wy * w1;
                    total += w;
                    acc += w * v;
                }
            }
        }
        if total <= 0.0 {
            return false;
        }
        out[0] = acc / total;
        return true;
    }
    out.iter_mut().for_each(|o| *o = 0.0);
    for (iy, &wy) in (sy.first..sy.end).zip(wys) {
        let at_row = iy * src.width;
        for (ix, &w1) in (sx.first..sx.end).zip(wx) {
            if !src.valid[at_row + ix] {
                continue;
            }
            let w = wy * w1;
            total += w;
            for (b, o) in out.iter_mut().enumerate() {
                *o += w * src.values[b * plane + at_row + ix];
            }
        }
    }
    if total <= 0.0 {
        return false;
    }
    out.iter_mut().for_each(|o| *o /= total);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warp::test_rng::random_window;

    #[test]
    fn per_axis_average_is_bit_identical_to_the_per_pixel_kernel() {
        let mut seed = 7u64;
        for bands in [1usize, 3] {
            for &(scale, offset) in &[(1.0, 0.37), (0.5, 0.0), (0.37, 0.61), (2.3, 0.15), (1.0, -1.2)] {
                let (sw, sh) = (23usize, 19usize);
                let (values, valid) = random_window(&mut seed, (sw, sh, bands), 1000.0, 0.2);
                let src = Source {
                    width: sw,
                    height: sh,
                    bands,
                    values: &values,
                    valid: &valid,
                };
                let (w, h) = (9usize, 7usize);
                // Corners of a footprint mapped axis by axis (x by `1/scale`, y by `1.3/scale`).
                let cx: Vec<f64> = (0..=h)
                    .flat_map(|_| (0..=w).map(move |j| offset + j as f64 / scale))
                    .collect();
                let cy: Vec<f64> = (0..=h)
                    .flat_map(|i| std::iter::repeat_n(offset * 0.5 + i as f64 * 1.3 / scale, w + 1))
                    .collect();
                let (xs, ys) = separable_edges(&cx, &cy, w, h).expect("axis-aligned corners are separable");
                let margin = (2.0, 2.0);
                let (cols, rows) = (AxisSpans::new(&xs, sw, margin.0), AxisSpans::new(&ys, sh, margin.1));
                let (mut a, mut b) = (vec![0.0; bands], vec![0.0; bands]);
                for i in 0..h {
                    for j in 0..w {
                        let c1 = i * (w + 1) + j;
                        let c2 = (i + 1) * (w + 1) + j + 1;
                        let per_pixel = kernel::area(&src, (cx[c1], cy[c1]), (cx[c2], cy[c2]), margin)
                            .map(|area| kernel::average(&src, &area, &mut a))
                            .unwrap_or(false);
                        let per_axis = average(&src, &cols, &rows, j, i, &mut b);
                        assert_eq!(per_pixel, per_axis, "pixel {i},{j}");
                        if per_pixel {
                            assert_eq!(
                                a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                                b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                                "pixel {i},{j}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn per_axis_bilinear_is_bit_identical_to_the_per_pixel_kernel() {
        let mut seed = 11u64;
        for bands in [1usize, 2] {
            for &(step, offset) in &[(1.0, 0.37), (0.5, -0.8), (0.93, 0.05), (1.07, 0.5)] {
                let (sw, sh) = (17usize, 15usize);
                let (values, valid) = random_window(&mut seed, (sw, sh, bands), 1000.0, 0.15);
                let src = Source {
                    width: sw,
                    height: sh,
                    bands,
                    values: &values,
                    valid: &valid,
                };
                let (w, h) = (18usize, 16usize);
                let xs: Vec<f64> = (0..w).map(|j| offset + (j as f64 + 0.5) * step).collect();
                let ys: Vec<f64> = (0..h).map(|i| offset * 0.7 + (i as f64 + 0.5) * step).collect();
                let cx: Vec<f64> = (0..h).flat_map(|_| xs.iter().copied()).collect();
                let cy: Vec<f64> = ys.iter().flat_map(|&y| std::iter::repeat_n(y, w)).collect();
                assert_eq!(separable_centres(&cx, &cy, w, h), Some((xs.clone(), ys.clone())));
                let (cols, rows) = (bilinear_axis(&xs, 0.0, sw), bilinear_axis(&ys, 0.0, sh));
                let (mut a, mut b) = (vec![0.0; bands], vec![0.0; bands]);
                for (i, &y) in ys.iter().enumerate() {
                    for (j, &x) in xs.iter().enumerate() {
                        let per_pixel = kernel::centre_pixel(&src, x, y)
                            .filter(|&(ix, iy)| src.valid[iy * sw + ix])
                            .map(|_| kernel::bilinear4(&src, x, y, &mut a));
                        let per_axis = match (cols[j], rows[i]) {
                            (Some((ix, bx)), Some((iy, by))) if src.valid[iy * sw + ix] => {
                                Some(kernel::bilinear_at(&src, bx, by, &mut b))
                            }
                            _ => None,
                        };
                        assert_eq!(per_pixel, per_axis, "pixel {i},{j}");
                        if per_pixel == Some(true) {
                            assert_eq!(
                                a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                                b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                                "pixel {i},{j}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_rotated_corner_grid_is_not_separable() {
        let (w, h) = (2usize, 2usize);
        let cx: Vec<f64> = (0..=h)
            .flat_map(|i| (0..=w).map(move |j| j as f64 + 0.01 * i as f64))
            .collect();
        let cy: Vec<f64> = (0..=h).flat_map(|i| std::iter::repeat_n(i as f64, w + 1)).collect();
        assert!(separable_edges(&cx, &cy, w, h).is_none());
        let cx: Vec<f64> = (0..=h).flat_map(|_| (0..=w).map(|j| j as f64)).collect();
        assert!(separable_edges(&cx, &cy, w, h).is_some());
    }
}
