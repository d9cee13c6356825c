//! Events of the memory broker: the tenant's log, bounded by `model::events_to_trim`, and its live
//! feed.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::broadcast;

use super::recent::{EMISSIONS_KEPT, Recent};
use super::{MemoryBroker, lock};
use crate::model;
use crate::prelude::*;
use crate::{BrokerError, ConvKey, Event, EventFeed, EventType, RawEvent, event_id_after, now_ms};

#[async_trait]
impl Events for MemoryBroker {
    async fn emit(
        &self,
        tenant: &str,
        kind: EventType,
        conv: &ConvKey,
        data: Value,
    ) -> Result<Event, BrokerError> {
        Ok(self.emit_now(tenant, kind, conv, data))
    }

    async fn emit_once(
        &self,
        tenant: &str,
        kind: EventType,
        conv: &ConvKey,
        data: Value,
        once: &str,
    ) -> Result<Option<Event>, BrokerError> {
        Ok(self.emit_once_now(tenant, kind, conv, data, once))
    }

    async fn events(&self, tenant: &str, after: Option<&str>) -> Result<EventFeed, BrokerError> {
        let mut logs = lock(&self.events.logs);
        let log = logs.entry(tenant.to_owned()).or_insert_with(TenantLog::new);
        let live = log.live.subscribe();
        let backlog = after.map_or_else(Vec::new, |after| log.page(after, crate::EVENT_PAGE));
        Ok(EventFeed { backlog, live })
    }

    async fn events_after(
        &self,
        tenant: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<RawEvent>, BrokerError> {
        Ok(lock(&self.events.logs)
            .get(tenant)
            .map_or_else(Vec::new, |log| log.page(after, limit)))
    }

    fn emitted(&self) -> &crate::Emitted {
        &self.events.emitted
    }
}

impl MemoryBroker {
    /// Emits the events of `change` once each, counted: called by the transitions while they
    /// hold the lock of the state they changed, so that no reader sees one without the other.
    pub(super) fn announce_now(&self, change: &crate::Change) {
        let conv = change.conv();
        for a in change.events() {
            if let Some(e) = self.emit_once_now(&conv.tenant, a.kind, conv, a.data, &a.once) {
                self.events.emitted.count(&e);
            }
        }
    }

    fn emit_once_now(
        &self,
        tenant: &str,
        kind: EventType,
        conv: &ConvKey,
        data: Value,
        once: &str,
    ) -> Option<Event> {
        {
            let mut logs = lock(&self.events.logs);
            let log = logs.entry(tenant.to_owned()).or_insert_with(TenantLog::new);
            let now = Instant::now();
            if log.once.get(once, now).is_some() {
                return None;
            }
            log.once.insert(once.to_owned(), (), now);
        }
        Some(self.emit_now(tenant, kind, conv, data))
    }

    fn emit_now(&self, tenant: &str, kind: EventType, conv: &ConvKey, data: Value) -> Event {
        let mut logs = lock(&self.events.logs);
        let log = logs.entry(tenant.to_owned()).or_insert_with(TenantLog::new);
        let ms = now_ms().max(log.last.0);
        let seq = if ms == log.last.0 { log.last.1 + 1 } else { 0 };
        log.last = (ms, seq);
        let event = Event {
            id: format!("{ms}-{seq}"),
            kind,
            timestamp: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            user: conv.user.clone(),
            conversation: conv.conversation.clone(),
            data,
            // The memory log trims freely: webhook deliveries keep their own copy.
            held_for_webhooks: false,
        };
        let stored = StoredEvent::from_event(&event);
        log.bytes += stored.size();
        log.events.push_back(stored);
        let trim = model::events_to_trim(
            log.events.iter().map(StoredEvent::size),
            log.bytes,
            &self.retention,
        );
        for e in log.events.drain(..trim) {
            log.bytes = log.bytes.saturating_sub(e.size());
        }
        let _ = log.live.send(event.clone());
        drop(logs);
        if let Some(t) = lock(&self.webhooks).get_mut(tenant) {
            t.capture(&event);
        }
        event
    }
}

/// An event as the log keeps it: the payload serialized (a fraction of a `Value` tree's size).
pub(super) struct StoredEvent {
    pub(super) id: Box<str>,
    pub(super) kind: EventType,
    pub(super) timestamp: Box<str>,
    pub(super) user: Box<str>,
    pub(super) conversation: Box<str>,
    pub(super) data: Box<str>,
}

impl StoredEvent {
    fn from_event(e: &Event) -> Self {
        StoredEvent {
            id: e.id.as_str().into(),
            kind: e.kind,
            timestamp: e.timestamp.as_str().into(),
            user: e.user.as_str().into(),
            conversation: e.conversation.as_str().into(),
            data: e.data.to_string().into_boxed_str(),
        }
    }

    /// Bytes its body takes in the log (what retention bounds).
    fn size(&self) -> u64 {
        (self.id.len()
            + self.timestamp.len()
            + self.user.len()
            + self.conversation.len()
            + self.data.len()) as u64
    }

    fn to_raw(&self) -> crate::RawEvent {
        crate::RawEvent::store(
            &self.id,
            self.kind,
            &self.timestamp,
            &self.user,
            &self.conversation,
            &self.data,
        )
    }
}

pub(super) struct TenantLog {
    pub(super) events: VecDeque<StoredEvent>,
    /// Bytes of the retained events' bodies.
    pub(super) bytes: u64,
    pub(super) last: (u64, u64),
    pub(super) live: broadcast::Sender<Event>,
    /// Names of [`Events::emit_once`] emissions.
    pub(super) once: Recent<()>,
}

impl TenantLog {
    fn new() -> Self {
        TenantLog {
            events: VecDeque::new(),
            bytes: 0,
            last: (0, 0),
            live: broadcast::channel(1024).0,
            once: Recent::new(EMISSIONS_KEPT),
        }
    }

    /// At most `limit` retained events after `after`, oldest first (ids increase along the log).
    fn page(&self, after: &str, limit: usize) -> Vec<crate::RawEvent> {
        let start = self
            .events
            .partition_point(|e| !event_id_after(&e.id, after));
        self.events
            .range(start..)
            .take(limit)
            .map(StoredEvent::to_raw)
            .collect()
    }
}

/// The tenants' event logs, and what this process emitted (the processes' metrics).
#[derive(Default)]
pub(super) struct EventLogs {
    pub(super) logs: Mutex<HashMap<String, TenantLog>>,
    pub(super) emitted: crate::Emitted,
}
