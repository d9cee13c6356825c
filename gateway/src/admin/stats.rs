//! Live figures of a tenant and of the cluster (`GET /admin/v1/tenants/{id}/stats`,
//! `GET /admin/v1/stats`): what the console polls every 2 s, cheap enough for that on a node
//! holding tens of thousands of pages. Nothing here walks pages or calls: connections are the
//! broker's per-tenant count (one read per tenant), the rest are counters this node keeps as
//! things happen ([`crate::traffic::Traffic`], the registry's conversation count).
//!
//! Each answer says which figures are cluster-wide (`cluster`) and which are this node's
//! (`node`): a call is counted by the node that supervised it, so the cluster's call figures are
//! the sum of every node's answer (or of the Prometheus series).

use std::collections::BTreeMap;

use futures_util::StreamExt;
use serde::Serialize;
use utoipa::ToSchema;

use super::*;
use crate::traffic::TrafficView;

/// How many tenants' connection counts the cluster summary reads at once.
const READS_AT_ONCE: usize = 16;

/// Figures summed over every node.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterFigures {
    /// Sockets counted against `limits.maxConnections` on every live node: page WebSockets and
    /// Laravel Echo connections.
    connections: u64,
    /// Conversations whose webhook deliveries wait for a retry (null when this node cannot read
    /// the webhook queues).
    webhook_backlog: Option<u64>,
}

/// Figures of the node that answered, since it started.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeFigures {
    /// Conversations with at least one page socket on this node.
    conversations: u64,
    /// Calls and describes finished a second, over the last 10 whole seconds.
    calls_per_second: f64,
    /// Finished calls and describes by outcome status (`ok`, `invalid`, `refused`,
    /// `needs_confirmation`, `cancelled`, `error`, `timeout`).
    #[schema(value_type = BTreeMap<String, u64>)]
    calls: BTreeMap<&'static str, u64>,
    /// Agent requests answered with a problem, by its code (`unauthorized`, `rate_limited`,
    /// `no_page`, `scope_denied`…).
    #[schema(value_type = BTreeMap<String, u64>)]
    refusals: BTreeMap<&'static str, u64>,
}

impl NodeFigures {
    fn of(conversations: u64, t: TrafficView) -> Self {
        NodeFigures {
            conversations,
            calls_per_second: t.calls_per_second,
            calls: t.outcomes,
            refusals: t.refusals,
        }
    }
}

/// `GET /admin/v1/tenants/{id}/stats`' answer.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TenantStats {
    /// The tenant.
    tenant: String,
    /// The node that answered (`server.node_id`).
    node_id: String,
    /// When the figures were read (RFC 3339).
    at: String,
    cluster: ClusterFigures,
    node: NodeFigures,
}

/// One tenant's line in the cluster summary.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TenantLine {
    id: String,
    /// Cluster-wide, as [`ClusterFigures::connections`].
    connections: u64,
    /// This node's conversations of the tenant.
    conversations: u64,
    /// This node's finished calls a second.
    calls_per_second: f64,
}

/// The whole cluster's page sockets and this node's totals.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterTotals {
    /// Tenants known (config file and admin API).
    tenants: u64,
    /// Connections of every tenant on every live node.
    connections: u64,
}

/// `GET /admin/v1/stats`' answer.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterStats {
    /// The node that answered.
    node_id: String,
    /// When the figures were read (RFC 3339).
    at: String,
    cluster: ClusterTotals,
    /// This node's figures over all its tenants.
    node: NodeFigures,
    /// Every tenant, by id.
    tenants: Vec<TenantLine>,
}

/// `GET /admin/v1/tenants/{id}/stats`: a tenant's connections and webhook backlog
/// (cluster-wide), conversations, call rate, outcomes and refusals (this node).
#[utoipa::path(get, path = "/admin/v1/tenants/{id}/stats", tag = "admin",
    params(crate::admin_doc::TenantId),
    responses((status = 200, description = "The tenant's live figures", body = TenantStats), crate::http::doc::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn tenant_stats(
    State(s): State<AdminState>,
    _who: Admin,
    Path(id): Path<String>,
) -> Result<axum::Json<TenantStats>, Problem> {
    AdminState::known_id(&id)?;
    let app = &s.0.app;
    if app.tenants.get(&id).is_none() {
        return Err(Problem::not_found("Tenant"));
    }
    let connections = app.broker.tenant_connections(&id).await?;
    let webhook_backlog = match &s.0.webhooks {
        Some(q) => Some(q.0.depth(&id).await?),
        None => None,
    };
    Ok(axum::Json(TenantStats {
        node_id: app.broker.node_id().to_owned(),
        at: rfc3339(now_ms()),
        cluster: ClusterFigures {
            connections,
            webhook_backlog,
        },
        node: NodeFigures::of(app.registry.conversations(&id), app.traffic.view(&id)),
        tenant: id,
    }))
}

/// `GET /admin/v1/stats`: every tenant's connections (cluster-wide), and this node's
/// conversations and calls, per tenant and in total.
#[utoipa::path(get, path = "/admin/v1/stats", tag = "admin",
    responses((status = 200, description = "Every tenant's figures and the totals", body = ClusterStats), crate::http::doc::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn cluster_stats(
    State(s): State<AdminState>,
    _who: Admin,
) -> Result<axum::Json<ClusterStats>, Problem> {
    let app = &s.0.app;
    let snapshot = app.tenants.snapshot();
    let mut ids: Vec<String> = snapshot.all().map(|t| t.id.clone()).collect();
    ids.sort();
    let counts: Vec<Result<u64, toolmark_broker::BrokerError>> =
        futures_util::stream::iter(ids.clone())
            .map(|id| {
                let broker = Arc::clone(&app.broker);
                async move { broker.tenant_connections(&id).await }
            })
            .buffered(READS_AT_ONCE)
            .collect()
            .await;
    let mut total = TrafficView::default();
    let mut tenants = Vec::with_capacity(ids.len());
    let mut connections = 0;
    for (id, n) in ids.into_iter().zip(counts) {
        let n = n?;
        let t = app.traffic.view(&id);
        total.add(&t);
        connections += n;
        tenants.push(TenantLine {
            connections: n,
            conversations: app.registry.conversations(&id),
            calls_per_second: t.calls_per_second,
            id,
        });
    }
    Ok(axum::Json(ClusterStats {
        node_id: app.broker.node_id().to_owned(),
        at: rfc3339(now_ms()),
        cluster: ClusterTotals {
            tenants: tenants.len() as u64,
            connections,
        },
        node: NodeFigures::of(app.registry.conversations_total(), total),
        tenants,
    }))
}
