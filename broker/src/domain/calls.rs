//! Calls and describes, as every broker keeps them: bound before they are sent, answered or
//! timed out exactly once, watched from any node.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::oneshot;
use toolmark_proto::{AgentMessage, ToolResult};

use crate::{
    BrokerError, CallBinding, CallRecord, ConvKey, Outcome, PageIdentity, SubmitError, partition,
};

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

/// Calls and describes: bound before they are sent, answered or timed out exactly once.
#[async_trait]
pub trait Calls: Send + Sync + std::fmt::Debug {
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
    /// gets it with the frame ([`crate::PageSink::deliver_traced`]).
    async fn send_traced_call(
        &self,
        binding: CallBinding,
        frame: AgentMessage,
        trace: Option<&str>,
    ) -> Result<OutcomeWaiter, BrokerError> {
        let _ = trace;
        self.send_call(binding, frame).await
    }

    /// Checks a page's `result` against the call's binding ([`crate::model::check_result`]) and
    /// marks it answered; the outcome goes to the waiting node. An async call's `call.result` is
    /// recorded with it ([`crate::Change::Call`]). The result is read, not taken: a node that
    /// must submit it again still has it.
    async fn submit_result(
        &self,
        from: &PageIdentity,
        id: &str,
        result: &ToolResult,
    ) -> Result<(), SubmitError>;

    /// [`Calls::submit_result`] again, by the node that received the result at `received_ms`,
    /// after a submission whose outcome it does not know (a stall, a lost reply): the deadline
    /// is judged as at `received_ms`, and a result already recorded from this page with the same
    /// outcome (the earlier submission, applied) is `Ok`, not [`crate::Rejection::Duplicate`].
    async fn submit_result_again(
        &self,
        from: &PageIdentity,
        id: &str,
        result: &ToolResult,
        received_ms: u64,
    ) -> Result<(), SubmitError>;

    /// Marks a pending call timed out, sends the page a `cancel` and resolves the waiter with
    /// [`Outcome::Timeout`]; its `call.timeout` (and an async call's `call.result`) is recorded
    /// with it. `None` when the call was no longer pending (its result won).
    async fn time_out(&self, conv: &ConvKey, id: &str) -> Result<Option<CallRecord>, BrokerError>;

    /// Times out pending calls whose deadline passed ([`crate::model::SWEEP_GRACE`] ago) with nobody
    /// left to do it (the waiting node died, or the call is async). Safe to run on every node:
    /// only one sweeps at a time, and each call is timed out once. Returns what it timed out.
    /// The same sweep emits the events of changes whose node did not (it stalled or died between
    /// its change and the event, [`Change`](crate::Change)): on Redis, what stayed in the partitions' outboxes
    /// for [`RELAY_AFTER`](crate::RELAY_AFTER).
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
