//! The front doors' records on Redis: one string per record with its time to live (`SET … PX`),
//! restarted by every read (`GETEX … PX`), so any node serves a session any node began. And
//! idempotency keys: one string per key, claimed with `SET NX`, updated with `SET XX KEEPTTL`.

use std::time::Duration;

use async_trait::async_trait;
use fred::interfaces::{ClientLike, KeysInterface};
use fred::prelude::Expiration;

use super::RedisBroker;
use super::reply::{millis, unavailable};
use super::scripts;
use crate::prelude::*;
use crate::{BrokerError, Kept, PlaceBound, Places};

#[async_trait]
impl DoorRecords for RedisBroker {
    async fn keep(&self, what: &Kept, body: &str, ttl: Duration) -> Result<(), BrokerError> {
        let _: Option<String> = self
            .conn
            .client
            .set(
                self.conn.keys.kept(what),
                body,
                Some(Expiration::PX(millis(ttl))),
                None,
                false,
            )
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(())
    }

    async fn kept(&self, what: &Kept, ttl: Duration) -> Result<Option<String>, BrokerError> {
        // `GETEX key PX ms`: the read and the new expiry in one command.
        let getex =
            fred::types::CustomCommand::new("GETEX", fred::types::ClusterHash::FirstKey, false);
        self.conn
            .client
            .custom(
                getex,
                vec![
                    self.conn.keys.kept(what),
                    "PX".to_owned(),
                    millis(ttl).to_string(),
                ],
            )
            .await
            .map_err(|e| unavailable(&e))
    }

    async fn forget(&self, what: &Kept) -> Result<bool, BrokerError> {
        let dropped: i64 = self
            .conn
            .client
            .del(self.conn.keys.kept(what))
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(dropped > 0)
    }

    async fn take_place(
        &self,
        places: &Places<'_>,
        id: &str,
        ttl: Duration,
    ) -> Result<Result<(), PlaceBound>, BrokerError> {
        let reply = self.places_script(places, id, "take", ttl).await?;
        Ok(match reply.as_str() {
            "holder" => Err(PlaceBound::Holder),
            "tenant" => Err(PlaceBound::Tenant),
            _ => Ok(()),
        })
    }

    async fn keep_place(
        &self,
        places: &Places<'_>,
        id: &str,
        ttl: Duration,
    ) -> Result<(), BrokerError> {
        self.places_script(places, id, "keep", ttl).await?;
        Ok(())
    }

    async fn give_place(&self, places: &Places<'_>, id: &str) -> Result<(), BrokerError> {
        self.places_script(places, id, "give", Duration::ZERO)
            .await?;
        Ok(())
    }
}

impl RedisBroker {
    /// Runs `places.lua` (`take`, `keep` or `give`) on the two sets of `places`, which
    /// share the tenant's slot.
    async fn places_script(
        &self,
        places: &Places<'_>,
        id: &str,
        op: &'static str,
        ttl: Duration,
    ) -> Result<String, BrokerError> {
        let reply = self
            .run(scripts::Places {
                tenant: self.conn.keys.places(places.tenant),
                holder: self.conn.keys.holder_places(places.tenant, places.holder),
                op,
                id: id.to_owned(),
                tenant_bound: places.per_tenant,
                holder_bound: places.per_holder,
                ttl: millis(ttl).max(1),
            })
            .await?;
        Ok(reply.as_string().unwrap_or_default())
    }
}

#[async_trait]
impl Idempotency for RedisBroker {
    async fn claim_idempotency(
        &self,
        tenant: &str,
        key: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<Option<String>, BrokerError> {
        let at = self.conn.keys.idempotency(tenant, key);
        // Claimed, or read what is there; a key that expired between the two is claimed again.
        for _ in 0..3 {
            let set: Option<String> = self
                .conn
                .client
                .set(
                    &at,
                    record,
                    Some(Expiration::PX(millis(ttl))),
                    Some(fred::types::SetOptions::NX),
                    false,
                )
                .await
                .map_err(|e| unavailable(&e))?;
            if set.is_some() {
                return Ok(None);
            }
            let existing: Option<String> = self
                .conn
                .client
                .get(&at)
                .await
                .map_err(|e| unavailable(&e))?;
            if existing.is_some() {
                return Ok(existing);
            }
        }
        // The key kept expiring between the two commands: only a time to live shorter than a
        // round trip does that.
        Err(BrokerError::Unavailable {
            retry_after: Duration::from_secs(1),
        })
    }

    async fn update_idempotency(
        &self,
        tenant: &str,
        key: &str,
        record: &str,
    ) -> Result<(), BrokerError> {
        let _: Option<String> = self
            .conn
            .client
            .set(
                self.conn.keys.idempotency(tenant, key),
                record,
                Some(Expiration::KEEPTTL),
                Some(fred::types::SetOptions::XX),
                false,
            )
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(())
    }

    async fn idempotency(&self, tenant: &str, key: &str) -> Result<Option<String>, BrokerError> {
        self.conn
            .client
            .get(self.conn.keys.idempotency(tenant, key))
            .await
            .map_err(|e| unavailable(&e))
    }

    async fn release_idempotency(&self, tenant: &str, key: &str) -> Result<(), BrokerError> {
        let _: i64 = self
            .conn
            .client
            .del(self.conn.keys.idempotency(tenant, key))
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(())
    }
}
