//! Events of the memory broker: the tenant's log, bounded by `model::events_to_trim`, and its live
//! feed.

use super::*;
use crate::prelude::*;

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
        let mut logs = lock(&self.logs);
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
        Ok(lock(&self.logs)
            .get(tenant)
            .map_or_else(Vec::new, |log| log.page(after, limit)))
    }

    fn emitted(&self) -> &crate::Emitted {
        &self.emitted
    }
}

impl MemoryBroker {
    /// Emits the events of `change` once each, counted: called by the transitions while they
    /// hold the lock of the state they changed, so that no reader sees one without the other.
    pub(super) fn announce_now(&self, change: &crate::Change) {
        let conv = change.conv();
        for a in change.events() {
            if let Some(e) = self.emit_once_now(&conv.tenant, a.kind, conv, a.data, &a.once) {
                self.emitted.count(&e);
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
            let mut logs = lock(&self.logs);
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
        let mut logs = lock(&self.logs);
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
