//! TLS on the gRPC listener: a rustls server configuration built from PEM files (certificate
//! chain, key, optional client CA for mTLS), rebuilt on SIGHUP and when a file changes, and
//! an accept loop whose handshakes run beside it under a time limit, so a client that never
//! finishes its handshake holds up nobody.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

use crate::config::TlsConfig;
use crate::error::{Error, Result};

use super::connections::Tracked;

/// Longest a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the files are checked for changes.
const WATCH_INTERVAL: Duration = Duration::from_secs(5);

fn tls_error(path: &Path, what: &str, detail: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("tls: {what} {}: {detail}", path.display()))
}

/// Builds the server configuration from the files named in `config`.
pub fn load(config: &TlsConfig) -> Result<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&config.cert)
        .map_err(|e| tls_error(&config.cert, "cannot read certificate", e))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| tls_error(&config.cert, "bad certificate", e))?;
    if certs.is_empty() {
        return Err(tls_error(
            &config.cert,
            "no certificate in",
            "expected PEM `CERTIFICATE` blocks",
        ));
    }
    let key =
        PrivateKeyDer::from_pem_file(&config.key).map_err(|e| tls_error(&config.key, "cannot read private key", e))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::InvalidArgument(format!("tls: {e}")))?;
    let builder = match &config.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).map_err(|e| tls_error(ca, "cannot read client CA", e))? {
                let cert = cert.map_err(|e| tls_error(ca, "bad client CA", e))?;
                roots.add(cert).map_err(|e| tls_error(ca, "bad client CA", e))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| tls_error(ca, "unusable client CA", e))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut server = builder
        .with_single_cert(certs, key)
        .map_err(|e| tls_error(&config.key, "key does not fit the certificate", e))?;
    // gRPC is HTTP/2 only.
    server.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(server))
}

/// The live server configuration, replaced when the files change or on SIGHUP. A reload
/// that fails keeps the previous configuration and logs why.
#[derive(Debug)]
pub struct Reloading {
    config: TlsConfig,
    current: RwLock<Arc<ServerConfig>>,
    stamps: RwLock<Vec<Option<SystemTime>>>,
}

impl Reloading {
    /// Loads the files once; errors here stop the daemon from starting.
    pub fn new(config: TlsConfig) -> Result<Arc<Self>> {
        let current = load(&config)?;
        let stamps = stamps(&config);
        Ok(Arc::new(Self {
            config,
            current: RwLock::new(current),
            stamps: RwLock::new(stamps),
        }))
    }

    /// The configuration new connections get.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Re-reads the files; returns whether the configuration was replaced.
    pub fn reload(&self) -> bool {
        match load(&self.config) {
            Ok(new) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = new;
                *self.stamps.write().unwrap_or_else(|p| p.into_inner()) = stamps(&self.config);
                tracing::info!(cert = %self.config.cert.display(), "tls certificate reloaded");
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "tls reload failed; keeping the previous certificate");
                false
            }
        }
    }

    /// Reloads when a file's modification time changed since the last load.
    pub fn reload_if_changed(&self) -> bool {
        let now = stamps(&self.config);
        let changed = *self.stamps.read().unwrap_or_else(|p| p.into_inner()) != now;
        changed && self.reload()
    }

    /// Watches the files and SIGHUP until `stop`.
    pub fn watch(self: &Arc<Self>, stop: CancellationToken) {
        let this = self.clone();
        let stop2 = stop.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(WATCH_INTERVAL);
            loop {
                tokio::select! {
                    _ = stop2.cancelled() => return,
                    _ = tick.tick() => { this.reload_if_changed(); }
                }
            }
        });
        #[cfg(unix)]
        {
            let this = self.clone();
            tokio::spawn(async move {
                use tokio::signal::unix::{SignalKind, signal};
                let Ok(mut hup) = signal(SignalKind::hangup()) else {
                    return;
                };
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        got = hup.recv() => {
                            if got.is_none() {
                                return;
                            }
                            this.reload();
                        }
                    }
                }
            });
        }
    }
}

fn stamps(config: &TlsConfig) -> Vec<Option<SystemTime>> {
    let files: [Option<&PathBuf>; 3] = [Some(&config.cert), Some(&config.key), config.client_ca.as_ref()];
    files
        .iter()
        .map(|p| p.and_then(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok()))
        .collect()
}

/// Yields the connections of `accepted` whose TLS handshake succeeds. Failed handshakes
/// (no client certificate, wrong CA, plain HTTP/2) are logged at debug level and dropped.
pub fn incoming<S>(
    accepted: S,
    tls: Arc<Reloading>,
) -> impl futures::Stream<Item = std::io::Result<TlsStream<Tracked>>> + Send + 'static
where
    S: futures::Stream<Item = std::io::Result<Tracked>> + Send + 'static,
{
    use futures::StreamExt;
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        let mut accepted = std::pin::pin!(accepted);
        loop {
            // The server went away: drop the accept stream (and its listener) now.
            let conn = tokio::select! {
                _ = tx.closed() => return,
                conn = accepted.next() => match conn {
                    Some(c) => c,
                    None => return,
                },
            };
            let Ok(conn) = conn else { continue };
            let acceptor = TlsAcceptor::from(tls.current());
            let tx = tx.clone();
            tokio::spawn(async move {
                let peer = conn.remote();
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(conn)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "tls handshake failed"),
                    Err(_) => tracing::debug!(%peer, "tls handshake timed out"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
