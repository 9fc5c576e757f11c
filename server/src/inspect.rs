//! The report `cogfeed inspect` prints: a file's layout, codec, levels, masks and
//! georeferencing as JSON.

use serde_json::{Value, json};

use cogfeed_tiff::{Cog, Level};

fn block(level: &Level) -> Value {
    json!([level.block_width, level.block_height])
}

/// Everything a user needs to know about a file to read it well.
pub fn report(cog: &Cog) -> Value {
    let h = cog.header();
    let l0 = &h.levels[0];
    let overviews: Vec<Value> = h.levels[1..]
        .iter()
        .map(|l| json!({"width": l.width, "height": l.height, "block": block(l)}))
        .collect();
    let masks: Vec<Value> = h
        .masks
        .iter()
        .map(|l| json!({"width": l.width, "height": l.height, "block": block(l), "compression": l.compression}))
        .collect();
    json!({
        "url": cog.name(),
        "width": l0.width,
        "height": l0.height,
        "bands": l0.bands,
        "dtype": l0.dtype.name(),
        "bits_per_sample": l0.storage.bits,
        "block": block(l0),
        "layout": if l0.tiled { "tiled" } else { "striped" },
        "compression": l0.compression,
        "predictor": l0.predictor,
        "planar": l0.planar,
        "photometric": l0.photometric,
        "bigtiff": h.bigtiff,
        "byte_order": match h.order { cogfeed_tiff::ifd::ByteOrder::Little => "little", cogfeed_tiff::ifd::ByteOrder::Big => "big" },
        "overviews": overviews,
        "mask": !h.masks.is_empty(),
        "masks": masks,
        "epsg": h.geo.epsg,
        "geotransform": h.geo.geotransform,
        "nodata": h.geo.nodata_value().filter(|v| v.is_finite()).map(Value::from).or_else(|| h.geo.nodata.clone().map(Value::from)),
        "scale": h.geo.scales,
        "offset": h.geo.offsets,
        "ifds": h.ifd_count,
        "pages": h.pages,
        "size_bytes": h.object_size,
        "version": cog.version(),
        "header_requests": cog.header_requests(),
    })
}
