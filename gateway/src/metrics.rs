//! Prometheus metrics of one gateway process.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use toolmark_process::metrics::{Catalogued, RedisScripts};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CallLabels {
    pub kind: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CodeLabel {
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TypeLabel {
    pub r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct MethodLabel {
    pub method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TransportLabel {
    pub transport: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct HttpLabels {
    pub route: &'static str,
    pub method: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RouteLabel {
    pub route: &'static str,
}

/// A route template as a `&'static str` label: routes are a fixed set, each kept once. Every
/// request looks its route up under a read lock; only a route's first request writes.
pub fn intern(route: &str) -> &'static str {
    use std::sync::{OnceLock, PoisonError, RwLock};
    static ROUTES: OnceLock<RwLock<std::collections::HashSet<&'static str>>> = OnceLock::new();
    let routes = ROUTES.get_or_init(Default::default);
    if let Some(r) = routes
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(route)
    {
        return r;
    }
    let mut routes = routes.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(r) = routes.get(route) {
        return r;
    }
    let r: &'static str = Box::leak(route.to_owned().into_boxed_str());
    routes.insert(r);
    r
}

fn method_label(m: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

type RouteHistograms = Family<RouteLabel, Histogram, fn() -> Histogram>;

fn request_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
        600.0,
    ])
}

/// Every metric the gateway exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Catalogued,
    /// Open page sockets, by transport.
    pub(crate) connections: Family<TransportLabel, Gauge>,
    /// HTTP requests answered, by route template, method and status.
    pub(crate) http_requests: Family<HttpLabels, Counter>,
    /// HTTP request durations (to the response head), by route template.
    pub(crate) http_duration: RouteHistograms,
    /// Redis script round trips, by script.
    redis_scripts: RedisScripts,
    /// The admin store's figures.
    pub admin_store: toolmark_process::metrics::AdminStore,
    /// Page sockets refused or closed, by close code.
    pub(crate) closes: Family<CodeLabel, Counter>,
    /// Agent calls and describes by outcome status.
    pub(crate) calls: Family<CallLabels, Counter>,
    /// Agent request → outcome latency, seconds.
    pub call_latency: Histogram,
    /// Results and confirmations dropped by a security rule.
    pub(crate) results_rejected: Family<ReasonLabel, Counter>,
    /// Page frames dropped before reaching the broker.
    pub(crate) inbound_rejected: Family<ReasonLabel, Counter>,
    /// Events emitted, by type.
    pub(crate) events: Family<TypeLabel, Counter>,
    /// Events emitted while the tenant's log was at its retention bound and its oldest events
    /// were kept for webhook delivery instead of trimmed.
    pub events_held_for_webhooks: Counter,
    /// One [`Metrics::sync_events`] at a time.
    events_synced: std::sync::Mutex<()>,
    /// Page frames held now until the broker answers.
    pub frames_holding: Gauge,
    /// Bytes of the hosted MCP's cache of tool input schemas on this node.
    pub mcp_schema_cache_bytes: Gauge,
    /// Hosted MCP requests, request to answer, by MCP method (never by tool: tenants name
    /// tools).
    mcp_duration: Family<MethodLabel, Histogram, fn() -> Histogram>,
    /// Page frames that were held (the broker did not answer their first submission).
    frames_held: Counter,
    /// Page frames dropped after they were accepted, by reason (`hold_full`, `hold_time`).
    frames_dropped: Family<ReasonLabel, Counter>,
    /// Agent requests a credential's policy refused, by reason (`scope_denied`,
    /// `tool_not_allowed`).
    calls_refused: Family<ReasonLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric; label values known up front start at 0.
    pub fn new() -> Self {
        let mut registry = Catalogued::default();
        let connections = Family::<TransportLabel, Gauge>::default();
        let http_requests = Family::<HttpLabels, Counter>::default();
        let http_duration: RouteHistograms = Family::new_with_constructor(request_histogram);
        let closes = Family::<CodeLabel, Counter>::default();
        let calls = Family::<CallLabels, Counter>::default();
        let call_latency = Histogram::new([
            0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            10.0, 30.0, 60.0, 600.0,
        ]);
        let results_rejected = Family::<ReasonLabel, Counter>::default();
        let inbound_rejected = Family::<ReasonLabel, Counter>::default();
        let events = Family::<TypeLabel, Counter>::default();
        let events_held_for_webhooks = Counter::default();
        let frames_holding = Gauge::default();
        let mcp_schema_cache_bytes = Gauge::default();
        let mcp_duration: Family<MethodLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(request_histogram);
        let frames_held = Counter::default();
        let frames_dropped = Family::<ReasonLabel, Counter>::default();
        let calls_refused = Family::<ReasonLabel, Counter>::default();
        toolmark_process::metrics::register_build_info(&mut registry);
        registry.register(
            "toolmark_page_connections",
            "Open page sockets, by transport (websocket: page WebSockets; echo: Laravel Echo subscriptions)",
            connections.clone(),
        );
        registry.register(
            "toolmark_http_requests",
            "HTTP requests answered, by route template, method and status",
            http_requests.clone(),
        );
        registry.register(
            "toolmark_http_request_duration_seconds",
            "HTTP request to response head, by route template",
            http_duration.clone(),
        );
        let redis_scripts = RedisScripts::register(&mut registry);
        let admin_store = toolmark_process::metrics::AdminStore::register(&mut registry);
        registry.register(
            "toolmark_page_closes",
            "Page WebSockets closed by the gateway, by close code",
            closes.clone(),
        );
        registry.register(
            "toolmark_calls",
            "Agent calls and describes by outcome",
            calls.clone(),
        );
        registry.register(
            "toolmark_call_duration_seconds",
            "Agent call round trip, request to outcome",
            call_latency.clone(),
        );
        registry.register(
            "toolmark_results_rejected",
            "Page results and confirmations dropped by a security rule",
            results_rejected.clone(),
        );
        registry.register(
            "toolmark_inbound_rejected",
            "Page frames dropped before processing",
            inbound_rejected.clone(),
        );
        registry.register("toolmark_events", "Events emitted, by type", events.clone());
        registry.register(
            "toolmark_events_held_for_webhooks",
            "Events emitted while the tenant's event log was at its retention bound and its oldest events waited for webhook delivery (kept, not trimmed)",
            events_held_for_webhooks.clone(),
        );
        registry.register(
            "toolmark_mcp_schema_cache_bytes",
            "Bytes of the tool input schemas the hosted MCP endpoint keeps on this node (bounded by 32 MiB)",
            mcp_schema_cache_bytes.clone(),
        );
        registry.register(
            "toolmark_mcp_operation_duration_seconds",
            "Hosted MCP requests, request to answer, by MCP method (mcp.server.operation.duration)",
            mcp_duration.clone(),
        );
        registry.register(
            "toolmark_frames_holding",
            "Page frames (result, confirmed, manifest) this node holds until the broker answers",
            frames_holding.clone(),
        );
        registry.register(
            "toolmark_frames_held",
            "Page frames whose first submission the broker did not answer, held and submitted again",
            frames_held.clone(),
        );
        registry.register(
            "toolmark_frames_dropped",
            "Page frames dropped after the node accepted them: hold_full (broker.stall_hold_frames or broker.stall_hold_bytes reached), hold_time (the broker did not answer within broker.stall_hold_secs)",
            frames_dropped.clone(),
        );
        for reason in ["hold_full", "hold_time"] {
            let _ = frames_dropped.get_or_create(&ReasonLabel { reason });
        }
        registry.register(
            "toolmark_policy_refusals",
            "Agent requests refused by their credential's policy or the tenant's pins, before anything reached a page: scope_denied, tool_not_allowed, tool_not_pinned",
            calls_refused.clone(),
        );
        for reason in ["scope_denied", "tool_not_allowed", "tool_not_pinned"] {
            let _ = calls_refused.get_or_create(&ReasonLabel { reason });
        }
        for r in toolmark_broker::Rejection::ALL {
            let _ = results_rejected.get_or_create(&ReasonLabel { reason: r.as_str() });
        }
        for kind in ["call", "describe"] {
            for outcome in [
                "ok",
                "invalid",
                "refused",
                "needs_confirmation",
                "cancelled",
                "error",
                "timeout",
            ] {
                let _ = calls.get_or_create(&CallLabels { kind, outcome });
            }
        }
        for transport in ["websocket", "echo"] {
            let _ = connections.get_or_create(&TransportLabel { transport });
        }
        for r in toolmark_proto::RejectReason::ALL {
            let _ = inbound_rejected.get_or_create(&ReasonLabel { reason: r.as_str() });
        }
        Metrics {
            registry,
            connections,
            http_requests,
            http_duration,
            redis_scripts,
            admin_store,
            closes,
            calls,
            call_latency,
            results_rejected,
            inbound_rejected,
            events,
            events_held_for_webhooks,
            events_synced: std::sync::Mutex::default(),
            frames_holding,
            mcp_schema_cache_bytes,
            mcp_duration,
            frames_held,
            frames_dropped,
            calls_refused,
        }
    }

    /// Counts a page frame held until the broker answers.
    pub fn frame_held(&self) {
        self.frames_held.inc();
    }

    /// Counts an agent request its credential's policy refused.
    pub fn call_refused(&self, reason: &'static str) {
        self.calls_refused
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Counts a page frame dropped after it was accepted.
    pub fn frame_dropped(&self, reason: &'static str) {
        self.frames_dropped
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// The gauge of open sockets of `transport` (`websocket`, `echo`).
    pub fn sockets(&self, transport: &'static str) -> Gauge {
        self.connections
            .get_or_create(&TransportLabel { transport })
            .clone()
    }

    /// Counts an answered HTTP request of `route` (an [`intern`]ed template, `unmatched` for
    /// no route).
    pub fn http_request(
        &self,
        route: &'static str,
        method: &axum::http::Method,
        status: u16,
        seconds: f64,
    ) {
        self.http_requests
            .get_or_create(&HttpLabels {
                route,
                method: method_label(method),
                status,
            })
            .inc();
        self.http_duration
            .get_or_create(&RouteLabel { route })
            .observe(seconds);
    }

    /// Records one Redis script's round trip.
    pub fn redis_script(&self, script: &'static str, seconds: f64) {
        self.redis_scripts.observe(script, seconds);
    }

    /// Counts a dropped page frame.
    pub fn inbound_rejected(&self, reason: &'static str) {
        self.inbound_rejected
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Counts a result or confirmation dropped by a security rule.
    pub fn result_rejected(&self, reason: &'static str) {
        self.results_rejected
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Counts a close by the gateway.
    pub fn closed(&self, code: u16) {
        self.closes.get_or_create(&CodeLabel { code }).inc();
    }

    /// Counts a finished call (through `calls::finished`, which counts it in the tenant's
    /// traffic too).
    /// A hosted MCP request of `method` answered after `seconds`.
    pub(crate) fn mcp_operation(&self, method: &'static str, seconds: f64) {
        self.mcp_duration
            .get_or_create(&MethodLabel { method })
            .observe(seconds);
    }

    pub(crate) fn call_finished(&self, kind: &'static str, outcome: &'static str, seconds: f64) {
        self.calls
            .get_or_create(&CallLabels { kind, outcome })
            .inc();
        self.call_latency.observe(seconds);
    }

    /// Brings the event counters up to what this process's broker emitted (the broker counts
    /// them where it emits them: every event is emitted by the broker's transitions and sweeps).
    pub fn sync_events(&self, emitted: &toolmark_broker::Emitted) {
        let raise = |c: &Counter, to: u64| {
            let seen = c.get();
            if to > seen {
                c.inc_by(to - seen);
            }
        };
        let _one = self
            .events_synced
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (kind, n) in emitted.by_kind() {
            if n > 0 {
                raise(
                    &self.events.get_or_create(&TypeLabel {
                        r#type: kind.as_str(),
                    }),
                    n,
                );
            }
        }
        raise(&self.events_held_for_webhooks, emitted.held_for_webhooks());
    }

    /// Every family of the gateway's own, as `(name, type)` (the jobs' are theirs:
    /// `toolmark_worker::jobs::JobMetrics::families`).
    pub fn families(&self) -> Vec<(&'static str, &'static str)> {
        self.registry.families().to_vec()
    }

    /// The OpenMetrics text of the gateway's metrics, then those of the jobs it runs.
    pub fn render(&self, jobs: Option<&dyn toolmark_process::metrics::Exposed>) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode_registry(&mut out, self.registry.registry());
        if let Some(jobs) = jobs {
            jobs.encode_into(&mut out);
        }
        let _ = encode_eof(&mut out);
        out
    }
}
