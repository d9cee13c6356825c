//! Keeps this node's tenant snapshot equal to the broker's catalog: the config file's tenants
//! plus those of the admin API, followed by a [`Follower`] (`toolmark_store::follower`).
//! Each change is applied to this node's sockets too: a deleted tenant, a deleted token key or
//! a `disconnect` closes the pages it covers with 4401, and ends the hosted MCP streams and
//! sessions whose credential it covers (OAuth access tokens included).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::CancellationToken;
use toolmark_broker::catalog::Catalog;
use toolmark_config::Sealer;
use toolmark_store::follower::{Change, Follower};

use crate::registry::Registry;
use crate::tenants::{Snapshot, Tenant, Tenants};

/// What a door keeps open on this node under a tenant's credentials, beside its pages (the
/// hosted MCP endpoint's sessions and streams): told of each change of a tenant, it ends what
/// the tenant no longer admits. The door implements it, so the follower names no door.
pub trait Revoke: Send + Sync + std::fmt::Debug {
    /// Ends what tenant `id` (now `tenant`; `None`: deleted) no longer admits; how many.
    fn revoke(&self, id: &str, tenant: Option<&Arc<Tenant>>) -> usize;
}

/// This node's view of the catalog.
#[derive(Debug)]
pub struct Loader {
    tenants: Tenants,
    statics: Vec<Arc<Tenant>>,
    follower: Arc<Follower>,
    registry: Arc<Registry>,
    mcp: Arc<dyn Revoke>,
    /// The admin API's tenants, ready to serve.
    stored: Mutex<BTreeMap<String, Arc<Tenant>>>,
}

impl Loader {
    /// A loader publishing into `tenants` (which holds the config file's tenants now).
    pub fn new(
        tenants: Tenants,
        catalog: Arc<dyn Catalog>,
        sealer: Sealer,
        registry: Arc<Registry>,
        mcp: Arc<dyn Revoke>,
    ) -> Self {
        let statics = tenants.snapshot().all().cloned().collect();
        let follower = Arc::new(Follower::new(catalog, sealer));
        tenants.follow(Arc::clone(&follower));
        Loader {
            tenants,
            statics,
            follower,
            registry,
            mcp,
            stored: Mutex::default(),
        }
    }

    /// The catalog.
    pub fn catalog(&self) -> &Arc<dyn Catalog> {
        self.follower.catalog()
    }

    /// The sealing key.
    pub fn sealer(&self) -> &Sealer {
        self.follower.sealer()
    }

    /// Whether `id` is a tenant of the config file.
    pub fn is_static(&self, id: &str) -> bool {
        self.statics.iter().any(|t| t.id == id)
    }

    /// The config file's tenants.
    pub fn statics(&self) -> &[Arc<Tenant>] {
        &self.statics
    }

    /// Re-reads every stored tenant.
    pub async fn load_all(&self) {
        let changes = self.follower.load_all().await;
        self.take(changes);
    }

    /// Re-reads one stored tenant (just written through this node).
    pub async fn load_one(&self, id: &str) {
        let changes = self.follower.load_one(id).await;
        self.take(changes);
    }

    /// Applies changes: the snapshot, then this node's sockets, each checked against its
    /// tenant as it is now.
    fn take(&self, changes: Vec<Change>) {
        if changes.is_empty() {
            return;
        }
        let mut applied = Vec::new();
        {
            let mut stored = self.stored.lock().unwrap_or_else(PoisonError::into_inner);
            for c in changes {
                // The admin API refuses the config file's ids; a record with one is ignored.
                if self.is_static(&c.id) {
                    continue;
                }
                let tenant = c.tenant.map(|s| Arc::new(Tenant::new(&s)));
                match &tenant {
                    Some(t) => stored.insert(c.id.clone(), Arc::clone(t)),
                    None => stored.remove(&c.id),
                };
                applied.push((c.id, tenant));
            }
            self.tenants.replace(Snapshot::new(
                self.statics.iter().cloned().chain(stored.values().cloned()),
            ));
        }
        for (id, tenant) in applied {
            let closed = self.registry.revoke(&id, |conv, grant| {
                tenant
                    .as_ref()
                    .is_some_and(|t| t.admits(&conv.user, &conv.conversation, grant))
            });
            if closed > 0 {
                tracing::info!(tenant = %id, closed, "pages closed by an admin change");
            }
            let ended = self.mcp.revoke(&id, tenant.as_ref());
            if ended > 0 {
                tracing::info!(tenant = %id, ended, "MCP sessions and streams ended by an admin change");
            }
        }
    }

    /// Follows the catalog until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let me = Arc::clone(&self);
        Arc::clone(&self.follower)
            .run(shutdown, move |changes| me.take(changes))
            .await;
    }
}
