//! Toolmark Gateway: the edges of the product. Page WebSockets, the agent HTTP API, events,
//! ops endpoints and the dev-mode demo, over a [`toolmark_broker::Broker`].
//!
//! [`run`] takes a bound listener and a stop future, so tests start real servers on port 0.

pub mod api;
pub mod auth;
pub mod config;
pub mod demo;
pub mod ids;
pub mod inbound;
pub mod jobs;
pub mod metrics;
pub mod ops;
pub mod page;
pub mod problem;
pub mod pusher;
pub mod registry;
pub mod state;
pub mod telemetry;
pub mod tenants;
pub mod tls;

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::response::Redirect;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use toolmark_broker::SharedBroker;
use toolmark_broker::memory::MemoryBroker;
use toolmark_broker::redis::{RedisBroker, RedisOptions};

use crate::config::{BrokerKind, Config, TenantConfig};
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::state::{AppState, DevInfo};
use crate::tenants::{Tenant, Tenants};

/// A server that could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A tenant's keys could not be loaded (validated config makes this rare).
    #[error("tenant {tenant}: {reason}")]
    Tenant {
        /// Tenant id.
        tenant: String,
        /// Why.
        reason: String,
    },
    /// The broker could not start.
    #[error("{0}")]
    Broker(String),
    /// Serving failed.
    #[error("serve: {0}")]
    Io(#[from] std::io::Error),
}

/// The dev tenant for a bound address: random API key, token secret and Pusher key and
/// secret, the gateway's own origins allowed (the demo page is served from them).
pub fn dev_tenant(addr: SocketAddr) -> (TenantConfig, DevInfo, String) {
    let api_key = format!("tmk_dev_{}", random_hex(24));
    let secret = random_hex(32);
    let pusher_key = format!("dev-{}", random_hex(10));
    let port = addr.port();
    let tenant = TenantConfig {
        id: demo::DEV_TENANT.into(),
        api_keys: vec![auth::key_hash_string(&api_key)],
        token_secret: Some(secret.clone()),
        token_public_key: None,
        allowed_origins: vec![
            format!("http://127.0.0.1:{port}"),
            format!("http://localhost:{port}"),
            format!("http://{addr}"),
        ],
        pusher_key: Some(pusher_key.clone()),
        pusher_secret: Some(random_hex(20)),
        pusher_old_keys: Vec::new(),
        webhook_url: None,
        webhook_secret: None,
        limits: config::TenantLimits::default(),
    };
    let info = DevInfo {
        api_key,
        pusher_key,
    };
    (tenant, info, secret)
}

fn random_hex(bytes: usize) -> String {
    use rand::RngExt;
    let mut buf = vec![0u8; bytes];
    rand::rng().fill(&mut buf[..]);
    hex::encode(buf)
}

/// Serves `config` on `listener` until `stop` resolves, then drains: `/readyz` turns 503, pages
/// are closed with 1001, in-flight requests get up to `drain_timeout_ms`.
pub async fn run(
    listener: TcpListener,
    config: Config,
    dev: Option<DevInfo>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    run_with_ready(listener, config, dev, stop, || {}).await
}

/// [`run`], calling `ready` once the broker is connected and requests are being served (the
/// binary prints its `listening on` line there).
pub async fn run_with_ready(
    listener: TcpListener,
    config: Config,
    dev: Option<DevInfo>,
    stop: impl Future<Output = ()> + Send + 'static,
    ready: impl FnOnce(),
) -> Result<(), RunError> {
    let tenants = config
        .tenants
        .iter()
        .map(|t| {
            Tenant::from_config(t).map_err(|reason| RunError::Tenant {
                tenant: t.id.clone(),
                reason,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let node_id = config
        .server
        .node_id
        .clone()
        .unwrap_or_else(|| format!("node-{}", random_hex(6)));
    let registry = Arc::new(Registry::default());
    // The broker outlives the drain: in-flight calls still need it until the very end.
    let broker_stop = CancellationToken::new();
    let _stop_broker = broker_stop.clone().drop_guard();
    let jobs = tokio_util::task::TaskTracker::new();
    let job_metrics = Arc::new(jobs::metrics::JobMetrics::default());
    let broker: SharedBroker = match config.broker.kind {
        BrokerKind::Memory => {
            let memory = Arc::new(MemoryBroker::new(node_id.clone(), registry.clone()));
            // One process: the gateway delivers webhooks itself (a worker does with Redis).
            for t in jobs::webhook_targets(&config).map_err(|e| RunError::Tenant {
                tenant: e.key.clone(),
                reason: e.reason,
            })? {
                toolmark_broker::webhook::WebhookQueue::open(memory.as_ref(), &t.tenant)
                    .await
                    .map_err(|e| RunError::Broker(e.to_string()))?;
            }
            jobs::spawn_deliveries(
                memory.clone(),
                &config,
                &node_id,
                job_metrics.clone(),
                &jobs,
                &broker_stop,
            )
            .map_err(|e| RunError::Tenant {
                tenant: e.key,
                reason: e.reason,
            })?;
            memory
        }
        BrokerKind::Redis => {
            let url = config.broker.url.as_deref().unwrap_or_default();
            let opts = RedisOptions {
                prefix: config.broker.key_prefix.clone(),
                ..RedisOptions::default()
            };
            RedisBroker::connect(
                url,
                node_id.clone(),
                registry.clone(),
                opts,
                broker_stop.clone(),
            )
            .await
            .map_err(|e| RunError::Broker(e.to_string()))?
        }
    };
    let shutdown = CancellationToken::new();
    let app = AppState::new(
        Tenants::new(tenants),
        broker,
        registry,
        Arc::new(Metrics::new()),
        shutdown.clone(),
        dev,
        job_metrics,
    );
    tokio::spawn(sweep_deadlines(app.clone(), broker_stop.clone()));

    let router = router(app.clone(), config.dev_mode);
    let drain = Duration::from_millis(config.server.drain_timeout_ms);
    let stopping = CancellationToken::new();
    let drain_app = app.clone();
    tokio::spawn(async move {
        stop.await;
        tracing::info!(node = %node_id, "draining");
        drain_app.start_drain();
    });
    let service = router.into_make_service();
    let graceful = stopping.clone().cancelled_owned();
    let server = match (&config.server.tls_cert, &config.server.tls_key) {
        (Some(cert), Some(key)) => {
            let acceptor = tls::acceptor(cert, key).map_err(RunError::Broker)?;
            let listener = tls::TlsListener::new(listener, acceptor)?;
            tokio::spawn(
                axum::serve(listener, service)
                    .with_graceful_shutdown(graceful)
                    .into_future(),
            )
        }
        _ => tokio::spawn(
            axum::serve(listener, service)
                .with_graceful_shutdown(graceful)
                .into_future(),
        ),
    };
    ready();
    app.shutdown.cancelled().await;
    // Draining: /readyz answers 503, pages are being closed with 1001, new calls get 503.
    // In-flight calls get up to the drain timeout, then the listener stops.
    // Pages get their 1001 before anything else stops; then in-flight calls finish. Both
    // within the drain timeout.
    app.tasks.close();
    app.sockets.close();
    let drained = async {
        app.sockets.wait().await;
        app.tasks.wait().await;
    };
    if tokio::time::timeout(drain, drained).await.is_err() {
        tracing::warn!("drain timeout reached with pages or calls still open");
    }
    stopping.cancel();
    match tokio::time::timeout(Duration::from_secs(1), server).await {
        Ok(Ok(result)) => result?,
        Ok(Err(join)) => tracing::error!(error = %join, "server task failed"),
        Err(_) => tracing::warn!("connections still open at exit"),
    }
    Ok(())
}

/// Every second, times out calls whose deadline passed with nobody left to do it (their node
/// died, or they are async), and announces them. Runs on every node; the broker makes sure each
/// call is timed out once.
async fn sweep_deadlines(app: AppState, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => match app.broker.sweep_deadlines().await {
                Ok(records) => {
                    for r in records {
                        tracing::info!(tenant = %r.binding.conv.tenant, call_id = %r.binding.id, "orphaned call timed out by the deadline sweep");
                        let kind = match r.binding.kind {
                            toolmark_broker::CallKind::Call => "call",
                            toolmark_broker::CallKind::Describe => "describe",
                        };
                        app.metrics.call_finished(kind, "timeout", 0.0);
                        api::announce_outcome(&app, &r.binding, &toolmark_broker::Outcome::Timeout).await;
                    }
                }
                Err(e) => tracing::debug!(error = %e, "deadline sweep skipped"),
            }
        }
        match app
            .broker
            .expire_abandoned_confirmations(toolmark_broker::CONFIRM_ABANDON_GRACE)
            .await
        {
            Ok(expired) => {
                for b in expired {
                    tracing::info!(tenant = %b.conv.tenant, confirm_id = %b.confirm_id, "confirmation of a gone page expired");
                    let data = toolmark_broker::confirmation_event(
                        &b,
                        &toolmark_broker::expired_confirmation(),
                    );
                    app.emit(
                        toolmark_broker::EventType::ConfirmationResolved,
                        &b.conv,
                        data,
                    )
                    .await;
                }
            }
            Err(e) => tracing::debug!(error = %e, "confirmation sweep skipped"),
        }
    }
}

/// All routes of a node.
pub fn router(app: AppState, dev_mode: bool) -> Router {
    let mut r = Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/v1/tenants/{tenant}/page", get(page::upgrade))
        .route("/app/{key}", get(pusher::upgrade))
        .merge(api::router());
    if dev_mode {
        r = r
            .merge(demo::router())
            .route("/", get(|| async { Redirect::temporary("/demo") }));
    }
    r.fallback(|| async { problem::Problem::not_found("Route") })
        .layer(DefaultBodyLimit::max(config::MAX_FRAME_BYTES))
        .layer(
            tower_http::trace::TraceLayer::new_for_http().make_span_with(telemetry::request_span),
        )
        .with_state(app)
}
