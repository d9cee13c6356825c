//! Keeps this node's tenant snapshot equal to the broker's catalog: the config file's tenants
//! plus those of the admin API, re-read for the tenant each change notification names, and in
//! whole when the catalog's revision moved without a notification reaching this node (checked
//! every [`REREAD_EVERY`]). Each change is applied to this node's sockets too: a deleted
//! tenant, a deleted token key or a `disconnect` closes the pages it covers with 4401.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use toolmark_broker::catalog::{Catalog, Record};
use toolmark_process::config::{Sealer, StoredTenant};

use crate::registry::Registry;
use crate::tenants::{Snapshot, Tenant, Tenants};

/// How often the catalog's revision is compared with what this node loaded.
pub const REREAD_EVERY: Duration = Duration::from_secs(1);

/// This node's view of the catalog.
#[derive(Debug)]
pub struct Loader {
    tenants: Tenants,
    statics: Vec<Arc<Tenant>>,
    catalog: Arc<dyn Catalog>,
    sealer: Sealer,
    registry: Arc<Registry>,
    /// Stored tenants as loaded: id → (version, tenant).
    loaded: Mutex<BTreeMap<String, (u64, Arc<Tenant>)>>,
    revision: Mutex<u64>,
}

impl Loader {
    /// A loader publishing into `tenants` (which holds the config file's tenants now).
    pub fn new(
        tenants: Tenants,
        catalog: Arc<dyn Catalog>,
        sealer: Sealer,
        registry: Arc<Registry>,
    ) -> Self {
        let statics = tenants.snapshot().all().cloned().collect();
        Loader {
            tenants,
            statics,
            catalog,
            sealer,
            registry,
            loaded: Mutex::default(),
            revision: Mutex::new(0),
        }
    }

    /// The catalog.
    pub fn catalog(&self) -> &Arc<dyn Catalog> {
        &self.catalog
    }

    /// The sealing key.
    pub fn sealer(&self) -> &Sealer {
        &self.sealer
    }

    /// Whether `id` is a tenant of the config file.
    pub fn is_static(&self, id: &str) -> bool {
        self.statics.iter().any(|t| t.id == id)
    }

    /// The config file's tenants.
    pub fn statics(&self) -> &[Arc<Tenant>] {
        &self.statics
    }

    fn open(&self, r: &Record) -> Option<Arc<Tenant>> {
        let stored: StoredTenant = match serde_json::from_str(&r.body) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(tenant = %r.id, error = %e, "stored tenant unreadable; not served");
                return None;
            }
        };
        match stored.open(&self.sealer) {
            Ok(settings) => Some(Arc::new(Tenant::new(&settings))),
            Err(e) => {
                tracing::error!(tenant = %r.id, error = %e, "stored tenant does not open (another admin.encryption_key?); not served");
                None
            }
        }
    }

    /// Re-reads every stored tenant.
    pub async fn load_all(&self) {
        let (revision, records) = match self.catalog.records().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "tenant catalog not read; keeping what this node has");
                return;
            }
        };
        let next: BTreeMap<String, (u64, Record)> = records
            .into_iter()
            .map(|r| (r.id.clone(), (r.version, r)))
            .collect();
        let ids: Vec<String> = {
            let loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
            loaded.keys().chain(next.keys()).cloned().collect()
        };
        for id in ids {
            self.apply(&id, next.get(&id).map(|(_, r)| r));
        }
        *self.revision.lock().unwrap_or_else(PoisonError::into_inner) = revision;
        self.publish();
    }

    /// Re-reads one stored tenant (named by a change notification, or just written here).
    pub async fn load_one(&self, id: &str) {
        match self.catalog.record(id).await {
            Ok(r) => {
                self.apply(id, r.as_ref());
                self.publish();
            }
            Err(e) => tracing::warn!(tenant = %id, error = %e, "stored tenant not read"),
        }
    }

    /// Takes `record` (or its absence) as tenant `id`'s state, closing the sockets the change
    /// revokes.
    fn apply(&self, id: &str, record: Option<&Record>) {
        let mut loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        let current = loaded.get(id).map(|(v, _)| *v);
        let next = match record {
            Some(r) if current == Some(r.version) => return,
            Some(r) => self.open(r).map(|t| (r.version, t)),
            None if current.is_none() => return,
            None => None,
        };
        match &next {
            Some(n) => loaded.insert(id.to_owned(), n.clone()),
            None => loaded.remove(id),
        };
        drop(loaded);
        if self.is_static(id) {
            return;
        }
        let tenant = next.map(|(_, t)| t);
        let closed = self.registry.revoke(id, |conv, grant| {
            tenant
                .as_ref()
                .is_some_and(|t| t.admits(&conv.user, &conv.conversation, grant))
        });
        if closed > 0 {
            tracing::info!(tenant = %id, closed, "pages closed by an admin change");
        }
    }

    /// Swaps in the snapshot: the config file's tenants, then the stored ones (a stored tenant
    /// never shadows a config one: the admin API refuses their ids).
    fn publish(&self) {
        let loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        let stored = loaded
            .iter()
            .filter(|(id, _)| !self.is_static(id))
            .map(|(_, (_, t))| Arc::clone(t));
        self.tenants
            .replace(Snapshot::new(self.statics.iter().cloned().chain(stored)));
    }

    /// Follows the catalog until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut changes = self.catalog.changes();
        self.load_all().await;
        let mut tick = tokio::time::interval(REREAD_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                change = changes.recv() => match change {
                    Ok(id) => self.load_one(&id).await,
                    Err(RecvError::Lagged(_)) => self.load_all().await,
                    Err(RecvError::Closed) => return,
                },
                _ = tick.tick() => {
                    let seen = *self.revision.lock().unwrap_or_else(PoisonError::into_inner);
                    match self.catalog.revision().await {
                        Ok(r) if r != seen => self.load_all().await,
                        Ok(_) => {}
                        Err(e) => tracing::debug!(error = %e, "catalog revision not read"),
                    }
                }
            }
        }
    }
}
