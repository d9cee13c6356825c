//! Toolmark Gateway: the edges of the product. Page WebSockets, the agent HTTP API, events,
//! ops endpoints and the dev-mode demo, over a [`toolmark_broker::Broker`]. The configuration
//! comes from `toolmark_config`, telemetry and lifecycle from `toolmark_process`; the background
//! jobs from `toolmark_worker::jobs`, which this process runs itself with the memory broker.
//!
//! [`run`] takes a bound listener and a stop future, so tests start real servers on port 0.

mod admin;
mod admin_doc;
pub mod api;
pub mod auth;
mod caller;
mod calls;
pub mod close;
mod demo;
mod echo_channels;
mod event_feed;
mod hold;
mod hosted_mcp;
pub mod http;
pub mod ids;
pub mod metrics;
mod openapi;
mod ops;
pub mod page;
mod places;
pub mod pusher;
mod rate;
pub mod records;
mod registry;
mod seen;
mod serve;
mod state;
mod tcp;
mod tenant_sync;
mod tenants;
mod tls;
pub mod traces;
mod traffic;
pub mod webmcp;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::response::Redirect;
use axum::routing::{MethodFilter, MethodRouter, get, on};

pub use serve::{RunError, bind_and_run, new_node_id, run, run_with, run_with_admin};

use crate::state::AppState;

/// A WebSocket route: `GET` with `Upgrade` (HTTP/1.1) or the extended `CONNECT` of RFC 8441
/// (HTTP/2, which the node announces: a browser holding an HTTP/2 connection to the node opens
/// its socket on it).
fn websocket<H, T>(handler: H) -> MethodRouter<AppState>
where
    H: Handler<T, AppState>,
    T: 'static,
{
    on(MethodFilter::GET.or(MethodFilter::CONNECT), handler)
}

/// All routes of a node: the hosted MCP endpoint's over its own state (`mcp`).
fn router(app: AppState, mcp: &hosted_mcp::McpState, dev_mode: bool) -> Router {
    let mut r = Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/v1/openapi.json", get(openapi::openapi_json))
        .route("/v1/webmcp.js", get(webmcp::webmcp_js))
        .route(
            "/v1/tenants/{tenant}/page",
            websocket(page::socket::upgrade),
        )
        .route("/app/{key}", websocket(pusher::upgrade))
        .merge(api::router().with_state(app.api.clone()))
        .merge(hosted_mcp::router(mcp));
    if dev_mode {
        r = r
            .merge(demo::router())
            .route("/", get(|| async { Redirect::temporary("/demo") }));
    }
    r.fallback(|| async { http::Problem::not_found("Route") })
        .method_not_allowed_fallback(|| async { http::Problem::method_not_allowed() })
        .layer(DefaultBodyLimit::max(toolmark_config::MAX_FRAME_BYTES))
        .layer(ops::CountRequests(app.clone()))
        .layer(tower_http::trace::TraceLayer::new_for_http().make_span_with(ops::request_span))
        .with_state(app)
}
