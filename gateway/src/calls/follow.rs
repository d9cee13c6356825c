//! A call followed to its next change, on any node: `GET /calls/{id}?wait=N` and the hosted MCP
//! endpoint's tasks read it so. What a call's record says is the one source of truth: its
//! outcome, and for a call answered `needs_confirmation`, how its confirmation ended, written by
//! the same atomic step that records `confirmation.resolved`.

use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use toolmark_broker::{CallRecord, CallState, EventType, Outcome, Watch};

use super::engine::CallEngine;
use super::error::CallError;

/// Where a call stands, as its followers tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Sent to the page, not answered yet.
    Running,
    /// Answered `needs_confirmation`; its confirmation has not ended.
    Confirming,
    /// Nothing more will change.
    Ended,
}

/// Where `record` stands.
pub(crate) fn phase(record: &CallRecord) -> Phase {
    match (&record.state, &record.outcome, &record.resolution) {
        (CallState::Pending, _, _) => Phase::Running,
        (_, Some(Outcome::Result(r)), None) if r.confirm_id().is_some() => Phase::Confirming,
        _ => Phase::Ended,
    }
}

impl CallEngine {
    /// The call `id` of `tenant` once it changed from how it stood when asked (answered, timed
    /// out, its confirmation ended) or `wait` passed, whichever comes first; at once when it has
    /// ended or `wait` is zero. `None`: no such call (never placed, or past its retention).
    /// A pending call is heard with [`toolmark_broker::Calls::watch`] (the outcome message of the
    /// node that placed it, on this node too); a confirmation by the tenant's event log, which every
    /// node reads: nothing is polled.
    pub(crate) async fn follow(
        &self,
        tenant: &str,
        id: &str,
        wait: Duration,
    ) -> Result<Option<CallRecord>, CallError> {
        let broker = &self.parts().broker;
        let Some(first) = broker.call(tenant, id).await? else {
            return Ok(None);
        };
        let until = tokio::time::Instant::now() + wait;
        if wait.is_zero() {
            return Ok(Some(first));
        }
        match phase(&first) {
            Phase::Ended => return Ok(Some(first)),
            Phase::Running => {
                if let Watch::Pending(heard) = broker.watch(tenant, id).await? {
                    let _ = tokio::time::timeout_at(until, heard).await;
                }
            }
            // Only a confirmation is followed on the tenant's log: listen, then read again, so
            // that one ending in between is seen, not missed.
            Phase::Confirming => {
                let mut live = broker.events(tenant, None).await?.live;
                match broker.call(tenant, id).await? {
                    Some(again) if phase(&again) == Phase::Confirming => {}
                    again => return Ok(again.or(Some(first))),
                }
                loop {
                    let event = tokio::select! {
                        e = live.recv() => e,
                        () = tokio::time::sleep_until(until) => break,
                    };
                    match event {
                        Ok(e)
                            if e.kind == EventType::ConfirmationResolved
                                && e.data.get("callId").and_then(|v| v.as_str()) == Some(id) =>
                        {
                            break;
                        }
                        Ok(_) => {}
                        // Missed events, or a feed that stopped: the record tells.
                        Err(RecvError::Lagged(_) | RecvError::Closed) => break,
                    }
                }
            }
        }
        Ok(Some(broker.call(tenant, id).await?.unwrap_or(first)))
    }
}
