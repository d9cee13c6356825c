//! The webhook queue contract shared by the memory and Redis brokers: new events of a tenant,
//! delivered in order per conversation; a failed event waits (with every later event of its
//! conversation) in that conversation's queue until its retry succeeds or it is buried as a
//! dead letter. The delivery loop itself lives with the jobs (`toolmark_worker::jobs`).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{BrokerError, Event};

/// An event waiting for delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// Event id: the `webhook-id`, stable across retries.
    pub id: String,
    /// The event body as delivered: `{type, id, timestamp, data}`.
    pub body: String,
    /// `user/conversation`: the ordering unit.
    pub conv: String,
    /// Failed attempts so far.
    pub attempts: u32,
    /// When the first attempt failed (ms since the epoch), 0 before any failure.
    pub first_failure_ms: u64,
    /// Last failure, for the dead-letter record (`500`, `timeout`…).
    pub last_error: String,
}

impl Pending {
    /// A fresh pending delivery of `event`.
    pub fn from_event(event: &Event) -> Self {
        Pending {
            id: event.id.clone(),
            body: event.body().to_string(),
            conv: format!("{}/{}", event.user, event.conversation),
            attempts: 0,
            first_failure_ms: 0,
            last_error: String::new(),
        }
    }

    /// The dead-letter record shown by `GET /webhooks/failed`.
    /// The dead letter this event became, under the dead-letter id `id`.
    pub fn dead_letter(&self, id: &str) -> DeadLetter {
        DeadLetter {
            id: id.to_owned(),
            event_id: self.id.clone(),
            conversation: self.conv.clone(),
            attempts: self.attempts,
            last_error: self.last_error.clone(),
            first_failure_ms: self.first_failure_ms,
            event: serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null),
        }
    }
}

/// A webhook event that exhausted its retries, as `GET …/webhooks/failed` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetter {
    /// Its id in the dead letters (for `POST …/webhooks/failed/{id}/retry`).
    pub id: String,
    /// The event's id.
    pub event_id: String,
    /// `user/conversation`.
    pub conversation: String,
    /// Delivery attempts made.
    pub attempts: u32,
    /// The last attempt's HTTP status or error.
    pub last_error: String,
    /// When the first attempt failed (ms since the epoch).
    pub first_failure_ms: u64,
    /// The event body that was to be delivered.
    pub event: serde_json::Value,
}

/// Whether a new event may be delivered now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Its conversation has nothing waiting: deliver it now.
    Deliver,
    /// Earlier events of its conversation wait: it was queued behind them.
    Queued,
}

/// A tenant's webhook queue.
#[async_trait]
pub trait WebhookQueue: Send + Sync + 'static {
    /// Starts capturing the tenant's events for delivery (idempotent).
    async fn open(&self, tenant: &str) -> Result<(), BrokerError>;
    /// New events for `consumer` (and events another consumer left unacknowledged for
    /// `stale_ms`), waiting up to `block_ms` when there are none.
    async fn read(
        &self,
        tenant: &str,
        consumer: &str,
        count: u64,
        block_ms: u64,
        stale_ms: u64,
    ) -> Result<Vec<Pending>, BrokerError>;
    /// Deliver now, or queued behind earlier events of its conversation.
    async fn admit(&self, tenant: &str, p: &Pending) -> Result<Admission, BrokerError>;
    /// A new event was delivered.
    async fn ack(&self, tenant: &str, id: &str) -> Result<(), BrokerError>;
    /// A new event failed: it waits in its conversation's queue until `due_ms`.
    async fn defer(&self, tenant: &str, p: &Pending, due_ms: u64) -> Result<(), BrokerError>;
    /// Conversations whose queue head is due, leased until `lease_until_ms`.
    async fn due(
        &self,
        tenant: &str,
        now_ms: u64,
        lease_until_ms: u64,
        count: u64,
    ) -> Result<Vec<String>, BrokerError>;
    /// The head of a conversation's queue.
    async fn head(&self, tenant: &str, conv: &str) -> Result<Option<Pending>, BrokerError>;
    /// The head was delivered: drop it; the next one is due at once.
    async fn pop(&self, tenant: &str, conv: &str, now_ms: u64) -> Result<(), BrokerError>;
    /// The head failed again: record it and retry at `due_ms`.
    async fn reschedule(&self, tenant: &str, p: &Pending, due_ms: u64) -> Result<(), BrokerError>;
    /// The head failed past the maximum age: move it to the dead letters.
    async fn bury(&self, tenant: &str, p: &Pending, now_ms: u64) -> Result<(), BrokerError>;
    /// Conversations with events waiting for a retry.
    async fn depth(&self, tenant: &str) -> Result<u64, BrokerError>;
}
