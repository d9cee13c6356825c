//! Shared state and routing of gateway nodes behind one [`Broker`] trait: call and confirmation
//! bindings with their single-use checks, the latest manifest per page, routing of agent → page
//! frames, cluster-wide limits and the event log. [`memory::MemoryBroker`] serves one process;
//! a Redis implementation serves many nodes with the same contract.

pub mod catalog;
mod change;
pub mod deadline;
mod error;
mod event;
pub mod memory;
pub mod model;
pub mod partition;
pub mod rate;
pub mod redis;
pub mod release;
pub mod retry;
pub mod seen;
pub mod traffic;
mod types;
pub mod webhook;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};
use toolmark_proto::{AgentMessage, Manifest, ToolResult};

pub(crate) use change::announce;
pub use change::{Announcement, Change, RELAY_AFTER, expired_confirmation};
pub use deadline::Deadline;
pub use error::{
    AdmitError, BrokerError, PlaceError, RateLimited, Rejection, SubmitError, TakeError,
};
pub use event::{
    EVENT_PAGE, EVENT_WINDOW_BYTES, Emitted, Event, EventType, RawEvent, event_id_after,
    is_event_id, next_event_page,
};
pub use model::{CONFIRM_ABANDON_GRACE, RECONNECT_GRACE, Retention};
pub use traffic::{NodeTraffic, SharedTraffic, TrafficEntry};
pub use types::{
    AdmitLimits, CallBinding, CallKind, CallRecord, CallRequest, CallState, CallTarget, CallerRate,
    CallerRef, ConfirmBinding, ConvKey, ConversationState, Outcome, PageIdentity, PageInfo,
    PageLeft, Placed, Resolution, ToolGate, facts_of, now_ms,
};

/// How long [`Events::emit_once`] remembers a name: past the longest a node holds a page's
/// frame for an unanswering broker (`broker.stall_hold_secs`, at most 300 s).
pub const ONCE_TTL: std::time::Duration = std::time::Duration::from_secs(600);

/// Where a node delivers agent → page frames: its own sockets of a conversation.
pub trait PageSink: Send + Sync + 'static {
    /// Writes `frame` to this node's sockets of `conv` whose clientId is `client_id` or not yet
    /// known (each page filters by clientId, rule 1).
    fn deliver(&self, conv: &ConvKey, client_id: &str, frame: Arc<str>);

    /// [`PageSink::deliver`] of a traced call's frame, with the call's W3C `traceparent`: the
    /// page's node continues the call's trace from it.
    fn deliver_traced(&self, conv: &ConvKey, client_id: &str, frame: Arc<str>, trace: &str) {
        let _ = trace;
        self.deliver(conv, client_id, frame);
    }
}

/// What [`Calls::watch`] found.
#[derive(Debug)]
pub enum Watch {
    /// The call ended with this outcome.
    Ended(Outcome),
    /// The call is pending: its outcome arrives here (at most once; a lost notification
    /// closes nothing, so a watcher bounds its wait by the call's deadline).
    Pending(OutcomeWaiter),
    /// No such call (never placed, another tenant's, or past its retention).
    Unknown,
}

/// Receives the final outcome of one call: its result, or a timeout. Exactly one arrives.
pub type OutcomeWaiter = oneshot::Receiver<Outcome>;

/// Events of one tenant: the first page of what was retained after the resume point, then the
/// live feed.
#[derive(Debug)]
pub struct EventFeed {
    /// At most [`EVENT_PAGE`] retained events after the requested id, oldest first, unparsed;
    /// a full page may have more behind it ([`Events::events_after`]).
    pub backlog: Vec<RawEvent>,
    /// Events emitted from now on (may repeat the tail of `backlog`; skip ids not after it).
    pub live: broadcast::Receiver<Event>,
}

/// The state and routing every gateway node shares, by domain ([`Calls`], [`Confirmations`],
/// [`Pages`], [`Events`], [`Limits`], [`DeadLetters`], [`DoorRecords`], [`Idempotency`],
/// [`SharedTraffic`]); the rules they follow are
/// [`model`]'s.
///
/// Every check-and-mark (a result against its binding, a timeout against a result, a
/// confirmation against its single use) is atomic in each implementation, so a call and its
/// timeout can never both win.
#[async_trait]
pub trait Broker:
    Calls
    + Confirmations
    + Pages
    + Events
    + Limits
    + DeadLetters
    + DoorRecords
    + Idempotency
    + SharedTraffic
    + seen::ToolsSeen
    + std::fmt::Debug
    + 'static
{
    /// This node's id (results are routed back to the node whose agent request waits).
    fn node_id(&self) -> &str;

    /// Whether the shared state is reachable and this node's delivery path works.
    async fn ready(&self) -> Result<(), BrokerError>;

    /// An agent's call: takes one call of the tenant's rate ([`Limits::take_call`]), reads the
    /// conversation ([`Pages::conversation`]), and when a page takes calls
    /// ([`CallTarget::of`]) binds and sends it ([`Calls::send_call`]). These steps, in this
    /// order, are the rule; an implementation may run them in fewer round trips.
    /// A caller's tool policy ([`CallRequest::gate`]) is asked first, against the page's
    /// manifest (a refused call takes nothing), then the caller's own rate
    /// ([`CallRequest::caller_rate`]) is taken. A request named by its tool's LLM name is
    /// resolved against the same manifest before the policy is asked, each time
    /// ([`CallRequest::resolve`]).
    async fn place_call(&self, mut req: CallRequest) -> Result<Placed, PlaceError> {
        if req.gate.is_some() || req.llm_name.is_some() {
            let state = self.conversation(&req.conv).await?;
            req.resolve(state.client_id.as_ref().map(|_| state.llm_names()))?;
            req.permitted(CallTarget::current(&state).as_ref())?;
        }
        if let Some(r) = &req.caller_rate {
            self.take_caller_call(&req.conv.tenant, &r.bucket, r.per_second)
                .await?;
        }
        self.take_call(&req.conv.tenant, req.calls_per_second)
            .await?;
        let state = self.conversation(&req.conv).await?;
        req.resolve(state.client_id.as_ref().map(|_| state.llm_names()))?;
        if req.gate.is_some() {
            req.permitted(CallTarget::current(&state).as_ref())?;
        }
        let target = CallTarget::of(&state).ok_or(PlaceError::NoPage)?;
        let (binding, frame) = req.bind_to(&target, self.node_id());
        let waiter = self
            .send_traced_call(binding.clone(), frame, req.trace.as_deref())
            .await?;
        Ok(Placed { binding, waiter })
    }

    /// The orderly end of this node: its background tasks stop (the node leaves the live set)
    /// and its connections close. Called last in a stop, once no page, call or job needs the
    /// broker; nothing may be asked of it afterwards.
    async fn close(&self);
}

/// Calls and describes: bound before they are sent, answered or timed out exactly once.
#[async_trait]
pub trait Calls: Send + Sync {
    /// A fresh id for a call of `conv`: [`partition::new_call_id`], 122 random bits; on Redis,
    /// while a node of a release up to 0.4.0 is live beside this one, the form that release
    /// reads ([`partition::new_legacy_call_id`]).
    fn mint_call_id(&self, conv: &ConvKey) -> String {
        let _ = conv;
        partition::new_call_id()
    }

    /// Stores the binding (before anything is sent), registers this node as the waiter and
    /// publishes `frame` to the pages of the binding's conversation. The call id comes from
    /// [`Calls::mint_call_id`] for that conversation.
    async fn send_call(
        &self,
        binding: CallBinding,
        frame: AgentMessage,
    ) -> Result<OutcomeWaiter, BrokerError>;

    /// [`Calls::send_call`] of a call traced as `trace` (a W3C `traceparent`): the page's node
    /// gets it with the frame ([`PageSink::deliver_traced`]).
    async fn send_traced_call(
        &self,
        binding: CallBinding,
        frame: AgentMessage,
        trace: Option<&str>,
    ) -> Result<OutcomeWaiter, BrokerError> {
        let _ = trace;
        self.send_call(binding, frame).await
    }

    /// Checks a page's `result` against the call's binding ([`model::check_result`]) and marks
    /// it answered; the outcome goes to the waiting node. An async call's `call.result` is
    /// recorded with it ([`Change::Call`]).
    async fn submit_result(
        &self,
        from: &PageIdentity,
        id: &str,
        result: ToolResult,
    ) -> Result<CallRecord, SubmitError>;

    /// [`Calls::submit_result`] again, by the node that received the result at `received_ms`,
    /// after a submission whose outcome it does not know (a stall, a lost reply): the deadline
    /// is judged as at `received_ms`, and a result already recorded from this page with the same
    /// outcome (the earlier submission, applied) is `Ok`, not [`Rejection::Duplicate`].
    async fn submit_result_again(
        &self,
        from: &PageIdentity,
        id: &str,
        result: ToolResult,
        received_ms: u64,
    ) -> Result<(), SubmitError>;

    /// Marks a pending call timed out, sends the page a `cancel` and resolves the waiter with
    /// [`Outcome::Timeout`]; its `call.timeout` (and an async call's `call.result`) is recorded
    /// with it. `None` when the call was no longer pending (its result won).
    async fn time_out(&self, conv: &ConvKey, id: &str) -> Result<Option<CallRecord>, BrokerError>;

    /// Times out pending calls whose deadline passed ([`model::SWEEP_GRACE`] ago) with nobody
    /// left to do it (the waiting node died, or the call is async). Safe to run on every node:
    /// only one sweeps at a time, and each call is timed out once. Returns what it timed out.
    /// The same sweep emits the events of changes whose node did not (it stalled or died between
    /// its change and the event, [`change`]): on Redis, what stayed in the partitions' outboxes
    /// for [`RELAY_AFTER`].
    async fn sweep_deadlines(&self) -> Result<Vec<CallRecord>, BrokerError>;

    /// Sends the protocol `cancel` for a pending call; its own result stays the outcome.
    async fn cancel(&self, tenant: &str, id: &str) -> Result<Option<CallRecord>, BrokerError>;

    /// A call of `tenant` by id.
    async fn call(&self, tenant: &str, id: &str) -> Result<Option<CallRecord>, BrokerError>;

    /// Hears the outcome of a call of `tenant` from this node too, whichever node placed it:
    /// its outcome when it has one, else a waiter that gets it with the placing node's (from
    /// the same notification, not a poll). A repeat of an idempotent request waits this way.
    async fn watch(&self, tenant: &str, id: &str) -> Result<Watch, BrokerError>;

    /// The frames of the conversation's calls still pending, to hand to a socket that just
    /// joined: a page that reconnects (to any node) gets the calls it may have missed while it
    /// was away. Pages ignore an id they already have (seed rule 2), so a repeat is harmless.
    async fn pending_frames(&self, conv: &ConvKey) -> Result<Vec<Arc<str>>, BrokerError>;

    /// The W3C `traceparent` the call `id` of `conv` was sent with, when it was traced (kept
    /// for the call's time to live): what its webhook delivery and a sweep's timeout link to.
    async fn call_trace(&self, conv: &ConvKey, id: &str) -> Result<Option<String>, BrokerError>;
}

/// Deferred confirmations: single use, bound to their page, expired only when their page is
/// gone (D23).
#[async_trait]
pub trait Confirmations: Send + Sync {
    /// Accepts a page's `confirmed` once per confirmId, only from the page that sent the
    /// `needs_confirmation` ([`model::check_confirm`]); returns what it was bound to. Its
    /// `confirmation.resolved`, with the page's final `outcome`, is recorded with it.
    async fn submit_confirmed(
        &self,
        from: &PageIdentity,
        confirm_id: &str,
        outcome: &ToolResult,
    ) -> Result<ConfirmBinding, SubmitError>;

    /// [`Confirmations::submit_confirmed`] again, after a submission whose outcome the node does
    /// not know (a stall, a lost reply): a confirmId already confirmed by this page (the earlier
    /// submission, applied) answers its binding, not [`Rejection::Duplicate`]; one expired by
    /// the sweep stays a duplicate.
    async fn submit_confirmed_again(
        &self,
        from: &PageIdentity,
        confirm_id: &str,
        outcome: &ToolResult,
    ) -> Result<ConfirmBinding, SubmitError>;

    /// Confirmations still pending from pages that have been gone (no socket anywhere that may
    /// be them, [`model::Presence::possibly`]) for at least `grace` without a break
    /// ([`model::sweep_confirm`]): marked used (a late `confirmed` is rejected), each with its
    /// `confirmation.resolved` ([`expired_confirmation`]), and returned. Safe on every node;
    /// each is returned once.
    async fn expire_abandoned_confirmations(
        &self,
        grace: std::time::Duration,
    ) -> Result<Vec<ConfirmBinding>, BrokerError>;
}

/// Page sockets, their presence and manifests, and the conversation they make up.
#[async_trait]
pub trait Pages: Send + Sync {
    /// Counts a new page socket against the tenant's and the conversation's limits.
    async fn admit_page(&self, conv: &ConvKey, limits: &AdmitLimits) -> Result<(), AdmitError>;

    /// Counts a socket of `tenant` that belongs to no conversation (a Pusher connection without
    /// a subscription) against `max_connections` alone.
    async fn admit_socket(&self, tenant: &str, max_connections: u64) -> Result<(), AdmitError>;

    /// Releases a socket admitted by [`Pages::admit_socket`].
    async fn release_socket(&self, tenant: &str) -> Result<(), BrokerError>;

    /// The tenant's sockets counted against `max_connections` on every live node (page
    /// sockets and sockets without a conversation): one read, no scan over pages.
    async fn tenant_connections(&self, tenant: &str) -> Result<u64, BrokerError>;

    /// Records that a socket of `conv` is the page load `client_id`.
    async fn page_identified(&self, conv: &ConvKey, client_id: &str) -> Result<(), BrokerError>;

    /// Releases a socket admitted by [`Pages::admit_page`], once per `release` however many
    /// times it is asked ([`Release::again`]: the answer of the first is returned). When it was
    /// the last socket of its page and the release is announced, `page.disconnected` is recorded
    /// with it ([`Change::PageLeft`]).
    async fn release_page(
        &self,
        conv: &ConvKey,
        client_id: Option<&str>,
        release: &Release,
    ) -> Result<PageLeft, BrokerError>;

    /// Keeps `manifest` as the latest of its page and makes that page the conversation's
    /// current one (new calls go there; D23); its `page.manifest` is recorded with it under
    /// the frame's `name` ([`Change::Manifest`]: stored again under the same name, a manifest
    /// is announced once).
    async fn put_manifest(
        &self,
        conv: &ConvKey,
        manifest: &Manifest,
        name: &str,
    ) -> Result<(), BrokerError>;

    /// The conversation's current page ([`model::current_page`]), its latest manifest and the
    /// connected pages.
    async fn conversation(&self, conv: &ConvKey) -> Result<ConversationState, BrokerError>;

    /// A draining node closed this conversation's sockets (with 1001): its pages are expected
    /// back on another node, so calls stay accepted for [`RECONNECT_GRACE`].
    async fn mark_drained(&self, conv: &ConvKey) -> Result<(), BrokerError>;

    /// Marks each of `names` announced in `conv` for the conversation's whole life (kept with
    /// it, refreshed and gone with it), answering per name whether it was new (`mark`); with
    /// `mark` false, unmarks them (an announcement that could not be emitted), answering whether
    /// each was marked. A conversation keeps at most [`model::ANNOUNCED_PER_CONVERSATION`]
    /// names: past them, and for a conversation the broker no longer holds, a name is answered
    /// new without being kept.
    async fn announce_once(
        &self,
        conv: &ConvKey,
        names: &[String],
        mark: bool,
    ) -> Result<Vec<bool>, BrokerError>;
}

/// The tenants' event logs: retained for `Last-Event-ID` resumption (bounded in count and
/// bytes, [`model::events_to_trim`]) and fed live.
#[async_trait]
pub trait Events: Send + Sync {
    /// Appends an event to the tenant's log and feeds live readers.
    async fn emit(
        &self,
        tenant: &str,
        kind: EventType,
        conv: &ConvKey,
        data: Value,
    ) -> Result<Event, BrokerError>;

    /// [`Events::emit`], once per `once` (a name of the change the event announces, unique in
    /// the tenant) for [`ONCE_TTL`]: a node that does not know whether its emission was
    /// recorded (a stall, a lost reply) emits again under the same name, and only the first
    /// is recorded. `None` when an emission under `once` was recorded before.
    async fn emit_once(
        &self,
        tenant: &str,
        kind: EventType,
        conv: &ConvKey,
        data: Value,
        once: &str,
    ) -> Result<Option<Event>, BrokerError>;

    /// The tenant's live events, and the first [`EVENT_PAGE`] retained after `after` (an event
    /// id; `None` means only live ones).
    async fn events(&self, tenant: &str, after: Option<&str>) -> Result<EventFeed, BrokerError>;

    /// At most `limit` retained events after `after`, oldest first, unparsed: a replay reads
    /// the log a page at a time, as its reader takes them.
    async fn events_after(
        &self,
        tenant: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<RawEvent>, BrokerError>;

    /// Every retained event after `after`, parsed, read page by page: for tests and tools that
    /// want the log at once (a replay to a reader takes a page at a time, as it reads).
    async fn retained(&self, tenant: &str, after: &str) -> Result<Vec<Event>, BrokerError> {
        let mut all = Vec::new();
        let mut from = after.to_owned();
        loop {
            let page = self.events_after(tenant, &from, EVENT_PAGE).await?;
            let Some(last) = page.last() else {
                return Ok(all);
            };
            from.clone_from(&last.id);
            let full = page.len() == EVENT_PAGE;
            all.extend(page.iter().filter_map(RawEvent::parse));
            if !full {
                return Ok(all);
            }
        }
    }

    /// What this process emitted so far (for the processes' metrics).
    fn emitted(&self) -> &Emitted;
}

/// The release of a page socket ([`Pages::release_page`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// Its name, unique among every node's releases: asked again under it, it is applied once.
    pub name: String,
    /// Announce `page.disconnected` when it was its page's last socket.
    pub announce: bool,
    /// Asked again after an attempt whose outcome the node does not know.
    pub again: bool,
}

impl Release {
    /// A first attempt of the release `name`.
    pub fn new(name: impl Into<String>, announce: bool) -> Self {
        Release {
            name: name.into(),
            announce,
            again: false,
        }
    }
}

/// Cluster-wide rates.
#[async_trait]
pub trait Limits: Send + Sync {
    /// Takes one call from the tenant's rate (`per_second`, burst [`model::burst`]). An
    /// unreachable broker refuses the call (the limit never fails open).
    async fn take_call(&self, tenant: &str, per_second: u32) -> Result<(), TakeError>;

    /// Takes one call from the rate of one credential of the tenant (`bucket`: an API key's
    /// id, or an OAuth subject's), shared by every node, burst [`model::burst`]; taken before
    /// the tenant's own. Refuses when the broker is unreachable, as the tenant's does.
    async fn take_caller_call(
        &self,
        tenant: &str,
        bucket: &str,
        per_second: u32,
    ) -> Result<(), TakeError>;
}

/// Webhook events that exhausted their retries.
#[async_trait]
pub trait DeadLetters: Send + Sync {
    /// The tenant's dead letters, oldest first.
    async fn webhook_failed(&self, tenant: &str) -> Result<Vec<webhook::DeadLetter>, BrokerError>;

    /// Puts a dead letter back in its conversation's queue; `false` when there is none.
    async fn webhook_retry(&self, tenant: &str, id: &str) -> Result<bool, BrokerError>;
}

/// A record a front door keeps in the broker ([`DoorRecords`]), by what it is. On Redis each is
/// one string under `<prefix>session:` and its name (`redis/keys.rs`, `Keys::kept`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Kept {
    /// A hosted MCP session's `initialize` state, as rmcp stores it.
    McpSession(String),
    /// A hosted MCP session's owner: the user and conversation of the token that began it.
    McpOwner(String),
    /// A hosted MCP task of a tenant: its call, and what `tasks/get` answers.
    McpTask { tenant: String, id: String },
}

/// Records of the front doors that outlive one request but not a retention window, valid on
/// every node, each named by what it is ([`Kept`]): a hosted MCP session, its owner, an MCP
/// task. Each is kept for its time to live, restarted on every read. And the bounds on live
/// hosted MCP sessions (the places methods).
#[async_trait]
pub trait DoorRecords: Send + Sync {
    /// Keeps `body` as `what` for `ttl` (replacing what was there).
    async fn keep(&self, what: &Kept, body: &str, ttl: Duration) -> Result<(), BrokerError>;

    /// The record `what`, its time to live restarted at `ttl`; `None` once it expired or was
    /// forgotten.
    async fn kept(&self, what: &Kept, ttl: Duration) -> Result<Option<String>, BrokerError>;

    /// Forgets the record; `false` when there was none.
    async fn forget(&self, what: &Kept) -> Result<bool, BrokerError>;

    /// Counts the session `id` among the live sessions of `places` (its tenant's and its
    /// holder's) until it goes `ttl` without [`DoorRecords::keep_place`]; `Ok(Err(bound))` when
    /// either set is full, which then changes nothing. A session counted already is kept.
    async fn take_place(
        &self,
        places: &Places<'_>,
        id: &str,
        ttl: Duration,
    ) -> Result<Result<(), PlaceBound>, BrokerError>;

    /// Restarts the time to live of a counted session (nothing for one no longer counted).
    async fn keep_place(
        &self,
        places: &Places<'_>,
        id: &str,
        ttl: Duration,
    ) -> Result<(), BrokerError>;

    /// No longer counts the session `id`.
    async fn give_place(&self, places: &Places<'_>, id: &str) -> Result<(), BrokerError>;
}

/// Where a bounded session is counted: among the live sessions of its tenant and among those
/// of its holder (for a hosted MCP session: the token's user and conversation), each set with
/// its bound.
#[derive(Debug, Clone, Copy)]
pub struct Places<'a> {
    /// The tenant's set (the gateway names the tenant's incarnation in it).
    pub tenant: &'a str,
    /// The holder's set, inside the tenant's.
    pub holder: &'a str,
    /// At most this many live sessions of the tenant.
    pub per_tenant: usize,
    /// At most this many live sessions of the holder.
    pub per_holder: usize,
}

/// Which bound refused a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceBound {
    /// The tenant's.
    Tenant,
    /// The holder's.
    Holder,
}

/// Idempotency keys of the agent API (`Idempotency-Key`): per tenant, one record each, kept for
/// a time to live counted from the first request; the record is opaque here (the gateway's).
#[async_trait]
pub trait Idempotency: Send + Sync {
    /// Stores `record` under the tenant's `key` unless one is there; returns the one there
    /// (`None`: this request claimed the key).
    async fn claim_idempotency(
        &self,
        tenant: &str,
        key: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<Option<String>, BrokerError>;

    /// Replaces the record of a claimed key, keeping its time to live; nothing when it expired.
    async fn update_idempotency(
        &self,
        tenant: &str,
        key: &str,
        record: &str,
    ) -> Result<(), BrokerError>;

    /// The record of the tenant's `key`.
    async fn idempotency(&self, tenant: &str, key: &str) -> Result<Option<String>, BrokerError>;

    /// Gives a key back (its first request failed before a call existed).
    async fn release_idempotency(&self, tenant: &str, key: &str) -> Result<(), BrokerError>;
}

/// Every domain trait, for callers of a [`SharedBroker`].
pub mod prelude {
    pub use crate::{
        Broker, Calls, Confirmations, DeadLetters, DoorRecords, Events, Idempotency, Limits, Pages,
        SharedTraffic, seen::ToolsSeen,
    };
}

/// A shareable broker handle.
pub type SharedBroker = Arc<dyn Broker>;
