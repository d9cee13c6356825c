//! The webhook queue of each tenant, in Redis: new events are read from the tenant's event
//! stream by a consumer group (entries a dead worker held are claimed by a live one); an event
//! whose delivery failed waits, with every later event of its conversation, in that
//! conversation's queue, so deliveries stay in order per conversation; a queue's head is retried
//! with backoff and, past the maximum age, moved to the tenant's dead-letter stream.

use std::collections::HashMap;

use fred::interfaces::{
    ClientLike, KeysInterface, ListInterface, SortedSetsInterface, StreamsInterface,
};
use fred::types::Value;
use fred::types::streams::XReadResponse;

use super::RedisBroker;
use super::reply::{strings, unavailable};
use super::scripts::{WebhookAdmit, WebhookDefer, WebhookPop, WebhookReschedule, WebhookTakeDue};
use crate::BrokerError;
pub use crate::webhook::{Admission, Pending};

/// A stream entry: its id and its fields.
type StreamEntry = (String, HashMap<String, String>);

/// The consumer group of webhook deliveries.
pub const GROUP: &str = "webhooks";

fn encode(p: &Pending) -> String {
    serde_json::to_string(p).unwrap_or_default()
}

impl RedisBroker {
    pub(super) fn wh_queue(&self, tenant: &str, conv: &str) -> String {
        format!("{}:wh:q:{conv}", self.conn.keys.events(tenant))
    }

    pub(super) fn wh_due(&self, tenant: &str) -> String {
        format!("{}:wh:due", self.conn.keys.events(tenant))
    }

    pub(super) fn wh_dead(&self, tenant: &str) -> String {
        format!("{}:wh:dead", self.conn.keys.events(tenant))
    }

    /// Creates the tenant's delivery group if it does not exist; a new group starts at the
    /// oldest retained event, so nothing emitted before the first worker started is skipped.
    pub async fn webhook_group(&self, tenant: &str) -> Result<(), BrokerError> {
        match self
            .conn
            .client
            .xgroup_create::<(), _, _, _>(self.conn.keys.events(tenant), GROUP, "0", true)
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if e.details().contains("BUSYGROUP") => Ok(()),
            Err(e) => Err(unavailable(&e)),
        }
    }

    /// New events for `consumer`, then entries other consumers left pending longer than
    /// `stale_ms` (a worker that died mid-delivery).
    pub async fn webhook_read(
        &self,
        tenant: &str,
        consumer: &str,
        count: u64,
        block_ms: u64,
        stale_ms: u64,
    ) -> Result<Vec<Pending>, BrokerError> {
        let stream = self.conn.keys.events(tenant);
        let (_, claimed): (String, Vec<StreamEntry>) = self
            .conn
            .client
            .xautoclaim_values(
                &stream,
                GROUP,
                consumer,
                stale_ms,
                "0-0",
                Some(count),
                false,
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let mut out: Vec<Pending> = claimed
            .into_iter()
            .filter_map(|(id, f)| pending_from(&id, f.get("e")))
            .collect();
        if out.is_empty() {
            let raw: Value = self
                .blocking_client()
                .await?
                .xreadgroup(
                    GROUP,
                    consumer,
                    Some(count),
                    Some(block_ms),
                    false,
                    &stream,
                    ">",
                )
                .await
                .map_err(|e| unavailable(&e))?;
            // A read that blocked without new entries answers nil, which is no map: nothing new.
            let read: XReadResponse<String, String, String, String> = if raw.is_null() {
                HashMap::new()
            } else {
                raw.into_xread_response().map_err(|e| unavailable(&e))?
            };
            for (_, items) in read {
                for (id, fields) in items {
                    if let Some(p) = pending_from(&id, fields.get("e")) {
                        out.push(p);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Whether `p` may go now, or was queued behind earlier events of its conversation.
    pub async fn webhook_admit(&self, tenant: &str, p: &Pending) -> Result<Admission, BrokerError> {
        let v = self
            .run(WebhookAdmit {
                stream: self.conn.keys.events(tenant),
                queue: self.wh_queue(tenant, &p.conv),
                entry_id: p.id.clone(),
                pending: encode(p),
            })
            .await?;
        Ok(if v.as_u64() == Some(1) {
            Admission::Queued
        } else {
            Admission::Deliver
        })
    }

    /// Acknowledges a delivered event.
    pub async fn webhook_ack(&self, tenant: &str, id: &str) -> Result<(), BrokerError> {
        self.conn
            .client
            .xack::<(), _, _, _>(self.conn.keys.events(tenant), GROUP, id)
            .await
            .map_err(|e| unavailable(&e))
    }

    /// Queues a failed new event for retry at `due_ms`.
    pub async fn webhook_defer(
        &self,
        tenant: &str,
        p: &Pending,
        due_ms: u64,
    ) -> Result<(), BrokerError> {
        self.run(WebhookDefer {
            stream: self.conn.keys.events(tenant),
            queue: self.wh_queue(tenant, &p.conv),
            due: self.wh_due(tenant),
            entry_id: p.id.clone(),
            pending: encode(p),
            conv: p.conv.clone(),
            due_ms,
        })
        .await
        .map(|_| ())
    }

    /// Conversations whose queue head is due, leased to this caller until `lease_until_ms`.
    pub async fn webhook_due(
        &self,
        tenant: &str,
        now_ms: u64,
        lease_until_ms: u64,
        count: u64,
    ) -> Result<Vec<String>, BrokerError> {
        let v = self
            .run(WebhookTakeDue {
                due: self.wh_due(tenant),
                now: now_ms,
                lease_until: lease_until_ms,
                count,
            })
            .await?;
        Ok(strings(v))
    }

    /// The head of a conversation's queue.
    pub async fn webhook_head(
        &self,
        tenant: &str,
        conv: &str,
    ) -> Result<Option<Pending>, BrokerError> {
        let head: Option<String> = self
            .conn
            .client
            .lindex(self.wh_queue(tenant, conv), 0)
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(head.and_then(|h| serde_json::from_str(&h).ok()))
    }

    /// Drops the head of a conversation's queue (delivered).
    pub async fn webhook_pop(
        &self,
        tenant: &str,
        conv: &str,
        now_ms: u64,
    ) -> Result<(), BrokerError> {
        self.run(WebhookPop {
            queue: self.wh_queue(tenant, conv),
            due: self.wh_due(tenant),
            conv: conv.to_owned(),
            now: now_ms,
        })
        .await
        .map(|_| ())
    }

    /// Records another failure of the head and when to try it again.
    pub async fn webhook_reschedule(
        &self,
        tenant: &str,
        p: &Pending,
        due_ms: u64,
    ) -> Result<(), BrokerError> {
        self.run(WebhookReschedule {
            queue: self.wh_queue(tenant, &p.conv),
            due: self.wh_due(tenant),
            conv: p.conv.clone(),
            pending: encode(p),
            due_ms,
        })
        .await
        .map(|_| ())
    }

    /// Moves the head to the dead-letter stream.
    pub async fn webhook_bury(
        &self,
        tenant: &str,
        p: &Pending,
        now_ms: u64,
    ) -> Result<(), BrokerError> {
        let _: String = self
            .conn
            .client
            .xadd(
                self.wh_dead(tenant),
                false,
                ("MAXLEN", "~", 100_000),
                "*",
                vec![("p", encode(p))],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        self.webhook_pop(tenant, &p.conv, now_ms).await
    }

    /// Dead letters, oldest first: (dead-letter id, the event that could not be delivered).
    pub async fn webhook_dead_letters(
        &self,
        tenant: &str,
        count: u64,
    ) -> Result<Vec<(String, Pending)>, BrokerError> {
        let items: Vec<StreamEntry> = self
            .conn
            .client
            .xrange(self.wh_dead(tenant), "-", "+", Some(count))
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(items
            .into_iter()
            .filter_map(|(id, f)| Some((id, serde_json::from_str(f.get("p")?).ok()?)))
            .collect())
    }

    /// Puts a dead letter back at the end of its conversation's queue, due now.
    pub async fn webhook_retry_failed(
        &self,
        tenant: &str,
        dead_id: &str,
        now_ms: u64,
    ) -> Result<bool, BrokerError> {
        let Some((_, mut p)) = self
            .webhook_dead_letters(tenant, 100_000)
            .await?
            .into_iter()
            .find(|(id, _)| id == dead_id)
        else {
            return Ok(false);
        };
        p.attempts = 0;
        p.first_failure_ms = 0;
        let queue = self.wh_queue(tenant, &p.conv);
        let _: i64 = self
            .conn
            .client
            .rpush(&queue, encode(&p))
            .await
            .map_err(|e| unavailable(&e))?;
        let _: i64 = self
            .conn
            .client
            .zadd(
                self.wh_due(tenant),
                None,
                None,
                false,
                false,
                (now_ms as f64, p.conv.as_str()),
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let _: i64 = self
            .conn
            .client
            .xdel(self.wh_dead(tenant), dead_id)
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(true)
    }

    /// Events read by the group and not yet delivered, plus events waiting in queues.
    pub async fn webhook_depth(&self, tenant: &str) -> Result<u64, BrokerError> {
        let due: u64 = self
            .conn
            .client
            .zcard(self.wh_due(tenant))
            .await
            .map_err(|e| unavailable(&e))?;
        let _: bool = self
            .conn
            .client
            .exists(self.conn.keys.events(tenant))
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(due)
    }

    /// The connection for blocking reads, opened on first use.
    async fn blocking_client(&self) -> Result<&fred::prelude::Client, BrokerError> {
        self.conn
            .blocking
            .get_or_try_init(|| async {
                let c = self.conn.client.clone_new();
                c.init().await.map_err(|e| unavailable(&e))?;
                Ok(c)
            })
            .await
    }
}

fn pending_from(id: &str, body: Option<&String>) -> Option<Pending> {
    let body = body?;
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let conv = format!(
        "{}/{}",
        v.get("user")?.as_str()?,
        v.get("conversation")?.as_str()?
    );
    // The delivered body is the contract's event: {type, id, timestamp, data}.
    let delivered = serde_json::json!({"type": v.get("type")?, "id": id, "timestamp": v.get("timestamp")?, "data": v.get("data")?});
    Some(Pending {
        id: id.to_owned(),
        body: delivered.to_string(),
        conv,
        attempts: 0,
        first_failure_ms: 0,
        last_error: String::new(),
    })
}

#[async_trait::async_trait]
impl crate::webhook::WebhookQueue for RedisBroker {
    async fn open(&self, tenant: &str) -> Result<(), BrokerError> {
        self.webhook_group(tenant).await
    }
    async fn read(
        &self,
        tenant: &str,
        consumer: &str,
        count: u64,
        block_ms: u64,
        stale_ms: u64,
    ) -> Result<Vec<Pending>, BrokerError> {
        self.webhook_read(tenant, consumer, count, block_ms, stale_ms)
            .await
    }
    async fn admit(&self, tenant: &str, p: &Pending) -> Result<Admission, BrokerError> {
        self.webhook_admit(tenant, p).await
    }
    async fn ack(&self, tenant: &str, id: &str) -> Result<(), BrokerError> {
        self.webhook_ack(tenant, id).await
    }
    async fn defer(&self, tenant: &str, p: &Pending, due_ms: u64) -> Result<(), BrokerError> {
        self.webhook_defer(tenant, p, due_ms).await
    }
    async fn due(
        &self,
        tenant: &str,
        now_ms: u64,
        lease_until_ms: u64,
        count: u64,
    ) -> Result<Vec<String>, BrokerError> {
        self.webhook_due(tenant, now_ms, lease_until_ms, count)
            .await
    }
    async fn head(&self, tenant: &str, conv: &str) -> Result<Option<Pending>, BrokerError> {
        self.webhook_head(tenant, conv).await
    }
    async fn pop(&self, tenant: &str, conv: &str, now_ms: u64) -> Result<(), BrokerError> {
        self.webhook_pop(tenant, conv, now_ms).await
    }
    async fn reschedule(&self, tenant: &str, p: &Pending, due_ms: u64) -> Result<(), BrokerError> {
        self.webhook_reschedule(tenant, p, due_ms).await
    }
    async fn bury(&self, tenant: &str, p: &Pending, now_ms: u64) -> Result<(), BrokerError> {
        self.webhook_bury(tenant, p, now_ms).await
    }
    async fn depth(&self, tenant: &str) -> Result<u64, BrokerError> {
        self.webhook_depth(tenant).await
    }
}

#[async_trait::async_trait]
impl crate::DeadLetters for RedisBroker {
    async fn webhook_failed(
        &self,
        tenant: &str,
    ) -> Result<Vec<crate::webhook::DeadLetter>, BrokerError> {
        Ok(self
            .webhook_dead_letters(tenant, 1000)
            .await?
            .iter()
            .map(|(id, p)| p.dead_letter(id))
            .collect())
    }

    async fn webhook_retry(&self, tenant: &str, id: &str) -> Result<bool, BrokerError> {
        self.webhook_retry_failed(tenant, id, crate::now_ms()).await
    }
}
