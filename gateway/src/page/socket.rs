//! Page WebSockets at `/v1/tenants/{tenant}/page?token=…`: authentication, admission, and one
//! task per socket with one `select!` over the socket, its bounded outbound queue, the
//! heartbeat and shutdown.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use futures_util::SinkExt;
use governor::DefaultDirectRateLimiter;
use serde::Deserialize;
use toolmark_broker::{AdmitError, ConvKey};
use toolmark_proto::Limits;
use tracing::Instrument;

use crate::close;
use crate::page::frames;
use crate::page::session::{Session, Transport, refusal_reason};
use crate::page::state::PageState;
use crate::registry::Outgoing;
use crate::tenants::{Grant, Tenant};
use toolmark_config::MAX_FRAME_BYTES;

/// Read buffer per socket: small, since page frames are small and idle sockets are many
/// (larger frames are read in several chunks).
const READ_BUFFER: usize = 1024;
/// Frames to the page gather in the socket's write buffer up to this size before they are
/// written: the frames queued behind one leave with it in one write (see [`send_frames`]). A
/// lone frame is written at once, since every batch ends with a flush.
const WRITE_BATCH: usize = 8 * 1024;
/// Most frames one batch takes, so that a page far behind still gets its pings and probes
/// between batches.
pub(crate) const FRAMES_PER_WRITE: usize = 16;
/// Invalid frames tolerated within [`STRIKE_WINDOW`] before closing with 1008.
const MAX_STRIKES: usize = 20;
const STRIKE_WINDOW: Duration = Duration::from_secs(60);
/// Ping interval; a socket silent for three intervals is dropped.
const PING_EVERY: Duration = Duration::from_secs(30);
/// Every socket's pings fall on a grid of this step, shared by the process: the pings due
/// within one step go out in one wakeup of the runtime, where pings spread evenly would each
/// wake a thread (at 19,000 pages, 633 wakeups a second become 10).
const PING_GRID: Duration = Duration::from_millis(100);

#[derive(Debug, Deserialize)]
pub struct TokenQuery {
    token: Option<String>,
}

/// The upgrade handler: refusals happen after the upgrade, as close codes.
pub async fn upgrade(
    State(pages): State<PageState>,
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
        .write_buffer_size(WRITE_BATCH)
        .max_message_size(MAX_FRAME_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .on_upgrade(move |socket| {
            let open = pages.life.hold();
            // The page's state lives in one box and the task holds only the loop's state, not
            // room for admission and close as well (docs/architecture.md, memory per idle page).
            // What the request brought (the socket, the tenant's id, the token, the origin) is
            // moved into admission's box here, outside the task's own future: a value the
            // task captured would keep its room in the task for the page's whole life, moved
            // out or not (the socket alone is 368 bytes).
            let admitting = Box::pin(admit(pages, tenant_id, q.token, origin, socket));
            async move {
                let _open = open;
                let Some(mut admitted) = admitting.await else {
                    return;
                };
                let Admitted { page, socket } = &mut *admitted;
                let outbound = Arc::clone(&page.session.outbox);
                let end = page.run(socket, outbound).await;
                Box::pin(finish(admitted, end)).await;
            }
        })
}

/// An admitted page socket: its session and its WebSocket.
struct Admitted {
    page: PageSocket,
    socket: WebSocket,
}

/// Authenticates and admits the page; a refused page gets its close code here and `None`.
async fn admit(
    pages: PageState,
    tenant_id: String,
    token: Option<String>,
    origin: Option<String>,
    socket: WebSocket,
) -> Option<Box<Admitted>> {
    let (tenant, conv, grant) =
        match authenticate(&pages, &tenant_id, token.as_deref(), origin.as_deref()) {
            Ok(found) => found,
            Err((code, reason)) => {
                refuse(&pages, socket, code, reason).await;
                return None;
            }
        };
    let session = match Session::open(&pages, &tenant, conv, Transport::WebSocket, grant).await {
        Ok(s) => s,
        Err(e) => {
            let code = match e {
                AdmitError::Broker(_) => close::INTERNAL,
                AdmitError::TenantConnections | AdmitError::ConversationPages => close::LIMIT,
            };
            refuse(&pages, socket, code, refusal_reason(&e)).await;
            return None;
        }
    };
    let page = PageSocket {
        pages,
        limits: Limits::with_max_bytes(tenant.limits.max_message_bytes),
        rate: toolmark_broker::rate::bucket(tenant.limits.page_messages_per_second),
        session,
        strikes: VecDeque::new(),
    };
    Some(Box::new(Admitted { page, socket }))
}

fn authenticate(
    pages: &PageState,
    tenant_id: &str,
    token: Option<&str>,
    origin: Option<&str>,
) -> Result<(Arc<Tenant>, ConvKey, Grant), (u16, &'static str)> {
    if pages.is_draining() {
        return Err((close::GOING_AWAY, "draining"));
    }
    let tenant = pages
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

async fn refuse(pages: &PageState, mut socket: WebSocket, code: u16, reason: &'static str) {
    pages.metrics.closed(code);
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })))
        .await;
}

/// The end of a page session: the drain's record, the release and its events, then the
/// linger after our close frame.
async fn finish(admitted: Box<Admitted>, end: End) {
    let span = admitted.page.span();
    let Admitted {
        page: PageSocket { pages, session, .. },
        mut socket,
    } = *admitted;
    async move {
        let code = match end {
            End::Gone => None,
            End::Closed(code) => Some(code),
        };
        if code == Some(close::GOING_AWAY)
            && let Err(e) = pages.broker.mark_drained(&session.conv).await
        {
            tracing::debug!(error = %e, "drain not recorded");
        }
        tracing::debug!(
            ?code,
            client_id = session.client_id.as_deref().unwrap_or(""),
            "page socket ended"
        );
        // The release and its events first: a page that does not answer our close frame must
        // not hold them up (a drain's grace could end while it lingers).
        session.close(&pages).await;
        if code.is_some() {
            linger(&mut socket).await;
        }
    }
    .instrument(span)
    .await;
}

/// Sends `first` and the frames already queued behind it (at most [`FRAMES_PER_WRITE`] in
/// all), then flushes: under load the frames a page has waiting leave in one write instead of
/// one each.
async fn send_frames(
    socket: &mut WebSocket,
    outbound: &crate::registry::Outbox,
    first: &str,
) -> Result<(), axum::Error> {
    socket.feed(Message::Text(first.into())).await?;
    for _ in 1..FRAMES_PER_WRITE {
        let Some(next) = outbound.queued_frame() else {
            break;
        };
        socket.feed(Message::Text(next.as_ref().into())).await?;
    }
    socket.flush().await
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
    pages: PageState,
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
    /// The span of this page's log lines: a root of its own, naming this page and no other
    /// connection. Made for the close rather than held for the socket's life, so that an idle
    /// page keeps no span (about 0.5 KiB at the default log level).
    fn span(&self) -> tracing::Span {
        let conv = &self.session.conv;
        tracing::info_span!(parent: None, "page", tenant = %conv.tenant, user = %conv.user, conversation = %conv.conversation, socket = self.session.slot)
    }

    /// The span of one page frame's lines: [`Self::span`] where debug lines are kept, none at
    /// `info`. Making a span for every frame (a call's result among them) took about 4 % of a
    /// pages' node's CPU under calls, and what a frame logs at `info` or above (a rejected
    /// result, a write the broker refused) names its tenant, user and conversation itself.
    fn frame_span(&self) -> tracing::Span {
        if tracing::enabled!(tracing::Level::DEBUG) {
            self.span()
        } else {
            tracing::Span::none()
        }
    }

    async fn run(&mut self, socket: &mut WebSocket, outbound: Arc<crate::registry::Outbox>) -> End {
        let mut ping =
            tokio::time::interval_at(first_ping(ping_epoch(), Instant::now()).into(), PING_EVERY);
        // A late tick (a busy runtime) is skipped, not made up in a burst, and the socket
        // stays on the grid.
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut last_seen = Instant::now();
        let shutdown = self.pages.life.stopping().clone();
        loop {
            let flow = tokio::select! {
                () = shutdown.cancelled() => Flow::Close(close::GOING_AWAY, "draining"),
                frame = outbound.next() => match frame {
                    Some(Outgoing::Frame(frame)) => match send_frames(socket, &outbound, &frame).await {
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
                            Box::pin(close::answer_peer_close(socket)).await;
                            return End::Gone;
                        }
                        // Boxed: the message path is large and idle sockets should not carry it.
                        Some(Ok(Message::Text(text))) => {
                            let span = self.frame_span();
                            Box::pin(self.on_text(text.as_str()).instrument(span)).await
                        }
                        Some(Ok(Message::Binary(_))) => {
                            self.pages.metrics.inbound_rejected("binary");
                            self.strike()
                        }
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => Flow::Continue,
                        Some(Err(e)) if is_capacity_error(&e) => {
                            self.pages.metrics.inbound_rejected("frame_too_large");
                            Flow::Close(close::TOO_BIG, "frame too large")
                        }
                        Some(Err(_)) => return End::Gone,
                    }
                }
            };
            if let Flow::Close(code, reason) = flow {
                self.pages.metrics.closed(code);
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
            self.pages.metrics.inbound_rejected("rate_limited");
            return self.strike();
        }
        let Ok(message) = frames::decode(&self.pages, text.as_bytes(), &self.limits) else {
            return self.strike();
        };
        let claimed = message.client_id();
        let (conv, slot) = (&self.session.conv, self.session.slot);
        match &self.session.client_id {
            Some(bound) if bound != claimed => {
                if self.pages.registry.claimed_by_other(conv, slot, claimed) {
                    return Flow::Close(close::POLICY, "frame claims another page's clientId");
                }
                frames::client_mismatch(&self.pages);
                return self.strike();
            }
            Some(_) => {}
            None => {
                // A first frame naming a clientId another socket of the conversation holds: the
                // same page load coming back (its old socket is dead) or another tab claiming
                // it. Only a live page answers a ping within the probe's time.
                if let Some(other) = self.pages.registry.bound_elsewhere(conv, slot, claimed) {
                    if answers_ping(&other).await {
                        frames::client_mismatch(&self.pages);
                        return Flow::Close(close::POLICY, "frame claims another page's clientId");
                    }
                    other.evict();
                }
                self.session.identify(&self.pages, claimed).await;
            }
        }
        // Refusals are counted and logged by `dispatch`; a page is never answered.
        let _ = frames::dispatch(&self.pages, &self.session.conv, &message, text.len()).await;
        Flow::Continue
    }
}

/// The instant the ping grid counts from: the first socket's.
fn ping_epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// A socket opened at `now` first pings on the first grid point at least [`PING_EVERY`] later.
fn first_ping(epoch: Instant, now: Instant) -> Instant {
    let due = (now + PING_EVERY).saturating_duration_since(epoch);
    let step = PING_GRID.as_nanos();
    let on_grid = due.as_nanos().div_ceil(step) * step;
    epoch + Duration::from_nanos(u64::try_from(on_grid).unwrap_or(u64::MAX))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_ping_falls_on_the_grid_one_interval_or_a_little_more_after_the_open() {
        let epoch = Instant::now();
        for offset_us in [0, 1, 99_999, 100_000, 100_500, 12_345_678, 86_400_007_001] {
            let now = epoch + Duration::from_micros(offset_us);
            let first = first_ping(epoch, now);
            let since_epoch = first.duration_since(epoch).as_nanos();
            assert_eq!(
                since_epoch % PING_GRID.as_nanos(),
                0,
                "{offset_us} µs: off the grid"
            );
            assert!(first >= now + PING_EVERY, "{offset_us} µs: pinged early");
            assert!(
                first < now + PING_EVERY + PING_GRID,
                "{offset_us} µs: pinged late"
            );
        }
        // Sockets opened within one grid step ping together.
        let a = first_ping(epoch, epoch + Duration::from_millis(201));
        let b = first_ping(epoch, epoch + Duration::from_millis(299));
        assert_eq!(a, b);
    }
}
