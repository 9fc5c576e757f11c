//! Conversions between the protocol's messages and the crate's types (no logic).

use cogfeed_proto::v1 as pb;

use crate::dataset::Dataset;
use crate::dataset::map::SampleMeta;
use crate::pipeline::{BatchOut, Skipped, TensorOut};
use crate::sampler::WindowSpec;

pub fn tensor(t: TensorOut) -> pb::Tensor {
    pb::Tensor {
        dtype: t.dtype.to_string(),
        shape: t.shape,
        data: t.data,
    }
}

pub fn window(w: &WindowSpec) -> pb::Window {
    pb::Window {
        scene: w.scene,
        col: w.col,
        row: w.row,
        width: w.width,
        height: w.height,
        level: w.level,
        padded: w.padded,
    }
}

fn skipped(s: &Skipped) -> pb::SkippedSample {
    pb::SkippedSample {
        sample: s.sample,
        window: Some(window(&s.window)),
        reason: s.reason.to_string(),
    }
}

pub fn batch(b: BatchOut) -> pb::Batch {
    pb::Batch {
        dataset_version: b.dataset_version.to_string(),
        epoch: b.epoch,
        index: b.index,
        cursor: b.cursor,
        image: Some(tensor(b.image)),
        label: b.label.map(tensor),
        windows: b.windows.iter().map(window).collect(),
        batches_in_epoch: b.batches_in_epoch,
        skipped: b.skipped.iter().map(skipped).collect(),
        layers: b
            .layers
            .into_iter()
            .map(|(name, t)| pb::NamedTensor {
                name,
                tensor: Some(tensor(t)),
            })
            .collect(),
        samples: b.samples.iter().map(sample).collect(),
        image_layer: b.image_layer.unwrap_or_default(),
        time_masks: b
            .time_masks
            .into_iter()
            .map(|(name, t)| pb::NamedTensor {
                name,
                tensor: Some(tensor(t)),
            })
            .collect(),
        targets: b
            .targets
            .into_iter()
            .map(|(name, t)| pb::NamedTensor {
                name,
                tensor: Some(tensor(t)),
            })
            .collect(),
    }
}

fn sample(m: &SampleMeta) -> pb::SampleInfo {
    pb::SampleInfo {
        items: m.items.clone(),
        drawn: m.drawn.clone(),
        datetime: m.datetime.clone().unwrap_or_default(),
        crs: m.crs.clone(),
        bounds: m.bounds.to_vec(),
        resolution: m.resolution,
        padded: m.padded,
        valid_fraction: m.valid_fraction,
        split: m.split.clone().unwrap_or_default(),
        datetimes: m
            .times
            .iter()
            .map(|(layer, days)| pb::LayerDates {
                layer: layer.clone(),
                dates: days.iter().map(|d| d.clone().unwrap_or_default()).collect(),
            })
            .collect(),
        point_id: m.point_id.clone().unwrap_or_default(),
        targets: m.targets.iter().cloned().collect(),
        dataset: m.dataset.clone().unwrap_or_default(),
        harmonized_offset: m
            .harmonized
            .iter()
            .map(|(layer, offsets)| pb::LayerOffsets {
                layer: layer.clone(),
                offsets: offsets.clone(),
            })
            .collect(),
    }
}

/// One of a map-space scene's drawn Item's times, RFC 3339 (empty: none, or a scene dataset).
fn item_time(
    ds: &Dataset,
    scene: usize,
    time: impl Fn(&cogfeed_stac::Item) -> Option<chrono::DateTime<chrono::Utc>>,
) -> String {
    ds.map
        .as_ref()
        .and_then(|m| m.drawn.get(scene).and_then(|&i| m.items.get(i)))
        .and_then(time)
        .map(|t| t.to_rfc3339())
        .unwrap_or_default()
}

/// What `DescribeDataset` answers for `ds`.
pub fn dataset_info(ds: &Dataset) -> pb::DatasetInfo {
    let scenes = ds
        .scenes
        .iter()
        .map(|s| pb::SceneInfo {
            index: s.index as u32,
            name: s.name.clone(),
            levels: match &ds.map {
                // Map-space: the reference grid the sampler plans over.
                Some(map) => {
                    let g = map.scene_grid(s.index);
                    vec![pb::Level {
                        width: g.width,
                        height: g.height,
                        block_width: g.block_width as u32,
                        block_height: g.block_height as u32,
                    }]
                }
                None => s
                    .object
                    .iter()
                    .flat_map(|o| o.cog.header().levels.iter())
                    .map(|l| pb::Level {
                        width: l.width,
                        height: l.height,
                        block_width: l.block_width as u32,
                        block_height: l.block_height as u32,
                    })
                    .collect(),
            },
            has_label: s.label.is_some(),
            geotransform: match &ds.map {
                Some(map) => {
                    let t = &map.grids[s.index].transform;
                    vec![t.c, t.a, t.b, t.f, t.d, t.e]
                }
                None => s
                    .object
                    .as_ref()
                    .and_then(|o| o.cog.header().geo.geotransform)
                    .map(|g| g.to_vec())
                    .unwrap_or_default(),
            },
            crs: match &ds.map {
                Some(map) => map.grids[s.index].crs.to_string(),
                None => s
                    .object
                    .as_ref()
                    .and_then(|o| o.cog.header().geo.epsg)
                    .map(|e| format!("EPSG:{e}"))
                    .unwrap_or_default(),
            },
            datetime: item_time(ds, s.index, |i| i.datetime),
            start_datetime: item_time(ds, s.index, |i| i.start),
            end_datetime: item_time(ds, s.index, |i| i.end),
        })
        .collect();
    let layers = ds
        .map
        .as_ref()
        .map(|m| {
            m.layers
                .iter()
                .map(|l| pb::LayerInfo {
                    name: l.name.clone(),
                    assets: l.assets.clone(),
                    resolution: l.resolution,
                    resampling: l.resampling.name().to_string(),
                    dtype: l.dtype.name().to_string(),
                    bands: l.bands as u32,
                    nodata: l.nodata,
                })
                .collect()
        })
        .unwrap_or_default();
    pb::DatasetInfo {
        name: ds.name.clone(),
        version: ds.version.clone(),
        bands: ds.bands.iter().map(|b| *b as u32 + 1).collect(),
        dtype: ds.dtype.name().to_string(),
        labels: ds.label_dtype.is_some(),
        label_dtype: ds.label_dtype.map(|d| d.name().to_string()).unwrap_or_default(),
        fill: ds.fill,
        mean: ds.mean.clone(),
        std: ds.std.clone(),
        scenes,
        layers,
        crs: ds.map.as_ref().map(|m| m.crs_name()).unwrap_or_default(),
        balance: ds
            .map
            .as_ref()
            .and_then(|m| m.balance.as_ref())
            .map(|b| {
                b.shares
                    .iter()
                    .map(|s| pb::ClassShare {
                        class_value: s.class,
                        natural: s.natural,
                        target: s.target,
                        expected: s.expected,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        balance_layer: ds
            .map
            .as_ref()
            .and_then(|m| Some(m.layers[m.balance.as_ref()?.layer].name.clone()))
            .unwrap_or_default(),
    }
}
