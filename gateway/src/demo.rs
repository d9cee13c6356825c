//! The demo served in dev mode: an app page with a small page-side bridge and an agent console.
//! `/demo/session` hands the page a token and the console the dev API key; it exists only in
//! dev mode, which listens on loopback only.

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::json;

use crate::state::AppState;
use crate::tenants::PageClaims;

mod echo;

/// The dev tenant's id.
pub const DEV_TENANT: &str = "dev";

const INDEX: &str = include_str!("../assets/demo/index.html");
const AGENT: &str = include_str!("../assets/demo/agent.html");
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "bridge.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/demo/bridge.js"),
    ),
    (
        "mcp-pairing.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/demo/mcp-pairing.js"),
    ),
    (
        "echo.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/demo/echo.js"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/demo/app.js"),
    ),
    (
        "agent.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/demo/agent.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../assets/demo/style.css"),
    ),
];

/// The demo routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/demo", get(|| async { Html(INDEX) }))
        .route("/demo/agent", get(|| async { Html(AGENT) }))
        .route("/demo/assets/{file}", get(asset))
        .route("/demo/session", get(session))
        .merge(echo::router())
}

async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, mime, body)) => (
            [
                (header::CONTENT_TYPE, *mime),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            *body,
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

#[derive(Debug, Deserialize)]
struct SessionQuery {
    user: Option<String>,
    conversation: Option<String>,
}

async fn session(State(app): State<AppState>, Query(q): Query<SessionQuery>) -> Response {
    let (Some(dev), Some(tenant)) = (app.dev.as_ref(), app.tenants.get(DEV_TENANT)) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let user = q.user.unwrap_or_else(|| "demo".into());
    let conversation = q.conversation.unwrap_or_else(|| "c1".into());
    if !crate::ids::is_valid_id(&user) || !crate::ids::is_valid_id(&conversation) {
        return crate::problem::Problem::invalid("/user", "ids match ^[A-Za-z0-9_-]{1,128}$")
            .into_response();
    }
    let now = toolmark_broker::now_ms() / 1000;
    let claims = PageClaims {
        sub: user.clone(),
        cnv: conversation.clone(),
        aud: DEV_TENANT.into(),
        exp: now + 3600,
        iat: Some(now),
        nbf: None,
        jti: None,
    };
    let Some(token) = tenant.tokens.mint(&claims) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    Json(json!({
        "tenant": DEV_TENANT,
        "user": user,
        "conversation": conversation,
        "pagePath": format!("/v1/tenants/{DEV_TENANT}/page?token={token}"),
        "token": token,
        "apiKey": dev.api_key,
        "apiBase": format!("/v1/tenants/{DEV_TENANT}"),
        "pusherKey": dev.pusher_key,
        "pusherPath": format!("/app/{}", dev.pusher_key),
        "channel": format!("toolmark.{user}.{conversation}"),
        "bridgePath": format!("/demo/bridge?user={user}&conversation={conversation}"),
    }))
    .into_response()
}
