//! A stream's epoch order: the request's `order`, `open_blocks` and `visits` over its
//! dataset's `[datasets.sampling]`, with the default `open_blocks` sized from the tile cache,
//! applied to the stream's plan.
//!
//! Owns the default dial. Must never order samples itself: that is the sampler's
//! (`sampler::local`).

use cogfeed_proto::v1 as pb;

use crate::dataset::Dataset;
use crate::error::Error;
use crate::sampler::{OrderChoice, Plan};

/// Most groups a locality order keeps open by default.
const DEFAULT_OPEN_BLOCKS_MAX: u64 = 64;

/// `plan` in the order request `r` asks for on dataset `ds` (InvalidArgument, saying why,
/// when the order or its dial is refused).
pub fn ordered(
    plan: Plan,
    ds: &Dataset,
    r: &pb::StreamBatchesRequest,
    sample_bytes: u64,
    cache_bytes: u64,
) -> Result<Plan, Error> {
    let bad = |m: String| Error::InvalidArgument(format!("dataset {}: {m}", ds.name));
    let requested = OrderChoice::parse(
        &r.order,
        (r.open_blocks > 0).then_some(r.open_blocks),
        (r.visits > 0).then_some(r.visits),
    )
    .map_err(Error::InvalidArgument)?;
    let order = requested
        .resolve(ds.order, || {
            default_open_blocks(cache_bytes, sample_bytes, r.patch_size, plan.largest_block())
        })
        .map_err(bad)?;
    plan.with_order(order).map_err(bad)
}

/// The default `open_blocks` of a locality order: as many groups as half the tile cache
/// holds, 1 to 64. A group's decoded tiles are estimated as one sample's bytes scaled from
/// the patch to the reference grid's tile block (`block_pixels`): for per-band COGs at the
/// reference resolution that is the block's decoded tiles of every layer and date (the
/// published Sentinel-2 sample of 32² over 1024² tiles: ~0.5 GB a group).
fn default_open_blocks(cache_bytes: u64, sample_bytes: u64, patch: u32, block_pixels: u64) -> u32 {
    let patch_pixels = u64::from(patch).pow(2).max(1);
    let per_block = sample_bytes.saturating_mul((block_pixels / patch_pixels).max(1)).max(1);
    (cache_bytes / per_block.saturating_mul(2)).clamp(1, DEFAULT_OPEN_BLOCKS_MAX) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_dial_fits_half_the_cache() {
        // The published sample: ~0.5 MB for 32² over 1024² tiles is ~0.5 GB a group.
        assert_eq!(default_open_blocks(4 << 30, 512 << 10, 32, 1 << 20), 4);
        assert_eq!(default_open_blocks(256 << 20, 512 << 10, 32, 1 << 20), 1);
        // The demo: 256² tiles, 64² patches of 32 KiB: far more than 64 fit.
        assert_eq!(default_open_blocks(2 << 30, 32 << 10, 64, 1 << 16), 64);
        assert_eq!(default_open_blocks(0, 0, 0, 0), 1);
    }
}
