//! One gateway node from start to stop: the broker, the jobs (memory broker, or
//! `server.run_jobs`), the state, the listener; then the drain in the order of
//! `toolmark_process::lifecycle`: stop accepting, close pages with 1001, wait for pages, calls
//! and jobs (their events reach the broker), stop the listener, close the broker.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use toolmark_broker::SharedBroker;
use toolmark_broker::catalog::Catalog;
use toolmark_broker::memory::MemoryBroker;
use toolmark_broker::redis::{CommandObserver, ConnectError, RedisBroker, RedisOptions};
use toolmark_broker::webhook::WebhookQueue;
use toolmark_config::{BrokerSettings, Settings};
use toolmark_process::Lifecycle;
use toolmark_worker::jobs::{JobMetrics, Jobs, JobsError};

use crate::admin::AdminState;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::state::{AppState, DevInfo};
use crate::tenant_sync::Loader;
use crate::tenants::{Tenant, Tenants};

/// A node that could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Redis could not be reached at start.
    #[error("redis: {0}")]
    Broker(#[from] ConnectError),
    /// The jobs this node runs could not be set up.
    #[error("{0}")]
    Jobs(#[from] JobsError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// `server.listen`.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// `admin.store` does not open.
    #[error("{0}")]
    Store(#[from] toolmark_store::StoreError),
    /// The dev tenant could not be made (dev mode).
    #[error("dev tenant: {0}")]
    DevTenant(#[from] toolmark_config::ConfigError),
    /// Serving failed.
    #[error("serve: {0}")]
    Io(#[from] std::io::Error),
}

/// What the binary runs: binds `server.listen`, adds the dev tenant in dev mode (printing its
/// keys), serves until `life` stops, then drains. `listening` gets the bound address once
/// requests are served.
pub async fn bind_and_run(
    mut settings: Settings,
    life: Lifecycle,
    listening: impl FnOnce(std::net::SocketAddr),
) -> Result<(), RunError> {
    let addr = settings.server.listen;
    let listener = listen(addr).map_err(|source| RunError::Listen { addr, source })?;
    let bound = listener.local_addr()?;
    let dev = if settings.dev_mode {
        let t = crate::demo::dev_tenant(bound)?;
        crate::demo::announce(&t, bound);
        // Dev mode's URLs name the address it listens on.
        settings
            .server
            .public_url
            .get_or_insert_with(|| format!("http://{bound}"));
        if let Some(key) = settings.admin.as_ref().and_then(|a| a.dev_key.as_ref()) {
            eprintln!("toolmark-gateway: dev mode: admin key {key}");
        }
        settings.tenants.push(t.settings);
        Some(t.info)
    } else {
        None
    };
    run_with(listener, settings, dev, life, move || listening(bound)).await
}

/// Connections the kernel may hold complete but not yet accepted (capped by
/// `net.core.somaxconn`, 4096 by default): a reconnect storm of thousands of pages must not
/// overflow it, or the kernel drops their handshakes and each waits a second for a SYN
/// retransmit (`docs/benchmarks.md`, the `handshakes` stage).
pub const LISTEN_BACKLOG: u32 = 4096;

/// Binds `addr` with [`LISTEN_BACKLOG`] (address reuse on, as the standard listener has it).
fn listen(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// How long the listener gets to close its connections after the drain.
const LISTENER_CLOSE: Duration = Duration::from_secs(1);

/// Serves `settings` on `listener` until `stop` resolves, then drains (see [`run_with`]).
pub async fn run(
    listener: TcpListener,
    settings: Settings,
    dev: Option<DevInfo>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let life = Lifecycle::new();
    life.stop_on(stop);
    run_with(listener, settings, dev, life, || {}).await
}

/// [`run`] with the admin API on `admin_listener` (bound by the caller, e.g. on port 0)
/// rather than on `admin.listen`.
pub async fn run_with_admin(
    listener: TcpListener,
    admin_listener: TcpListener,
    settings: Settings,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let life = Lifecycle::new();
    life.stop_on(stop);
    serve_until_stopped(listener, Some(admin_listener), settings, None, life, || {}).await
}

/// Serves until `life` stops, calling `ready` once the broker is connected and requests are
/// being served (the binary prints its `listening on` line there). Then drains: `/readyz`
/// turns 503, pages are closed with 1001, new calls get 503, and pages, calls and jobs get up
/// to `server.drain_timeout_ms` to finish before the listener and the broker close.
pub async fn run_with(
    listener: TcpListener,
    settings: Settings,
    dev: Option<DevInfo>,
    life: Lifecycle,
    ready: impl FnOnce(),
) -> Result<(), RunError> {
    serve_until_stopped(listener, None, settings, dev, life, ready).await
}

/// A node id for a node that names none (`server.node_id`): `node-` and 12 random hex digits.
pub fn new_node_id() -> String {
    format!("node-{}", crate::ids::random_hex(6))
}

async fn serve_until_stopped(
    listener: TcpListener,
    admin_listener: Option<TcpListener>,
    settings: Settings,
    dev: Option<DevInfo>,
    life: Lifecycle,
    ready: impl FnOnce(),
) -> Result<(), RunError> {
    let node_id = settings.server.node_id.clone().unwrap_or_else(new_node_id);
    let registry = Arc::new(Registry::default());
    let metrics = Arc::new(Metrics::new());
    let (broker, queue, catalog, webhook_reads) =
        connect(&settings, &node_id, &registry, &metrics).await?;
    // The platform's records: in the broker, or in the database `admin.store` names.
    let catalog = match &settings.admin {
        Some(a) => {
            let observed = Arc::clone(&metrics);
            toolmark_store::open(
                &a.store,
                a.audit_retention,
                catalog,
                Arc::new(move |op, took, answered| {
                    observed.admin_store.observe(op, took, answered);
                }),
            )
            .await?
        }
        None => catalog,
    };
    let job_metrics: Option<Arc<dyn toolmark_process::metrics::Exposed>> = match queue {
        Some(queue) => {
            let metrics = Arc::new(JobMetrics::default());
            let jobs = Jobs::new(
                Arc::clone(&broker),
                queue,
                &settings,
                &node_id,
                Arc::clone(&metrics),
                Some(Arc::clone(&catalog)),
            )?;
            jobs.prepare().await;
            life.spawn(jobs.run(life.stopping().clone()));
            Some(metrics)
        }
        None => None,
    };
    let tenants = Tenants::new(settings.tenants.iter().map(Tenant::new).collect());
    let mcp_live = Arc::new(crate::hosted_mcp::live::Live::new(
        toolmark_broker::handle::records(&broker),
        settings.mcp.clone(),
    ));
    // Tenants of the admin API: loaded before the first request, then followed.
    let admin = match &settings.admin {
        Some(a) => {
            let loader = Arc::new(Loader::new(
                tenants.clone(),
                catalog,
                a.sealer.clone(),
                Arc::clone(&registry),
                Arc::new(Arc::clone(&mcp_live)),
            ));
            loader.load_all().await;
            life.spawn(Arc::clone(&loader).run(life.stopping().clone()));
            let listener = match admin_listener {
                Some(l) => l,
                None => listen(a.listen).map_err(|source| RunError::Listen {
                    addr: a.listen,
                    source,
                })?,
            };
            Some((listener, a.clone(), loader))
        }
        None => None,
    };
    let app = AppState::new(
        tenants,
        Arc::clone(&broker),
        registry,
        metrics,
        life.clone(),
        dev,
        job_metrics,
        settings.server.public_url.clone(),
        settings.hold,
    );
    let mcp = crate::hosted_mcp::McpState::new(crate::hosted_mcp::McpParts {
        broker: Arc::clone(&app.broker),
        calls: app.calls.clone(),
        tenants: app.tenants.clone(),
        metrics: Arc::clone(&app.metrics),
        life: app.life.clone(),
        public_url: app.public_url.clone(),
        settings: settings.mcp.clone(),
        live: mcp_live,
    });
    app.api.event_streams.bound(
        settings.server.max_event_streams_per_tenant,
        settings.server.max_event_streams_per_key,
    );
    life.spawn(crate::traffic::flush(
        Arc::clone(&app.traffic),
        toolmark_broker::handle::traffic(&broker),
        app.tenants.clone(),
        settings.server.stats_flush,
        life.stopping().clone(),
    ));
    let admin = admin.map(|(listener, a, loader)| {
        let state = AdminState::new(
            a,
            loader,
            settings.server.public_url.clone(),
            crate::admin::Node {
                tenants: app.tenants.clone(),
                broker: Arc::clone(&app.broker),
                registry: Arc::clone(&app.registry),
                traffic: Arc::clone(&app.traffic),
                life: app.life.clone(),
            },
            Some(Arc::clone(&webhook_reads)),
        );
        (listener, state)
    });
    let router = crate::router(app, &mcp, settings.dev_mode);
    let (close_listener, closing) = oneshot::channel::<()>();
    let graceful = async {
        let _ = closing.await;
    };
    let server = match settings.server.tls.clone() {
        Some(acceptor) => {
            let listener = crate::tls::TlsListener::new(listener, acceptor)?;
            tokio::spawn(crate::http::connections::serve(listener, router, graceful))
        }
        None => tokio::spawn(crate::http::connections::serve(
            crate::tcp::accepting(listener),
            router,
            graceful,
        )),
    };
    ready();
    let admin_server = match admin {
        Some((listener, state)) => {
            let bound = listener.local_addr()?;
            toolmark_process::cli::announce_admin_listening("toolmark-gateway", bound);
            let stop = life.stopping().clone();
            Some(tokio::spawn(crate::http::connections::serve(
                listener,
                crate::admin::router(state),
                async move { stop.cancelled().await },
            )))
        }
        None => None,
    };
    life.stopping().cancelled().await;
    tracing::info!(node = %node_id, "draining");
    if !life.finish(settings.server.drain_timeout).await {
        tracing::warn!("drain timeout reached with pages, calls or jobs still open");
    }
    let _ = close_listener.send(());
    let served = match tokio::time::timeout(LISTENER_CLOSE, server).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(join)) => {
            tracing::error!(error = %join, "server task failed");
            Ok(())
        }
        Err(_) => {
            tracing::warn!("connections still open at exit");
            Ok(())
        }
    };
    if let Some(a) = admin_server {
        let _ = tokio::time::timeout(LISTENER_CLOSE, a).await;
    }
    broker.close().await;
    served
}

/// The broker of `settings`, its webhook queue when this node runs the jobs, its catalog, and
/// its webhook queue for reads (the admin stats' backlog), whether or not it runs them.
async fn connect(
    settings: &Settings,
    node_id: &str,
    registry: &Arc<Registry>,
    metrics: &Arc<Metrics>,
) -> Result<
    (
        SharedBroker,
        Option<Arc<dyn WebhookQueue>>,
        Arc<dyn Catalog>,
        Arc<dyn WebhookQueue>,
    ),
    RunError,
> {
    Ok(match &settings.broker {
        BrokerSettings::Memory => {
            let memory = Arc::new(MemoryBroker::new(node_id, registry.clone()));
            // One process: the gateway runs the jobs itself.
            (memory.clone(), Some(memory.clone()), memory.clone(), memory)
        }
        BrokerSettings::Redis { server, prefix } => {
            let observed = Arc::clone(metrics);
            let opts = RedisOptions {
                prefix: prefix.clone(),
                observe: CommandObserver::new(move |script, took| {
                    observed.redis_script(script, took.as_secs_f64());
                }),
                ..RedisOptions::default()
            };
            let redis =
                RedisBroker::connect(server.client_config(), node_id, registry.clone(), opts)
                    .await?;
            let queue = settings
                .server
                .run_jobs
                .then(|| Arc::clone(&redis) as Arc<dyn WebhookQueue>);
            (redis.clone(), queue, redis.clone(), redis)
        }
    })
}
