//! Where the platform's records live (`admin.store`): the tenant catalog (tenants, their API
//! keys and policies, token keys, webhook secrets, OAuth settings, each record as
//! `toolmark-config` seals it) and the admin audit log.
//!
//! Every store is a [`Catalog`], the trait the broker's own catalog implements: `broker` (the
//! default) is the broker itself; a database ([`SqlCatalog`]: PostgreSQL for many nodes, SQLite
//! for one) keeps the records and the audit log, and leaves to the broker what it keeps per
//! tenant in flight (event log, webhook queues, call rates), which [`Catalog::drop_tenant`]
//! still clears there. Nodes follow a store exactly as they follow the broker's catalog
//! ([`follower`]): pages and calls read the node's snapshot, never the
//! store.
//!
//! [`copy`] moves every record from one store to another (the binary's
//! `--copy-records-to`), sealed secrets as they are.

pub mod follower;
mod migrations;
mod sql;

use std::sync::Arc;
use std::time::Duration;

use toolmark_broker::catalog::{Catalog, CatalogError, Expect};
use toolmark_config::StoreSettings;

pub use sql::SqlCatalog;

/// Told of every operation on a database store: its name, how long it took, and whether it
/// answered (the process's metrics).
pub type Observer = Arc<dyn Fn(&'static str, Duration, bool) + Send + Sync>;

/// An observer that records nothing.
pub fn unobserved() -> Observer {
    Arc::new(|_, _, _| {})
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL does not open (a bad option, an unknown host form).
    #[error("admin.store: {0}")]
    Url(String),
}

/// How long a process waits at start for its database's schema before it goes on without
/// the records (not ready; they are read as soon as the database answers).
pub const START_WAIT: Duration = Duration::from_secs(5);

/// The store `settings` name: the broker's own `catalog`, or a database whose schema is
/// created and migrated first (waited for at most [`START_WAIT`]; then in the background:
/// until it is, and whenever the database does not answer, its operations fail as a broker
/// that cannot be reached does). `retention` is how long a database keeps the audit log.
pub async fn open(
    settings: &StoreSettings,
    retention: Duration,
    catalog: Arc<dyn Catalog>,
    observer: Observer,
) -> Result<Arc<dyn Catalog>, StoreError> {
    Ok(match settings {
        StoreSettings::Broker => catalog,
        StoreSettings::Postgres(_) | StoreSettings::Sqlite(_) => {
            let store = SqlCatalog::open(settings, retention, catalog, observer)?;
            if !store.migrated(START_WAIT).await {
                tracing::warn!(
                    store = settings.kind(),
                    "admin store not reachable at start: not ready until it answers"
                );
            }
            store
        }
    })
}

/// Brings a PostgreSQL database's schema to step `step` and no further: how the tests make a
/// database of a previous release's schema.
pub async fn migrate_postgres_to(url: &str, step: i64) -> Result<(), String> {
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(url)
        .await
        .map_err(|e| e.to_string())?;
    let m = migrations::migrator(migrations::Dialect::Postgres)
        .await
        .map_err(|e| e.to_string())?;
    m.run_to(step, &pool).await.map_err(|e| e.to_string())
}

/// What [`copy`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    /// Records written to the target (new there, or different).
    pub written: usize,
    /// Records the target already held as they are.
    pub unchanged: usize,
    /// Audit entries copied (only into a target whose audit log was empty).
    pub audit: usize,
}

/// Copies every record of `from` into `to`, bodies (and their sealed secrets) untouched: a
/// record the target lacks is created, one it holds differently is replaced, one it holds
/// alike is left. The audit log is copied, oldest first, into a target whose log is empty (a
/// second run copies none again). Safe to run twice; a record deleted from `from` between two
/// runs stays in `to` (a copy never deletes).
pub async fn copy(from: &dyn Catalog, to: &Target) -> Result<Copied, CatalogError> {
    let target = to.catalog();
    let mut done = Copied::default();
    let (_, records) = from.records().await?;
    for r in records {
        match target.record(&r.id).await? {
            Some(there) if there.body == r.body => done.unchanged += 1,
            Some(there) => {
                target
                    .put(&r.id, &r.body, Expect::Version(there.version))
                    .await?;
                done.written += 1;
            }
            None => {
                target.put(&r.id, &r.body, Expect::Absent).await?;
                done.written += 1;
            }
        }
    }
    if target.audit_log(None, 1).await?.is_empty() {
        let mut after: Option<String> = None;
        loop {
            let batch = from.audit_log(after.as_deref(), 500).await?;
            let Some((last, _)) = batch.last() else { break };
            after = Some(last.clone());
            for (id, entry) in &batch {
                match to {
                    Target::Sql(sql) => sql.import_audit(id, entry).await?,
                    Target::Other(c) => {
                        c.audit(entry).await?;
                    }
                }
                done.audit += 1;
            }
        }
    }
    Ok(done)
}

/// Where [`copy`] writes.
#[derive(Debug)]
pub enum Target {
    /// A database: audit entries keep the time of their ids.
    Sql(Arc<SqlCatalog>),
    /// The broker's catalog: audit entries get ids of the time of the copy (their `at`
    /// stays).
    Other(Arc<dyn Catalog>),
}

impl Target {
    fn catalog(&self) -> &dyn Catalog {
        match self {
            Target::Sql(s) => s.as_ref(),
            Target::Other(c) => c.as_ref(),
        }
    }
}
