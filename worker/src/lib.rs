//! `toolmark-worker`: the background jobs of a deployment ([`jobs`]: webhook delivery, the
//! deadline sweep, confirmation expiry) and the process that runs them against Redis. A gateway
//! with the memory broker runs the same [`jobs::Jobs`] in its own process; the worker never
//! depends on the gateway.

pub mod jobs;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use toolmark_broker::redis::{ConnectError, RedisBroker, RedisOptions};
use toolmark_broker::{ConvKey, PageSink, SharedBroker};
use toolmark_config::{BrokerSettings, Settings};
use toolmark_process::Lifecycle;

use crate::jobs::{JobMetrics, Jobs, JobsError};

/// Why the worker could not run.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The configuration cannot work for a worker (the operator's to fix; exit 2).
    #[error(
        "config: broker.kind: the worker needs \"redis\" (with \"memory\", the gateway runs these jobs itself)"
    )]
    NotRedis,
    /// Redis could not be reached at start.
    #[error("redis: {0}")]
    Broker(#[from] ConnectError),
    /// The jobs could not be set up.
    #[error("{0}")]
    Jobs(#[from] JobsError),
    /// `admin.store` does not open.
    #[error("{0}")]
    Store(#[from] toolmark_store::StoreError),
    /// The `/metrics` listener.
    #[error("cannot listen on the worker address: {0}")]
    Listen(#[from] std::io::Error),
}

/// A worker holds no page sockets: frames for pages are not its business.
#[derive(Debug)]
struct NoPages;

impl PageSink for NoPages {
    fn deliver(&self, _: &ConvKey, _: &str, _: Arc<str>) {}
}

/// Runs the worker until `life` stops, then lets the jobs finish the item in hand (bounded by
/// one webhook timeout plus a second) and closes the broker. `ready` gets the bound address of
/// `/healthz`, `/readyz` and `/metrics`.
pub async fn run(
    settings: Settings,
    life: Lifecycle,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), WorkerError> {
    let BrokerSettings::Redis { server, prefix } = &settings.broker else {
        return Err(WorkerError::NotRedis);
    };
    let id = format!(
        "worker-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let metrics = Arc::new(JobMetrics::for_worker());
    let scripts = metrics.redis_scripts.clone();
    let opts = RedisOptions {
        prefix: prefix.clone(),
        observe: toolmark_broker::redis::CommandObserver::new(move |script, took| {
            if let Some(s) = &scripts {
                s.observe(script, took.as_secs_f64());
            }
        }),
        ..RedisOptions::default()
    };
    let broker =
        RedisBroker::connect(server.client_config(), id.clone(), Arc::new(NoPages), opts).await?;
    let shared: SharedBroker = broker.clone();
    let jobs = Jobs::new(
        shared.clone(),
        broker.clone(),
        &settings,
        &id,
        metrics.clone(),
        match &settings.admin {
            Some(a) => Some(
                toolmark_store::open(
                    &a.store,
                    a.audit_retention,
                    broker.clone(),
                    toolmark_store::unobserved(),
                )
                .await?,
            ),
            None => None,
        },
    )?;
    jobs.prepare().await;
    let listener = tokio::net::TcpListener::bind(settings.worker.listen).await?;
    let bound = listener.local_addr()?;
    life.spawn(jobs.run(life.stopping().clone()));
    let ops = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(Ops {
            broker: shared.clone(),
            metrics,
            life: life.clone(),
        });
    let stopping = life.stopping().clone();
    life.spawn(async move {
        let _ = axum::serve(listener, ops)
            .with_graceful_shutdown(stopping.cancelled_owned())
            .await;
    });
    ready(bound);
    life.stopping().cancelled().await;
    tracing::info!(worker = %id, "stopping");
    let grace =
        std::time::Duration::from_millis(settings.worker.delivery.webhook_timeout_ms + 1000);
    if !life.finish(grace).await {
        tracing::warn!(
            "deliveries still in flight at exit; their events stay pending and another worker claims them"
        );
    }
    shared.close().await;
    Ok(())
}

#[derive(Debug, Clone)]
struct Ops {
    broker: SharedBroker,
    metrics: Arc<JobMetrics>,
    life: Lifecycle,
}

/// `GET /readyz`: Redis reachable and the worker not stopping.
async fn readyz(State(ops): State<Ops>) -> impl IntoResponse {
    if ops.life.is_stopping() {
        return (StatusCode::SERVICE_UNAVAILABLE, "stopping");
    }
    match ops.broker.ready().await {
        Ok(()) => (StatusCode::OK, "ready"),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "broker unreachable"),
    }
}

/// `GET /metrics`: the jobs' metrics.
async fn metrics_text(State(ops): State<Ops>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        ops.metrics.render(),
    )
}
