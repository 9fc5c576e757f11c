//! `ReadFootprintRequest` validation: a dataset, layers and footprints become a typed
//! [`FootprintJob`] — every footprint parsed (CRS, bounds, resolution, datetime, Item),
//! placed on the dataset's grids, its output shapes and bytes computed and checked against
//! the limits — or INVALID_ARGUMENT / NOT_FOUND / FAILED_PRECONDITION naming the footprint
//! and what is wrong. Nothing is allocated for the samples here: the caller admits
//! `memory_bytes` first. Client strings reach messages bounded and escaped; never a URL.

use std::sync::Arc;

use cogfeed_proto::v1 as pb;

use crate::config::LimitsConfig;
use crate::dataset::map::footprint::FootprintAsk;
use crate::dataset::map::{MapSpace, Placed};
use crate::dataset::{Catalog, Dataset};
use crate::error::Error;
use crate::pipeline::footprints::FOOTPRINTS_IN_FLIGHT;

use super::job::{dataset, shown};

/// Longest Item id accepted in a footprint.
const MAX_ITEM_CHARS: usize = 1024;

fn invalid(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(msg.into())
}

/// A validated `ReadFootprint` request.
#[derive(Debug)]
pub struct FootprintJob {
    pub dataset: Arc<Dataset>,
    pub placed: Vec<Placed>,
    /// Layers sent, in request order.
    pub layers: Vec<usize>,
    /// Layers assembled (the sent ones and those the valid fraction needs).
    pub wanted: Vec<usize>,
    /// `(T, C, H, W)` of every layer, the same for every footprint.
    pub shapes: Vec<(usize, usize, usize, usize)>,
    /// Bytes of the response.
    pub bytes: u64,
    /// Bytes the call holds at most: the response, the encoder's copy and the working sets
    /// of the footprints in flight.
    pub memory_bytes: u64,
}

impl FootprintJob {
    /// The dataset's map space (a job is only made for map-space datasets).
    pub fn map(&self) -> Result<&MapSpace, Error> {
        self.dataset
            .map
            .as_deref()
            .ok_or_else(|| invalid(format!("dataset {} is not a map-space dataset", self.dataset.name)))
    }
}

/// Indices of the requested layers (every layer when none is named).
fn layer_indices(ds: &Dataset, map: &MapSpace, names: &[String]) -> Result<Vec<usize>, Error> {
    if names.is_empty() {
        return Ok((0..map.layers.len()).collect());
    }
    if names.len() > map.layers.len() {
        return Err(invalid(format!(
            "{} layers requested, dataset {} has {}",
            names.len(),
            ds.name,
            map.layers.len()
        )));
    }
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let i = map.layers.iter().position(|l| &l.name == name).ok_or_else(|| {
            let all: Vec<&str> = map.layers.iter().map(|l| l.name.as_str()).collect();
            invalid(format!(
                "dataset {} has no layer {} (layers {})",
                ds.name,
                shown(name),
                all.join(", ")
            ))
        })?;
        if out.contains(&i) {
            return Err(invalid(format!("layer {} requested twice", shown(name))));
        }
        out.push(i);
    }
    Ok(out)
}

/// Footprint `k` of the request, parsed.
fn ask(k: usize, f: &pb::Footprint) -> Result<FootprintAsk, Error> {
    let bad = |m: String| invalid(format!("footprint {k}: {m}"));
    if f.crs.is_empty() {
        return Err(bad("no crs (give EPSG:<code>)".into()));
    }
    let crs = cogfeed_geo::Crs::parse(&f.crs).map_err(|_| bad(format!("unknown crs {}", shown(&f.crs))))?;
    let bounds: [f64; 4] = f
        .bounds
        .as_slice()
        .try_into()
        .map_err(|_| bad(format!("{} bounds (give minx, miny, maxx, maxy)", f.bounds.len())))?;
    if bounds.iter().any(|v| !v.is_finite()) {
        return Err(bad(format!("bounds {bounds:?} are not finite")));
    }
    if !(bounds[0] < bounds[2] && bounds[1] < bounds[3]) {
        return Err(bad(format!("bounds {bounds:?}: need minx < maxx and miny < maxy")));
    }
    let r = f.resolution;
    let resolution = if r == 0.0 {
        None
    } else if r.is_finite() && r > 0.0 {
        Some(r)
    } else {
        return Err(bad(format!("resolution {r} is not a positive number")));
    };
    let datetime = if f.datetime.is_empty() {
        None
    } else {
        let t = chrono::DateTime::parse_from_rfc3339(f.datetime.trim())
            .map_err(|_| bad(format!("datetime {} is not RFC 3339", shown(&f.datetime))))?;
        Some(t.with_timezone(&chrono::Utc))
    };
    if f.item.chars().count() > MAX_ITEM_CHARS {
        return Err(bad(format!("item id of {} characters", f.item.chars().count())));
    }
    Ok(FootprintAsk {
        crs,
        bounds,
        resolution,
        datetime,
        item: (!f.item.is_empty()).then(|| f.item.clone()),
    })
}

/// Output pixels of a layer at `resolution` over `bounds`, in f64 (checked before any
/// integer size is made).
fn pixels_f64(bounds: [f64; 4], resolution: f64) -> f64 {
    ((bounds[2] - bounds[0]) / resolution + 0.5).floor() * ((bounds[3] - bounds[1]) / resolution + 0.5).floor()
}

/// Validates a `ReadFootprint` request.
pub fn footprint_job(
    catalog: &Catalog,
    limits: &LimitsConfig,
    r: &pb::ReadFootprintRequest,
) -> Result<FootprintJob, Error> {
    let ds = dataset(catalog, &r.dataset)?;
    let Some(map) = ds.map.as_deref() else {
        return Err(Error::FailedPrecondition(format!(
            "dataset {} is not a map-space dataset: read its scenes with ReadWindow",
            ds.name
        )));
    };
    if r.footprints.is_empty() {
        return Err(invalid("no footprints to read"));
    }
    let most = limits.max_batch_size as usize;
    if r.footprints.len() > most {
        return Err(invalid(format!(
            "{} footprints in one call (at most {most}, limits.max_batch_size)",
            r.footprints.len()
        )));
    }
    let layers = layer_indices(&ds, map, &r.layers)?;
    let mut wanted = layers.clone();
    if let Some(rule) = &map.valid {
        for l in std::iter::once(0).chain(rule.mask_layer) {
            if !wanted.contains(&l) {
                wanted.push(l);
            }
        }
    }
    let side_limit = f64::from(limits.max_patch_size);
    let mut placed = Vec::with_capacity(r.footprints.len());
    let mut shapes: Option<Vec<(usize, usize, usize, usize)>> = None;
    for (k, f) in r.footprints.iter().enumerate() {
        let bad = |m: String| invalid(format!("footprint {k}: {m}"));
        let a = ask(k, f)?;
        // Absurd sizes are refused on the request's own numbers, before placing.
        let reference = a.resolution.unwrap_or(map.layers[0].resolution);
        let (w, h) = (
            (a.bounds[2] - a.bounds[0]) / reference,
            (a.bounds[3] - a.bounds[1]) / reference,
        );
        // Finite or infinite (bounds are finite, the resolution positive): never NaN.
        if w > side_limit + 1.0 || h > side_limit + 1.0 {
            return Err(bad(format!(
                "{w:.0}x{h:.0} reference pixels (at most {} per side, limits.max_patch_size)",
                limits.max_patch_size
            )));
        }
        for l in &map.layers {
            let px = pixels_f64(a.bounds, l.resolution * reference / map.layers[0].resolution);
            if px * l.bands as f64 * l.steps() as f64 * l.dtype.size() as f64 > limits.max_batch_bytes as f64 {
                return Err(bad(format!(
                    "layer {} would hold more than limits.max_batch_bytes ({})",
                    l.name, limits.max_batch_bytes
                )));
            }
        }
        let p = map.place(&a).map_err(|m| match a.item {
            Some(_) if m.starts_with("no drawable item") => Error::NotFound(format!("footprint {k}: {m}")),
            _ => bad(m),
        })?;
        if !map.meets_items(&p) {
            return Err(bad(format!(
                "bounds {:?} in {} meet no item of dataset {}",
                a.bounds, a.crs, ds.name
            )));
        }
        let these = map.placed_shapes(&p).map_err(|e| bad(e.to_string()))?;
        match &shapes {
            None => shapes = Some(these),
            Some(first) => {
                if let Some(&l) = layers.iter().find(|&&l| first[l] != these[l]) {
                    return Err(bad(format!(
                        "layer {} is {:?} ([T, C, H, W]), footprint 0's is {:?}: footprints of one call must have one shape",
                        map.layers[l].name, these[l], first[l]
                    )));
                }
            }
        }
        placed.push(p);
    }
    let shapes = shapes.unwrap_or_default();
    let (mut sample_bytes, mut working) = (0u64, 0u64);
    for &l in &wanted {
        let (t, c, h, w) = shapes[l];
        let pixels = (h as u64).saturating_mul(w as u64).saturating_mul(t as u64);
        let values = pixels.saturating_mul(c as u64);
        let bytes = values.saturating_mul(map.layers[l].dtype.size() as u64);
        if layers.contains(&l) {
            sample_bytes = sample_bytes.saturating_add(bytes.saturating_add(t as u64));
        } else {
            working = working.saturating_add(bytes);
        }
        let held = (crate::dataset::map::mosaic::MOSAIC_IN_FLIGHT + 1) as u64;
        working = working.saturating_add(values.saturating_mul(8).saturating_add(pixels).saturating_mul(held));
    }
    let sample_bytes = sample_bytes.saturating_add(map.meta_bytes_per_sample());
    let n = placed.len() as u64;
    let bytes = sample_bytes.saturating_mul(n);
    if bytes > limits.max_batch_bytes {
        return Err(invalid(format!(
            "the footprints would hold {bytes} bytes, over the limit of {} (limits.max_batch_bytes)",
            limits.max_batch_bytes
        )));
    }
    // Samples are held until stacked (one copy), the stacked batch, the encoder's copy, and
    // the working sets of the loads in flight.
    let in_flight = n.min(FOOTPRINTS_IN_FLIGHT as u64);
    let memory_bytes = bytes
        .saturating_mul(3)
        .saturating_add(working.saturating_add(sample_bytes).saturating_mul(in_flight));
    Ok(FootprintJob {
        dataset: ds.clone(),
        placed,
        layers,
        wanted,
        shapes,
        bytes,
        memory_bytes,
    })
}
