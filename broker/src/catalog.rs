//! The tenant catalog: tenants created at run time (the admin API), stored in the broker so
//! that every node and worker sees the same set. A record is opaque here (`toolmark-config`
//! encodes it, secrets encrypted); the catalog keeps each record's version for compare-and-set
//! updates, a revision that moves with every change (a node that re-reads it periodically
//! heals a missed notification), and tells every node of every change.

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::BrokerError;

/// One stored tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The tenant id.
    pub id: String,
    /// Its version: the catalog's revision at its last change.
    pub version: u64,
    /// What the process stored (JSON).
    pub body: String,
}

/// What a write expects to find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// No record of that id (a create).
    Absent,
    /// A record at exactly this version (an update with `If-Match`, or a read-modify-write).
    Version(u64),
}

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The broker could not be reached.
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// A record exists where none was expected.
    #[error("exists")]
    Exists,
    /// No record where one was expected.
    #[error("missing")]
    Missing,
    /// The record is at another version than expected.
    #[error("stale")]
    Stale,
}

/// The tenant catalog, shared by every node.
#[async_trait]
pub trait Catalog: Send + Sync + std::fmt::Debug {
    /// The catalog's revision (0 while empty and never changed).
    async fn revision(&self) -> Result<u64, BrokerError>;

    /// Every record, with the revision they were read at.
    async fn records(&self) -> Result<(u64, Vec<Record>), BrokerError>;

    /// One record.
    async fn record(&self, id: &str) -> Result<Option<Record>, BrokerError>;

    /// Writes a record if it is as expected; returns its new version.
    async fn put(&self, id: &str, body: &str, expect: Expect) -> Result<u64, CatalogError>;

    /// Removes a record if it is at `version`.
    async fn remove(&self, id: &str, version: u64) -> Result<(), CatalogError>;

    /// Writes back what a node holds after the catalog lost its data (a Redis restarted
    /// without persistence, a `FLUSHALL`, a failover to a replica that had not received the
    /// last writes): when the catalog's revision is below `seen` (the revision the node last
    /// read: a revision never goes back otherwise), each of `held` that the catalog lacks is
    /// put back at its version, each of `gone` (an id the node saw deleted, with the revision
    /// it saw it at) is removed where a record older than that deletion stands, and the
    /// revision is set to `seen`, in one step. [`Restored::NotBehind`] when the catalog was
    /// not behind (another node restored it first, or nothing was lost).
    async fn restore(
        &self,
        held: &[Record],
        gone: &[(String, u64)],
        seen: u64,
    ) -> Result<Restored, BrokerError>;

    /// Ids of the tenants changed from now on, by any node (a lagging receiver re-reads all).
    fn changes(&self) -> broadcast::Receiver<String>;

    /// Drops what the broker keeps per tenant (its event log, webhook queues and dead letters,
    /// its call rate), once the tenant is deleted: a tenant created later with the same id
    /// starts empty. Its conversations' keys expire with their retention.
    async fn drop_tenant(&self, tenant: &str) -> Result<(), BrokerError>;

    /// Appends an entry to the admin audit log (the newest [`AUDIT_KEPT`] are kept); returns
    /// its id, ordered like an event id.
    async fn audit(&self, entry: &str) -> Result<String, BrokerError>;

    /// Up to `count` audit entries after `after` (from the oldest kept without it), oldest
    /// first, as `(id, entry)`.
    async fn audit_log(
        &self,
        after: Option<&str>,
        count: usize,
    ) -> Result<Vec<(String, String)>, BrokerError>;
}

/// What [`Catalog::restore`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restored {
    /// The catalog was behind: this many records were written back.
    Wrote(usize),
    /// The catalog was not behind: nothing written.
    NotBehind,
}

/// What a restore does to one id, given what the catalog has of it (`current`, its version):
/// the rule both brokers follow (`catalog_restore.lua` writes it in Lua). `held`: the
/// version the node holds; `gone`: the revision at which the node saw it deleted.
pub fn restore_one(current: Option<u64>, held: Option<u64>, gone: Option<u64>) -> RestoreStep {
    match (current, held, gone) {
        // What the catalog has stays, unless it is older than a deletion the node saw.
        (Some(v), _, Some(deleted)) if v < deleted => RestoreStep::Remove,
        (Some(_), _, _) => RestoreStep::Keep,
        (None, Some(_), _) => RestoreStep::Put,
        (None, None, _) => RestoreStep::Keep,
    }
}

/// One id's step in a restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreStep {
    /// Leave it as the catalog has it.
    Keep,
    /// Put the held record back at its version.
    Put,
    /// Remove the record the catalog has (written back by a node that had not yet seen it
    /// deleted).
    Remove,
}

/// How many audit entries the catalog keeps.
pub const AUDIT_KEPT: usize = 10_000;

/// Whether a write expecting `expect` may replace what is there (a record at `current`, or
/// none): the rule both brokers follow (the Redis script [`crate::redis`] writes it in Lua).
pub fn check(expect: Expect, current: Option<u64>) -> Result<(), CatalogError> {
    match (expect, current) {
        (Expect::Absent, None) => Ok(()),
        (Expect::Absent, Some(_)) => Err(CatalogError::Exists),
        (Expect::Version(_), None) => Err(CatalogError::Missing),
        (Expect::Version(v), Some(c)) if v == c => Ok(()),
        (Expect::Version(_), Some(_)) => Err(CatalogError::Stale),
    }
}
