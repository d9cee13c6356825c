//! Events on Redis: the tenant's stream, trimmed in count and bytes behind the webhook group, and
//! its sharded live channel.

use std::collections::HashMap;

use async_trait::async_trait;
use fred::interfaces::{PubsubInterface, StreamsInterface};
use serde_json::Value as Json;

use super::RedisBroker;
use super::reply::{millis, strings, unavailable};
use super::scripts::Emit;
use crate::prelude::*;
use crate::{BrokerError, ConvKey, Emitted, Event, EventFeed, EventType, RawEvent, event_id_after};

#[async_trait]
impl Events for RedisBroker {
    async fn emit(
        &self,
        tenant: &str,
        kind: EventType,
        conv: &ConvKey,
        data: Json,
    ) -> Result<Event, BrokerError> {
        Ok(self.emit_named(tenant, kind, conv, data, None).await?.0)
    }

    async fn emit_once(
        &self,
        tenant: &str,
        kind: EventType,
        conv: &ConvKey,
        data: Json,
        once: &str,
    ) -> Result<Option<Event>, BrokerError> {
        let (event, recorded) = self
            .emit_named(tenant, kind, conv, data, Some(once))
            .await?;
        Ok(recorded.then_some(event))
    }

    async fn events(&self, tenant: &str, after: Option<&str>) -> Result<EventFeed, BrokerError> {
        let (live, first) = self.events.feeds.subscribe(tenant);
        if first && let Err(e) = self.follow_feed(tenant).await {
            self.events.feeds.remove(tenant);
            return Err(e);
        }
        let backlog = match after {
            None => Vec::new(),
            Some(after) => self.events_after(tenant, after, crate::EVENT_PAGE).await?,
        };
        Ok(EventFeed { backlog, live })
    }

    async fn events_after(
        &self,
        tenant: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<RawEvent>, BrokerError> {
        // An id that is not one starts at the log's beginning.
        let start = if crate::is_event_id(after) {
            format!("({after}")
        } else {
            "-".to_owned()
        };
        let entries: Vec<(String, HashMap<String, String>)> = self
            .again("xrange", || {
                self.conn.client.xrange(
                    self.conn.keys.events(tenant),
                    start.clone(),
                    "+",
                    Some(limit as u64),
                )
            })
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(entries
            .into_iter()
            .filter(|(id, _)| event_id_after(id, after))
            .filter_map(|(id, mut fields)| {
                let body = fields.remove("e")?.into_boxed_str();
                Some(RawEvent { id, body })
            })
            .collect())
    }

    fn emitted(&self) -> &Emitted {
        &self.events.emitted
    }
}

impl RedisBroker {
    /// Subscribes to the tenant's live channel, then notes the stream's last event id: what a
    /// lost subscription missed is read from there ([`RedisBroker::resubscribe_all`]).
    async fn follow_feed(&self, tenant: &str) -> Result<(), BrokerError> {
        self.conn
            .subscriber
            .ssubscribe(self.conn.keys.events_channel(tenant))
            .await
            .map_err(|e| unavailable(&e))?;
        let newest: Vec<(String, HashMap<String, String>)> = self
            .again("xrevrange", || {
                self.conn
                    .client
                    .xrevrange(self.conn.keys.events(tenant), "+", "-", Some(1))
            })
            .await
            .map_err(|e| unavailable(&e))?;
        let newest = newest
            .into_iter()
            .next()
            .map_or_else(|| "0-0".to_owned(), |(id, _)| id);
        self.events.feeds.start_after(tenant, newest);
        Ok(())
    }

    /// One run of the emit script: the event, and whether this run recorded it (not when `once`
    /// names an emission recorded before: the event then carries that one's id).
    async fn emit_named(
        &self,
        tenant: &str,
        kind: EventType,
        conv: &ConvKey,
        data: Json,
        once: Option<&str>,
    ) -> Result<(Event, bool), BrokerError> {
        let timestamp = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        let body = serde_json::json!({"type": kind, "timestamp": timestamp, "user": conv.user, "conversation": conv.conversation, "data": data});
        let reply = strings(
            self.run(Emit {
                stream: self.conn.keys.events(tenant),
                bytes: self.conn.keys.event_bytes(tenant),
                once: once.map(|once| {
                    (
                        self.conn.keys.event_once(tenant, once),
                        millis(crate::ONCE_TTL),
                    )
                }),
                max_count: self.conn.opts.retention.events_per_tenant,
                max_bytes: self.conn.opts.retention.event_bytes_per_tenant,
                event: body.to_string(),
                channel: self.conn.keys.events_channel(tenant),
            })
            .await?,
        );
        let recorded = reply.get(2).is_none();
        let id = reply.first().cloned().unwrap_or_default();
        let held_for_webhooks = reply.get(1).is_some_and(|h| h != "0");
        if held_for_webhooks {
            tracing::debug!(
                tenant,
                "event retention reached, but the oldest events are not delivered to webhooks yet: they stay until delivered or dead-lettered"
            );
        }
        let event = Event {
            id,
            kind,
            timestamp,
            user: conv.user.clone(),
            conversation: conv.conversation.clone(),
            data,
            held_for_webhooks,
        };
        Ok((event, recorded))
    }
}
