//! The `cogfeed.v1.Peer` service: tiles for other replicas. Only objects in this replica's
//! catalog are served (scenes, labels, and the assets a map-space dataset's layers read),
//! at the version the requester read; the tile comes from the main cache (fetched from the
//! store once for the whole fleet). When auth is on, the caller must hold a token for
//! every dataset (`["*"]`), i.e. be a replica. Peers also share their streams' plans for
//! the tiles this replica owns (`SharePlan`): each call is one remote stream on this
//! replica's plan board, admitted against the memory budget and withdrawn when it closes.

use std::sync::Arc;

use bytes::Bytes;
use tonic::{Request, Response, Status, Streaming};

use cogfeed_proto::v1 as pb;
use pb::peer_server::Peer;

use crate::api::auth::{Auth, Principal};
use crate::dataset::Catalog;
use crate::error::Error;
use crate::memory::MemoryBudget;
use crate::metrics::Metrics;
use crate::tiles::board::MAX_PLAN_ENTRIES;
use crate::tiles::{Tile, TileCache};

/// Serves tiles this replica owns (or can read) to its peers.
#[derive(Debug)]
pub struct PeerService {
    pub catalog: Arc<Catalog>,
    pub cache: TileCache,
    pub auth: Arc<Auth>,
    pub metrics: Arc<Metrics>,
    /// What a shared plan's board entries are admitted against.
    pub memory: MemoryBudget,
}

impl PeerService {
    /// The caller, refused unless it may read every dataset (a replica) when auth is on.
    fn replica<T>(&self, r: &Request<T>) -> Result<Principal, Status> {
        let caller = match r.extensions().get::<Principal>() {
            Some(p) => p.clone(),
            None => self
                .auth
                .authenticate(None, crate::api::connections::remote_addr(r).map(|a| a.ip()))
                .map_err(|e| e.to_status())?,
        };
        if self.auth.required() && !caller.may_read_all() {
            return Err(Error::PermissionDenied(format!(
                "{} is not a replica (peer calls need a token for every dataset)",
                caller.name()
            ))
            .to_status());
        }
        Ok(caller)
    }
}

/// A tile's bytes sent without a copy.
struct TileBytes(Tile);

impl AsRef<[u8]> for TileBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

#[tonic::async_trait]
impl Peer for PeerService {
    async fn get_tile(&self, r: Request<pb::TileRequest>) -> Result<Response<pb::TileReply>, Status> {
        self.replica(&r)?;
        let peer = crate::api::connections::remote_addr(&r)
            .map(|a| a.ip().to_string())
            .unwrap_or_else(|| "unknown".into());
        let t = r.into_inner();
        let count = |result: &str| {
            self.metrics
                .peer_requests
                .with_label_values(&[peer.as_str(), "in", result])
                .inc()
        };
        let object = match self.catalog.peer_object(&t.object).await {
            Some(Ok(object)) => object,
            Some(Err(e)) => {
                count("error");
                return Err(e.to_status());
            }
            None => {
                count("not_found");
                return Err(
                    Error::NotFound(format!("object {} is not in this replica's catalog", t.object)).to_status(),
                );
            }
        };
        if *object.version != *t.version {
            count("stale");
            return Err(Error::FailedPrecondition(format!(
                "object {} is at version {} here, {} was asked for",
                t.object, object.version, t.version
            ))
            .to_status());
        }
        let tile = self
            .cache
            .get_local(&object, t.level as usize, t.block as usize)
            .await
            .map_err(|e| {
                count("error");
                Error::tiff(object.url.as_ref(), e).to_status()
            })?;
        count("ok");
        self.metrics
            .peer_bytes
            .with_label_values(&[peer.as_str(), "out"])
            .inc_by(tile.len() as u64);
        Ok(Response::new(pb::TileReply {
            data: Bytes::from_owner(TileBytes(tile)),
        }))
    }

    async fn share_plan(&self, r: Request<Streaming<pb::PlanUpdate>>) -> Result<Response<pb::PlanAck>, Status> {
        self.replica(&r)?;
        let mut updates = r.into_inner();
        let Some(board) = crate::tiles::TileSource::board(&self.cache) else {
            // This cache evicts by recency: a plan changes nothing here.
            return Ok(Response::new(pb::PlanAck { kept: 0 }));
        };
        let _memory = self
            .memory
            .try_reserve(crate::pipeline::plan_ahead::plan_bytes())
            .ok_or_else(|| Error::LimitExceeded("no memory for another shared plan".into()).to_status())?;
        let plan = board.open();
        let (mut kept, mut last) = (0u64, 0u64);
        while let Some(u) = updates.message().await? {
            if u.uses_at.len() != u.tiles.len() {
                return Err(
                    Error::InvalidArgument("plan update: uses_at and tiles differ in length".into()).to_status(),
                );
            }
            let mut k = 0;
            while k < u.tiles.len() {
                let at = u.uses_at[k];
                let n = u.uses_at[k..].iter().take_while(|&&p| p == at).count();
                // Positions only ascend (the board's order), and a plan stays bounded.
                if at >= last && plan.published() + n <= MAX_PLAN_ENTRIES {
                    plan.publish(at, u.tiles[k..k + n].iter().copied());
                    kept += n as u64;
                    last = at;
                }
                k += n;
            }
            if u.cursor > 0 {
                plan.advance(u.cursor);
            }
            for p in u.retired {
                plan.retire(p);
            }
        }
        Ok(Response::new(pb::PlanAck { kept }))
    }
}
