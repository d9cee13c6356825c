//! One simulated browser page: a WebSocket from its own source address with the tenant's
//! `Origin`, a manifest, then an immediate echo of every call addressed to it until the run
//! stops it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::http::header::ORIGIN;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_util::sync::CancellationToken;

use crate::frames;
use crate::tally::Tally;
use crate::target::Target;

/// TCP connect plus WebSocket upgrade, at most.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a page waits for the gateway's close reply when the run stops it.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest frame a page accepts: the gateway's own cap.
const MAX_FRAME_BYTES: usize = 4 * 1024 * 1024;

/// Who a page is.
#[derive(Debug, Clone)]
pub struct PageSpec {
    /// Position in the fleet: picks the source address and the user.
    pub index: usize,
    /// The page load's id, sent in every frame.
    pub client_id: String,
    /// The socket's page token.
    pub token: String,
}

type Socket = WebSocketStream<TcpStream>;

/// Small buffers: thousands of pages share this process, and their frames are small.
fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4 * 1024)
        .write_buffer_size(0)
        .max_write_buffer_size(MAX_FRAME_BYTES * 2)
        .max_message_size(Some(MAX_FRAME_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES))
}

/// Connects page `spec`, sends its manifest, and answers its calls until `stop`; every outcome
/// lands in `tally`.
pub async fn run(target: Arc<Target>, spec: PageSpec, tally: Arc<Tally>, stop: CancellationToken) {
    let connected = tokio::select! {
        () = stop.cancelled() => return,
        c = tokio::time::timeout(HANDSHAKE_TIMEOUT, connect(&target, &spec)) => c,
    };
    let mut ws = match connected {
        Ok(Ok(ws)) => ws,
        Ok(Err(reason)) => return tally.failed(reason),
        Err(_) => return tally.failed("handshake timed out".into()),
    };
    if let Err(e) = ws
        .send(Message::text(frames::manifest(&spec.client_id)))
        .await
    {
        return tally.failed(format!("manifest: {e}"));
    }
    tally.ready();
    match serve(&mut ws, &spec.client_id, &tally, &stop).await {
        Ok(()) => {
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, close(&mut ws)).await;
        }
        Err(reason) => tally.dropped(reason),
    }
}

async fn connect(target: &Target, spec: &PageSpec) -> Result<Socket, String> {
    let socket = TcpSocket::new_v4().map_err(|e| format!("socket: {e}"))?;
    if let Some(source) = target.source_for(spec.index) {
        socket
            .bind(SocketAddr::new(source, 0))
            .map_err(|e| format!("bind {source}: {e}"))?;
    }
    let stream = socket
        .connect(target.addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .set_nodelay(true)
        .map_err(|e| format!("nodelay: {e}"))?;
    let url = format!("{}?token={}", target.page_url, spec.token);
    let mut request = url
        .into_client_request()
        .map_err(|e| format!("request: {e}"))?;
    let origin = HeaderValue::from_str(&target.origin).map_err(|e| format!("origin: {e}"))?;
    request.headers_mut().insert(ORIGIN, origin);
    let (ws, _) = tokio_tungstenite::client_async_with_config(request, stream, Some(ws_config()))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    Ok(ws)
}

/// Answers calls until `stop` (`Ok`) or until the socket ends on its own (`Err` with why).
async fn serve(
    ws: &mut Socket,
    client_id: &str,
    tally: &Tally,
    stop: &CancellationToken,
) -> Result<(), String> {
    loop {
        let incoming = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            incoming = ws.next() => incoming,
        };
        match incoming {
            Some(Ok(Message::Text(text))) => {
                if let Some(reply) = frames::answer(text.as_str(), client_id) {
                    ws.send(Message::text(reply))
                        .await
                        .map_err(|e| format!("send: {e}"))?;
                    tally.answered();
                }
            }
            Some(Ok(Message::Close(frame))) => {
                return Err(match frame {
                    Some(f) => format!("closed by the gateway: {} {}", u16::from(f.code), f.reason),
                    None => "closed by the gateway".into(),
                });
            }
            // Pings are answered by tungstenite itself while reading.
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(format!("read: {e}")),
            None => return Err("connection ended".into()),
        }
    }
}

/// Sends a close frame and reads until the gateway's reply ends the stream.
async fn close(ws: &mut Socket) {
    if ws.close(None).await.is_err() {
        return;
    }
    while let Some(Ok(_)) = ws.next().await {}
}
