//! The HTTP side of the pairing server: reads one request head, applies the DNS-rebinding
//! guard (`Host`), the Origin allow-list and the WebSocket upgrade rules, and answers either
//! `101 Switching Protocols` or a plain refusal (404 for anything that is not an upgrade).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use crate::origin::is_allowed;

/// Largest accepted request head.
const MAX_HEAD_BYTES: usize = 8 * 1024;
/// The whole request head must arrive within this.
pub const HEAD_DEADLINE: Duration = Duration::from_millis(3000);
const MAX_HEADERS: usize = 64;

/// Why an HTTP request was not upgraded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a WebSocket upgrade of `/`: plain HTTP gets nothing here.
    #[error("not found")]
    NotFound,
    /// `Host` is not `127.0.0.1:<port>` or `localhost:<port>` (DNS rebinding guard).
    #[error("host not allowed")]
    BadHost,
    /// `Origin` missing, empty, `null` or not allowed.
    #[error("origin not allowed")]
    BadOrigin,
    /// A malformed upgrade (version, key).
    #[error("bad upgrade request")]
    BadRequest,
    /// The head was too large, malformed, late or the peer went away.
    #[error("unreadable request")]
    Unreadable,
}

impl Refusal {
    fn status_line(self) -> &'static str {
        match self {
            Refusal::NotFound => "404 Not Found",
            Refusal::BadHost | Refusal::BadOrigin => "403 Forbidden",
            Refusal::BadRequest | Refusal::Unreadable => "400 Bad Request",
        }
    }
}

/// An accepted upgrade: the bytes read past the request head (normally none).
#[derive(Debug)]
pub struct Accepted {
    /// Bytes after the head, handed to the WebSocket layer.
    pub leftover: Vec<u8>,
}

/// Reads and judges one request; answers it (101 or a refusal) on `stream`.
pub async fn accept(
    stream: &mut TcpStream,
    port: u16,
    allow_origins: &[String],
) -> Result<Accepted, Refusal> {
    let (head, leftover) = tokio::time::timeout(HEAD_DEADLINE, read_head(stream))
        .await
        .map_err(|_| Refusal::Unreadable)??;
    match judge(&head, port, allow_origins) {
        Ok(key) => {
            let response = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
                derive_accept_key(key.as_bytes())
            );
            stream
                .write_all(response.as_bytes())
                .await
                .map_err(|_| Refusal::Unreadable)?;
            Ok(Accepted { leftover })
        }
        Err(refusal) => {
            let response = format!(
                "HTTP/1.1 {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                refusal.status_line()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
            Err(refusal)
        }
    }
}

/// Reads until the blank line that ends the head; returns the head and any bytes after it.
async fn read_head(stream: &mut TcpStream) -> Result<(Vec<u8>, Vec<u8>), Refusal> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|_| Refusal::Unreadable)?;
        if n == 0 {
            return Err(Refusal::Unreadable);
        }
        let scan_from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf[scan_from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = scan_from + at + 4;
            let leftover = buf.split_off(end);
            return Ok((buf, leftover));
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(Refusal::Unreadable);
        }
    }
}

/// The rules, in order; returns the `Sec-WebSocket-Key` of an acceptable upgrade.
fn judge(head: &[u8], port: u16, allow_origins: &[String]) -> Result<String, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(Refusal::Unreadable),
    }
    let header = |name: &str| -> Option<&str> {
        let mut values = request
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name));
        let first = values.next()?;
        // A repeated Host or Origin is ambiguous: treat it as absent.
        if values.next().is_some() {
            return None;
        }
        std::str::from_utf8(first.value).ok().map(str::trim)
    };
    let has_token = |name: &str, token: &str| {
        header(name).is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    let is_upgrade = request.method == Some("GET")
        && request.path == Some("/")
        && has_token("Upgrade", "websocket")
        && has_token("Connection", "upgrade");
    if !is_upgrade {
        return Err(Refusal::NotFound);
    }
    if !host_allowed(header("Host"), port) {
        return Err(Refusal::BadHost);
    }
    if !is_allowed(header("Origin"), allow_origins) {
        return Err(Refusal::BadOrigin);
    }
    if header("Sec-WebSocket-Version") != Some("13") {
        return Err(Refusal::BadRequest);
    }
    match header("Sec-WebSocket-Key") {
        Some(key) if !key.is_empty() => Ok(key.to_owned()),
        _ => Err(Refusal::BadRequest),
    }
}

/// `127.0.0.1:<port>` or `localhost:<port>` (host case-insensitive), nothing else.
fn host_allowed(host: Option<&str>, port: u16) -> bool {
    let Some((name, host_port)) = host.and_then(|h| h.rsplit_once(':')) else {
        return false;
    };
    host_port == port.to_string() && (name == "127.0.0.1" || name.eq_ignore_ascii_case("localhost"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(extra: &str) -> Vec<u8> {
        format!(
            "GET / HTTP/1.1\r\nHost: 127.0.0.1:4000\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra}\r\n"
        )
        .into_bytes()
    }

    fn allowed() -> Vec<String> {
        vec!["http://localhost:5173".into()]
    }

    #[test]
    fn a_good_upgrade_passes() {
        let key = judge(
            &request("Origin: http://localhost:5173\r\n"),
            4000,
            &allowed(),
        );
        assert_eq!(key.as_deref(), Ok("dGhlIHNhbXBsZSBub25jZQ=="));
    }

    #[test]
    fn origins_are_checked() {
        for origin in [
            "",
            "Origin: null\r\n",
            "Origin: \r\n",
            "Origin: http://evil.test\r\n",
        ] {
            assert_eq!(
                judge(&request(origin), 4000, &allowed()),
                Err(Refusal::BadOrigin),
                "{origin}"
            );
        }
    }

    #[test]
    fn hosts_are_checked() {
        let head = String::from_utf8(request("Origin: http://localhost:5173\r\n")).unwrap();
        for host in [
            "evil.test:4000",
            "127.0.0.1:4001",
            "127.0.0.1",
            "[::1]:4000",
            "127.0.0.2:4000",
        ] {
            let h = head.replace("127.0.0.1:4000", host);
            assert_eq!(
                judge(h.as_bytes(), 4000, &allowed()),
                Err(Refusal::BadHost),
                "{host}"
            );
        }
        let h = head.replace("127.0.0.1:4000", "LocalHost:4000");
        assert!(judge(h.as_bytes(), 4000, &allowed()).is_ok());
    }

    #[test]
    fn plain_http_is_not_found() {
        let plain = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:4000\r\n\r\n";
        assert_eq!(judge(plain, 4000, &allowed()), Err(Refusal::NotFound));
        let head = String::from_utf8(request("Origin: http://localhost:5173\r\n")).unwrap();
        let other_path = head.replace("GET / ", "GET /x ");
        assert_eq!(
            judge(other_path.as_bytes(), 4000, &allowed()),
            Err(Refusal::NotFound)
        );
    }
}
