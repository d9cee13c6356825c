//! The tenant catalog of one process.

use std::collections::{BTreeMap, VecDeque};

use async_trait::async_trait;
use tokio::sync::broadcast;

use super::{MemoryBroker, lock};
use crate::BrokerError;
use crate::catalog::{
    self, AUDIT_KEPT, Catalog, CatalogError, Expect, Record, RestoreStep, Restored,
};
use crate::{event_id_after, now_ms};

/// Records by id and the revision.
#[derive(Debug)]
pub(super) struct Tenants {
    revision: u64,
    records: BTreeMap<String, Record>,
    changes: broadcast::Sender<String>,
    audit: VecDeque<(String, String)>,
    audit_seq: u64,
}

impl Default for Tenants {
    fn default() -> Self {
        Tenants {
            revision: 0,
            records: BTreeMap::new(),
            changes: broadcast::channel(1024).0,
            audit: VecDeque::new(),
            audit_seq: 0,
        }
    }
}

#[async_trait]
impl Catalog for MemoryBroker {
    async fn revision(&self) -> Result<u64, BrokerError> {
        Ok(lock(&self.catalog).revision)
    }

    async fn records(&self) -> Result<(u64, Vec<Record>), BrokerError> {
        let t = lock(&self.catalog);
        Ok((t.revision, t.records.values().cloned().collect()))
    }

    async fn record(&self, id: &str) -> Result<Option<Record>, BrokerError> {
        Ok(lock(&self.catalog).records.get(id).cloned())
    }

    async fn put(&self, id: &str, body: &str, expect: Expect) -> Result<u64, CatalogError> {
        let mut t = lock(&self.catalog);
        catalog::check(expect, t.records.get(id).map(|r| r.version))?;
        t.revision += 1;
        let version = t.revision;
        t.records.insert(
            id.to_owned(),
            Record {
                id: id.to_owned(),
                version,
                body: body.to_owned(),
            },
        );
        let _ = t.changes.send(id.to_owned());
        Ok(version)
    }

    async fn remove(&self, id: &str, version: u64) -> Result<(), CatalogError> {
        let mut t = lock(&self.catalog);
        catalog::check(
            Expect::Version(version),
            t.records.get(id).map(|r| r.version),
        )?;
        t.revision += 1;
        t.records.remove(id);
        let _ = t.changes.send(id.to_owned());
        Ok(())
    }

    async fn restore(
        &self,
        held: &[Record],
        gone: &[(String, u64)],
        seen: u64,
    ) -> Result<Restored, BrokerError> {
        let mut t = lock(&self.catalog);
        if t.revision >= seen {
            return Ok(Restored::NotBehind);
        }
        let mut wrote = 0;
        for (id, deleted) in gone {
            let current = t.records.get(id).map(|r| r.version);
            if catalog::restore_one(current, None, Some(*deleted)) == RestoreStep::Remove {
                t.records.remove(id);
            }
        }
        for r in held {
            let current = t.records.get(&r.id).map(|r| r.version);
            if catalog::restore_one(current, Some(r.version), None) == RestoreStep::Put {
                t.records.insert(r.id.clone(), r.clone());
                wrote += 1;
            }
        }
        t.revision = seen;
        Ok(Restored::Wrote(wrote))
    }

    fn changes(&self) -> broadcast::Receiver<String> {
        lock(&self.catalog).changes.subscribe()
    }

    async fn drop_tenant(&self, tenant: &str) -> Result<(), BrokerError> {
        lock(&self.events.logs).remove(tenant);
        lock(&self.webhooks).remove(tenant);
        let credentials = super::limits::caller_bucket(tenant, "");
        lock(&self.rates).retain(|k, _| k != tenant && !k.starts_with(&credentials));
        Ok(())
    }

    async fn audit(&self, entry: &str) -> Result<String, BrokerError> {
        let mut t = lock(&self.catalog);
        t.audit_seq += 1;
        // Ids like a stream's: time, then a sequence that orders entries of one millisecond.
        let id = format!("{}-{}", now_ms(), t.audit_seq);
        t.audit.push_back((id.clone(), entry.to_owned()));
        while t.audit.len() > AUDIT_KEPT {
            t.audit.pop_front();
        }
        Ok(id)
    }

    async fn audit_log(
        &self,
        after: Option<&str>,
        count: usize,
    ) -> Result<Vec<(String, String)>, BrokerError> {
        let t = lock(&self.catalog);
        Ok(t.audit
            .iter()
            .filter(|(id, _)| after.is_none_or(|a| event_id_after(id, a)))
            .take(count)
            .cloned()
            .collect())
    }
}
