//! The tenants' events as the broker keeps and hands them out: their types, the event, its
//! stored form read a page at a time ([`RawEvent`]), and the order of their ids.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// How many retained events the first read of a replay takes ([`crate::Events::events`]); the reads
/// after it take as many as fit in [`EVENT_WINDOW_BYTES`] at the size of the events read last.
pub const EVENT_PAGE: usize = 8;

/// About what a replay holds of the log's raw entries at once (one event at least): a reader
/// that does not read holds this, whatever the log holds.
pub const EVENT_WINDOW_BYTES: usize = 512 << 10;

/// How many events the next read of a replay takes, after a page whose largest event had
/// `largest` bytes: as many as fit in [`EVENT_WINDOW_BYTES`], from 1 to 64.
pub fn next_event_page(largest: usize) -> usize {
    (EVENT_WINDOW_BYTES / largest.max(1)).clamp(1, 64)
}

/// Event types of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    /// A page published a manifest.
    #[serde(rename = "page.manifest")]
    PageManifest,
    /// The last socket of a page closed.
    #[serde(rename = "page.disconnected")]
    PageDisconnected,
    /// The outcome of an async call.
    #[serde(rename = "call.result")]
    CallResult,
    /// A call's deadline passed without a result.
    #[serde(rename = "call.timeout")]
    CallTimeout,
    /// A deferred confirmation reached its outcome.
    #[serde(rename = "confirmation.resolved")]
    ConfirmationResolved,
    /// A page presented a tool definition the tenant did not pin (pins in `report` or
    /// `enforce`).
    #[serde(rename = "tool.unpinned")]
    ToolUnpinned,
    /// A conversation's new manifest changed the definition of a tool it had.
    #[serde(rename = "tool.changed")]
    ToolChanged,
}

impl EventType {
    /// Every type.
    pub const ALL: [EventType; 7] = [
        EventType::PageManifest,
        EventType::PageDisconnected,
        EventType::CallResult,
        EventType::CallTimeout,
        EventType::ConfirmationResolved,
        EventType::ToolUnpinned,
        EventType::ToolChanged,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            EventType::PageManifest => "page.manifest",
            EventType::PageDisconnected => "page.disconnected",
            EventType::CallResult => "call.result",
            EventType::CallTimeout => "call.timeout",
            EventType::ConfirmationResolved => "confirmation.resolved",
            EventType::ToolUnpinned => "tool.unpinned",
            EventType::ToolChanged => "tool.changed",
        }
    }
}

/// One event of a tenant's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// `<ms>-<seq>`, increasing within a tenant.
    pub id: String,
    /// The event type.
    #[serde(rename = "type")]
    pub kind: EventType,
    /// RFC 3339 time of emission.
    pub timestamp: String,
    /// For filtering by user.
    #[serde(skip)]
    pub user: String,
    /// For filtering by conversation.
    #[serde(skip)]
    pub conversation: String,
    /// The payload.
    pub data: Value,
    /// Set by `emit` when the tenant's log is at its retention bound and its oldest events are
    /// kept anyway, because a webhook consumer has not had them yet (counted by the gateway).
    #[serde(skip)]
    pub held_for_webhooks: bool,
}

impl Event {
    /// The contract's body, the same on SSE and in webhooks:
    /// `{"type", "id", "timestamp", "data"}`.
    pub fn body(&self) -> Value {
        json!({"type": self.kind.as_str(), "id": self.id, "timestamp": self.timestamp, "data": self.data})
    }
}

/// An event as the log keeps it, not yet parsed: a replay holds a page of these and parses one
/// at a time as its reader takes them, so a reader that does not read holds a page of the
/// log's bytes, never the log parsed ([`crate::Events::events_after`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEvent {
    /// Its id.
    pub id: String,
    /// `{"type", "timestamp", "user", "conversation", "data"}` as JSON (the form of a Redis
    /// stream's entry).
    pub body: Box<str>,
}

/// The stored form's fields, borrowed where the JSON allows.
#[derive(Deserialize)]
struct StoredBody {
    #[serde(rename = "type")]
    kind: EventType,
    timestamp: String,
    user: String,
    conversation: String,
    data: Value,
}

impl RawEvent {
    /// The stored form of an event's fields, `data` being its payload as JSON text.
    pub fn store(
        id: &str,
        kind: EventType,
        timestamp: &str,
        user: &str,
        conversation: &str,
        data: &str,
    ) -> Self {
        let text = |s: &str| Value::String(s.to_owned()).to_string();
        let body = format!(
            r#"{{"type":"{}","timestamp":{},"user":{},"conversation":{},"data":{data}}}"#,
            kind.as_str(),
            text(timestamp),
            text(user),
            text(conversation),
        );
        RawEvent {
            id: id.to_owned(),
            body: body.into_boxed_str(),
        }
    }

    /// Its bytes.
    pub fn size(&self) -> usize {
        self.id.len() + self.body.len()
    }

    /// The event; `None` for an entry that is not one (never one the gateway wrote).
    pub fn parse(&self) -> Option<Event> {
        let b: StoredBody = serde_json::from_str(&self.body).ok()?;
        Some(Event {
            id: self.id.clone(),
            kind: b.kind,
            timestamp: b.timestamp,
            user: b.user,
            conversation: b.conversation,
            data: b.data,
            held_for_webhooks: false,
        })
    }
}

/// Parses an event id `<ms>-<seq>`.
fn parse_event_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// Whether `id` is an event id (`<ms>-<seq>`).
pub fn is_event_id(id: &str) -> bool {
    parse_event_id(id).is_some()
}

/// Whether event id `id` comes after `after` (ids that do not parse come after nothing).
pub fn event_id_after(id: &str, after: &str) -> bool {
    match (parse_event_id(id), parse_event_id(after)) {
        (Some(a), Some(b)) => a > b,
        (Some(_), None) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_order_numerically() {
        assert!(event_id_after("10-0", "9-5"));
        assert!(event_id_after("10-10", "10-9"));
        assert!(!event_id_after("10-9", "10-9"));
        assert!(event_id_after("1-0", "garbage"));
    }
}

/// Events one process emitted, by type, and how many of them found the tenant's log at its
/// bound with events not yet delivered to webhooks (kept anyway). Cumulative.
#[derive(Debug, Default)]
pub struct Emitted {
    by_kind: [std::sync::atomic::AtomicU64; EventType::ALL.len()],
    held_for_webhooks: std::sync::atomic::AtomicU64,
}

impl Emitted {
    /// Counts an event this process emitted.
    pub fn count(&self, event: &Event) {
        use std::sync::atomic::Ordering::Relaxed;
        self.by_kind[event.kind as usize].fetch_add(1, Relaxed);
        if event.held_for_webhooks {
            self.held_for_webhooks.fetch_add(1, Relaxed);
        }
    }

    /// Events emitted so far, per type.
    pub fn by_kind(&self) -> Vec<(EventType, u64)> {
        use std::sync::atomic::Ordering::Relaxed;
        EventType::ALL
            .iter()
            .map(|k| (*k, self.by_kind[*k as usize].load(Relaxed)))
            .collect()
    }

    /// Events emitted while the log was held at its bound for webhooks.
    pub fn held_for_webhooks(&self) -> u64 {
        self.held_for_webhooks
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}
