//! Clear TLS errors. gRPC channels report a failed handshake as a cancelled call; one
//! handshake made here first, with the same trust roots and client certificate, names the
//! actual problem ("invalid peer certificate: UnknownIssuer", "certificate required").

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The HTTP/2 client preface and an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// Connects to `host:port`, completes a TLS handshake and reads the server's first bytes
/// (a server that wants a client certificate refuses only then). Err = what went wrong.
pub async fn probe(
    host: &str,
    port: u16,
    ca: Option<&[u8]>,
    identity: Option<(&[u8], &[u8])>,
    domain: &str,
) -> Result<(), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("bad CA file: {e}"))?;
                roots.add(cert).map_err(|e| format!("bad CA certificate: {e}"))?;
            }
            if roots.is_empty() {
                return Err("the CA file holds no certificate".into());
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("bad client certificate: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("bad client key: {e}"))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| format!("client certificate and key do not fit: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = ServerName::try_from(domain.to_string()).map_err(|e| format!("bad server name {domain}: {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let attempt = async {
        let tcp = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| e.to_string())?;
        let mut tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake failed: {e}"))?;
        tls.write_all(PREFACE)
            .await
            .map_err(|e| format!("TLS session refused: {e}"))?;
        let mut first = [0u8; 9];
        tls.read_exact(&mut first)
            .await
            .map_err(|e| format!("TLS session refused: {e}"))?;
        Ok(())
    };
    tokio::time::timeout(Duration::from_secs(10), attempt)
        .await
        .map_err(|_| "TLS handshake timed out".to_string())?
}
