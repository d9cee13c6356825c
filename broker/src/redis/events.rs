//! Events on Redis: the tenant's stream, trimmed in count and bytes behind the webhook group, and
//! its sharded live channel.

use super::*;
use crate::prelude::*;

#[async_trait]
impl Events for RedisBroker {
    async fn emit(
        &self,
        tenant: &str,
        kind: EventType,
        conv: &ConvKey,
        data: Json,
    ) -> Result<Event, BrokerError> {
        let timestamp = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        let body = serde_json::json!({"type": kind, "timestamp": timestamp, "user": conv.user, "conversation": conv.conversation, "data": data});
        let reply = strings(
            self.script(
                &self.scripts.emit,
                vec![self.keys.events(tenant), self.keys.event_bytes(tenant)],
                vec![
                    self.opts.retention.events_per_tenant.to_string(),
                    self.opts.retention.event_bytes_per_tenant.to_string(),
                    body.to_string(),
                    self.keys.events_channel(tenant),
                ],
            )
            .await?,
        );
        let id = reply.first().cloned().unwrap_or_default();
        let held_for_webhooks = reply.get(1).is_some_and(|h| h != "0");
        if held_for_webhooks {
            tracing::debug!(
                tenant,
                "event retention reached, but the oldest events are not delivered to webhooks yet: they stay until delivered or dead-lettered"
            );
        }
        Ok(Event {
            id,
            kind,
            timestamp,
            user: conv.user.clone(),
            conversation: conv.conversation.clone(),
            data,
            held_for_webhooks,
        })
    }

    async fn events(&self, tenant: &str, after: Option<&str>) -> Result<EventFeed, BrokerError> {
        let (live, first) = {
            let mut feeds = lock(&self.feeds);
            let first = !feeds.contains_key(tenant);
            let tx = feeds
                .entry(tenant.to_owned())
                .or_insert_with(|| broadcast::channel(4096).0);
            (tx.subscribe(), first)
        };
        if first
            && let Err(e) = self
                .subscriber
                .ssubscribe(self.keys.events_channel(tenant))
                .await
        {
            lock(&self.feeds).remove(tenant);
            return Err(unavailable(&e));
        }
        let backlog = match after {
            None => Vec::new(),
            Some(after) => {
                let start = format!("({after}");
                let entries: Vec<(String, HashMap<String, String>)> = self
                    .client
                    .xrange(
                        self.keys.events(tenant),
                        start,
                        "+",
                        Some(self.opts.retention.events_per_tenant),
                    )
                    .await
                    .map_err(|e| unavailable(&e))?;
                entries
                    .into_iter()
                    .filter(|(id, _)| event_id_after(id, after))
                    .filter_map(|(id, fields)| parse_event(&id, fields.get("e")?))
                    .collect()
            }
        };
        Ok(EventFeed { backlog, live })
    }
}
