//! What a map-space sample will read, without reading it: the source tiles of each layer's
//! planned sources, for a stream's plan (`pipeline::plan_ahead`). Opens headers (cached,
//! shared with the samples), never fetches or decodes a tile, and never decides what a
//! sample contains: `MapSpace::sample` does.

use super::geometry::aligned_window;
use super::{MapSpace, mosaic};
use crate::error::{Error, Result};
use crate::sampler::WindowSpec;
use crate::tiles::PlannedBlocks;
use cogfeed_geo::Footprint;

impl MapSpace {
    /// The source tiles assembling sample `window`'s layers `wanted` reads (a mosaic's
    /// first sources; later ones are read only where those leave pixels empty): what a
    /// stream publishes of its plan. Opens headers, reads no tile.
    pub async fn planned_tiles(&self, window: &WindowSpec, wanted: &[usize]) -> Result<Vec<PlannedBlocks>> {
        let scene = window.scene as usize;
        let (crs, bounds, drawn) = (&self.grids[scene].crs, self.bounds(window), self.drawn_of(scene));
        let mut keys = Vec::new();
        for &li in wanted {
            let Some(layer) = self.layers.get(li) else { continue };
            let fp = Footprint::new(crs.clone(), bounds, layer.resolution)?;
            let plans = mosaic::GridPlans::new(&fp, layer.resampling);
            let (of_step, _) = self.layer_steps(drawn, layer, &plans, &fp).await?;
            for cands in of_step.iter().flatten() {
                for key in &layer.assets {
                    let opened = futures::future::try_join_all(cands.iter().map(|&i| self.source(i, key))).await?;
                    let mut planned = Vec::new();
                    for src in &opened {
                        let p = plans.plan(src)?;
                        if p.window().is_some() && planned.len() < mosaic::MOSAIC_IN_FLIGHT {
                            planned.push(p);
                        }
                    }
                    let aligned = match planned.as_slice() {
                        [only] => aligned_window(only.source, &fp, layer),
                        _ => None,
                    };
                    for (k, p) in planned.iter().enumerate() {
                        let spec = match aligned {
                            Some(w) => w,
                            None => match mosaic::read_spec(p)? {
                                Some(w) => w,
                                None => continue,
                            },
                        };
                        let object = &p.source.object;
                        let bands: Vec<usize> = (0..p.source.bands).collect();
                        let read = crate::tiles::region::region_blocks(object, spec, &bands)
                            .map_err(|e| Error::tiff(object.url.as_ref(), e))?;
                        keys.push(PlannedBlocks {
                            object: object.clone(),
                            level: spec.level as usize,
                            blocks: read.blocks,
                            top_rows: read.top_rows,
                            // A later source is read only where the first leaves pixels empty.
                            sure: k == 0,
                        });
                    }
                }
            }
        }
        Ok(keys)
    }
}
