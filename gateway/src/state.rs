//! Shared handles of one gateway process: a small struct of cloneable parts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use toolmark_broker::{ConvKey, EventType, SharedBroker};

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
    /// Cancelled when the process starts draining.
    pub shutdown: CancellationToken,
    /// Call supervisors, awaited (bounded) at exit.
    pub tasks: TaskTracker,
    /// Open page and Echo sockets: the drain waits (bounded) until each has sent its 1001.
    pub sockets: TaskTracker,
    /// Dev mode only.
    pub dev: Option<DevInfo>,
    /// Metrics of the jobs this node runs itself (memory broker: webhook delivery).
    pub job_metrics: Arc<crate::jobs::metrics::JobMetrics>,
    draining: AtomicBool,
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    /// Assembles the state.
    pub fn new(
        tenants: Tenants,
        broker: SharedBroker,
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
        dev: Option<DevInfo>,
        job_metrics: Arc<crate::jobs::metrics::JobMetrics>,
    ) -> Self {
        AppState(Arc::new(Inner {
            tenants,
            broker,
            registry,
            metrics,
            shutdown,
            tasks: TaskTracker::new(),
            sockets: TaskTracker::new(),
            dev,
            job_metrics,
            draining: AtomicBool::new(false),
        }))
    }

    /// Whether SIGTERM started the drain.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Starts the drain: `/readyz` turns 503 and pages are closed with 1001.
    pub fn start_drain(&self) {
        self.draining.store(true, Ordering::Relaxed);
        self.shutdown.cancel();
    }

    /// Emits an event; a broker failure is logged, never fatal to the caller.
    pub async fn emit(&self, kind: EventType, conv: &ConvKey, data: Value) {
        match self.broker.emit(&conv.tenant, kind, conv, data).await {
            Ok(e) => {
                self.metrics.event(kind.as_str());
                if e.held_for_webhooks {
                    self.metrics.events_held_for_webhooks.inc();
                }
            }
            Err(e) => {
                tracing::warn!(tenant = %conv.tenant, event = kind.as_str(), error = %e, "event not emitted")
            }
        }
    }
}
