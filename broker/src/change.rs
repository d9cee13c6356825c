//! What a state change announces. A broker transition that changes what an agent must hear of
//! (a manifest kept, a page gone, a call finished, a confirmation resolved) records its
//! [`Change`] in the same atomic step as the state: the memory broker under the same lock, Redis
//! in the same script, in its conversation's partition's outbox. The change's events are then
//! emitted under names of their own ([`crate::Events::emit_once`]), by the node that made the
//! change or, should it fail to (a stall, a crash), by the deadline sweep from the outbox, so an
//! event is emitted once however many times it is relayed. Every event's payload is built here
//! and nowhere else.

use serde_json::{Value, json};
use toolmark_proto::{Manifest, ToolResult};

use crate::{CallRecord, CallState, ConfirmBinding, ConvKey, EventType, Outcome};

/// A state change with events to announce.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A page's manifest became its latest (`page.manifest`), under the name of the frame that
    /// carried it (a page sends its manifest again after a reconnection: each is announced).
    Manifest {
        /// The page's conversation.
        conv: ConvKey,
        /// The event's data.
        data: Value,
        /// The name of the frame.
        name: String,
    },
    /// The last socket of a page closed (`page.disconnected`), under the name of its release.
    PageLeft {
        /// The page's conversation.
        conv: ConvKey,
        /// The page load that left.
        client_id: String,
        /// The name of the release.
        name: String,
    },
    /// A call finished: `call.timeout` when its deadline won, `call.result` when it was async.
    Call(CallRecord),
    /// A confirmation resolved: confirmed by its page with the final outcome, or expired.
    Confirmation {
        /// What the confirmId was bound to.
        binding: ConfirmBinding,
        /// The page's final outcome, or [`expired_confirmation`].
        outcome: ToolResult,
    },
}

/// One event of a change, ready to emit.
#[derive(Debug, Clone, PartialEq)]
pub struct Announcement {
    /// The event type.
    pub kind: EventType,
    /// Its payload.
    pub data: Value,
    /// Its name for [`crate::Events::emit_once`], unique in the tenant.
    pub once: String,
}

impl Change {
    /// A page's manifest, kept under the frame's `name`.
    pub fn manifest(conv: &ConvKey, manifest: &Manifest, name: &str) -> Self {
        Change::Manifest {
            conv: conv.clone(),
            data: json!({"user": conv.user, "conversation": conv.conversation,
                "clientId": manifest.client_id, "rev": manifest.rev, "tools": manifest.tools}),
            name: name.to_owned(),
        }
    }

    /// The conversation the change belongs to (its events go to its tenant).
    pub fn conv(&self) -> &ConvKey {
        match self {
            Change::Manifest { conv, .. } | Change::PageLeft { conv, .. } => conv,
            Change::Call(r) => &r.binding.conv,
            Change::Confirmation { binding, .. } => &binding.conv,
        }
    }

    /// The change's name in its partition's outbox: unique among the partition's changes.
    pub fn name(&self) -> String {
        match self {
            Change::Manifest { name, .. } | Change::PageLeft { name, .. } => name.clone(),
            Change::Call(r) => call_change_name(&r.binding.id),
            Change::Confirmation { binding, .. } => {
                confirmation_event_name(&binding.conv, &binding.confirm_id)
            }
        }
    }

    /// The events it announces (none for a call answered in time and not async).
    pub fn events(&self) -> Vec<Announcement> {
        match self {
            Change::Manifest { data, name, .. } => vec![Announcement {
                kind: EventType::PageManifest,
                data: data.clone(),
                once: name.clone(),
            }],
            Change::PageLeft {
                conv,
                client_id,
                name,
            } => vec![Announcement {
                kind: EventType::PageDisconnected,
                data: json!({"user": conv.user, "conversation": conv.conversation, "clientId": client_id}),
                once: name.clone(),
            }],
            Change::Call(r) => {
                let outcome = match (&r.outcome, r.state) {
                    (Some(o), _) => o.clone(),
                    (None, CallState::TimedOut) => Outcome::Timeout,
                    (None, _) => return Vec::new(),
                };
                outcome_events(r, &outcome)
            }
            Change::Confirmation { binding, outcome } => vec![Announcement {
                kind: EventType::ConfirmationResolved,
                data: confirmation_event(binding, outcome),
                once: confirmation_event_name(&binding.conv, &binding.confirm_id),
            }],
        }
    }
}

/// The events that announce a finished call, with their data: `call.timeout` when the deadline
/// won, and `call.result` for an async call (`Prefer: respond-async`); one of each per call.
fn outcome_events(r: &CallRecord, outcome: &Outcome) -> Vec<Announcement> {
    let b = &r.binding;
    let data = json!({
        "id": b.id, "user": b.conv.user, "conversation": b.conv.conversation,
        "clientId": b.client_id, "tool": b.tool, "outcome": outcome, "caller": b.caller,
    });
    let mut events = Vec::new();
    if *outcome == Outcome::Timeout {
        let kind = EventType::CallTimeout;
        events.push(Announcement {
            kind,
            data: data.clone(),
            once: call_event_name(kind, &b.id),
        });
    }
    if b.respond_async {
        let kind = EventType::CallResult;
        events.push(Announcement {
            kind,
            data,
            once: call_event_name(kind, &b.id),
        });
    }
    events
}

/// The name of a call's change in its partition's outbox.
pub(crate) fn call_change_name(call_id: &str) -> String {
    format!("call:{call_id}")
}

/// The name of a call's outcome event: one `call.result` or `call.timeout` per call, whichever
/// node or sweep announces it, however many times.
fn call_event_name(kind: EventType, call_id: &str) -> String {
    format!("{}:{call_id}", kind.as_str())
}

/// The name of a confirmation's `confirmation.resolved`: one per confirmId of a conversation,
/// confirmed by its page or expired by the sweep.
pub(crate) fn confirmation_event_name(conv: &ConvKey, confirm_id: &str) -> String {
    format!(
        "{}:{}\n{}\n{confirm_id}",
        EventType::ConfirmationResolved.as_str(),
        conv.user,
        conv.conversation
    )
}

/// The data of a `confirmation.resolved` event: the outcome, and the tool-result message to
/// append to the conversation, its content wrapped as untrusted page data.
fn confirmation_event(binding: &ConfirmBinding, outcome: &ToolResult) -> Value {
    json!({
        "confirmId": binding.confirm_id,
        "callId": binding.call_id,
        "tool": binding.tool,
        "clientId": binding.client_id,
        "user": binding.conv.user,
        "conversation": binding.conv.conversation,
        "caller": binding.caller,
        "outcome": outcome,
        "toolResultMessage": {
            "role": "tool",
            "callId": binding.call_id,
            "confirmId": binding.confirm_id,
            "tool": binding.tool,
            "content": toolmark_proto::llm::wrap_untrusted(outcome),
        },
    })
}

/// The outcome of a confirmation whose page went away before it was approved.
pub fn expired_confirmation() -> ToolResult {
    ToolResult::Refused {
        code: toolmark_proto::codes::RefusedCode::ConfirmationExpired,
        message: toolmark_proto::codes::CONFIRMATION_EXPIRED_MESSAGE.to_owned(),
        rev: None,
    }
}

/// How long a change's events may wait for the node that made the change before the deadline
/// sweep emits them from the outbox instead (the node stalled or died in between).
pub const RELAY_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// Emits each event of `change` once ([`Events::emit_once`]), counting what this process
/// emitted. Both brokers announce their changes here.
pub(crate) async fn announce<E: crate::Events + ?Sized>(
    events: &E,
    change: &Change,
) -> Result<(), crate::BrokerError> {
    let conv = change.conv();
    for a in change.events() {
        if let Some(event) = events
            .emit_once(&conv.tenant, a.kind, conv, a.data, &a.once)
            .await?
        {
            events.emitted().count(&event);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CallBinding, CallKind};

    fn record(respond_async: bool, state: CallState, outcome: Option<Outcome>) -> CallRecord {
        CallRecord {
            binding: CallBinding {
                id: "c1".into(),
                conv: ConvKey::new("t", "u", "v"),
                client_id: "p1".into(),
                tool: "todo.add".into(),
                kind: CallKind::Call,
                deadline_ms: 1,
                node: String::new(),
                untrusted: false,
                respond_async,
                caller: None,
            },
            state,
            outcome,
            resolution: None,
        }
    }

    #[test]
    fn a_call_announces_its_timeout_and_its_async_result_once_each() {
        let ok = Some(Outcome::Result(ToolResult::Ok {
            data: Some(json!(1)),
        }));
        let kinds = |c: Change| c.events().into_iter().map(|a| a.kind).collect::<Vec<_>>();
        assert!(kinds(Change::Call(record(false, CallState::Answered, ok.clone()))).is_empty());
        assert_eq!(
            kinds(Change::Call(record(true, CallState::Answered, ok))),
            [EventType::CallResult]
        );
        assert_eq!(
            kinds(Change::Call(record(true, CallState::TimedOut, None))),
            [EventType::CallTimeout, EventType::CallResult]
        );
        let names: Vec<_> = Change::Call(record(true, CallState::TimedOut, None))
            .events()
            .into_iter()
            .map(|a| a.once)
            .collect();
        assert_eq!(names, ["call.timeout:c1", "call.result:c1"]);
    }

    #[test]
    fn a_confirmation_is_named_by_its_conversation_and_confirm_id() {
        let binding = ConfirmBinding {
            confirm_id: "k".into(),
            call_id: "c1".into(),
            tool: "todo.add".into(),
            conv: ConvKey::new("t", "u", "v"),
            client_id: "p1".into(),
            untrusted: false,
            caller: None,
        };
        let change = Change::Confirmation {
            binding,
            outcome: expired_confirmation(),
        };
        let events = change.events();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].once, change.name());
        assert_eq!(events[0].data["outcome"]["code"], "confirmation_expired");
    }
}
