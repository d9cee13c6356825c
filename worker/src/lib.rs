//! `toolmark-worker`: the background jobs of a Redis-backed deployment. It times out calls
//! whose waiting node died (and async calls), emitting `call.timeout` / `call.result` and
//! sending the page its `cancel`, and it delivers every event of each tenant with a
//! `webhook_url` (the delivery code is the gateway's `jobs` module, which a memory-broker
//! gateway runs itself). Any number of workers share the work: the sweep is leased, deliveries
//! go through a consumer group, retries are leased per conversation.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use toolmark_broker::prelude::*;

use axum::Router;
use axum::routing::get;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use toolmark_broker::redis::{RedisBroker, RedisOptions};
use toolmark_broker::{ConvKey, PageSink};
use toolmark_gateway::config::{BrokerKind, Config};
use toolmark_gateway::jobs::metrics::JobMetrics;

/// Why the worker could not run.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The configuration cannot work for a worker.
    #[error("config: {key}: {reason}")]
    Config {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// Redis could not be reached at start.
    #[error("{0}")]
    Broker(String),
    /// The metrics listener.
    #[error("listen: {0}")]
    Io(#[from] std::io::Error),
}

/// A worker holds no page sockets: frames for pages are not its business.
struct NoPages;

impl PageSink for NoPages {
    fn deliver(&self, _: &ConvKey, _: &str, _: Arc<str>) {}
}

/// Runs the worker until `stop`, then lets in-flight deliveries finish (bounded).
pub async fn run(
    config: Config,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), WorkerError> {
    if config.broker.kind != BrokerKind::Redis {
        return Err(WorkerError::Config {
            key: "broker.kind".into(),
            reason:
                "the worker needs \"redis\" (with \"memory\", the gateway runs these jobs itself)"
                    .into(),
        });
    }
    let id = format!(
        "worker-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let shutdown = CancellationToken::new();
    let opts = RedisOptions {
        prefix: config.broker.key_prefix.clone(),
        ..RedisOptions::default()
    };
    let url = config.broker.url.clone().unwrap_or_default();
    let broker = RedisBroker::connect(&url, id.clone(), Arc::new(NoPages), opts, shutdown.clone())
        .await
        .map_err(|e| WorkerError::Broker(e.to_string()))?;
    let metrics = Arc::new(JobMetrics::default());
    let tasks = TaskTracker::new();
    toolmark_gateway::jobs::spawn_deliveries(
        broker.clone(),
        &config,
        &id,
        metrics.clone(),
        &tasks,
        &shutdown,
    )
    .map_err(|e| WorkerError::Config {
        key: e.key,
        reason: e.reason,
    })?;
    tasks.spawn(sweep(broker.clone(), metrics.clone(), shutdown.clone()));

    let addr: SocketAddr =
        config
            .worker
            .listen
            .parse()
            .map_err(|e: std::net::AddrParseError| WorkerError::Config {
                key: "worker.listen".into(),
                reason: e.to_string(),
            })?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let m = metrics.clone();
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/metrics",
            get(move || {
                let m = m.clone();
                async move { m.render() }
            }),
        );
    let server_stop = shutdown.clone();
    tasks.spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(server_stop.cancelled_owned())
            .await;
    });
    announce(bound);
    stop.await;
    tracing::info!(worker = %id, "stopping");
    shutdown.cancel();
    tasks.close();
    if tokio::time::timeout(
        Duration::from_millis(config.worker.webhook_timeout_ms + 1000),
        tasks.wait(),
    )
    .await
    .is_err()
    {
        tracing::warn!(
            "deliveries still in flight at exit; their events stay pending and another worker claims them"
        );
    }
    Ok(())
}

#[allow(
    clippy::print_stdout,
    reason = "the readiness line is the binary's one stdout output"
)]
fn announce(bound: SocketAddr) {
    println!("toolmark-worker listening on http://{bound}");
}

/// Every second, times out calls whose deadline passed with nobody left to do it.
async fn sweep(broker: Arc<RedisBroker>, metrics: Arc<JobMetrics>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Ok(records) = broker.sweep_deadlines().await else {
            continue;
        };
        for r in records {
            metrics.swept.inc();
            tracing::info!(tenant = %r.binding.conv.tenant, call_id = %r.binding.id, "orphaned call timed out");
            let outcome = r
                .outcome
                .clone()
                .unwrap_or(toolmark_broker::Outcome::Timeout);
            for (kind, data) in toolmark_broker::outcome_events(&r.binding, &outcome) {
                if let Err(e) = broker
                    .emit(&r.binding.conv.tenant, kind, &r.binding.conv, data)
                    .await
                {
                    tracing::warn!(error = %e, "event not emitted");
                }
            }
        }
    }
}
