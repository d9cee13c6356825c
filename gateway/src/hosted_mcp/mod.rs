//! The hosted MCP endpoint, `/v1/tenants/{tenant}/mcp`: MCP Streamable HTTP (rmcp's server
//! side) in front of the page a user has open, so that a hosted assistant calls the page's
//! tools through the gateway with nothing installed on the user's machine.
//!
//! - Every request carries an MCP token ([`auth`]); the user and conversation come from it.
//! - A session (revisions before 2026-07-28) is kept in the broker ([`sessions`]), so any node
//!   serves a session any node began: rmcp replays the client's `initialize` from the stored
//!   state where the session is not in memory.
//! - Tools are listed by the shared [`toolmark_mcp_tools`] module, exactly as `toolmark-mcp`
//!   lists them ([`tools`]); a call is an agent call (bound, deadlined, rate-limited, counted).
//! - `notifications/tools/list_changed` follows the tenant's event log (`page.manifest`,
//!   `page.disconnected`), which every node reads, so the stream may be on any node
//!   ([`listings`]).

pub mod auth;
pub mod grant;
mod handler;
mod listings;
pub mod live;
pub mod oauth;
pub mod sessions;
mod state;
pub mod streams;
mod tasks;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router, middleware};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

use crate::http::problem::Problem;
pub use state::{McpState, Parts as McpParts};

/// The endpoint's path.
pub const PATH: &str = "/v1/tenants/{tenant}/mcp";

/// Where a tenant's RFC 9728 protected-resource metadata is.
const METADATA_PATH: &str = "/.well-known/oauth-protected-resource/v1/tenants/{tenant}/mcp";

/// The metadata path of `tenant`'s endpoint.
pub fn metadata_path(tenant: &str) -> String {
    format!("/.well-known/oauth-protected-resource/v1/tenants/{tenant}/mcp")
}

/// The endpoint of `tenant` under `server.public_url`: the audience of the access tokens it
/// accepts and the `resource` of its metadata. `None` without a public URL: a request's own
/// `Host` or forwarded headers never stand in for it (the config and the admin API refuse an
/// authorization server on a gateway without one).
pub fn resource(public_url: Option<&str>, tenant: &str) -> Option<String> {
    public_url.map(|base| format!("{}/v1/tenants/{tenant}/mcp", base.trim_end_matches('/')))
}

/// `GET /.well-known/oauth-protected-resource/v1/tenants/{tenant}/mcp` (RFC 9728): the
/// endpoint as an OAuth protected resource, naming the tenant's authorization server. A tenant
/// without one has none (404).
async fn metadata(
    State(app): State<McpState>,
    Path(tenant): Path<String>,
) -> Result<Json<Value>, Problem> {
    let t = app
        .tenants
        .get(&tenant)
        .filter(|t| t.mcp_oauth.is_some())
        .ok_or_else(|| Problem::not_found("Resource metadata"))?;
    let resource = resource(app.public_url.as_deref(), &t.id)
        .ok_or_else(|| Problem::not_found("Resource metadata"))?;
    let issuer = t.mcp_oauth.as_ref().map(|o| o.issuer.clone());
    Ok(Json(json!({
        "resource": resource,
        "authorization_servers": [issuer],
        "bearer_methods_supported": ["header"],
        "resource_name": format!("Toolmark page tools of {}", t.id),
    })))
}

/// How often an idle SSE stream carries a keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The hosted MCP routes, over the endpoint's own state.
pub fn router<S: Clone + Send + Sync + 'static>(app: &McpState) -> Router<S> {
    let settings = app.settings.clone();
    let mut config = StreamableHttpServerConfig::default()
        .with_sse_keep_alive(Some(KEEP_ALIVE))
        .with_cancellation_token(app.life.stopping().child_token())
        .with_max_request_body_bytes(toolmark_config::MAX_FRAME_BYTES)
        // The gateway is reached under its public names; the bearer token is the guard here.
        .disable_allowed_hosts();
    config.session_store = Some(Arc::new(sessions::StoredSessions::new(
        toolmark_broker::handle::records(&app.broker),
        settings.session_idle,
    )));
    let schemas = Arc::new(tools::Schemas::new(
        app.metrics.mcp_schema_cache_bytes.clone(),
    ));
    let listings = Arc::new(listings::Listings::default());
    let factory_app = app.clone();
    let service = StreamableHttpService::new(
        move || {
            Ok(handler::HostedMcp::new(
                factory_app.clone(),
                Arc::clone(&schemas),
                Arc::clone(&listings),
            ))
        },
        Arc::clone(&app.live.manager),
        config,
    );
    Router::new()
        .route_service(PATH, service)
        .route_layer(middleware::from_fn_with_state(
            auth::Door {
                app: app.clone(),
                key_sets: Arc::default(),
            },
            auth::authenticate,
        ))
        .route(METADATA_PATH, get(metadata))
        .with_state(app.clone())
}
