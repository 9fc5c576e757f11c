//! The gRPC listener's connections: accepted here, counted, and closed when idle.
//!
//! Every accepted TCP connection is wrapped in a [`Tracked`] stream that records when its
//! client last sent a byte and can be closed from outside (its next read fails, hyper tears
//! the connection down, every call on it ends). A connection whose client sent nothing for
//! `idle_timeout` is closed (live clients answer the server's HTTP/2 keepalive pings, so
//! only dead or idle-by-design connections go). At `max_connections`, the connection idle
//! longest is closed to make room: a flood of idle connections can never keep a working
//! client out. The connection's handle travels with each request ([`ConnInfo`]), so a
//! stream whose client stopped reading can close the connection it came on.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often idle connections are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// One connection's shared state.
#[derive(Debug)]
pub struct ConnState {
    id: u64,
    remote: SocketAddr,
    /// Milliseconds since the registry's start at the client's last byte.
    last_read_ms: AtomicU64,
    closed: AtomicBool,
    waker: AtomicWaker,
}

impl ConnState {
    /// Closes the connection: its next read fails and hyper drops it with all its calls.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// The client's address.
    pub fn remote(&self) -> SocketAddr {
        self.remote
    }
}

/// What a request knows of its connection (tonic's connect info for [`Tracked`]).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub state: Arc<ConnState>,
}

/// The open connections.
#[derive(Debug)]
pub struct Registry {
    start: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<ConnState>>>,
    max: usize,
    idle: Duration,
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Registry {
    pub fn new(max: usize, idle: Duration, metrics: Option<Arc<crate::metrics::Metrics>>) -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            next_id: AtomicU64::new(1),
            open: Mutex::new(HashMap::new()),
            max: max.max(1),
            idle,
            metrics,
        })
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.open.lock().map(|o| o.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn closed(&self, reason: &str) {
        if let Some(m) = &self.metrics {
            m.connections_closed.with_label_values(&[reason]).inc();
        }
    }

    /// Registers a new connection, closing the one idle longest when at the limit.
    fn admit(self: &Arc<Self>, tcp: TcpStream, remote: SocketAddr) -> Tracked {
        let state = Arc::new(ConnState {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            remote,
            last_read_ms: AtomicU64::new(self.now_ms()),
            closed: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        });
        let evicted = {
            let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            let evicted = if open.len() >= self.max {
                let oldest = open
                    .values()
                    .min_by_key(|c| c.last_read_ms.load(Ordering::Relaxed))
                    .cloned();
                if let Some(c) = &oldest {
                    open.remove(&c.id);
                }
                oldest
            } else {
                None
            };
            open.insert(state.id, state.clone());
            if let Some(m) = &self.metrics {
                m.connections_open.set(open.len() as i64);
            }
            evicted
        };
        if let Some(c) = evicted {
            tracing::warn!(peer = %c.remote, limit = self.max, "connection limit reached: closing the connection idle longest");
            self.closed("evicted");
            c.close();
        }
        Tracked {
            inner: tcp,
            state,
            registry: self.clone(),
        }
    }

    fn forget(&self, id: u64) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.remove(&id);
        if let Some(m) = &self.metrics {
            m.connections_open.set(open.len() as i64);
        }
    }

    /// Closes the connections whose client has been silent for the idle timeout.
    fn sweep(&self) {
        let deadline = self.now_ms().saturating_sub(self.idle.as_millis() as u64);
        let idle: Vec<Arc<ConnState>> = {
            let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            open.values()
                .filter(|c| c.last_read_ms.load(Ordering::Relaxed) < deadline)
                .cloned()
                .collect()
        };
        for c in idle {
            tracing::debug!(peer = %c.remote, "closing an idle connection");
            self.closed("idle");
            c.close();
        }
    }
}

/// A TCP connection that notes its client's activity and can be closed from outside.
#[derive(Debug)]
pub struct Tracked {
    inner: TcpStream,
    state: Arc<ConnState>,
    registry: Arc<Registry>,
}

impl Tracked {
    /// The client's address.
    pub fn remote(&self) -> SocketAddr {
        self.state.remote
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.registry.forget(self.state.id);
    }
}

fn aborted() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "connection closed by the server")
}

impl AsyncRead for Tracked {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.state.waker.register(cx.waker());
        if self.state.closed.load(Ordering::Acquire) {
            return Poll::Ready(Err(aborted()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let now = self.registry.now_ms();
            self.state.last_read_ms.store(now, Ordering::Relaxed);
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if self.state.closed.load(Ordering::Acquire) {
            return Poll::Ready(Err(aborted()));
        }
        Pin::new(&mut self.inner).poll_write(cx, data)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.state.closed.load(Ordering::Acquire) {
            return Poll::Ready(Err(aborted()));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Tracked {
    type ConnectInfo = ConnInfo;
    fn connect_info(&self) -> ConnInfo {
        ConnInfo {
            state: self.state.clone(),
        }
    }
}

/// Accepts connections on `listener`; a task sweeps idle ones every second until `stop`.
/// The listener lives in the returned stream: when the server drops it, the port is free.
pub fn accept(
    listener: TcpListener,
    registry: Arc<Registry>,
    stop: CancellationToken,
) -> impl futures::Stream<Item = io::Result<Tracked>> + Send + 'static {
    let sweeper = registry.clone();
    tokio::spawn(async move {
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = sweep.tick() => sweeper.sweep(),
            }
        }
    });
    futures::stream::unfold((listener, registry), |(listener, registry)| async move {
        loop {
            match listener.accept().await {
                Ok((tcp, remote)) => {
                    let _ = tcp.set_nodelay(true);
                    let conn = registry.admit(tcp, remote);
                    return Some((Ok(conn), (listener, registry)));
                }
                Err(e) => {
                    // Out of file descriptors or the like: wait, the sweep frees some.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    })
}

/// The connection a request came on (plain or TLS).
pub fn connection<T>(r: &tonic::Request<T>) -> Option<Arc<ConnState>> {
    if let Some(c) = r.extensions().get::<ConnInfo>() {
        return Some(c.state.clone());
    }
    r.extensions()
        .get::<tonic::transport::server::TlsConnectInfo<ConnInfo>>()
        .map(|c| c.get_ref().state.clone())
}

/// The client's address of a request, however it was served.
pub fn remote_addr<T>(r: &tonic::Request<T>) -> Option<SocketAddr> {
    connection(r).map(|c| c.remote()).or_else(|| r.remote_addr())
}

/// Raises this process's soft limit on open files to its hard limit, as servers do, so
/// that the connection limit (not the descriptor limit) is what a flood of connections
/// meets. Returns the limit now in force.
pub fn raise_fd_limit() -> Option<u64> {
    rlimit::increase_nofile_limit(u64::MAX).ok()
}
