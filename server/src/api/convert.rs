//! Conversions between the protocol's messages and the crate's types (no logic).

use cogfeed_proto::v1 as pb;

use crate::pipeline::{BatchOut, Skipped, TensorOut};
use crate::sampler::WindowSpec;
use crate::stacset::SampleMeta;

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
    }
}

fn sample(m: &SampleMeta) -> pb::SampleInfo {
    pb::SampleInfo {
        items: m.items.clone(),
        datetime: m.datetime.clone().unwrap_or_default(),
        crs: m.crs.clone(),
        bounds: m.bounds.to_vec(),
        resolution: m.resolution,
        padded: m.padded,
    }
}
