//! The fleet as a tile source: a decorator around this replica's [`TileCache`]. Tiles
//! this replica owns come from its cache (and the store, once); tiles another replica
//! owns are asked from their owner and kept in a near cache beside the main one, so the
//! fleet holds each tile once. When the owner fails, the next owner, then the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::tiles::{Tile, TileCache, TileKey, TileObject, TileSource};
use cogfeed_tiff::{TiffError, TiffResult};

use super::{Cluster, Owner};

/// This replica's cache in a fleet.
#[derive(Clone)]
pub struct FleetTiles {
    local: TileCache,
    cluster: Arc<Cluster>,
    near: moka::future::Cache<TileKey, Tile>,
}

impl std::fmt::Debug for FleetTiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetTiles")
            .field("near_entries", &self.near.entry_count())
            .finish()
    }
}

impl FleetTiles {
    /// `local` joined to `cluster`, with a near cache of `near_bytes` for tiles others own.
    pub fn new(local: TileCache, cluster: Arc<Cluster>, near_bytes: u64) -> Self {
        let near = moka::future::Cache::builder()
            .max_capacity((near_bytes / 1024).max(1))
            .weigher(crate::tiles::tile_kib)
            .build();
        Self { local, cluster, near }
    }

    /// A tile another replica owns: near cache, else its owner (single-flight), else, when
    /// the owner fails, the next owner or the store.
    async fn owned_elsewhere(&self, peer: String, object: &TileObject, key: TileKey) -> TiffResult<Tile> {
        if let Some(tile) = self.near.get(&key).await {
            self.local.hit();
            return Ok(tile);
        }
        let loaded = AtomicBool::new(false);
        let (level, block) = (key.level as usize, key.block as usize);
        let result = self
            .near
            .try_get_with(key.clone(), async {
                loaded.store(true, Ordering::Relaxed);
                let mut owner = peer;
                // The owner, then (if it failed and was skipped) the next owner, then ourselves.
                for _ in 0..2 {
                    match self.cluster.fetch(&owner, &key).await {
                        Ok(tile) => {
                            self.local.loaded_from("peer");
                            return Ok(tile);
                        }
                        Err(e) => {
                            tracing::debug!(peer = %owner, error = %e, "peer tile request failed");
                            match self.cluster.owner(&key) {
                                Owner::Peer(next) if next != owner => owner = next,
                                _ => break,
                            }
                        }
                    }
                }
                self.local.load(object, level, block).await
            })
            .await
            .map_err(|e: Arc<TiffError>| (*e).clone());
        self.local.miss_or_wait(loaded.load(Ordering::Relaxed));
        result
    }
}

#[async_trait::async_trait]
impl TileSource for FleetTiles {
    async fn tile(&self, object: &TileObject, level: usize, block: usize) -> TiffResult<Tile> {
        let key = object.key(level, block);
        match self.cluster.owner(&key) {
            Owner::Peer(peer) => self.owned_elsewhere(peer, object, key).await,
            _ => self.local.get_local(object, level, block).await,
        }
    }

    /// A tile this replica owns may be decoded at its top rows only; a peer's owner
    /// serves whole tiles (what it caches for every replica).
    async fn tile_rows(&self, object: &TileObject, level: usize, block: usize, rows: u32) -> TiffResult<Tile> {
        let key = object.key(level, block);
        match self.cluster.owner(&key) {
            Owner::Peer(peer) => self.owned_elsewhere(peer, object, key).await,
            _ => self.local.get_local_rows(object, level, block, rows).await,
        }
    }

    fn board(&self) -> Option<Arc<crate::tiles::board::PlanBoard>> {
        self.local.board()
    }

    fn plan_relay(&self) -> Option<Box<dyn crate::tiles::board::PlanRelay>> {
        Some(Box::new(super::plans::FleetPlanRelay::new(self.cluster.clone())))
    }

    /// Only tiles this replica owns: a peer's owner fetches its own (it decodes them).
    async fn prefetch(&self, object: &TileObject, level: usize, block: usize, rows: u32) -> Option<usize> {
        match self.cluster.owner(&object.key(level, block)) {
            Owner::Peer(_) => None,
            _ => self.local.prefetch_local(object, level, block, rows).await,
        }
    }

    fn prefetch_budget(&self) -> u64 {
        self.local.prefetch_budget()
    }
}
