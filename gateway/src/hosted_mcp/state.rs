//! What the hosted MCP endpoint uses of its node, as its own state: built once by the node's
//! assembly (`serve.rs`) from the node's shared parts, with the endpoint's settings and its
//! live sessions, which no other door holds.

use std::sync::Arc;

use toolmark_broker::SharedBroker;
use toolmark_config::McpSettings;
use toolmark_process::Lifecycle;

use super::live::Live;
use crate::calls::CallEngine;
use crate::metrics::Metrics;
use crate::tenants::Tenants;

/// The hosted MCP endpoint's state: cheap to clone (one shared part).
#[derive(Debug, Clone)]
pub struct McpState(Arc<Parts>);

/// What the endpoint reads.
#[derive(Debug)]
pub struct Parts {
    /// Shared state and routing: sessions, tasks, conversations, events.
    pub broker: SharedBroker,
    /// The call engine: a tool call is an agent call.
    pub(crate) calls: CallEngine,
    /// Tenants by id.
    pub tenants: Tenants,
    /// The node's metrics (the endpoint's own series among them).
    pub metrics: Arc<Metrics>,
    /// The process's stop token and task tracker: listings and task notifications run there.
    pub life: Lifecycle,
    /// `server.public_url`: the audience of OAuth access tokens, the metadata's `resource`.
    pub public_url: Option<String>,
    /// `[mcp]`: sessions and stream limits, when a call becomes a task.
    pub settings: McpSettings,
    /// The sessions and streams open on this node (the tenant follower ends a revoked
    /// credential's through the same handle).
    pub live: Arc<Live>,
}

impl McpState {
    /// The endpoint's state over its parts.
    pub fn new(parts: Parts) -> Self {
        McpState(Arc::new(parts))
    }
}

impl std::ops::Deref for McpState {
    type Target = Parts;
    fn deref(&self) -> &Parts {
        &self.0
    }
}
