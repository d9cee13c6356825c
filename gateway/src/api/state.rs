//! What the agent API uses of its node, as its own state: built once by the node's assembly
//! ([`crate::state::ApiState::new`]); its handlers take it (`State<ApiState>`) and nothing else
//! of the node.

use std::sync::Arc;

use toolmark_broker::SharedBroker;
use toolmark_process::Lifecycle;

use crate::calls::CallEngine;
use crate::metrics::Metrics;
use crate::page::state::PageState;
use crate::places::EventStreams;
use crate::tenants::Tenants;

/// The agent API's state: cheap to clone (one shared part).
#[derive(Debug, Clone)]
pub struct ApiState(Arc<Parts>);

/// What the agent API reads.
#[derive(Debug)]
pub struct Parts {
    /// Tenants by id: a request's API key is checked against its path tenant's.
    pub tenants: Tenants,
    /// Shared state and routing: conversations, events, dead letters.
    pub broker: SharedBroker,
    /// The call engine: calls, describes, invokes, a call's resource and its cancel.
    pub(crate) calls: CallEngine,
    /// The node's metrics (refusals by scope and rate among them).
    pub metrics: Arc<Metrics>,
    /// The process's stop token: event streams end with the drain.
    pub life: Lifecycle,
    /// `server.public_url`: the base of the URLs handed out (else the request's `Host`).
    pub public_url: Option<String>,
    /// Open event streams of this node, bounded per tenant and per key.
    pub event_streams: Arc<EventStreams>,
    /// The page door's state: `/inbound` carries an Echo page's frames (a page transport).
    pub pages: PageState,
}

impl ApiState {
    /// The agent API's state over its parts.
    pub(crate) fn new(parts: Parts) -> Self {
        ApiState(Arc::new(parts))
    }
}

impl axum::extract::FromRef<ApiState> for PageState {
    fn from_ref(api: &ApiState) -> PageState {
        api.pages.clone()
    }
}

impl std::ops::Deref for ApiState {
    type Target = Parts;
    fn deref(&self) -> &Parts {
        &self.0
    }
}
