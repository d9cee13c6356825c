//! The call engine as one service: [`CallEngine`] owns what a call needs on this node (the
//! broker, the tenants, the hold for an unanswered broker, the call metrics and traffic
//! counters, the process's lifecycle that supervisions outlive their request in) and offers a
//! call's steps as methods, in the engine's own types: [`CallEngine::once`] (the
//! `Idempotency-Key`), [`CallEngine::start`] (the deadline, the rate, the binding, the
//! supervision), [`CallEngine::follow`] (a call's next change) and
//! [`CallEngine::authorize_tool`] (the tenant's pins and the caller's policy). Nothing here
//! speaks HTTP or MCP: a refusal is a [`super::CallError`], which each door words itself.

use std::sync::Arc;

use toolmark_broker::SharedBroker;
use toolmark_process::Lifecycle;

use crate::hold::Hold;
use crate::metrics::Metrics;
use crate::tenants::Tenants;
use crate::traffic::Traffic;

/// The call engine of one node: cheap to clone (one shared part), handed to each door.
#[derive(Debug, Clone)]
pub(crate) struct CallEngine(Arc<Parts>);

/// What the engine owns; its methods, in the files of the steps they run, read it.
#[derive(Debug)]
pub(super) struct Parts {
    pub(super) broker: SharedBroker,
    pub(super) tenants: Tenants,
    pub(super) hold: Arc<Hold>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) traffic: Arc<Traffic>,
    pub(super) life: Lifecycle,
}

impl CallEngine {
    /// The engine over a node's parts (the doors share them: a page's frames are held by the
    /// same hold, the admin stats read the same traffic).
    pub(crate) fn new(
        broker: SharedBroker,
        tenants: Tenants,
        hold: Arc<Hold>,
        metrics: Arc<Metrics>,
        traffic: Arc<Traffic>,
        life: Lifecycle,
    ) -> Self {
        CallEngine(Arc::new(Parts {
            broker,
            tenants,
            hold,
            metrics,
            traffic,
            life,
        }))
    }

    /// Its parts, for the steps' methods.
    pub(super) fn parts(&self) -> &Parts {
        &self.0
    }
}
