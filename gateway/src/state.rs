//! Shared handles of one gateway process: a small struct of cloneable parts, from which each
//! door's own state is made once (the agent API's [`ApiState`], the pages' [`PageState`]; the
//! hosted MCP endpoint's and the admin API's are made in `serve.rs`). A door's handlers take
//! their door's state, never this; what takes it is the node's own routes (`/readyz`,
//! `/metrics`, the request counter) and the dev-mode demo.

use std::sync::Arc;

use toolmark_broker::SharedBroker;
use toolmark_config::HoldSettings;
use toolmark_process::Lifecycle;
use toolmark_process::metrics::Exposed;

use crate::api::state::{ApiState, Parts as ApiParts};
use crate::metrics::Metrics;
use crate::page::state::{PageState, Parts as PageParts};
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

/// The node's shared parts and its doors' states.
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
    /// The call engine: both agent doors start, answer and follow calls through it.
    pub(crate) calls: crate::calls::CallEngine,
    /// Per-tenant calls and refusals of this node (the admin stats).
    pub traffic: Arc<crate::traffic::Traffic>,
    /// The agent API's state.
    pub api: ApiState,
    /// The page door's state (page WebSockets, Echo sockets, `/inbound`).
    pub pages: PageState,
}

impl axum::extract::FromRef<AppState> for ApiState {
    fn from_ref(app: &AppState) -> ApiState {
        app.api.clone()
    }
}

impl axum::extract::FromRef<AppState> for PageState {
    fn from_ref(app: &AppState) -> PageState {
        app.pages.clone()
    }
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
        let pages = PageState::new(PageParts {
            tenants: tenants.clone(),
            broker: Arc::clone(&broker),
            registry: Arc::clone(&registry),
            metrics: Arc::clone(&metrics),
            life: life.clone(),
            hold,
            seen: crate::seen::SeenRecently::default(),
        });
        let api = ApiState::new(ApiParts {
            tenants: tenants.clone(),
            broker: Arc::clone(&broker),
            calls: calls.clone(),
            metrics: Arc::clone(&metrics),
            life: life.clone(),
            public_url: public_url.clone(),
            event_streams: Arc::default(),
            pages: pages.clone(),
        });
        AppState(Arc::new(Inner {
            tenants,
            broker,
            registry,
            metrics,
            life,
            dev,
            job_metrics,
            public_url,
            calls,
            traffic,
            api,
            pages,
        }))
    }

    /// Whether the drain has begun (SIGTERM): `/readyz` answers 503, pages are closed with
    /// 1001, new pages and calls are refused.
    pub fn is_draining(&self) -> bool {
        self.life.is_stopping()
    }
}
