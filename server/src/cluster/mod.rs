//! A fleet of replicas behaving like one cache: membership (a static list or a DNS name
//! re-resolved in the background), tile ownership by rendezvous hashing over the live
//! members, and tile requests to owners with deadlines, a retry and metrics. A peer that
//! fails is skipped for a cooldown, so its tiles move to their next owner and no stream
//! waits on a dead replica.

pub mod plans;
pub mod ring;
pub mod tiles;

pub use tiles::FleetTiles;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::time::Instant;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use cogfeed_proto::v1 as pb;
use pb::peer_client::PeerClient;

use crate::config::ClusterConfig;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::tiles::{Tile, TileKey};

/// Who holds a tile for the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// This replica: its main cache, filled from the store.
    Local,
    /// Another replica, by address.
    Peer(String),
}

/// Adds the peer token to every call.
#[derive(Debug, Clone)]
struct PeerToken(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for PeerToken {
    fn call(&mut self, mut r: tonic::Request<()>) -> std::result::Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            r.metadata_mut().insert("authorization", v.clone());
        }
        Ok(r)
    }
}

type Client = PeerClient<InterceptedService<Channel, PeerToken>>;

/// Membership and peer calls of this replica.
#[derive(Debug)]
pub struct Cluster {
    self_addr: String,
    members: RwLock<Vec<String>>,
    down: Mutex<HashMap<String, Instant>>,
    clients: Mutex<HashMap<String, Client>>,
    /// Channels for plan relays: long-lived calls, so no per-call deadline.
    plan_clients: Mutex<HashMap<String, Client>>,
    timeout: Duration,
    cooldown: Duration,
    token: PeerToken,
    metrics: Option<Arc<Metrics>>,
}

impl Cluster {
    /// The cluster of `config`; with `peers_dns`, call [`Cluster::watch_dns`] to fill it.
    pub fn new(config: &ClusterConfig, metrics: Option<Arc<Metrics>>) -> Result<Arc<Self>> {
        let self_addr = std::env::var("COGFEED_CLUSTER_SELF")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| config.self_addr.clone());
        let token =
            match &config.peer_token {
                Some(t) => Some(format!("Bearer {}", t.expose()).parse().map_err(|_| {
                    Error::InvalidArgument("config: cluster.peer_token must be printable ASCII".into())
                })?),
                None => None,
            };
        let mut members = config.peers.clone();
        if !members.contains(&self_addr) {
            members.push(self_addr.clone());
        }
        members.sort();
        members.dedup();
        let cluster = Arc::new(Self {
            self_addr,
            members: RwLock::new(members),
            down: Mutex::new(HashMap::new()),
            clients: Mutex::new(HashMap::new()),
            plan_clients: Mutex::new(HashMap::new()),
            timeout: Duration::from_millis(config.peer_timeout_ms),
            cooldown: Duration::from_secs_f64(config.peer_cooldown_secs),
            token: PeerToken(token),
            metrics,
        });
        cluster.export_members();
        Ok(cluster)
    }

    /// This replica's address.
    pub fn self_addr(&self) -> &str {
        &self.self_addr
    }

    /// Every member, live or not, sorted.
    pub fn members(&self) -> Vec<String> {
        self.members.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the member list (this replica always stays in it).
    pub fn set_members(&self, mut members: Vec<String>) {
        if !members.contains(&self.self_addr) {
            members.push(self.self_addr.clone());
        }
        members.sort();
        members.dedup();
        let mut current = self.members.write().unwrap_or_else(|p| p.into_inner());
        if *current != members {
            tracing::info!(members = ?members, "cluster membership changed");
            *current = members;
            drop(current);
            self.export_members();
        }
    }

    fn is_down(&self, peer: &str) -> bool {
        let mut down = self.down.lock().unwrap_or_else(|p| p.into_inner());
        match down.get(peer) {
            Some(until) if Instant::now() < *until => true,
            Some(_) => {
                down.remove(peer);
                if let Some(m) = &self.metrics {
                    m.peer_up.with_label_values(&[peer]).set(1);
                }
                false
            }
            None => false,
        }
    }

    /// Skips `peer` for the cooldown.
    pub fn mark_down(&self, peer: &str) {
        tracing::warn!(%peer, cooldown_secs = self.cooldown.as_secs_f64(), "peer failed; its tiles move to their next owner");
        self.down
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(peer.to_string(), Instant::now() + self.cooldown);
        if let Some(m) = &self.metrics {
            m.peer_up.with_label_values(&[peer]).set(0);
        }
    }

    fn export_members(&self) {
        if let Some(m) = &self.metrics {
            for p in self.members() {
                if p != self.self_addr {
                    m.peer_up.with_label_values(&[&p]).set(1);
                }
            }
        }
    }

    /// The owner of `key` among the live members.
    pub fn owner(&self, key: &TileKey) -> Owner {
        let members = self.members();
        let live = members.iter().filter(|m| **m == self.self_addr || !self.is_down(m));
        match ring::owner(key.digest(), live.map(String::as_str)) {
            Some(o) if o != self.self_addr => Owner::Peer(o.to_string()),
            _ => Owner::Local,
        }
    }

    fn client(&self, peer: &str) -> Result<Client> {
        self.client_in(&self.clients, peer, Some(self.timeout))
    }

    /// A client for `peer`'s long-lived calls (plan relays): connects within the peer
    /// timeout, but a call has no deadline.
    fn plan_client(&self, peer: &str) -> Result<Client> {
        self.client_in(&self.plan_clients, peer, None)
    }

    fn client_in(
        &self,
        clients: &Mutex<HashMap<String, Client>>,
        peer: &str,
        deadline: Option<Duration>,
    ) -> Result<Client> {
        let mut clients = clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(peer) {
            return Ok(c.clone());
        }
        let mut endpoint = Endpoint::from_shared(format!("http://{peer}"))
            .map_err(|_| Error::InvalidArgument(format!("cluster: bad peer address {peer:?}")))?
            .connect_timeout(self.timeout);
        if let Some(d) = deadline {
            endpoint = endpoint.timeout(d);
        }
        let channel = endpoint
            .tcp_nodelay(true)
            .initial_stream_window_size(Some(8 << 20))
            .initial_connection_window_size(Some(32 << 20))
            .connect_lazy();
        let client = PeerClient::with_interceptor(channel, self.token.clone()).max_decoding_message_size(1 << 30);
        clients.insert(peer.to_string(), client.clone());
        Ok(client)
    }

    /// Asks `peer` for `key`: a deadline per attempt, one retry after 50 ms for errors that
    /// may pass. On failure the peer is skipped for the cooldown; the caller reads the tile
    /// elsewhere.
    pub async fn fetch(&self, peer: &str, key: &TileKey) -> std::result::Result<Tile, tonic::Status> {
        let request = pb::TileRequest {
            object: key.object.to_string(),
            version: key.version.to_string(),
            level: key.level,
            block: key.block,
        };
        let mut client = self
            .client(peer)
            .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
        let start = Instant::now();
        let mut result = Err(tonic::Status::unavailable("no attempt"));
        for attempt in 0..2 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            result = match tokio::time::timeout(self.timeout, client.get_tile(request.clone())).await {
                Ok(r) => r.map(|r| r.into_inner()),
                Err(_) => Err(tonic::Status::deadline_exceeded("peer did not answer in time")),
            };
            let retry = matches!(
                &result,
                Err(s) if matches!(s.code(), tonic::Code::Unavailable | tonic::Code::DeadlineExceeded)
            );
            if !retry {
                break;
            }
        }
        let outcome = match &result {
            Ok(_) => "ok",
            Err(s) if s.code() == tonic::Code::FailedPrecondition => "stale",
            Err(_) => "error",
        };
        if let Some(m) = &self.metrics {
            m.peer_seconds
                .with_label_values(&[peer])
                .observe(start.elapsed().as_secs_f64());
            m.peer_requests.with_label_values(&[peer, "out", outcome]).inc();
            if let Ok(r) = &result {
                m.peer_bytes
                    .with_label_values(&[peer, "in"])
                    .inc_by(r.data.len() as u64);
            }
        }
        match result {
            Ok(r) => Ok(Arc::new(r.data.to_vec())),
            Err(s) => {
                // A peer that refused (stale object, missing tile, or a limit of its own) is up.
                if !matches!(
                    s.code(),
                    tonic::Code::FailedPrecondition | tonic::Code::NotFound | tonic::Code::ResourceExhausted
                ) {
                    self.mark_down(peer);
                }
                Err(s)
            }
        }
    }

    /// Re-resolves `name` (`host:port`) every `every` and makes its addresses the members,
    /// until `stop`.
    pub fn watch_dns(self: &Arc<Self>, name: String, every: Duration, stop: tokio_util::sync::CancellationToken) {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                match tokio::net::lookup_host(name.as_str()).await {
                    Ok(addrs) => {
                        let members: Vec<String> = addrs.map(|a| a.to_string()).collect();
                        if !members.is_empty() {
                            this.set_members(members);
                        }
                    }
                    Err(e) => tracing::warn!(%name, error = %e, "cannot resolve cluster peers; keeping the last list"),
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(self_addr: &str) -> ClusterConfig {
        ClusterConfig {
            self_addr: self_addr.into(),
            peers: vec!["a:1".into(), "b:1".into(), "c:1".into()],
            peers_dns: None,
            refresh_secs: 5.0,
            peer_timeout_ms: 100,
            peer_cooldown_secs: 60.0,
            near_cache_bytes: None,
            peer_token: None,
        }
    }

    fn key(i: u32) -> TileKey {
        TileKey {
            object: Arc::from("s3://b/x.tif"),
            version: Arc::from("v1"),
            level: 0,
            block: i,
            rows: 0,
        }
    }

    #[tokio::test]
    async fn replicas_agree_on_owners_and_skip_dead_peers() {
        let a = Cluster::new(&config("a:1"), None).unwrap();
        let b = Cluster::new(&config("b:1"), None).unwrap();
        let mut local = 0;
        for i in 0..300 {
            let (oa, ob) = (a.owner(&key(i)), b.owner(&key(i)));
            // Both name the same replica.
            let name = |o: &Owner, me: &str| match o {
                Owner::Local => me.to_string(),
                Owner::Peer(p) => p.clone(),
            };
            assert_eq!(name(&oa, "a:1"), name(&ob, "b:1"));
            local += (oa == Owner::Local) as usize;
        }
        assert!((60..140).contains(&local), "{local}");
        // c dies: its tiles move, nobody else's do.
        a.mark_down("c:1");
        for i in 0..300 {
            let before = b.owner(&key(i));
            let after = a.owner(&key(i));
            assert_ne!(after, Owner::Peer("c:1".into()));
            if before == Owner::Peer("a:1".into()) {
                assert_eq!(after, Owner::Local);
            }
        }
        // Membership changes are picked up without a restart.
        a.set_members(vec!["a:1".into()]);
        assert!((0..50).all(|i| a.owner(&key(i)) == Owner::Local));
    }

    #[tokio::test]
    async fn a_dead_peer_fails_fast_and_is_skipped() {
        let a = Cluster::new(&config("a:1"), None).unwrap();
        // Nothing listens on port 1 of 127.0.0.1.
        a.set_members(vec!["a:1".into(), "127.0.0.1:1".into()]);
        let start = Instant::now();
        let err = a.fetch("127.0.0.1:1", &key(0)).await.unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(2), "{err}");
        assert!((0..50).all(|i| a.owner(&key(i)) == Owner::Local));
    }
}
