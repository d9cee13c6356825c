//! Idempotency keys of the agent API.

use std::time::Duration;

use async_trait::async_trait;

use crate::BrokerError;

/// Idempotency keys of the agent API (`Idempotency-Key`): per tenant, one record each, kept for
/// a time to live counted from the first request; the record is opaque here (the gateway's).
#[async_trait]
pub trait Idempotency: Send + Sync + std::fmt::Debug {
    /// Stores `record` under the tenant's `key` unless one is there; returns the one there
    /// (`None`: this request claimed the key).
    async fn claim_idempotency(
        &self,
        tenant: &str,
        key: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<Option<String>, BrokerError>;

    /// Replaces the record of a claimed key, keeping its time to live; nothing when it expired.
    async fn update_idempotency(
        &self,
        tenant: &str,
        key: &str,
        record: &str,
    ) -> Result<(), BrokerError>;

    /// The record of the tenant's `key`.
    async fn idempotency(&self, tenant: &str, key: &str) -> Result<Option<String>, BrokerError>;

    /// Gives a key back (its first request failed before a call existed).
    async fn release_idempotency(&self, tenant: &str, key: &str) -> Result<(), BrokerError>;
}
