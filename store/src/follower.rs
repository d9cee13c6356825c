//! Following the broker's tenant catalog (the admin API's tenants): what every process that
//! serves tenants needs, the gateway (its snapshot, its sockets) and the worker (its webhook
//! deliveries) alike. A [`Follower`] re-reads the tenant each change notification names, and
//! every tenant when the catalog's revision moved without a notification reaching it (checked
//! every [`REREAD_EVERY`]); each record is opened into the same [`TenantSettings`] a
//! `[[tenants]]` entry gives, and each change is handed to the caller.
//!
//! A catalog whose revision went back (below the highest this process knows it reached: a read
//! of every record, or a record's version read on a change notification) lost its data:
//! a Redis restarted without persistence, a `FLUSHALL`, a failover to a replica behind. A
//! follower never takes that for the tenants' deletion: it writes back the records it holds
//! ([`Catalog::restore`], with the ids it saw deleted, so that no deleted record comes back)
//! and reads the catalog again, so the platform's records survive as long as one process that
//! held them lives, and no page of theirs is closed for it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use toolmark_broker::catalog::{Catalog, Record, Restored};
use toolmark_config::{Sealer, StoredTenant, TenantSettings};

/// How often the catalog's revision is compared with what was loaded.
pub const REREAD_EVERY: Duration = Duration::from_secs(1);

/// How many deleted ids a follower remembers (with the revision it saw each deleted at), for
/// a restore not to bring them back.
pub const GONE_KEPT: usize = 10_000;

/// A stored tenant that changed: its new settings, or `None` once it is gone (deleted, or no
/// longer opening).
#[derive(Debug, Clone)]
pub struct Change {
    /// The tenant id.
    pub id: String,
    /// What it is now.
    pub tenant: Option<Arc<TenantSettings>>,
}

/// One process's view of the catalog.
#[derive(Debug)]
pub struct Follower {
    catalog: Arc<dyn Catalog>,
    sealer: Sealer,
    /// Stored tenants as loaded: id → (record, settings).
    loaded: Mutex<BTreeMap<String, (Record, Arc<TenantSettings>)>>,
    /// Ids seen deleted: id → the catalog's revision when it was seen gone.
    gone: Mutex<BTreeMap<String, u64>>,
    /// The catalog's revision at this process's last read of every record: the once-a-second
    /// check reads every record again when the catalog's has moved from it.
    revision: Mutex<u64>,
    /// The highest revision this process knows the catalog reached: that of a read of every
    /// record, a record's version (its write's revision) read on a change notification, the
    /// revision read with a deletion. A catalog found below it lost its data, even when no read
    /// of every record happened between the change and the loss.
    highest: AtomicU64,
    /// When the catalog last answered a read (none yet: the process has not its records).
    read_at: Mutex<Option<std::time::Instant>>,
}

impl Follower {
    /// A follower of `catalog`, opening secrets with `sealer`.
    pub fn new(catalog: Arc<dyn Catalog>, sealer: Sealer) -> Self {
        Follower {
            catalog,
            sealer,
            loaded: Mutex::default(),
            gone: Mutex::default(),
            revision: Mutex::new(0),
            highest: AtomicU64::new(0),
            read_at: Mutex::default(),
        }
    }

    /// When the catalog last answered (its records or its revision); `None` while it never
    /// did since this process started.
    pub fn last_read(&self) -> Option<std::time::Instant> {
        *self.read_at.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn answered(&self) {
        *self.read_at.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(std::time::Instant::now());
    }

    /// The catalog.
    pub fn catalog(&self) -> &Arc<dyn Catalog> {
        &self.catalog
    }

    /// The sealing key.
    pub fn sealer(&self) -> &Sealer {
        &self.sealer
    }

    /// Every stored tenant as loaded.
    pub fn tenants(&self) -> Vec<Arc<TenantSettings>> {
        self.lock().values().map(|(_, t)| Arc::clone(t)).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (Record, Arc<TenantSettings>)>> {
        self.loaded.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn seen(&self) -> u64 {
        *self.revision.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn highest(&self) -> u64 {
        self.highest.load(Ordering::Acquire)
    }

    /// The catalog was read at `revision` (or had reached it).
    fn reached(&self, revision: u64) {
        self.highest.fetch_max(revision, Ordering::AcqRel);
    }

    /// The catalog was found at revision `found`, below the highest this process knows it
    /// reached: it lost its data. Writes back what this process holds; `false` when that failed
    /// (nothing is taken from the catalog then: what was loaded stays).
    async fn heal(&self, found: u64) -> bool {
        let seen = self.highest();
        let held: Vec<Record> = self.lock().values().map(|(r, _)| r.clone()).collect();
        let gone: Vec<(String, u64)> = self
            .gone
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(id, at)| (id.clone(), *at))
            .collect();
        match self.catalog.restore(&held, &gone, seen).await {
            Ok(Restored::Wrote(n)) => {
                tracing::warn!(
                    found,
                    seen,
                    written_back = n,
                    held = held.len(),
                    "the tenant catalog lost its data (its revision went back): wrote back the records this process holds"
                );
                true
            }
            Ok(Restored::NotBehind) => true,
            Err(e) => {
                tracing::warn!(error = %e, "the tenant catalog lost its data and could not be written back yet; keeping what was loaded");
                false
            }
        }
    }

    fn open(&self, r: &Record) -> Option<Arc<TenantSettings>> {
        let stored: StoredTenant = match serde_json::from_str(&r.body) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(tenant = %r.id, error = %e, "stored tenant unreadable; not served");
                return None;
            }
        };
        match stored.open(&self.sealer) {
            Ok(settings) => Some(Arc::new(settings)),
            Err(e) => {
                tracing::error!(tenant = %r.id, error = %e, "stored tenant does not open (another admin.encryption_key?); not served");
                None
            }
        }
    }

    /// Takes `record` (or its absence, seen at the catalog's revision `at`) as tenant `id`'s
    /// state; the change, if it is one.
    fn apply(&self, id: &str, record: Option<&Record>, at: u64) -> Option<Change> {
        let mut loaded = self.lock();
        let current = loaded.get(id).map(|(r, _)| r.version);
        let next = match record {
            Some(r) if current == Some(r.version) => return None,
            Some(r) => self.open(r).map(|t| (r.clone(), t)),
            None if current.is_none() => return None,
            None => None,
        };
        let mut gone = self.gone.lock().unwrap_or_else(PoisonError::into_inner);
        match &next {
            Some(n) => {
                loaded.insert(id.to_owned(), n.clone());
                gone.remove(id);
            }
            None => {
                loaded.remove(id);
                gone.insert(id.to_owned(), at);
                if gone.len() > GONE_KEPT {
                    // The one seen deleted longest ago goes first.
                    let oldest = gone
                        .iter()
                        .min_by_key(|(_, at)| **at)
                        .map(|(id, _)| id.clone());
                    if let Some(oldest) = oldest {
                        gone.remove(&oldest);
                    }
                }
            }
        };
        drop(gone);
        Some(Change {
            id: id.to_owned(),
            tenant: next.map(|(_, t)| t),
        })
    }

    /// Re-reads every stored tenant; the changes (none when the catalog cannot be read). A
    /// catalog found behind what was read before is written back first ([`Follower::heal`]).
    pub async fn load_all(&self) -> Vec<Change> {
        let mut healed = false;
        let (revision, records) = loop {
            let read = match self.catalog.records().await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "tenant catalog not read; keeping what was loaded");
                    return Vec::new();
                }
            };
            if read.0 >= self.highest() {
                break read;
            }
            if healed || !self.heal(read.0).await {
                return Vec::new();
            }
            healed = true;
        };
        let next: BTreeMap<String, Record> =
            records.into_iter().map(|r| (r.id.clone(), r)).collect();
        let ids: Vec<String> = self.lock().keys().chain(next.keys()).cloned().collect();
        let changes = ids
            .iter()
            .filter_map(|id| self.apply(id, next.get(id), revision))
            .collect();
        *self.revision.lock().unwrap_or_else(PoisonError::into_inner) = revision;
        self.reached(revision);
        self.answered();
        changes
    }

    /// Re-reads one stored tenant (named by a change notification, or just written here).
    pub async fn load_one(&self, id: &str) -> Vec<Change> {
        match self.catalog.record(id).await {
            Ok(None) if self.lock().contains_key(id) => {
                // Gone: deleted, or lost with the catalog's data. The revision tells.
                match self.catalog.revision().await {
                    Ok(at) if at >= self.highest() => {
                        self.reached(at);
                        self.apply(id, None, at).into_iter().collect()
                    }
                    Ok(_) => self.load_all().await,
                    Err(e) => {
                        tracing::warn!(tenant = %id, error = %e, "catalog revision not read");
                        Vec::new()
                    }
                }
            }
            Ok(r) => {
                if let Some(r) = &r {
                    self.reached(r.version);
                }
                self.apply(id, r.as_ref(), self.seen())
                    .into_iter()
                    .collect()
            }
            Err(e) => {
                tracing::warn!(tenant = %id, error = %e, "stored tenant not read");
                Vec::new()
            }
        }
    }

    /// The once-a-second check: every record read again when the catalog's revision moved
    /// without a notification reaching this process, or went below the highest this process
    /// knows it reached (it lost its data: [`Follower::load_all`] writes back what is held).
    pub async fn check(&self) -> Vec<Change> {
        match self.catalog.revision().await {
            Ok(r) if r != self.seen() || r < self.highest() => self.load_all().await,
            Ok(_) => {
                self.answered();
                Vec::new()
            }
            Err(e) => {
                tracing::debug!(error = %e, "catalog revision not read");
                Vec::new()
            }
        }
    }

    /// Follows the catalog until `shutdown`, handing each batch of changes to `changed`.
    pub async fn run(
        self: Arc<Self>,
        shutdown: CancellationToken,
        changed: impl Fn(Vec<Change>) + Send,
    ) {
        let mut changes = self.catalog.changes();
        changed(self.load_all().await);
        let mut tick = tokio::time::interval(REREAD_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let batch = tokio::select! {
                () = shutdown.cancelled() => return,
                change = changes.recv() => match change {
                    Ok(id) => self.load_one(&id).await,
                    Err(RecvError::Lagged(_)) => self.load_all().await,
                    Err(RecvError::Closed) => return,
                },
                _ = tick.tick() => self.check().await,
            };
            if !batch.is_empty() {
                changed(batch);
            }
        }
    }
}
