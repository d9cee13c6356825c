//! One Pusher connection: the handshake, then one `select!` over the socket, the frames of its
//! subscriptions, the activity timer and shutdown. Each subscription is admitted, registered
//! and released like a page socket of its conversation; its clientId stays unknown (an Echo
//! page never speaks on the socket), so it receives every frame of the conversation and the
//! page filters by clientId (rule 1).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::stream::{SelectAll, Stream, StreamExt};
use governor::DefaultDirectRateLimiter;
use toolmark_broker::ConvKey;
use tracing::Instrument;

use super::protocol::{self, ACTIVITY_TIMEOUT_SECS, ClientEvent, code};
use crate::echo_channels::{new_socket_id, toolmark_channel, verify};
use crate::page::session::{Session, Transport};
use crate::page::state::PageState;
use crate::registry::{Outbox, Outgoing};
use crate::tenants::Tenant;

/// Subscriptions one connection may hold.
const MAX_SUBSCRIPTIONS: usize = 32;
const ACTIVITY: Duration = Duration::from_secs(ACTIVITY_TIMEOUT_SECS);
/// A connection without a subscription for this long is closed (4201): the app key is public,
/// so an unsubscribed socket is anyone's.
pub(crate) const SUBSCRIBE_WINDOW: Duration = Duration::from_secs(30);
const LINGER: Duration = Duration::from_secs(2);

/// Frames of one subscription: `(channel, registry slot, frame)`; `None` once its queue was
/// closed (full, or unsubscribed).
type Frames = Pin<Box<dyn Stream<Item = (Arc<str>, u64, Delivery)> + Send>>;

/// What one subscription's outbox yields.
enum Delivery {
    /// A frame for the page.
    Frame(Arc<str>),
    /// The outbox closed: the page could not keep up.
    Full,
    /// The admin API revoked what the subscription was admitted with (its tenant deleted, or
    /// its user disconnected).
    Revoked,
}

struct Connection {
    pages: PageState,
    tenant: Arc<Tenant>,
    socket_id: String,
    rate: DefaultDirectRateLimiter,
    subs: HashMap<Arc<str>, Session>,
    frames: SelectAll<Frames>,
    /// Whether the connection holds its own slot of the tenant's `max_connections`: from the
    /// upgrade until its first subscription, and again whenever it has none (a subscription
    /// counts as a socket of its conversation).
    slot: bool,
}

enum Flow {
    Continue,
    Send(String),
    /// A frame of a subscription: sent with those already waiting behind it.
    Frame(String),
    Close(u16, &'static str),
    Gone,
}

/// Serves one upgraded connection for the app key `key`. The opening (the checks, the
/// admission, a refusal) runs in a box of its own that takes what the request brought, and the
/// opened connection is boxed too: the task's own future keeps room only for the loop's state,
/// not for a socket and strings moved out long ago (`docs/architecture.md`, "Memory per idle
/// page").
pub(super) fn serve(
    pages: PageState,
    socket: WebSocket,
    key: String,
    proto: Option<String>,
    origin: Option<String>,
) -> impl Future<Output = ()> + Send {
    let opening = Box::pin(open(pages, socket, key, proto, origin));
    async move {
        let Some(mut opened) = opening.await else {
            return;
        };
        let span = tracing::info_span!(parent: None, "pusher", tenant = %opened.conn.tenant.id, socket_id = %opened.conn.socket_id);
        async move {
            let Opened { conn, socket } = &mut *opened;
            let hello = protocol::established(&conn.socket_id);
            if socket.send(Message::Text(hello.into())).await.is_ok() {
                Box::pin(conn.run(socket)).await;
            }
            Box::pin(opened.conn.finish()).await;
        }
        .instrument(span)
        .await;
    }
}

/// An admitted connection and its socket.
struct Opened {
    conn: Connection,
    socket: WebSocket,
}

/// The checks and the admission of a connection; a refused one gets its `pusher:error` and
/// close here, and `None`.
async fn open(
    pages: PageState,
    mut socket: WebSocket,
    key: String,
    proto: Option<String>,
    origin: Option<String>,
) -> Option<Box<Opened>> {
    let tenant = pages.tenants.by_pusher_key(&key);
    let mut refusal = match (&tenant, proto.as_deref()) {
        _ if pages.is_draining() => Some((code::OVER_CAPACITY, "draining")),
        (None, _) => Some((code::UNKNOWN_APP, "App key not in use")),
        (Some(_), p) if p != Some(protocol::PROTOCOL) => {
            Some((code::UNSUPPORTED_PROTOCOL, "Unsupported protocol version"))
        }
        (Some(t), _) if !t.origin_allowed(origin.as_deref()) => {
            Some((code::UNAUTHORIZED, "Origin not allowed"))
        }
        _ => None,
    };
    if let (Some(t), None) = (&tenant, refusal) {
        // Counted from the upgrade, before anything is read from the socket.
        refusal = match pages
            .broker
            .admit_socket(&t.id, t.limits.max_connections)
            .await
        {
            Ok(()) => None,
            Err(e) => Some((
                code::OVER_CAPACITY,
                crate::page::session::refusal_reason(&e),
            )),
        };
    }
    let (Some(tenant), None) = (tenant, refusal) else {
        let (c, why) = refusal.unwrap_or((code::UNKNOWN_APP, "App key not in use"));
        pages.metrics.closed(c);
        let _ = socket
            .send(Message::Text(protocol::error(c, why, None).into()))
            .await;
        close(&mut socket, c, why).await;
        return None;
    };
    let conn = Connection {
        rate: toolmark_broker::rate::bucket(tenant.limits.page_messages_per_second),
        pages,
        tenant,
        socket_id: new_socket_id(),
        subs: HashMap::new(),
        frames: SelectAll::new(),
        slot: true,
    };
    Some(Box::new(Opened { conn, socket }))
}

async fn close(socket: &mut WebSocket, code: u16, reason: &'static str) {
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })))
        .await;
    // Read what the client still sends, so the close frame is not lost to a reset.
    let _ = tokio::time::timeout(LINGER, async {
        while let Some(Ok(_)) = socket.recv().await {}
    })
    .await;
}

impl Connection {
    async fn run(&mut self, socket: &mut WebSocket) {
        let mut tick = tokio::time::interval(ACTIVITY);
        tick.tick().await;
        let mut last_seen = Instant::now();
        let shutdown = self.pages.life.stopping().clone();
        let unsubscribed = tokio::time::sleep(SUBSCRIBE_WINDOW);
        tokio::pin!(unsubscribed);
        let mut was_empty = true;
        loop {
            let flow = tokio::select! {
                () = shutdown.cancelled() => Flow::Close(code::RECONNECT, "draining"),
                () = &mut unsubscribed, if self.subs.is_empty() => {
                    Flow::Close(code::NO_ACTIVITY, "no subscription")
                }
                Some((channel, slot, frame)) = self.frames.next(), if !self.frames.is_empty() => {
                    self.delivered(&channel, slot, frame)
                }
                _ = tick.tick() => {
                    if last_seen.elapsed() > ACTIVITY * 3 {
                        Flow::Close(code::NO_ACTIVITY, "no activity")
                    } else if last_seen.elapsed() >= ACTIVITY {
                        Flow::Send(protocol::ping())
                    } else {
                        Flow::Continue
                    }
                }
                incoming = socket.recv() => {
                    last_seen = Instant::now();
                    match incoming {
                        None => Flow::Gone,
                        Some(Ok(Message::Close(_))) => {
                            crate::close::answer_peer_close(socket).await;
                            Flow::Gone
                        }
                        Some(Ok(Message::Text(text))) => Box::pin(self.on_text(text.as_str())).await,
                        Some(Ok(_)) => Flow::Continue,
                        Some(Err(e)) if e.to_string().contains("too long") || e.to_string().contains("Space limit") => {
                            Flow::Close(crate::close::TOO_BIG, "frame too large")
                        }
                        Some(Err(_)) => Flow::Gone,
                    }
                }
            };
            let flow = match flow {
                Flow::Frame(text) => match self.send_frames(socket, text).await {
                    Ok(then) => then,
                    Err(_) => return,
                },
                other => other,
            };
            match flow {
                Flow::Continue => {}
                Flow::Send(text) | Flow::Frame(text) => {
                    if socket.send(Message::Text(text.into())).await.is_err() {
                        return;
                    }
                }
                Flow::Close(c, why) => {
                    self.pages.metrics.closed(c);
                    let _ = socket
                        .send(Message::Text(protocol::error(c, why, None).into()))
                        .await;
                    close(socket, c, why).await;
                    return;
                }
                Flow::Gone => return,
            }
            // The window starts again whenever the last subscription ends.
            let empty = self.subs.is_empty();
            if empty && !was_empty {
                unsubscribed
                    .as_mut()
                    .reset(tokio::time::Instant::now() + SUBSCRIBE_WINDOW);
            }
            was_empty = empty;
        }
    }

    /// What a subscription's delivery asks of the connection.
    fn delivered(&self, channel: &Arc<str>, slot: u64, frame: Delivery) -> Flow {
        match (self.subs.get(channel), frame) {
            (Some(s), Delivery::Frame(f)) if s.slot == slot => {
                Flow::Frame(protocol::message(channel, &f))
            }
            (Some(s), Delivery::Full) if s.slot == slot => {
                Flow::Close(code::OVER_CAPACITY, "cannot keep up")
            }
            (Some(s), Delivery::Revoked) if s.slot == slot => {
                Flow::Close(code::UNAUTHORIZED, "revoked")
            }
            _ => Flow::Continue, // an ended subscription
        }
    }

    /// Sends `first` and the frames of its subscriptions already waiting behind it (at most
    /// `FRAMES_PER_WRITE` in all, as a page socket does), then flushes: under load the frames
    /// leave in one write instead of one each, and a lone frame leaves at once. What a
    /// delivery taken here asks beyond a frame (a close) comes back, to be done after them.
    async fn send_frames(
        &mut self,
        socket: &mut WebSocket,
        first: String,
    ) -> Result<Flow, axum::Error> {
        use futures_util::{FutureExt as _, SinkExt as _};
        socket.feed(Message::Text(first.into())).await?;
        let mut then = Flow::Continue;
        for _ in 1..crate::page::socket::FRAMES_PER_WRITE {
            // Only what is ready now: the loop's `select!` polls the subscriptions again (and
            // waits on them) before the task sleeps.
            let Some(Some((channel, slot, frame))) = self.frames.next().now_or_never() else {
                break;
            };
            match self.delivered(&channel, slot, frame) {
                Flow::Frame(text) => socket.feed(Message::Text(text.into())).await?,
                Flow::Continue => {}
                other => {
                    then = other;
                    break;
                }
            }
        }
        socket.flush().await?;
        Ok(then)
    }

    async fn on_text(&mut self, text: &str) -> Flow {
        if self.rate.check().is_err() {
            self.pages.metrics.inbound_rejected("rate_limited");
            return Flow::Continue;
        }
        match ClientEvent::parse(text) {
            Some(ClientEvent::Ping) => Flow::Send(protocol::pong()),
            Some(ClientEvent::Subscribe {
                channel,
                auth,
                channel_data,
            }) => self.subscribe(channel, auth, channel_data).await,
            Some(ClientEvent::Unsubscribe { channel }) => {
                if let Some(s) = self.subs.remove(channel.as_str()) {
                    s.close(&self.pages).await;
                    if self.subs.is_empty() && !self.take_slot().await {
                        return Flow::Close(code::OVER_CAPACITY, "tenant connection limit");
                    }
                }
                Flow::Continue
            }
            Some(ClientEvent::ClientEvent) => Flow::Send(protocol::error(
                code::UNAUTHORIZED,
                "Client events are not accepted: pages send through the app's bridge endpoint",
                None,
            )),
            Some(ClientEvent::Pong | ClientEvent::Other) | None => Flow::Continue,
        }
    }

    /// Authorizes and admits one subscription; the answer is `subscription_succeeded` or a
    /// `pusher:error` naming the channel.
    async fn subscribe(
        &mut self,
        channel: String,
        auth: Option<String>,
        channel_data: Option<String>,
    ) -> Flow {
        if self.subs.contains_key(channel.as_str()) {
            return Flow::Send(protocol::subscribed(&channel));
        }
        let refuse = |pages: &PageState, c: u16, why: &str| {
            pages.metrics.closed(c);
            tracing::debug!(%channel, code = c, reason = why, "subscription refused");
            Flow::Send(protocol::error(c, why, Some(&channel)))
        };
        let Some((user, conversation)) = toolmark_channel(&channel) else {
            return refuse(&self.pages, code::UNAUTHORIZED, "Channel not served");
        };
        if channel_data.is_some() {
            return refuse(&self.pages, code::UNAUTHORIZED, "Channel not served");
        }
        let authorized = auth
            .as_deref()
            .is_some_and(|a| verify(&self.tenant.pusher, a, &self.socket_id, &channel));
        if !authorized {
            return refuse(&self.pages, code::UNAUTHORIZED, "Invalid signature");
        }
        if self.subs.len() >= MAX_SUBSCRIPTIONS {
            return refuse(&self.pages, code::OVER_CAPACITY, "Too many subscriptions");
        }
        let conv = ConvKey::new(&self.tenant.id, user, conversation);
        // The first subscription takes over the connection's own slot.
        self.give_slot().await;
        let grant = crate::tenants::Grant {
            kid: None,
            iat_ms: Some(toolmark_broker::now_ms()),
        };
        let session =
            match Session::open(&self.pages, &self.tenant, conv, Transport::Echo, grant).await {
                Ok(s) => s,
                Err(e) => {
                    let why = crate::page::session::refusal_reason(&e);
                    if self.subs.is_empty() && !self.take_slot().await {
                        self.pages.metrics.closed(code::OVER_CAPACITY);
                        return Flow::Close(code::OVER_CAPACITY, why);
                    }
                    return refuse(&self.pages, code::OVER_CAPACITY, why);
                }
            };
        let name: Arc<str> = channel.as_str().into();
        let slot = session.slot;
        self.frames
            .push(frames(Arc::clone(&name), slot, Arc::clone(&session.outbox)));
        self.subs.insert(name, session);
        tracing::debug!(%channel, slot, "subscribed");
        Flow::Send(protocol::subscribed(&channel))
    }

    /// Takes the connection's own slot back (it has no subscription left); false when the
    /// tenant is at its limit.
    async fn take_slot(&mut self) -> bool {
        let t = &self.tenant;
        self.slot = self
            .pages
            .broker
            .admit_socket(&t.id, t.limits.max_connections)
            .await
            .is_ok();
        self.slot
    }

    /// Gives the connection's own slot up (a subscription is about to count instead).
    async fn give_slot(&mut self) {
        if std::mem::take(&mut self.slot)
            && let Err(e) = self.pages.broker.release_socket(&self.tenant.id).await
        {
            tracing::warn!(error = %e, "connection release not recorded");
        }
    }

    async fn finish(mut self) {
        self.give_slot().await;
        for (_, s) in self.subs {
            s.close(&self.pages).await;
        }
    }
}

/// The frames of one subscription's outbox, then one `None` when it closes.
fn frames(channel: Arc<str>, slot: u64, outbox: Arc<Outbox>) -> Frames {
    Box::pin(futures_util::stream::unfold(Some(outbox), move |o| {
        let channel = Arc::clone(&channel);
        async move {
            let o = o?;
            loop {
                return match o.next().await {
                    Some(Outgoing::Frame(f)) => {
                        Some(((channel, slot, Delivery::Frame(f)), Some(o)))
                    }
                    // Probes and evictions are for sockets bound to a clientId, which an Echo
                    // subscription never is.
                    Some(Outgoing::Probe | Outgoing::Evict) => continue,
                    // A revocation stays set: the stream ends with it.
                    Some(Outgoing::Revoke) => Some(((channel, slot, Delivery::Revoked), None)),
                    None => Some(((channel, slot, Delivery::Full), None)),
                };
            }
        }
    }))
}
