//! The front doors' records and idempotency keys in the process: one map of records with their
//! expiry, expired ones dropped as they are met and swept once the map grows.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{MemoryBroker, lock};
use crate::BrokerError;
use crate::prelude::*;
use crate::{Kept, PlaceBound, Places};

/// Above this many records, a write first drops the expired ones.
const SWEEP_ABOVE: usize = 4096;

#[async_trait]
impl DoorRecords for MemoryBroker {
    async fn keep(&self, what: &Kept, body: &str, ttl: Duration) -> Result<(), BrokerError> {
        let now = Instant::now();
        let mut sessions = lock(&self.records.kept);
        if sessions.len() >= SWEEP_ABOVE {
            sessions.retain(|_, (_, until)| *until > now);
        }
        sessions.insert(Stored::Door(what.clone()), (body.to_owned(), now + ttl));
        Ok(())
    }

    async fn kept(&self, what: &Kept, ttl: Duration) -> Result<Option<String>, BrokerError> {
        let now = Instant::now();
        let mut sessions = lock(&self.records.kept);
        let what = Stored::Door(what.clone());
        match sessions.get_mut(&what) {
            Some((body, until)) if *until > now => {
                *until = now + ttl;
                Ok(Some(body.clone()))
            }
            Some(_) => {
                sessions.remove(&what);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    async fn forget(&self, what: &Kept) -> Result<bool, BrokerError> {
        let now = Instant::now();
        Ok(lock(&self.records.kept)
            .remove(&Stored::Door(what.clone()))
            .is_some_and(|(_, until)| until > now))
    }

    async fn take_place(
        &self,
        places: &Places<'_>,
        id: &str,
        ttl: Duration,
    ) -> Result<Result<(), PlaceBound>, BrokerError> {
        let now = Instant::now();
        let mut all = lock(&self.records.places);
        let set = all.entry(places.tenant.to_owned()).or_default();
        set.retain(|_, (_, until)| *until > now);
        if !set.contains_key(id) {
            let holders = set
                .values()
                .filter(|(holder, _)| holder == places.holder)
                .count();
            if holders >= places.per_holder {
                return Ok(Err(PlaceBound::Holder));
            }
            if set.len() >= places.per_tenant {
                return Ok(Err(PlaceBound::Tenant));
            }
        }
        set.insert(id.to_owned(), (places.holder.to_owned(), now + ttl));
        Ok(Ok(()))
    }

    async fn keep_place(
        &self,
        places: &Places<'_>,
        id: &str,
        ttl: Duration,
    ) -> Result<(), BrokerError> {
        let now = Instant::now();
        if let Some((_, until)) = lock(&self.records.places)
            .get_mut(places.tenant)
            .and_then(|set| set.get_mut(id))
            .filter(|(_, until)| *until > now)
        {
            *until = now + ttl;
        }
        Ok(())
    }

    async fn give_place(&self, places: &Places<'_>, id: &str) -> Result<(), BrokerError> {
        let mut all = lock(&self.records.places);
        if let Some(set) = all.get_mut(places.tenant) {
            set.remove(id);
            if set.is_empty() {
                all.remove(places.tenant);
            }
        }
        Ok(())
    }
}

/// What the map keeps: the doors' records and the tenants' idempotency keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Stored {
    Door(Kept),
    Idempotency { tenant: String, key: String },
}

/// An idempotency key's place in the map.
fn idempotency_key(tenant: &str, key: &str) -> Stored {
    Stored::Idempotency {
        tenant: tenant.to_owned(),
        key: key.to_owned(),
    }
}

#[async_trait]
impl Idempotency for MemoryBroker {
    async fn claim_idempotency(
        &self,
        tenant: &str,
        key: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<Option<String>, BrokerError> {
        let now = Instant::now();
        let mut sessions = lock(&self.records.kept);
        if sessions.len() >= SWEEP_ABOVE {
            sessions.retain(|_, (_, until)| *until > now);
        }
        let at = idempotency_key(tenant, key);
        match sessions.get(&at) {
            Some((existing, until)) if *until > now => Ok(Some(existing.clone())),
            _ => {
                sessions.insert(at, (record.to_owned(), now + ttl));
                Ok(None)
            }
        }
    }

    async fn update_idempotency(
        &self,
        tenant: &str,
        key: &str,
        record: &str,
    ) -> Result<(), BrokerError> {
        let now = Instant::now();
        let mut sessions = lock(&self.records.kept);
        if let Some((existing, until)) = sessions.get_mut(&idempotency_key(tenant, key))
            && *until > now
        {
            record.clone_into(existing);
        }
        Ok(())
    }

    async fn idempotency(&self, tenant: &str, key: &str) -> Result<Option<String>, BrokerError> {
        let now = Instant::now();
        Ok(lock(&self.records.kept)
            .get(&idempotency_key(tenant, key))
            .filter(|(_, until)| *until > now)
            .map(|(record, _)| record.clone()))
    }

    async fn release_idempotency(&self, tenant: &str, key: &str) -> Result<(), BrokerError> {
        lock(&self.records.kept).remove(&idempotency_key(tenant, key));
        Ok(())
    }
}

/// One tenant set's counted sessions: id → (holder, when it lapses).
pub(super) type PlaceSet = HashMap<String, (String, Instant)>;

/// The front doors' records ([`crate::DoorRecords`]) and idempotency keys
/// ([`crate::Idempotency`]), each with its expiry; and the counted sessions of each tenant set.
#[derive(Default)]
pub(super) struct Records {
    /// What → (record, expiry).
    pub(super) kept: Mutex<HashMap<Stored, (String, Instant)>>,
    /// Counted sessions per tenant set.
    pub(super) places: Mutex<HashMap<String, PlaceSet>>,
}
