//! The two halves of the HTTP proxies the store tests put between the daemon and a store
//! (one request per connection): reading a request's head, and asking the upstream the
//! same request with `Connection: close` for its whole answer. What a proxy does between
//! them (record, throttle, fail, stall, cut) is the test's own.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The head of the next request on `client` (GET and HEAD carry no body); None when the
/// peer closed first.
pub async fn read_head(client: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match client.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    Some(String::from_utf8_lossy(&head).to_string())
}

/// The upstream's whole answer to `head`, asked on a connection of its own that it closes
/// after answering; None when it cannot be reached.
pub async fn fetch_once(upstream: u16, head: &str) -> Option<Vec<u8>> {
    let mut up = TcpStream::connect(("127.0.0.1", upstream)).await.ok()?;
    let one = head.replacen("\r\n", "\r\nConnection: close\r\n", 1);
    up.write_all(one.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    let _ = up.read_to_end(&mut response).await;
    Some(response)
}
