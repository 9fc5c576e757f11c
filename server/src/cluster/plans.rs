//! A stream's plan relayed to the owners of its tiles, so that a fleet's caches evict by
//! every replica's plans (Belady over the fleet), not only their own streams'.
//!
//! Per stream and per peer that owns some of its tiles, one `SharePlan` call stays open
//! for the stream's life: each planned sample sends the ids of the tiles that peer owns,
//! and the consumer's cursor follows every [`ADVANCE_EVERY`] samples. Updates go through a
//! bounded queue with `try_send`: a slow or dead peer loses updates, never delays the
//! stream. Dropping the relay (the stream ended) closes the calls, which withdraws the
//! plan from the owners' boards. Owns the relay only; the owner's side is
//! `api::peer::PeerService::share_plan`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use cogfeed_proto::v1 as pb;

use super::{Cluster, Owner};
use crate::tiles::TileKey;
use crate::tiles::board::{PlanRelay, tile_id};

/// Updates queued per peer before new ones are dropped.
const QUEUE: usize = 256;
/// The cursor is relayed when it has moved this many samples (the owners' distances are
/// in samples; a few samples late misorders nothing that matters).
const ADVANCE_EVERY: u64 = 8;

/// One stream's relay to the peers owning its tiles.
#[derive(Debug)]
pub struct FleetPlanRelay {
    cluster: Arc<Cluster>,
    peers: Mutex<HashMap<String, mpsc::Sender<pb::PlanUpdate>>>,
    /// The cursor last relayed.
    sent_cursor: AtomicU64,
}

impl FleetPlanRelay {
    pub fn new(cluster: Arc<Cluster>) -> Self {
        Self {
            cluster,
            peers: Mutex::new(HashMap::new()),
            sent_cursor: AtomicU64::new(0),
        }
    }

    /// Queues `update` for `peer`, opening the call on first use.
    fn send(&self, peer: &str, update: pb::PlanUpdate) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = peers.get(peer) {
            let _ = tx.try_send(update);
            return;
        }
        let Ok(mut client) = self.cluster.plan_client(peer) else {
            return;
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        let _ = tx.try_send(update);
        peers.insert(peer.to_string(), tx);
        let name = peer.to_string();
        tokio::spawn(async move {
            let updates = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|u| (u, rx)) });
            if let Err(e) = client.share_plan(updates).await {
                tracing::debug!(peer = %name, error = %e, "plan relay closed");
            }
        });
    }
}

impl PlanRelay for FleetPlanRelay {
    fn publish(&self, position: u64, keys: &[TileKey]) {
        let mut by_peer: HashMap<String, Vec<u64>> = HashMap::new();
        for key in keys {
            if let Owner::Peer(p) = self.cluster.owner(key) {
                by_peer.entry(p).or_default().push(tile_id(key));
            }
        }
        for (peer, tiles) in by_peer {
            let update = pb::PlanUpdate {
                uses_at: vec![position; tiles.len()],
                tiles,
                ..Default::default()
            };
            self.send(&peer, update);
        }
    }

    fn advance(&self, cursor: u64) {
        let sent = self.sent_cursor.load(Ordering::Relaxed);
        if cursor < sent + ADVANCE_EVERY {
            return;
        }
        self.sent_cursor.store(cursor, Ordering::Relaxed);
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        for tx in peers.values() {
            let _ = tx.try_send(pb::PlanUpdate {
                cursor,
                ..Default::default()
            });
        }
    }
}
