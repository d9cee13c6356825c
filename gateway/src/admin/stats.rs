//! Live figures of a tenant and of the cluster (`GET /admin/v1/tenants/{id}/stats`,
//! `GET /admin/v1/stats`): what the console polls every 2 s, cheap enough for that on a node
//! holding tens of thousands of pages. Nothing here walks pages or calls: connections are the
//! broker's per-tenant count, the call figures the entries every node writes of its own counts
//! (two reads per tenant, sent at once), the node's figures counters this node keeps as things
//! happen ([`crate::traffic::Traffic`], the registry's conversation count).
//!
//! Each answer says which figures are cluster-wide (`cluster`) and which are this node's
//! (`node`). A call is counted by the node that supervised it; the cluster's call figures are
//! the sum over the nodes whose entries have not lapsed, each as of its last write (at most
//! `server.stats_flush_ms` old): the cluster's calls a second is the sum of each node's
//! finished calls over the 10 whole seconds before its last write, divided by 10.

use std::collections::BTreeMap;

use futures_util::StreamExt;
use serde::Serialize;
use utoipa::ToSchema;

use super::*;
use crate::traffic::TrafficView;
use toolmark_broker::TrafficEntry;

/// How many tenants the cluster summary reads at once (two commands each, pipelined on the
/// broker's connection).
const READS_AT_ONCE: usize = 64;

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
    #[serde(flatten)]
    traffic: ClusterTraffic,
}

/// Call figures summed over the nodes whose entries have not lapsed, each as it last wrote
/// them (every `server.stats_flush_ms`).
#[derive(Debug, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterTraffic {
    /// The sum of each node's finished calls and describes a second over the 10 whole seconds
    /// before its last write.
    calls_per_second: f64,
    /// Finished calls and describes by outcome status, since each node started.
    calls: BTreeMap<String, u64>,
    /// Agent requests answered with a problem, by its code, since each node started (those
    /// that failed authentication apart).
    refusals: BTreeMap<String, u64>,
    /// Requests naming the tenant that failed authentication, since each node started: anyone
    /// can send them, so they are never the tenant's own refusals.
    unauthenticated: u64,
    /// How many nodes' entries were summed.
    nodes: u64,
}

impl ClusterTraffic {
    /// Adds the entries of the tenant's incarnation `incarnation` (never a deleted
    /// predecessor's under the same id).
    fn add(&mut self, entries: &[TrafficEntry], incarnation: u64) {
        for e in entries
            .iter()
            .filter(|e| e.traffic.of_incarnation(incarnation))
        {
            self.unauthenticated += e.traffic.unauthenticated;
            self.calls_per_second += e.traffic.calls_per_second();
            for (k, v) in &e.traffic.outcomes {
                *self.calls.entry(k.clone()).or_default() += v;
            }
            for (k, v) in &e.traffic.refusals {
                *self.refusals.entry(k.clone()).or_default() += v;
            }
            self.nodes += 1;
        }
    }

    fn of(entries: &[TrafficEntry], incarnation: u64) -> Self {
        let mut t = ClusterTraffic::default();
        t.add(entries, incarnation);
        t
    }
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
    /// Agent requests answered with a problem, by its code (`rate_limited`, `no_page`,
    /// `scope_denied`…).
    #[schema(value_type = BTreeMap<String, u64>)]
    refusals: BTreeMap<&'static str, u64>,
    /// Requests that failed authentication.
    unauthenticated: u64,
}

impl NodeFigures {
    fn of(conversations: u64, t: TrafficView) -> Self {
        NodeFigures {
            conversations,
            calls_per_second: t.calls_per_second,
            calls: t.outcomes,
            refusals: t.refusals,
            unauthenticated: t.unauthenticated,
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
    /// Cluster-wide finished calls a second, as [`ClusterTraffic::calls_per_second`].
    calls_per_second: f64,
    /// This node's finished calls a second, over the last 10 whole seconds.
    node_calls_per_second: f64,
}

/// The whole cluster's page sockets and calls, over every tenant.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterTotals {
    /// Tenants known (config file and admin API).
    tenants: u64,
    /// Connections of every tenant on every live node.
    connections: u64,
    /// Call figures of every tenant, as [`ClusterTraffic`] (`nodes`: the most nodes summed
    /// for one tenant).
    #[serde(flatten)]
    traffic: ClusterTraffic,
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

/// `GET /admin/v1/tenants/{id}/stats`: a tenant's connections, webhook backlog, call rate,
/// outcomes and refusals cluster-wide, and this node's conversations and call figures.
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
    let node = &s.0.node;
    let Some(tenant) = node.tenants.get(&id) else {
        return Err(Problem::not_found("Tenant"));
    };
    let incarnation = tenant.incarnation;
    let backlog = async {
        match &s.0.webhooks {
            Some(q) => q.0.depth(&id).await.map(Some),
            None => Ok(None),
        }
    };
    let (connections, traffic, webhook_backlog) = tokio::try_join!(
        node.broker.tenant_connections(&id),
        node.broker.traffic(&id),
        backlog
    )?;
    Ok(axum::Json(TenantStats {
        node_id: node.broker.node_id().to_owned(),
        at: rfc3339(now_ms()),
        cluster: ClusterFigures {
            connections,
            webhook_backlog,
            traffic: ClusterTraffic::of(&traffic, incarnation),
        },
        node: NodeFigures::of(
            node.registry.conversations(&id),
            node.traffic.view(&id, incarnation),
        ),
        tenant: id,
    }))
}

/// `GET /admin/v1/stats`: every tenant's connections and call figures (cluster-wide), and this
/// node's conversations and calls, per tenant and in total.
#[utoipa::path(get, path = "/admin/v1/stats", tag = "admin",
    responses((status = 200, description = "Every tenant's figures and the totals", body = ClusterStats), crate::http::doc::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn cluster_stats(
    State(s): State<AdminState>,
    _who: Admin,
) -> Result<axum::Json<ClusterStats>, Problem> {
    let node = &s.0.node;
    let snapshot = node.tenants.snapshot();
    let mut all: Vec<(String, u64)> = snapshot
        .all()
        .map(|t| (t.id.clone(), t.incarnation))
        .collect();
    all.sort();
    let (ids, incarnations): (Vec<String>, Vec<u64>) = all.into_iter().unzip();
    type Read = Result<(u64, Vec<TrafficEntry>), toolmark_broker::BrokerError>;
    let reads: Vec<Read> = futures_util::stream::iter(ids.clone())
        .map(|id| {
            let broker = Arc::clone(&node.broker);
            async move { tokio::try_join!(broker.tenant_connections(&id), broker.traffic(&id)) }
        })
        .buffered(READS_AT_ONCE)
        .collect()
        .await;
    let mut total = TrafficView::default();
    let mut cluster = ClusterTraffic::default();
    let mut tenants = Vec::with_capacity(ids.len());
    let mut connections = 0;
    for ((id, incarnation), read) in ids.into_iter().zip(incarnations).zip(reads) {
        let (n, entries) = read?;
        let t = node.traffic.view(&id, incarnation);
        total.add(&t);
        connections += n;
        let of_tenant = ClusterTraffic::of(&entries, incarnation);
        let nodes = cluster.nodes.max(of_tenant.nodes);
        cluster.add(&entries, incarnation);
        cluster.nodes = nodes;
        tenants.push(TenantLine {
            connections: n,
            conversations: node.registry.conversations(&id),
            calls_per_second: of_tenant.calls_per_second,
            node_calls_per_second: t.calls_per_second,
            id,
        });
    }
    Ok(axum::Json(ClusterStats {
        node_id: node.broker.node_id().to_owned(),
        at: rfc3339(now_ms()),
        cluster: ClusterTotals {
            tenants: tenants.len() as u64,
            connections,
            traffic: cluster,
        },
        node: NodeFigures::of(node.registry.conversations_total(), total),
        tenants,
    }))
}
