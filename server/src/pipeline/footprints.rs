//! One `ReadFootprint` call: the placed footprints' samples assembled concurrently (a
//! bounded, ordered look-ahead, so the batch is in request order whatever finishes first)
//! and stacked into one batch exactly as a stream stacks its samples. Never validates or
//! admits (the caller did, before anything was allocated) and never decodes or warps itself:
//! `dataset::map` assembles each sample, its CPU work on the caller's pool tenant. Dropping
//! the future (the client went away) drops every load in flight; queued CPU work for them
//! never starts.

use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::{BatchOut, TensorOut};
use crate::dataset::map::{MapSpace, Placed, SampleMeta};
use crate::error::Error;
use crate::tiles::TileSource;

/// Footprints of one call assembled at once.
pub const FOOTPRINTS_IN_FLIGHT: usize = 8;

/// What to read: the footprints, placed and checked, and the layers.
#[derive(Debug)]
pub struct FootprintRead<'a> {
    pub map: &'a MapSpace,
    pub placed: &'a [Placed],
    /// Layers sent, in request order.
    pub layers: &'a [usize],
    /// Layers assembled: `layers` and those the valid fraction needs.
    pub wanted: &'a [usize],
    /// Each layer's `(T, C, H, W)`, the same for every footprint.
    pub shapes: &'a [(usize, usize, usize, usize)],
    pub dataset_version: &'a str,
}

/// Reads every footprint of `read` and stacks them into one batch; `wrap` turns each
/// tensor's bytes into the message's (e.g. holding a memory reservation until sent).
pub async fn read_footprints(
    read: &FootprintRead<'_>,
    tiles: &dyn TileSource,
    wrap: &(dyn Fn(Vec<u8>) -> Bytes + Sync),
) -> Result<BatchOut, Error> {
    type Load<'b> =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<(Vec<Vec<u8>>, SampleMeta), Error>> + Send + 'b>>;
    // Boxed, so the stream of loads has one nameable type.
    let loads: Vec<Load<'_>> = read
        .placed
        .iter()
        .map(|p| Box::pin(read.map.read_placed(tiles, p, read.wanted)) as Load<'_>)
        .collect();
    let samples: Vec<(Vec<Vec<u8>>, SampleMeta)> = futures::stream::iter(loads)
        .buffered(FOOTPRINTS_IN_FLIGHT)
        .try_collect()
        .await?;
    let n = samples.len();
    let mut stacked: Vec<Vec<u8>> = read
        .layers
        .iter()
        .map(|&l| {
            let (t, c, h, w) = read.shapes[l];
            Vec::with_capacity(n * t * c * h * w * read.map.layers[l].dtype.size())
        })
        .collect();
    let mut metas = Vec::with_capacity(n);
    for (mut all, meta) in samples {
        for (out, &l) in stacked.iter_mut().zip(read.layers) {
            out.extend_from_slice(&std::mem::take(&mut all[l]));
        }
        metas.push(meta);
    }
    let mut layers = read.layers.iter().zip(stacked).map(|(&l, bytes)| {
        let (t, c, h, w) = read.shapes[l];
        let spec = &read.map.layers[l];
        let mut shape = vec![n as i64];
        if spec.time.is_some() {
            shape.push(t as i64);
        }
        shape.extend([c as i64, h as i64, w as i64]);
        (
            spec.name.clone(),
            TensorOut {
                dtype: spec.dtype.name(),
                shape,
                data: wrap(bytes),
            },
        )
    });
    let (image_layer, image) = layers
        .next()
        .ok_or_else(|| Error::InvalidArgument("no layer to read".into()))?;
    let layers: Vec<(String, TensorOut)> = layers.collect();
    let time_masks = read
        .layers
        .iter()
        .filter_map(|&l| {
            let spec = &read.map.layers[l];
            let t = spec.time.as_ref()?.steps;
            let mut mask = Vec::with_capacity(n * t);
            for m in &metas {
                let days = m.times.iter().find(|(name, _)| name == &spec.name);
                mask.extend((0..t).map(|k| u8::from(days.is_some_and(|(_, d)| d.get(k).is_some_and(Option::is_some)))));
            }
            Some((
                spec.name.clone(),
                TensorOut {
                    dtype: "uint8",
                    shape: vec![n as i64, t as i64],
                    data: Bytes::from(mask),
                },
            ))
        })
        .collect();
    Ok(BatchOut {
        epoch: 0,
        index: 0,
        cursor: 0,
        batches_in_epoch: 0,
        image,
        label: None,
        windows: Vec::new(),
        skipped: Vec::new(),
        layers,
        image_layer: Some(image_layer),
        samples: metas,
        time_masks,
        targets: Vec::new(),
        dataset_version: Arc::from(read.dataset_version),
    })
}
