//! The demo's stand-ins for a Laravel app's two endpoints, so the demo page can run over Echo
//! (`?transport=echo`): the channel authorization (`/broadcasting/auth`) and the same-origin
//! bridge that forwards the page's POSTs to the inbound checks. Dev mode only: there is no
//! session here, where a real app checks the user and conversation of its session.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use toolmark_broker::ConvKey;

use super::DEV_TENANT;
use crate::http::Body;
use crate::http::problem::Problem;
use crate::page::state::PageState;
use crate::state::AppState;

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/demo/broadcasting/auth", post(authorize))
        .route("/demo/bridge", post(bridge))
}

#[derive(Debug, Deserialize)]
struct AuthRequest {
    socket_id: String,
    channel_name: String,
}

/// Signs a toolmark channel for a socket, as Laravel's `/broadcasting/auth` does after its
/// channel callback approved the user and conversation.
async fn authorize(State(app): State<AppState>, Json(req): Json<AuthRequest>) -> Response {
    let Some(tenant) = app.tenants.get(DEV_TENANT) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let (Some(pair), Some(_)) = (
        tenant.pusher.first(),
        crate::echo_channels::toolmark_channel(&req.channel_name),
    ) else {
        return StatusCode::FORBIDDEN.into_response();
    };
    let signature = pair.sign(&req.socket_id, &req.channel_name);
    Json(json!({"auth": format!("{}:{signature}", pair.key)})).into_response()
}

#[derive(Debug, Deserialize)]
struct BridgeQuery {
    user: String,
    conversation: String,
}

/// Forwards a page message to the inbound checks, as the app's `/toolmark/bridge` does.
async fn bridge(
    State(pages): State<PageState>,
    Query(q): Query<BridgeQuery>,
    Body(body): Body,
) -> Result<StatusCode, Problem> {
    let tenant = pages
        .tenants
        .get(DEV_TENANT)
        .ok_or_else(|| Problem::not_found("Tenant"))?;
    crate::http::check_ids(&q.user, &q.conversation)?;
    let conv = ConvKey::new(DEV_TENANT, &q.user, &q.conversation);
    crate::page::inbound::accept(&pages, &tenant, &conv, &body).await?;
    Ok(StatusCode::ACCEPTED)
}
