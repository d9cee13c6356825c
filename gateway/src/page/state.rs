//! What the page door uses of its node, as its own state: the sockets of pages (WebSocket and
//! Laravel Echo alike, and the Echo page's frames that reach the node over `/inbound`), built
//! once by the node's assembly ([`crate::state::PageState::new`]) and handed to each socket.

use std::sync::Arc;

use toolmark_broker::SharedBroker;
use toolmark_process::Lifecycle;

use crate::hold::Hold;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::seen::SeenRecently;
use crate::tenants::Tenants;

/// The page door's state: cheap to clone (one shared part).
#[derive(Debug, Clone)]
pub struct PageState(Arc<Parts>);

/// What the page door reads.
#[derive(Debug)]
pub struct Parts {
    /// Tenants by id: a page's token and origin are checked against its tenant.
    pub tenants: Tenants,
    /// Shared state and routing: admissions, manifests, results, confirmations, releases.
    pub broker: SharedBroker,
    /// This node's sockets, by conversation.
    pub registry: Arc<Registry>,
    /// The node's metrics (sockets, refusals, closes).
    pub metrics: Arc<Metrics>,
    /// The process's stop token and task tracker: each socket is tracked there.
    pub life: Lifecycle,
    /// Page frames held while the broker does not answer.
    pub hold: Arc<Hold>,
    /// The tool definitions this node told the broker its pages presented, with when.
    pub seen: SeenRecently,
}

impl PageState {
    /// The page door's state over its parts.
    pub fn new(parts: Parts) -> Self {
        PageState(Arc::new(parts))
    }

    /// Whether the drain has begun (SIGTERM): new pages are refused, open ones closed with 1001.
    pub fn is_draining(&self) -> bool {
        self.life.is_stopping()
    }
}

impl std::ops::Deref for PageState {
    type Target = Parts;
    fn deref(&self) -> &Parts {
        &self.0
    }
}
