//! Page WebSockets at `/v1/tenants/{tenant}/page?token=…`: authentication, admission, and one
//! task per socket with one `select!` over the socket, its bounded outbound queue, the
//! heartbeat and shutdown.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use serde::Deserialize;
use toolmark_broker::{AdmitError, ConvKey};
use toolmark_proto::Limits;
use tracing::Instrument;

use crate::close;
use crate::inbound;
use crate::registry::Outgoing;
use crate::session::{Session, Transport, refusal_reason};
use crate::state::AppState;
use crate::tenants::{Grant, Tenant};
use toolmark_process::config::MAX_FRAME_BYTES;

/// Read buffer per socket: small, since page frames are small and idle sockets are many
/// (larger frames are read in several chunks).
const READ_BUFFER: usize = 1024;
/// Invalid frames tolerated within [`STRIKE_WINDOW`] before closing with 1008.
const MAX_STRIKES: usize = 20;
const STRIKE_WINDOW: Duration = Duration::from_secs(60);
/// Ping interval; a socket silent for three intervals is dropped.
const PING_EVERY: Duration = Duration::from_secs(30);

#[derive(Debug, Deserialize)]
pub struct TokenQuery {
    token: Option<String>,
}

/// The upgrade handler: refusals happen after the upgrade, as close codes.
pub async fn upgrade(
    State(app): State<AppState>,
    Path(tenant_id): Path<String>,
    Query(q): Query<TokenQuery>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let origin = headers
        .get("origin")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    ws.read_buffer_size(READ_BUFFER)
        .write_buffer_size(0)
        .max_message_size(MAX_FRAME_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .on_upgrade(move |socket| async move {
            let _open = app.life.hold();
            match authenticate(&app, &tenant_id, q.token.as_deref(), origin.as_deref()) {
                Err((code, reason)) => refuse(&app, socket, code, reason).await,
                Ok((tenant, conv, grant)) => serve(app, socket, tenant, conv, grant).await,
            }
        })
}

fn authenticate(
    app: &AppState,
    tenant_id: &str,
    token: Option<&str>,
    origin: Option<&str>,
) -> Result<(Arc<Tenant>, ConvKey, Grant), (u16, &'static str)> {
    if app.is_draining() {
        return Err((close::GOING_AWAY, "draining"));
    }
    let tenant = app
        .tenants
        .get(tenant_id)
        .ok_or((close::UNAUTHORIZED, "unauthorized"))?;
    if !tenant.origin_allowed(origin) {
        return Err((close::FORBIDDEN_ORIGIN, "origin not allowed"));
    }
    let token = token.ok_or((close::UNAUTHORIZED, "unauthorized"))?;
    let (claims, grant) = tenant.verify(token).map_err(|e| {
        tracing::debug!(tenant = %tenant.id, error = %e, "page token refused");
        (close::UNAUTHORIZED, "unauthorized")
    })?;
    let conv = ConvKey::new(&tenant.id, &claims.sub, &claims.cnv);
    Ok((tenant, conv, grant))
}

async fn refuse(app: &AppState, mut socket: WebSocket, code: u16, reason: &'static str) {
    app.metrics.closed(code);
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })))
        .await;
}

async fn serve(app: AppState, socket: WebSocket, tenant: Arc<Tenant>, conv: ConvKey, grant: Grant) {
    let session = match Session::open(&app, &tenant, conv, Transport::WebSocket, grant).await {
        Ok(s) => s,
        Err(e) => {
            let code = match e {
                AdmitError::Broker(_) => close::INTERNAL,
                AdmitError::TenantConnections | AdmitError::ConversationPages => close::LIMIT,
            };
            return refuse(&app, socket, code, refusal_reason(&e)).await;
        }
    };
    let per_second =
        NonZeroU32::new(tenant.limits.page_messages_per_second).unwrap_or(NonZeroU32::MIN);
    // A root span of its own: a page's log lines name that page and no other connection.
    let span = tracing::info_span!(parent: None, "page", tenant = %session.conv.tenant, user = %session.conv.user, conversation = %session.conv.conversation, socket = session.slot);
    let mut page = PageSocket {
        app,
        limits: Limits::with_max_bytes(tenant.limits.max_message_bytes),
        rate: RateLimiter::direct(
            Quota::per_second(per_second)
                .allow_burst(per_second.saturating_mul(NonZeroU32::MIN.saturating_add(1))),
        ),
        session,
        strikes: VecDeque::new(),
    };
    async move {
        let mut socket = socket;
        let outbound = Arc::clone(&page.session.outbox);
        let end = page.run(&mut socket, outbound).await;
        let code = match end {
            End::Gone => None,
            End::Closed(code) => Some(code),
        };
        if code == Some(close::GOING_AWAY)
            && let Err(e) = page.app.broker.mark_drained(&page.session.conv).await
        {
            tracing::debug!(error = %e, "drain not recorded");
        }
        tracing::debug!(
            ?code,
            client_id = page.session.client_id.as_deref().unwrap_or(""),
            "page socket ended"
        );
        // The release and its events first: a page that does not answer our close frame must not
        // hold them up (a drain's grace could end while it lingers).
        page.session.close(&page.app).await;
        if code.is_some() {
            linger(&mut socket).await;
        }
    }
    .instrument(span)
    .await;
}

/// Why a socket loop ended.
#[derive(Debug)]
enum End {
    /// The page closed or the connection dropped.
    Gone,
    /// We closed it with this code.
    Closed(u16),
}

struct PageSocket {
    app: AppState,
    limits: Limits,
    rate: DefaultDirectRateLimiter,
    session: Session,
    strikes: VecDeque<Instant>,
}

enum Flow {
    Continue,
    Close(u16, &'static str),
}

impl PageSocket {
    async fn run(&mut self, socket: &mut WebSocket, outbound: Arc<crate::registry::Outbox>) -> End {
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        let mut last_seen = Instant::now();
        let shutdown = self.app.life.stopping().clone();
        loop {
            let flow = tokio::select! {
                () = shutdown.cancelled() => Flow::Close(close::GOING_AWAY, "draining"),
                frame = outbound.next() => match frame {
                    Some(Outgoing::Frame(frame)) => match socket.send(Message::Text(frame.as_ref().into())).await {
                        Ok(()) => Flow::Continue,
                        Err(_) => return End::Gone,
                    },
                    // Another socket claims this page's clientId: a live page answers the ping.
                    Some(Outgoing::Probe) => match socket.send(Message::Ping(Default::default())).await {
                        Ok(()) => Flow::Continue,
                        Err(_) => return End::Gone,
                    },
                    // It did not answer: its page load reconnected on that other socket.
                    Some(Outgoing::Evict) => return End::Gone,
                    // Its tenant, token key or user was revoked through the admin API.
                    Some(Outgoing::Revoke) => Flow::Close(close::UNAUTHORIZED, "revoked"),
                    None => Flow::Close(close::TRY_AGAIN_LATER, "outbound queue full"),
                },
                _ = ping.tick() => {
                    if last_seen.elapsed() > PING_EVERY * 3 {
                        return End::Gone;
                    }
                    if socket.send(Message::Ping(Default::default())).await.is_err() {
                        return End::Gone;
                    }
                    Flow::Continue
                }
                incoming = socket.recv() => {
                    last_seen = Instant::now();
                    outbound.heard();
                    match incoming {
                        None => return End::Gone,
                        Some(Ok(Message::Close(_))) => {
                            close::answer_peer_close(socket).await;
                            return End::Gone;
                        }
                        // Boxed: the message path is large and idle sockets should not carry it.
                        Some(Ok(Message::Text(text))) => Box::pin(self.on_text(text.as_str())).await,
                        Some(Ok(Message::Binary(_))) => {
                            self.app.metrics.inbound_rejected("binary");
                            self.strike()
                        }
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => Flow::Continue,
                        Some(Err(e)) if is_capacity_error(&e) => {
                            self.app.metrics.inbound_rejected("frame_too_large");
                            Flow::Close(close::TOO_BIG, "frame too large")
                        }
                        Some(Err(_)) => return End::Gone,
                    }
                }
            };
            if let Flow::Close(code, reason) = flow {
                self.app.metrics.closed(code);
                let _ = socket
                    .send(Message::Close(Some(CloseFrame {
                        code,
                        reason: reason.into(),
                    })))
                    .await;
                return End::Closed(code);
            }
        }
    }

    /// Counts an invalid frame; too many within the window close the socket with 1008.
    fn strike(&mut self) -> Flow {
        let now = Instant::now();
        self.strikes.push_back(now);
        while self
            .strikes
            .front()
            .is_some_and(|t| now.duration_since(*t) > STRIKE_WINDOW)
        {
            self.strikes.pop_front();
        }
        if self.strikes.len() >= MAX_STRIKES {
            Flow::Close(close::POLICY, "repeated invalid frames")
        } else {
            Flow::Continue
        }
    }

    async fn on_text(&mut self, text: &str) -> Flow {
        if self.rate.check().is_err() {
            self.app.metrics.inbound_rejected("rate_limited");
            return self.strike();
        }
        let Ok(message) = inbound::decode(&self.app, text.as_bytes(), &self.limits) else {
            return self.strike();
        };
        let claimed = message.client_id();
        let (conv, slot) = (&self.session.conv, self.session.slot);
        match &self.session.client_id {
            Some(bound) if bound != claimed => {
                if self.app.registry.claimed_by_other(conv, slot, claimed) {
                    return Flow::Close(close::POLICY, "frame claims another page's clientId");
                }
                inbound::client_mismatch(&self.app);
                return self.strike();
            }
            Some(_) => {}
            None => {
                // A first frame naming a clientId another socket of the conversation holds: the
                // same page load coming back (its old socket is dead) or another tab claiming
                // it. Only a live page answers a ping within the probe's time.
                if let Some(other) = self.app.registry.bound_elsewhere(conv, slot, claimed) {
                    if answers_ping(&other).await {
                        inbound::client_mismatch(&self.app);
                        return Flow::Close(close::POLICY, "frame claims another page's clientId");
                    }
                    other.evict();
                }
                self.session.identify(&self.app, claimed).await;
            }
        }
        // Refusals are counted and logged by `dispatch`; a page is never answered.
        let _ = inbound::dispatch(&self.app, &self.session.conv, message).await;
        Flow::Continue
    }
}

/// How long the socket that holds a clientId has to answer a ping before a new socket claiming
/// the same clientId takes it over.
const CLAIM_PROBE: Duration = Duration::from_secs(2);

/// Pings the page behind `other` and waits up to [`CLAIM_PROBE`] for any sign of it.
async fn answers_ping(other: &crate::registry::Outbox) -> bool {
    let asked = toolmark_broker::now_ms();
    other.probe();
    let deadline = Instant::now() + CLAIM_PROBE;
    while Instant::now() < deadline {
        if other.heard_since(asked) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    other.heard_since(asked)
}

/// After our close frame, reads (and discards) what the page still sends, until it closes or
/// [`LINGER`] passes, so the close frame is not lost to a TCP reset caused by unread data.
async fn linger(socket: &mut WebSocket) {
    let _ = tokio::time::timeout(LINGER, async {
        while let Some(Ok(_)) = socket.recv().await {}
    })
    .await;
}

const LINGER: Duration = Duration::from_secs(2);

fn is_capacity_error(e: &axum::Error) -> bool {
    let text = e.to_string();
    text.contains("Space limit exceeded") || text.contains("too long") || text.contains("Capacity")
}
