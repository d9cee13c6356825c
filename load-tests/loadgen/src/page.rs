//! One simulated browser page: a WebSocket from its own source address with the tenant's
//! `Origin`, a manifest, then an immediate echo of every call addressed to it until the run
//! stops it. With a fallback node, a page closed with 1001 (its node draining), or whose socket
//! breaks, reconnects there with the same token and clientId and without resending its
//! manifest, as the bridge does.

use std::net::{IpAddr, SocketAddr};
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
/// Close code of a draining node: the page comes back elsewhere.
const GOING_AWAY: u16 = 1001;
/// Pause between two failed reconnection attempts.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Where a page goes when its node drains, and how much it waits first.
#[derive(Debug, Clone)]
pub struct Fallback {
    /// The node pages reconnect to.
    pub target: Arc<Target>,
    /// Each page waits a random delay up to this before reconnecting (0: at once), as real
    /// clients spread their reconnections.
    pub jitter: Duration,
}

/// How a page's socket ended.
enum End {
    /// The run stopped the page.
    Stopped,
    /// The gateway closed it with this code.
    Closed(u16, String),
    /// Anything else.
    Broken(String),
}

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

pub(crate) type Socket = WebSocketStream<TcpStream>;

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
pub async fn run(
    target: Arc<Target>,
    fallback: Option<Fallback>,
    spec: PageSpec,
    tally: Arc<Tally>,
    stop: CancellationToken,
) {
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
    loop {
        match serve(&mut ws, &spec.client_id, &tally, &stop).await {
            End::Stopped => {
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, close(&mut ws)).await;
                return;
            }
            End::Closed(GOING_AWAY, _) if fallback.is_some() => {
                tally.went_away(false);
            }
            // A real page also comes back after an abnormal closure; counted apart.
            End::Broken(_) if fallback.is_some() => tally.went_away(true),
            End::Closed(code, reason) => {
                return tally.dropped(format!("closed by the gateway: {code} {reason}"));
            }
            End::Broken(reason) => return tally.dropped(reason),
        }
        let Some(fb) = &fallback else { return };
        match reconnect(fb, &spec, &stop).await {
            Some(again) => {
                ws = again;
                tally.came_back();
            }
            None => return,
        }
    }
}
/// Connects to the fallback node until it works or the run stops (`None`).
async fn reconnect(
    fallback: &Fallback,
    spec: &PageSpec,
    stop: &CancellationToken,
) -> Option<Socket> {
    let jitter = jitter_for(spec, fallback.jitter);
    tokio::select! {
        () = stop.cancelled() => return None,
        () = tokio::time::sleep(jitter) => {}
    }
    loop {
        let attempt = tokio::select! {
            () = stop.cancelled() => return None,
            a = tokio::time::timeout(HANDSHAKE_TIMEOUT, connect(&fallback.target, spec)) => a,
        };
        if let Ok(Ok(ws)) = attempt {
            return Some(ws);
        }
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(RETRY_PAUSE) => {}
        }
    }
}

/// A delay in `0..=max` that differs from page to page (derived from its clientId, so no
/// random source is needed).
fn jitter_for(spec: &PageSpec, max: Duration) -> Duration {
    let max_us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
    if max_us == 0 {
        return Duration::ZERO;
    }
    let seed = spec
        .client_id
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    Duration::from_micros(seed % (max_us + 1))
}

pub(crate) async fn connect(target: &Target, spec: &PageSpec) -> Result<Socket, String> {
    let url = format!("{}?token={}", target.page_url, spec.token);
    open(
        target.addr,
        target.source_for(spec.index),
        &url,
        &target.origin,
    )
    .await
}

/// The load generator's one WebSocket client (pages and the Pusher scenarios alike): a TCP
/// connect to `addr` from `source`, Nagle off, then the upgrade to `url` with `origin`.
pub(crate) async fn open(
    addr: SocketAddr,
    source: Option<IpAddr>,
    url: &str,
    origin: &str,
) -> Result<Socket, String> {
    let socket = TcpSocket::new_v4().map_err(|e| format!("socket: {e}"))?;
    if let Some(source) = source {
        socket
            .bind(SocketAddr::new(source, 0))
            .map_err(|e| format!("bind {source}: {e}"))?;
    }
    let stream = socket
        .connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .set_nodelay(true)
        .map_err(|e| format!("nodelay: {e}"))?;
    let mut request = url
        .into_client_request()
        .map_err(|e| format!("request: {e}"))?;
    let origin = HeaderValue::from_str(origin).map_err(|e| format!("origin: {e}"))?;
    request.headers_mut().insert(ORIGIN, origin);
    let (ws, _) = tokio_tungstenite::client_async_with_config(request, stream, Some(ws_config()))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    Ok(ws)
}

/// Answers calls until `stop` or until the socket ends on its own.
async fn serve(ws: &mut Socket, client_id: &str, tally: &Tally, stop: &CancellationToken) -> End {
    loop {
        let incoming = tokio::select! {
            () = stop.cancelled() => return End::Stopped,
            incoming = ws.next() => incoming,
        };
        match incoming {
            Some(Ok(Message::Text(text))) => {
                if let Some(reply) = frames::answer(text.as_str(), client_id) {
                    if let Err(e) = ws.send(Message::text(reply)).await {
                        return End::Broken(format!("send: {e}"));
                    }
                    tally.answered();
                }
            }
            Some(Ok(Message::Close(frame))) => {
                return match frame {
                    Some(f) => End::Closed(u16::from(f.code), f.reason.to_string()),
                    None => End::Broken("closed by the gateway without a code".into()),
                };
            }
            // Pings are answered by tungstenite itself while reading.
            Some(Ok(_)) => {}
            Some(Err(e)) => return End::Broken(format!("read: {e}")),
            None => return End::Broken("connection ended".into()),
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
