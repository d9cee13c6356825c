//! Records the front doors keep in the broker (hosted MCP sessions, their owners, MCP tasks)
//! and the bounds on live sessions.

use std::time::Duration;

use async_trait::async_trait;

use crate::BrokerError;

/// A record a front door keeps in the broker ([`DoorRecords`]), by what it is. On Redis each is
/// one string under `<prefix>session:` and its name (`redis/keys.rs`, `Keys::kept`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Kept {
    /// A hosted MCP session's `initialize` state, as rmcp stores it.
    McpSession(String),
    /// A hosted MCP session's owner: the user and conversation of the token that began it.
    McpOwner(String),
    /// A hosted MCP task of a tenant: its call, and what `tasks/get` answers.
    McpTask { tenant: String, id: String },
}

/// Records of the front doors that outlive one request but not a retention window, valid on
/// every node, each named by what it is ([`Kept`]): a hosted MCP session, its owner, an MCP
/// task. Each is kept for its time to live, restarted on every read. And the bounds on live
/// hosted MCP sessions (the places methods).
#[async_trait]
pub trait DoorRecords: Send + Sync + std::fmt::Debug {
    /// Keeps `body` as `what` for `ttl` (replacing what was there).
    async fn keep(&self, what: &Kept, body: &str, ttl: Duration) -> Result<(), BrokerError>;

    /// The record `what`, its time to live restarted at `ttl`; `None` once it expired or was
    /// forgotten.
    async fn kept(&self, what: &Kept, ttl: Duration) -> Result<Option<String>, BrokerError>;

    /// Forgets the record; `false` when there was none.
    async fn forget(&self, what: &Kept) -> Result<bool, BrokerError>;

    /// Counts the session `id` among the live sessions of `places` (its tenant's and its
    /// holder's) until it goes `ttl` without [`DoorRecords::keep_place`]; `Ok(Err(bound))` when
    /// either set is full, which then changes nothing. A session counted already is kept.
    async fn take_place(
        &self,
        places: &Places<'_>,
        id: &str,
        ttl: Duration,
    ) -> Result<Result<(), PlaceBound>, BrokerError>;

    /// Restarts the time to live of a counted session (nothing for one no longer counted).
    async fn keep_place(
        &self,
        places: &Places<'_>,
        id: &str,
        ttl: Duration,
    ) -> Result<(), BrokerError>;

    /// No longer counts the session `id`.
    async fn give_place(&self, places: &Places<'_>, id: &str) -> Result<(), BrokerError>;
}

/// Where a bounded session is counted: among the live sessions of its tenant and among those
/// of its holder (for a hosted MCP session: the token's user and conversation), each set with
/// its bound.
#[derive(Debug, Clone, Copy)]
pub struct Places<'a> {
    /// The tenant's set (the gateway names the tenant's incarnation in it).
    pub tenant: &'a str,
    /// The holder's set, inside the tenant's.
    pub holder: &'a str,
    /// At most this many live sessions of the tenant.
    pub per_tenant: usize,
    /// At most this many live sessions of the holder.
    pub per_holder: usize,
}

/// Which bound refused a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceBound {
    /// The tenant's.
    Tenant,
    /// The holder's.
    Holder,
}
