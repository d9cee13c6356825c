//! Shared handles of one gateway process: a small struct of cloneable parts.

use std::sync::Arc;

use toolmark_broker::SharedBroker;
use toolmark_config::HoldSettings;
use toolmark_process::Lifecycle;
use toolmark_process::metrics::Exposed;

use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::tenants::Tenants;

/// What dev mode hands to the demo page.
#[derive(Debug, Clone)]
pub struct DevInfo {
    /// The dev tenant's API key in plain text (dev mode prints it anyway).
    pub api_key: String,
    /// The dev tenant's Pusher app key (the demo page's Echo transport).
    pub pusher_key: String,
}

/// Everything a handler or socket task needs.
#[derive(Debug, Clone)]
pub struct AppState(Arc<Inner>);

#[derive(Debug)]
pub struct Inner {
    /// Tenants by id.
    pub tenants: Tenants,
    /// Shared state and routing.
    pub broker: SharedBroker,
    /// This node's sockets.
    pub registry: Arc<Registry>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The process's stop token and task tracker: page and Echo sockets, call supervisors
    /// and the jobs are tracked there, so the drain waits (bounded) for each.
    pub life: Lifecycle,
    /// Dev mode only.
    pub dev: Option<DevInfo>,
    /// Metrics of the jobs, when this node runs them (memory broker, or `server.run_jobs`).
    pub job_metrics: Option<Arc<dyn Exposed>>,
    /// `server.public_url`: the base of the URLs handed out (else the request's `Host`).
    pub public_url: Option<String>,
    /// Page frames held while the broker does not answer (the call engine's timeouts too).
    pub hold: Arc<crate::hold::Hold>,
    /// The call engine: both agent doors start, answer and follow calls through it.
    pub(crate) calls: crate::calls::CallEngine,
    /// Per-tenant calls and refusals of this node (the admin stats).
    pub traffic: Arc<crate::traffic::Traffic>,
    /// Open event streams of this node, bounded per tenant and per key.
    pub event_streams: Arc<crate::places::EventStreams>,
    /// The tool definitions this node told the broker its pages presented, with when.
    pub seen: crate::seen::SeenRecently,
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    /// Assembles the state.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        tenants: Tenants,
        broker: SharedBroker,
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
        life: Lifecycle,
        dev: Option<DevInfo>,
        job_metrics: Option<Arc<dyn Exposed>>,
        public_url: Option<String>,
        hold: HoldSettings,
    ) -> Self {
        let hold = Arc::new(crate::hold::Hold::new(hold, metrics.frames_holding.clone()));
        let traffic = Arc::<crate::traffic::Traffic>::default();
        let calls = crate::calls::CallEngine::new(
            Arc::clone(&broker),
            tenants.clone(),
            Arc::clone(&hold),
            Arc::clone(&metrics),
            Arc::clone(&traffic),
            life.clone(),
        );
        AppState(Arc::new(Inner {
            tenants,
            broker,
            registry,
            metrics,
            life,
            dev,
            job_metrics,
            public_url,
            hold,
            calls,
            traffic,
            event_streams: Arc::default(),
            seen: crate::seen::SeenRecently::default(),
        }))
    }

    /// Whether the drain has begun (SIGTERM): `/readyz` answers 503, pages are closed with
    /// 1001, new pages and calls are refused.
    pub fn is_draining(&self) -> bool {
        self.life.is_stopping()
    }
}
