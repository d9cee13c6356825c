//! Shared state and routing of gateway nodes behind one [`Broker`] trait: call and confirmation
//! bindings with their single-use checks, the latest manifest per page, routing of agent → page
//! frames, cluster-wide limits and the event log. [`memory::MemoryBroker`] serves one process;
//! a Redis implementation serves many nodes with the same contract.
//!
//! Each domain is a trait of its own ([`domain`]: calls, confirmations, pages, events, limits,
//! dead letters, the doors' records, idempotency keys; and [`SharedTraffic`], [`seen::ToolsSeen`],
//! [`catalog::Catalog`]); [`Broker`] is all of them. A part of a node that uses one domain
//! keeps that domain's handle ([`handle`]), not the whole broker.

pub mod catalog;
mod change;
pub mod deadline;
pub mod domain;
mod error;
mod event;
pub mod memory;
pub mod model;
pub mod partition;
mod placement;
pub mod rate;
pub mod redis;
pub mod release;
pub mod retry;
pub mod seen;
pub mod traffic;
mod types;
pub mod webhook;

use std::sync::Arc;

use async_trait::async_trait;

pub(crate) use change::announce;
pub use change::{Announcement, Change, RELAY_AFTER, expired_confirmation};
pub use deadline::Deadline;
pub use domain::calls::{Calls, OutcomeWaiter, Watch};
pub use domain::confirmations::Confirmations;
pub use domain::dead_letters::DeadLetters;
pub use domain::events::{EventFeed, Events, ONCE_TTL};
pub use domain::idempotency::Idempotency;
pub use domain::limits::Limits;
pub use domain::pages::{Pages, Release};
pub use domain::records::{DoorRecords, Kept, PlaceBound, Places};
pub use error::{
    AdmitError, BrokerError, PlaceError, RateLimited, Rejection, SubmitError, TakeError,
};
pub use event::{
    EVENT_PAGE, EVENT_WINDOW_BYTES, Emitted, Event, EventType, RawEvent, event_id_after,
    is_event_id, next_event_page,
};
pub use model::{CONFIRM_ABANDON_GRACE, RECONNECT_GRACE, Retention};
pub use placement::{CallRequest, CallTarget, CallView, CallerRate, Placed, ToolGate, facts_of};
pub use traffic::{NodeTraffic, SharedTraffic, TrafficEntry};
pub use types::{
    AdmitLimits, CallBinding, CallKind, CallRecord, CallState, CallerRef, ConfirmBinding, ConvKey,
    ConversationState, Outcome, PageIdentity, PageInfo, PageLeft, Resolution, now_ms,
};

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
    /// conversation ([`Broker::call_target`]), and when a page takes calls
    /// ([`CallTarget::of`]) binds and sends it ([`Calls::send_call`]). These steps, in this
    /// order, are the rule; an implementation may run them in fewer round trips.
    /// A caller's tool policy ([`CallRequest::gate`]) is asked first, against the page's
    /// manifest (a refused call takes nothing), then the caller's own rate
    /// ([`CallRequest::caller_rate`]) is taken. A request named by its tool's LLM name is
    /// resolved against the same manifest before the policy is asked, each time
    /// ([`CallRequest::resolve`]).
    async fn place_call(&self, mut req: CallRequest) -> Result<Placed, PlaceError> {
        if req.gate.is_some() || req.llm_name.is_some() {
            self.call_target(&mut req).await?;
        }
        if let Some(r) = &req.caller_rate {
            self.take_caller_call(&req.conv.tenant, &r.bucket, r.per_second)
                .await?;
        }
        self.take_call(&req.conv.tenant, req.calls_per_second)
            .await?;
        let target = self
            .call_target(&mut req)
            .await?
            .ok_or(PlaceError::NoPage)?;
        let (binding, frame) = req.bind_to(&target, self.node_id());
        let waiter = self
            .send_traced_call(binding.clone(), frame, req.trace.as_deref())
            .await?;
        Ok(Placed { binding, waiter })
    }

    /// One read of [`Broker::place_call`]: the request checked against its conversation as it
    /// is now ([`CallRequest::target_in`]), and the page it goes to when one takes calls. By
    /// default from [`Pages::conversation`]; the memory broker reads it in place.
    async fn call_target(&self, req: &mut CallRequest) -> Result<Option<CallTarget>, PlaceError> {
        let state = self.conversation(&req.conv).await?;
        req.target_in(state.call_view())
    }

    /// The orderly end of this node: its background tasks stop (the node leaves the live set)
    /// and its connections close. Called last in a stop, once no page, call or job needs the
    /// broker; nothing may be asked of it afterwards.
    async fn close(&self);
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

/// The narrow handles of a [`SharedBroker`]: each is the same broker, seen as one domain. A part
/// of a node that uses one domain takes its handle (the deadline sweep takes
/// `Arc<dyn Calls>`, an MCP session store `Arc<dyn DoorRecords>`), so what it may do with the
/// broker is written in its type.
pub mod handle {
    use std::sync::Arc;

    use crate::{
        Calls, Confirmations, DeadLetters, DoorRecords, Events, Idempotency, Limits, Pages,
        SharedBroker, SharedTraffic, seen::ToolsSeen,
    };

    /// Calls and describes.
    pub fn calls(b: &SharedBroker) -> Arc<dyn Calls> {
        Arc::clone(b) as Arc<dyn Calls>
    }

    /// Deferred confirmations.
    pub fn confirmations(b: &SharedBroker) -> Arc<dyn Confirmations> {
        Arc::clone(b) as Arc<dyn Confirmations>
    }

    /// Page sockets, manifests and conversations.
    pub fn pages(b: &SharedBroker) -> Arc<dyn Pages> {
        Arc::clone(b) as Arc<dyn Pages>
    }

    /// The tenants' event logs.
    pub fn events(b: &SharedBroker) -> Arc<dyn Events> {
        Arc::clone(b) as Arc<dyn Events>
    }

    /// Cluster-wide rates.
    pub fn limits(b: &SharedBroker) -> Arc<dyn Limits> {
        Arc::clone(b) as Arc<dyn Limits>
    }

    /// Webhook dead letters.
    pub fn dead_letters(b: &SharedBroker) -> Arc<dyn DeadLetters> {
        Arc::clone(b) as Arc<dyn DeadLetters>
    }

    /// The front doors' records.
    pub fn records(b: &SharedBroker) -> Arc<dyn DoorRecords> {
        Arc::clone(b) as Arc<dyn DoorRecords>
    }

    /// Idempotency keys.
    pub fn idempotency(b: &SharedBroker) -> Arc<dyn Idempotency> {
        Arc::clone(b) as Arc<dyn Idempotency>
    }

    /// The nodes' traffic figures.
    pub fn traffic(b: &SharedBroker) -> Arc<dyn SharedTraffic> {
        Arc::clone(b) as Arc<dyn SharedTraffic>
    }

    /// The tool definitions pages presented.
    pub fn tools_seen(b: &SharedBroker) -> Arc<dyn ToolsSeen> {
        Arc::clone(b) as Arc<dyn ToolsSeen>
    }
}
