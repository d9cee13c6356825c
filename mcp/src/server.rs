//! The pairing WebSocket server on 127.0.0.1: the accept loop, the pairing handshake of each
//! socket, then the paired socket's loop relaying protocol v1 frames to and from the [`Link`].

use std::net::SocketAddr;

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot::error::TryRecvError;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use toolmark_proto::{Limits, decode_to_agent};

use crate::close::{
    self, BUSY, FIRST_FRAME_DEADLINE, GOING_AWAY, INVALID_PAIRING_FRAME, MAX_FIRST_FRAME_BYTES,
    MAX_FRAME_BYTES, NO_PAIRING_FRAME, REFUSED, TOO_BIG,
};
use crate::handshake::{Gate, PairingFrame, paired_frame, parse_first_frame};
use crate::link::{Attach, Link};
use crate::opening::{Opening, read_opening};
use crate::outbox::{self, Outbound};
use crate::pairing::Pairing;
use crate::upgrade;

type Ws = WebSocketStream<TcpStream>;

/// Everything a connection needs; cheap to clone.
#[derive(Debug, Clone)]
pub struct PairingServer {
    /// The bound port (the Host check compares against it).
    pub port: u16,
    /// Allowed page origins.
    pub allow_origins: Vec<String>,
    /// Codes and tokens.
    pub pairing: Pairing,
    /// The link to the paired page.
    pub link: Link,
    /// One handshake at a time.
    pub gate: Gate,
}

impl PairingServer {
    /// Accepts connections until `shutdown`; each runs as a tracked task.
    pub async fn run(self, listener: TcpListener, tasks: TaskTracker, shutdown: CancellationToken) {
        loop {
            let (stream, peer) = tokio::select! {
                () = shutdown.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            if !peer.ip().is_loopback() {
                continue;
            }
            let server = self.clone();
            let stop = shutdown.clone();
            tasks.spawn(async move { server.connection(stream, peer, stop).await });
        }
    }

    async fn connection(
        self,
        mut stream: TcpStream,
        peer: SocketAddr,
        shutdown: CancellationToken,
    ) {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            a = upgrade::accept(&mut stream, self.port, &self.allow_origins) => a,
        };
        let leftover = match accepted {
            Ok(a) => a.leftover,
            Err(refusal) => {
                tracing::debug!(%peer, %refusal, "upgrade refused");
                return;
            }
        };
        let Some(pass) = self.gate.enter() else {
            return refuse(stream, leftover, BUSY).await;
        };
        // The first message is judged on its frame headers before the WebSocket layer, whose
        // limit is the paired socket's 4 MiB, buffers any of it (a tokio-tungstenite stream's
        // limits are fixed when it is made).
        let deadline = Instant::now() + FIRST_FRAME_DEADLINE;
        let mut opening = leftover;
        let judged = tokio::select! {
            () = shutdown.cancelled() => return refuse(stream, opening, GOING_AWAY).await,
            judged = tokio::time::timeout_at(deadline, read_opening(&mut stream, &mut opening)) => judged,
        };
        // Each refusal releases the gate before its closing handshake.
        match judged {
            Err(_) => {
                drop(pass);
                return refuse(stream, opening, NO_PAIRING_FRAME).await;
            }
            Ok(Opening::Gone) => return,
            Ok(Opening::TooBig) => {
                drop(pass);
                return refuse(stream, opening, INVALID_PAIRING_FRAME).await;
            }
            Ok(Opening::Ready) => {}
        }
        let mut ws = websocket(stream, opening, MAX_FRAME_BYTES).await;
        let first = tokio::select! {
            () = shutdown.cancelled() => return close_with(&mut ws, GOING_AWAY).await,
            first = tokio::time::timeout_at(deadline, first_frame(&mut ws)) => first,
        };
        let frame = match first {
            Err(_) => {
                drop(pass);
                return close_with(&mut ws, NO_PAIRING_FRAME).await;
            }
            Ok(First::Gone) => return,
            Ok(First::Close(code)) => {
                drop(pass);
                return close_with(&mut ws, code).await;
            }
            Ok(First::Text(text)) => match parse_first_frame(&text) {
                Some(frame) => frame,
                None => {
                    drop(pass);
                    return close_with(&mut ws, INVALID_PAIRING_FRAME).await;
                }
            },
        };
        let (verdict, how) = match &frame {
            PairingFrame::Pair(code) => (self.pairing.pair(code), Attach::Pair),
            PairingFrame::Resume(token) => (self.pairing.resume(token), Attach::Resume),
        };
        let token = match verdict {
            Ok(token) => token,
            Err(why) => {
                tracing::info!(%peer, %why, "pairing refused");
                pass.refused();
                return close_with(&mut ws, REFUSED).await;
            }
        };
        // The handshake is over once its verdict is in: the next one may begin while `paired`
        // is on its way (a page that resumes and another that connects right after it must not
        // meet a 4429).
        drop(pass);
        if ws
            .send(Message::text(paired_frame(&token.encode())))
            .await
            .is_err()
        {
            return;
        }
        let (outbox, outbound) = outbox::outbox();
        let generation = self.link.attach(outbox, how);
        tracing::info!(%peer, generation, ?how, "page paired");
        relay(ws, outbound, &self.link, generation, shutdown).await;
        self.link.detach(generation);
    }
}

enum First {
    Text(String),
    Close(u16),
    Gone,
}

/// A WebSocket over `stream`, `read` already taken from it, with frames and messages capped at
/// `max_bytes`.
async fn websocket(stream: TcpStream, read: Vec<u8>, max_bytes: usize) -> Ws {
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_bytes))
        .max_frame_size(Some(max_bytes));
    WebSocketStream::from_partially_read(stream, read, Role::Server, Some(config)).await
}

/// Closes a socket that did not pair with `code`. Its WebSocket keeps the first frame's limit,
/// so the closing handshake buffers no oversized frame either.
async fn refuse(stream: TcpStream, read: Vec<u8>, code: u16) {
    let mut ws = websocket(stream, read, MAX_FIRST_FRAME_BYTES).await;
    close_with(&mut ws, code).await;
}

/// The first data frame (already judged within the size limit), or the close code it earns.
async fn first_frame(ws: &mut Ws) -> First {
    loop {
        match ws.next().await {
            None => return First::Gone,
            Some(Ok(Message::Close(_))) => {
                let _ = ws.flush().await;
                return First::Gone;
            }
            Some(Ok(Message::Text(text))) => return First::Text(text.as_str().to_owned()),
            Some(Ok(Message::Binary(_))) => return First::Close(INVALID_PAIRING_FRAME),
            Some(Ok(_)) => continue,
            Some(Err(WsError::Capacity(_))) => return First::Close(INVALID_PAIRING_FRAME),
            Some(Err(_)) => return First::Gone,
        }
    }
}

/// The paired socket's loop: page frames in (validated, then handed to the link), link frames
/// out, until the page leaves, the link closes the socket, or shutdown (1001). A close from the
/// link comes first, even while a send waits on a page that does not read: what is still queued
/// is dropped and the close frame follows what the socket already took.
async fn relay(
    mut ws: Ws,
    outbound: Outbound,
    link: &Link,
    generation: u64,
    shutdown: CancellationToken,
) {
    let Outbound {
        mut frames,
        mut close,
    } = outbound;
    let limits = Limits::with_max_bytes(MAX_FRAME_BYTES);
    loop {
        // Checked first on every turn; the select below stays fair between reading and sending.
        match close.try_recv() {
            Ok(code) => return close_with(&mut ws, code).await,
            Err(TryRecvError::Closed) => return close_with(&mut ws, GOING_AWAY).await,
            Err(TryRecvError::Empty) => {}
        }
        tokio::select! {
            code = &mut close => return close_with(&mut ws, code.unwrap_or(GOING_AWAY)).await,
            () = shutdown.cancelled() => return close_with(&mut ws, GOING_AWAY).await,
            out = frames.recv() => match out {
                Some(text) => {
                    let sent = tokio::select! {
                        biased;
                        code = &mut close => {
                            return close_with(&mut ws, code.unwrap_or(GOING_AWAY)).await;
                        }
                        () = shutdown.cancelled() => return close_with(&mut ws, GOING_AWAY).await,
                        sent = ws.send(Message::text(text)) => sent,
                    };
                    if sent.is_err() {
                        return;
                    }
                }
                // The link let go of the socket: with the code it closed it with, if any.
                None => {
                    let code = close.try_recv().unwrap_or(GOING_AWAY);
                    return close_with(&mut ws, code).await;
                }
            },
            inbound = ws.next() => match inbound {
                None => return,
                Some(Ok(Message::Close(_))) => {
                    // Completes the closing handshake (the reply is queued by the read).
                    let _ = ws.flush().await;
                    return;
                }
                Some(Ok(Message::Text(text))) => {
                    match decode_to_agent(text.as_bytes(), &limits) {
                        Ok(message) => link.on_frame(generation, message),
                        Err(e) => tracing::debug!(reason = e.reason().as_str(), "invalid page frame dropped"),
                    }
                }
                Some(Ok(Message::Binary(_))) => tracing::debug!("binary page frame dropped"),
                Some(Ok(_)) => {}
                Some(Err(WsError::Capacity(CapacityError::MessageTooLong { .. }))) | Some(Err(WsError::Capacity(_))) => {
                    return close_with(&mut ws, TOO_BIG).await;
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "page socket failed");
                    return;
                }
            },
        }
    }
}

/// Sends a close frame with `code` and waits briefly for the page's answer.
async fn close_with(ws: &mut Ws, code: u16) {
    let frame = CloseFrame {
        code: CloseCode::from(code),
        reason: close::reason(code).into(),
    };
    if ws.close(Some(frame)).await.is_err() {
        return;
    }
    let drain = async { while let Some(Ok(_)) = ws.next().await {} };
    let _ = tokio::time::timeout(std::time::Duration::from_millis(1000), drain).await;
}
