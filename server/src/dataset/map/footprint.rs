//! Footprints asked for by a client (`ReadFootprint`): a CRS and bounds become a [`Placed`]
//! sample — snapped to a reference grid in that grid's CRS and planned on its drawn Item,
//! exactly as the sampler would have placed it, or else a footprint of its own — and its
//! layers are assembled by the same code as a streamed sample's, so the bytes and the
//! metadata are the same. Owns the placing rules and the per-layer output shapes; never
//! allocates a sample before its size is known (callers check it against the limits), never
//! reads a file itself.

use chrono::{DateTime, Utc};

use super::{Drawn, LayerSpec, MapSpace, Placed, SampleMeta, day, lonlat_bbox};
use crate::error::Result;
use crate::tiles::TileSource;
use cogfeed_geo::{Crs, Footprint};

/// A footprint as the client gave it, parsed but not yet placed.
#[derive(Debug, Clone)]
pub struct FootprintAsk {
    pub crs: Crs,
    pub bounds: [f64; 4],
    /// Reference layer pixel size (None: the dataset's).
    pub resolution: Option<f64>,
    pub datetime: Option<DateTime<Utc>>,
    /// The drawn Item's id, when given.
    pub item: Option<String>,
}

/// Grid pixel edges `bounds` snap to on scene `scene`'s grid: (col0, row0, col1, row1).
fn snapped(map: &MapSpace, scene: usize, bounds: [f64; 4]) -> Option<[i64; 4]> {
    let t = &map.grids[scene].transform;
    if t.b != 0.0 || t.d != 0.0 || t.a == 0.0 || t.e == 0.0 {
        return None;
    }
    let col = |x: f64| ((x - t.c) / t.a).round();
    let row = |y: f64| ((y - t.f) / t.e).round();
    let (c0, c1) = (col(bounds[0]).min(col(bounds[2])), col(bounds[0]).max(col(bounds[2])));
    let (r0, r1) = (row(bounds[1]).min(row(bounds[3])), row(bounds[1]).max(row(bounds[3])));
    let fits = |v: f64| v.is_finite() && v.abs() < 1e15;
    if ![c0, c1, r0, r1].into_iter().all(fits) {
        return None;
    }
    Some([c0 as i64, r0 as i64, c1 as i64, r1 as i64])
}

/// The map bounds of grid pixels `px` of scene `scene`, computed as `MapSpace::bounds`
/// computes a window's (so a snapped streamed footprint is the same floats).
fn bounds_of(map: &MapSpace, scene: usize, px: [i64; 4]) -> [f64; 4] {
    let t = &map.grids[scene].transform;
    let (x0, y0) = t.apply(px[0] as f64, px[1] as f64);
    let (x1, y1) = t.apply(px[2] as f64, px[3] as f64);
    [x0.min(x1), y0.min(y1), x0.max(x1), y0.max(y1)]
}

impl MapSpace {
    /// Places `ask`: with `item`, on that Item's grid (its CRS must be the footprint's);
    /// else on the first grid (priority order) in the footprint's CRS whose pixels hold the
    /// footprint's first pixel and, with a datetime, whose Item has that datetime (or, for
    /// want of one, that day); else a footprint of its own (snapped to the first grid in its
    /// CRS, if any). A client-facing message on refusal.
    pub fn place(&self, ask: &FootprintAsk) -> std::result::Result<Placed, String> {
        let reference = self.layers[0].resolution;
        let scale = match ask.resolution {
            None => 1.0,
            Some(r) if r.is_finite() && r > 0.0 => r / reference,
            Some(r) => return Err(format!("resolution {r} is not a positive number")),
        };
        let same_crs: Vec<usize> = (0..self.grids.len())
            .filter(|&s| self.grids[s].crs == ask.crs)
            .collect();
        let holds = |s: usize| -> Option<([f64; 4], bool)> {
            let px = snapped(self, s, ask.bounds)?;
            let g = &self.grids[s];
            let inside = |v: i64, n: u64| v >= 0 && (v as u64) < n;
            if px[2] <= px[0] || px[3] <= px[1] || !inside(px[0], g.width) || !inside(px[1], g.height) {
                return None;
            }
            let padded = px[2] as u64 > g.width || px[3] as u64 > g.height;
            Some((bounds_of(self, s, px), padded))
        };
        let on = |s: usize, bounds: [f64; 4], padded: bool| Placed {
            crs: ask.crs.clone(),
            bounds,
            scale,
            drawn: self.drawn_of(s),
            datetime: None,
            padded,
        };
        if let Some(id) = &ask.item {
            let s = (0..self.grids.len())
                .find(|&s| &self.items[self.drawn[s]].id == id)
                .ok_or_else(|| format!("no drawable item {id:?}"))?;
            if self.grids[s].crs != ask.crs {
                return Err(format!(
                    "item {id:?} has its reference grid in {}, not {}",
                    self.grids[s].crs, ask.crs
                ));
            }
            let (bounds, padded) = holds(s)
                .ok_or_else(|| format!("the footprint's first pixel is not on item {id:?}'s reference grid"))?;
            return Ok(on(s, bounds, padded));
        }
        let of_item = |s: usize| &self.items[self.drawn[s]];
        let by_time: [&dyn Fn(usize) -> bool; 2] =
            [&|s| ask.datetime.is_none_or(|t| of_item(s).datetime == Some(t)), &|s| {
                ask.datetime.is_none_or(|t| day(of_item(s)) == Some(t.date_naive()))
            }];
        for matches in by_time {
            for &s in &same_crs {
                if matches(s)
                    && let Some((bounds, padded)) = holds(s)
                {
                    return Ok(on(s, bounds, padded));
                }
            }
        }
        // A footprint of its own, on the lattice of the first grid in its CRS.
        let bounds = match same_crs.first().and_then(|&s| Some((s, snapped(self, s, ask.bounds)?))) {
            Some((s, px)) if px[2] > px[0] && px[3] > px[1] => bounds_of(self, s, px),
            Some(_) => return Err(format!("bounds {:?} hold no pixel of the reference grid", ask.bounds)),
            None => ask.bounds,
        };
        Ok(Placed {
            crs: ask.crs.clone(),
            bounds,
            scale,
            drawn: Drawn {
                item: None,
                day: ask.datetime.map(|t| t.date_naive()),
            },
            datetime: ask.datetime.map(|t| t.to_rfc3339()),
            padded: false,
        })
    }

    /// Whether some Item's lon/lat bbox meets the footprint of `placed`.
    pub fn meets_items(&self, placed: &Placed) -> bool {
        let Some(b) = lonlat_bbox(&placed.crs, placed.bounds) else {
            return false;
        };
        self.index.query(b).into_iter().any(|i| {
            let ib = self.bboxes[i];
            !(ib[0] > b[2] || ib[2] < b[0] || ib[1] > b[3] || ib[3] < b[1])
        })
    }

    /// The output shape `(T, C, H, W)` of every layer of `placed` (an invalid footprint,
    /// e.g. one over the side limit, is refused here, before anything is allocated).
    pub fn placed_shapes(&self, placed: &Placed) -> Result<Vec<(usize, usize, usize, usize)>> {
        self.layers
            .iter()
            .map(|l| {
                let fp = Footprint::new(placed.crs.clone(), placed.bounds, l.resolution * placed.scale)?;
                Ok((l.steps(), l.bands, fp.height() as usize, fp.width() as usize))
            })
            .collect()
    }

    /// The sample `placed`: the layers in `wanted` assembled (as by `MapSpace::sample`, the
    /// valid fraction counted on each layer's own pixels) and its metadata.
    pub async fn read_placed(
        &self,
        tiles: &dyn TileSource,
        placed: &Placed,
        wanted: &[usize],
    ) -> Result<(Vec<Vec<u8>>, SampleMeta)> {
        let reference = self.layers[0].resolution * placed.scale;
        let side = |l: &LayerSpec| {
            let res = (l.resolution * placed.scale).max(reference);
            let along = |len: f64| (len / res + 0.5).floor().max(0.0) as usize;
            (
                along(placed.bounds[3] - placed.bounds[1]),
                along(placed.bounds[2] - placed.bounds[0]),
            )
        };
        self.assemble(tiles, placed, wanted, &side).await
    }
}
