//! One layer of a map-space sample: which Items each step (date) reads, and the layer's
//! `[T, C, H, W]` bytes, every step and asset written straight into its own slice of one
//! buffer (no per-asset or per-step buffers copied together). Every step and every asset
//! is read at once, so a cold layer waits one round trip of the store.
//!
//! Owns the layout of a layer's buffer; what a mosaic holds is `mosaic`'s, which Items may
//! cover a footprint is `MapSpace::candidates`'. Never reads a tile the sample does not
//! need, and never panics on a layer whose bands do not add up (an error instead).

use chrono::NaiveDate;

use super::geometry::aligned_window;
use super::items::day;
use super::{Drawn, LayerSpec, MapSpace, mosaic};
use crate::error::{Error, Result};
use crate::tiles::TileSource;
use cogfeed_geo::Footprint;
use cogfeed_geo::warp::{Mosaic, Resampling};

/// One layer's bytes `[T, C, H, W]`, the Items used, a time layer's day per step and what
/// harmonisation added per step.
pub(super) type LayerBytes = (Vec<u8>, Vec<usize>, Option<Vec<Option<String>>>, Vec<i32>);

/// Window pixels stitched on the async thread; larger windows go to the CPU pool.
const INLINE_PIXELS: usize = 128 * 128;

/// What one asset of a layer's step reads: the step's plans, footprint and Items.
struct Step<'a> {
    layer: &'a LayerSpec,
    plans: &'a mosaic::GridPlans,
    fp: &'a Footprint,
    cands: &'a [usize],
}

/// `out` cut into consecutive parts of `lens` bytes; an error where they do not add up.
fn split_parts(mut out: &mut [u8], lens: impl Iterator<Item = usize>) -> Result<Vec<&mut [u8]>> {
    let mut parts = Vec::new();
    for len in lens {
        let (part, rest) = out
            .split_at_mut_checked(len)
            .ok_or_else(|| Error::InvalidArgument("a layer's assets hold more bands than the layer".into()))?;
        parts.push(part);
        out = rest;
    }
    if !out.is_empty() {
        return Err(Error::InvalidArgument(
            "a layer's assets hold fewer bands than the layer".into(),
        ));
    }
    Ok(parts)
}

impl MapSpace {
    /// One date's (or the only) mosaic of `layer` on `fp` from the Items `cands`
    /// (priority order), written into `out` (`[C, H, W]`): the Items whose data it touches.
    async fn layer_mosaic(&self, tiles: &dyn TileSource, step: &Step<'_>, out: &mut [u8]) -> Result<Vec<usize>> {
        let (layer, fp) = (step.layer, step.fp);
        let plane = fp.width() as usize * fp.height() as usize * layer.dtype.size();
        let parts = split_parts(out, layer.asset_bands.iter().map(|&nb| nb * plane))?;
        // Every asset at once: a cold sample waits one round trip of the store for its
        // tiles, not one per asset (10 for Sentinel-2's bands).
        let used_each = futures::future::try_join_all(
            layer
                .assets
                .iter()
                .zip(&layer.asset_bands)
                .zip(parts)
                .map(|((key, &nb), part)| self.asset_mosaic(tiles, step, key, nb, part)),
        )
        .await?;
        let mut used = Vec::new();
        for i in used_each.into_iter().flatten() {
            if !used.contains(&i) {
                used.push(i);
            }
        }
        Ok(used)
    }

    /// One asset `key` (of `nb` bands) of [`Self::layer_mosaic`], written into `out`:
    /// the candidates whose source the footprint reads, in priority order.
    async fn asset_mosaic(
        &self,
        tiles: &dyn TileSource,
        step: &Step<'_>,
        key: &str,
        nb: usize,
        out: &mut [u8],
    ) -> Result<Vec<usize>> {
        let (layer, fp) = (step.layer, step.fp);
        let opened = futures::future::try_join_all(step.cands.iter().map(|&i| self.source(i, key))).await?;
        // Sources the footprint misses contribute nothing: leave them out before
        // choosing the path.
        let mut planned = Vec::with_capacity(opened.len());
        let mut used = Vec::new();
        for (src, &i) in opened.iter().zip(step.cands) {
            let mut p = step.plans.plan(src)?;
            p.shift = self.shift(layer, i);
            if p.window().is_some() {
                planned.push(p);
                used.push(i);
            }
        }
        // A shifted source goes through the warp (the shift is applied to its values).
        if let [only] = planned.as_slice()
            && only.shift == 0
            && let Some(window) = aligned_window(only.source, fp, layer)
        {
            // One source on the footprint's own grid: its pixels are the sample.
            let bands: Vec<usize> = (0..only.source.bands).collect();
            let object = &only.source.object;
            let bad = |e| Error::tiff(object.url.as_ref(), e);
            let region = crate::tiles::region::fetch_region(tiles, object, window, &bands, layer.nodata)
                .await
                .map_err(bad)?;
            let small = (window.width as usize).saturating_mul(window.height as usize) <= INLINE_PIXELS;
            if !(small && region.assemble_into(out)) {
                let raster = cogfeed_tiff::on_cpu_pool(move || region.assemble())
                    .await
                    .map_err(bad)?;
                copy_exact(out, &raster.data)?;
            }
            return Ok(used);
        }
        let does_not_fill = || {
            Error::InvalidArgument(format!(
                "asset {key}: a mosaic of {nb} bands does not fill its part of the layer"
            ))
        };
        // One source: warped straight into the layer's part (the integer kernel where it
        // applies), without a mosaic of one.
        if let [only] = planned.as_slice()
            && only.source.bands == nb
        {
            let into = (layer.dtype, layer.nodata);
            if !mosaic::single_into(tiles, only, fp, layer.resampling, into, out).await? {
                return Err(does_not_fill());
            }
            return Ok(used);
        }
        let m = mosaic::mosaic_planned(tiles, &planned, nb, fp, layer.resampling).await?;
        if !m.to_bytes_into(layer.dtype, layer.nodata, layer.resampling != Resampling::Nearest, out) {
            return Err(does_not_fill());
        }
        Ok(used)
    }

    /// The Items each step of `layer` on `fp` reads, priority order: one step for a layer
    /// without time, else one per step (None: no date fills it), with the days picked.
    pub(super) async fn layer_steps(
        &self,
        drawn: Drawn,
        layer: &LayerSpec,
        plans: &mosaic::GridPlans,
        fp: &Footprint,
    ) -> Result<(Vec<Option<Vec<usize>>>, Option<Vec<Option<NaiveDate>>>)> {
        let cands = self.candidates(drawn, layer, &fp.crs, fp.bounds);
        let Some(ts) = &layer.time else {
            return Ok((vec![Some(cands)], None));
        };
        // The dates whose Items meet the footprint.
        let first = &layer.assets[0];
        let opened = futures::future::try_join_all(cands.iter().map(|&i| self.source(i, first))).await?;
        let mut meeting = Vec::with_capacity(cands.len());
        for (src, &i) in opened.iter().zip(&cands) {
            if plans.plan(src)?.window().is_some() {
                meeting.push(i);
            }
        }
        let mut dates: Vec<NaiveDate> = meeting.iter().filter_map(|&i| day(&self.items[i])).collect();
        dates.sort_unstable();
        dates.dedup();
        let reference = drawn.item.map_or(drawn.day, |i| day(&self.items[i]));
        let picked = ts.select(&dates, reference);
        let of_step = picked
            .iter()
            .map(|d| {
                d.map(|d| {
                    meeting
                        .iter()
                        .copied()
                        .filter(|&i| day(&self.items[i]) == Some(d))
                        .collect()
                })
            })
            .collect();
        Ok((of_step, Some(picked)))
    }

    /// `layer` on `fp`: `[T, C, H, W]` bytes, the Items used, for a time layer the day
    /// of each step, and what harmonisation added to each step (the shift of the step's
    /// first Item in priority order: each Item is shifted by its own).
    pub(super) async fn layer_bytes(
        &self,
        tiles: &dyn TileSource,
        drawn: Drawn,
        layer: &LayerSpec,
        fp: &Footprint,
    ) -> Result<LayerBytes> {
        let step_shift = |used: &[usize]| used.first().map_or(0, |&i| self.shift(layer, i));
        // One plan per source grid for every asset and date of the layer.
        let plans = &mosaic::GridPlans::new(fp, layer.resampling);
        let (of_step, picked) = self.layer_steps(drawn, layer, plans, fp).await?;
        let (w, h) = (fp.width() as usize, fp.height() as usize);
        let step_len = layer.bands * w * h * layer.dtype.size();
        let step = |cands| Step {
            layer,
            plans,
            fp,
            cands,
        };
        let (Some(_), Some(picked)) = (&layer.time, picked) else {
            let cands = of_step.into_iter().flatten().next().unwrap_or_default();
            let mut bytes = vec![0u8; step_len];
            let used = self.layer_mosaic(tiles, &step(&cands), &mut bytes).await?;
            let shifts = vec![step_shift(&used)];
            return Ok((bytes, used, None, shifts));
        };
        // Every step at once, each into its own slice: one round trip of latency, not T.
        let mut bytes = vec![0u8; of_step.len() * step_len];
        let parts = split_parts(&mut bytes, of_step.iter().map(|_| step_len))?;
        let steps = futures::future::try_join_all(of_step.iter().zip(parts).map(|(of_day, part)| async move {
            match of_day {
                None => {
                    // No date fills the step: nodata (the part is the layer's size).
                    Mosaic::new(layer.bands, w, h).to_bytes_into(layer.dtype, layer.nodata, false, part);
                    Ok(None)
                }
                Some(of_day) => self.layer_mosaic(tiles, &step(of_day), part).await.map(Some),
            }
        }))
        .await?;
        let mut used = Vec::new();
        let mut shifts = Vec::with_capacity(steps.len());
        for step in steps {
            shifts.push(step.as_deref().map_or(0, step_shift));
            used.extend(step.unwrap_or_default());
        }
        let days = picked.iter().map(|d| d.map(|d| d.to_string())).collect();
        Ok((bytes, used, Some(days), shifts))
    }
}

/// `from` into `out`, which must be as long.
fn copy_exact(out: &mut [u8], from: &[u8]) -> Result<()> {
    if out.len() != from.len() {
        return Err(Error::InvalidArgument(format!(
            "a source window gave {} bytes where the layer holds {}",
            from.len(),
            out.len()
        )));
    }
    out.copy_from_slice(from);
    Ok(())
}
