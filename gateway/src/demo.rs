//! The demo served in dev mode: an app page with a small page-side bridge and an agent console.
//! `/demo/session` hands the page a token and the console the dev API key; it exists only in
//! dev mode, which listens on loopback only, and answers only a request whose `Host` is a
//! loopback name or address and that comes from the demo's own origin: a page of another site
//! that rebinds its name to 127.0.0.1 (DNS rebinding) sends its own name as `Host`, and a
//! cross-site fetch says so in `Origin` and `Sec-Fetch-Site`.

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::json;

use std::net::SocketAddr;

use toolmark_config::{ConfigError, TenantConfig, TenantLimits, TenantSettings};

use crate::state::{AppState, DevInfo};
use crate::tenants::PageClaims;

mod echo;

/// The dev tenant's id.
pub const DEV_TENANT: &str = "dev";

/// The dev tenant of a gateway bound to `addr`, and what dev mode prints about it.
#[derive(Debug)]
pub struct DevTenant {
    /// The tenant, parsed like any other.
    pub settings: TenantSettings,
    /// What the demo page gets.
    pub info: DevInfo,
    /// The HS256 page-token secret.
    pub token_secret: String,
    /// The Pusher app secret.
    pub pusher_secret: String,
}

/// Random API key, token secret and Pusher key and secret; the gateway's own origins allowed
/// (the demo page is served from them).
pub fn dev_tenant(addr: SocketAddr) -> Result<DevTenant, ConfigError> {
    let api_key = format!("tmk_dev_{}", random_hex(24));
    let token_secret = random_hex(32);
    let pusher_key = format!("dev-{}", random_hex(10));
    let pusher_secret = random_hex(20);
    let port = addr.port();
    let config = TenantConfig {
        id: DEV_TENANT.into(),
        api_keys: vec![toolmark_config::ApiKeyEntry::Hash(
            crate::auth::key_hash_string(&api_key),
        )],
        token_secret: Some(token_secret.clone()),
        token_public_key: None,
        allowed_origins: vec![
            format!("http://127.0.0.1:{port}"),
            format!("http://localhost:{port}"),
            format!("http://{addr}"),
        ],
        pusher_key: Some(pusher_key.clone()),
        pusher_secret: Some(pusher_secret.clone()),
        pusher_old_keys: Vec::new(),
        webhook_url: None,
        webhook_secret: None,
        webhook_allow_private: false,
        mcp_issuer: None,
        mcp_jwks_url: None,
        mcp_public_key: None,
        mcp_default_conversation: None,
        mcp_policy: None,
        limits: TenantLimits::default(),
        tools: toolmark_config::pins::PinsConfig::default(),
    };
    Ok(DevTenant {
        settings: TenantSettings::parse(&config, 0)?,
        info: DevInfo {
            api_key,
            pusher_key,
        },
        token_secret,
        pusher_secret,
    })
}

/// Prints the dev tenant's keys and the demo's addresses on stderr (dev mode only).
pub fn announce(t: &DevTenant, bound: SocketAddr) {
    eprintln!(
        "toolmark-gateway: dev mode: tenant \"dev\", API key {}, token secret {}, pusher key {}, pusher secret {}",
        t.info.api_key, t.token_secret, t.info.pusher_key, t.pusher_secret
    );
    eprintln!(
        "toolmark-gateway: demo page http://{bound}/demo, agent console http://{bound}/demo/agent"
    );
}

pub use crate::ids::random_hex;

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
        "webmcp-demo.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/demo/webmcp-demo.js"),
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

/// Whether `host` (a `Host` header: name or address, optional port) is loopback.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Why a `/demo/session` request is refused, if it is: a `Host` that is not loopback, or a
/// request from another origin.
fn refuse_session(headers: &HeaderMap) -> Option<&'static str> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let Some(host) = text("host").filter(|h| is_loopback_host(h)) else {
        return Some("the demo session answers only a loopback Host");
    };
    if let Some(origin) = text("origin")
        && origin != format!("http://{host}")
    {
        return Some("the demo session answers only its own origin");
    }
    if let Some(site) = text("sec-fetch-site")
        && !matches!(site, "same-origin" | "none")
    {
        return Some("the demo session answers only its own origin");
    }
    None
}

async fn session(
    State(app): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<SessionQuery>,
) -> Response {
    let (Some(dev), Some(tenant)) = (app.dev.as_ref(), app.tenants.get(DEV_TENANT)) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if let Some(why) = refuse_session(&headers) {
        return crate::http::problem::Problem::forbidden(why).into_response();
    }
    let user = q.user.unwrap_or_else(|| "demo".into());
    let conversation = q.conversation.unwrap_or_else(|| "c1".into());
    if !crate::ids::is_valid_id(&user) || !crate::ids::is_valid_id(&conversation) {
        return crate::http::problem::Problem::invalid("/user", "ids match ^[A-Za-z0-9_-]{1,128}$")
            .into_response();
    }
    let now_ms = toolmark_broker::now_ms();
    let now = now_ms / 1000;
    let claims = PageClaims {
        akid: None,
        pol: None,
        sub: user.clone(),
        cnv: conversation.clone(),
        aud: DEV_TENANT.into(),
        exp: now + 3600,
        #[allow(clippy::cast_precision_loss)]
        iat: Some(now_ms as f64 / 1000.0),
        nbf: None,
        jti: None,
        scope: None,
    };
    let Some(token) = tenant.mint(&claims) else {
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
