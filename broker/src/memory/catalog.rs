//! The tenant catalog of one process.

use std::collections::BTreeMap;

use async_trait::async_trait;
use tokio::sync::broadcast;

use super::{MemoryBroker, lock};
use crate::BrokerError;
use crate::catalog::{self, Catalog, CatalogError, Expect, Record};

/// Records by id and the revision.
#[derive(Debug)]
pub(super) struct Tenants {
    revision: u64,
    records: BTreeMap<String, Record>,
    changes: broadcast::Sender<String>,
}

impl Default for Tenants {
    fn default() -> Self {
        Tenants {
            revision: 0,
            records: BTreeMap::new(),
            changes: broadcast::channel(1024).0,
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

    fn changes(&self) -> broadcast::Receiver<String> {
        lock(&self.catalog).changes.subscribe()
    }
}
