//! Webhook events that exhausted their retries.

use async_trait::async_trait;

use crate::{BrokerError, webhook};

/// Webhook events that exhausted their retries.
#[async_trait]
pub trait DeadLetters: Send + Sync + std::fmt::Debug {
    /// The tenant's dead letters, oldest first.
    async fn webhook_failed(&self, tenant: &str) -> Result<Vec<webhook::DeadLetter>, BrokerError>;

    /// Puts a dead letter back in its conversation's queue; `false` when there is none.
    async fn webhook_retry(&self, tenant: &str, id: &str) -> Result<bool, BrokerError>;
}
