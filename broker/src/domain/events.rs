//! The tenants' event logs: retained for `Last-Event-ID` resumption and fed live.

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::{BrokerError, ConvKey, EVENT_PAGE, Emitted, Event, EventType, RawEvent};

/// How long [`Events::emit_once`] remembers a name: past the longest a node holds a page's
/// frame for an unanswering broker (`broker.stall_hold_secs`, at most 300 s).
pub const ONCE_TTL: std::time::Duration = std::time::Duration::from_secs(600);

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

/// The tenants' event logs: retained for `Last-Event-ID` resumption (bounded in count and
/// bytes, [`crate::model::events_to_trim`]) and fed live.
#[async_trait]
pub trait Events: Send + Sync + std::fmt::Debug {
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
