//! Conversation state, LLM tool definitions and page-token minting.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use toolmark_broker::ConvKey;
use toolmark_proto::llm::{LlmFormat, tool_definitions};

use super::{Authed, Body, check_ids, parse_body};
use crate::problem::Problem;
use crate::state::AppState;
use crate::tenants::{MCP_SCOPE, PageClaims};

/// Default and largest lifetime of a minted page token.
const DEFAULT_TOKEN_TTL: u64 = 3600;
const MAX_TOKEN_TTL: u64 = 86_400;

/// `GET /users/{u}/conversations/{c}`
pub async fn state(
    State(app): State<AppState>,
    Authed(tenant): Authed,
    Path((_, user, conversation)): Path<(String, String, String)>,
) -> Result<Json<serde_json::Value>, Problem> {
    check_ids(&user, &conversation)?;
    let conv = ConvKey::new(&tenant.id, &user, &conversation);
    let s = app.broker.conversation(&conv).await?;
    Ok(Json(json!({
        "user": user,
        "conversation": conversation,
        "clientId": s.client_id,
        "rev": s.rev,
        "tools": s.tools,
        "pages": s.pages,
    })))
}

#[derive(Debug, Deserialize)]
pub struct FormatQuery {
    format: Option<String>,
}

/// `GET /users/{u}/conversations/{c}/llm-tools?format=anthropic|openai`
pub async fn llm_tools(
    State(app): State<AppState>,
    Authed(tenant): Authed,
    Path((_, user, conversation)): Path<(String, String, String)>,
    Query(q): Query<FormatQuery>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    check_ids(&user, &conversation)?;
    let format: LlmFormat = match q.format.as_deref() {
        None => LlmFormat::Anthropic,
        Some(f) => f
            .parse()
            .map_err(|_| Problem::invalid("/format", "format is anthropic or openai"))?,
    };
    let conv = ConvKey::new(&tenant.id, &user, &conversation);
    let s = app.broker.conversation(&conv).await?;
    let tools = tool_definitions(&s.tools, format);
    let bytes = serde_json::to_vec(&tools).unwrap_or_default();
    let etag = format!("\"{}\"", hex::encode(&Sha256::digest(&bytes)[..16]));
    let etag_header = HeaderValue::from_str(&etag).unwrap_or(HeaderValue::from_static("\"\""));
    let matches = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| {
            let tag = tag.trim();
            tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag
        });
    if matches {
        return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, etag_header)]).into_response());
    }
    let body = json!({"tools": tools, "rev": s.rev, "etag": etag});
    Ok(([(header::ETAG, etag_header)], Json(body)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TokenRequest {
    user: String,
    conversation: String,
    ttl_seconds: Option<u64>,
    /// `"mcp"` for the hosted MCP endpoint; absent (or `"page"`) for a page socket.
    scope: Option<String>,
}

/// `POST /tokens`: a page token, or with `"scope": "mcp"` an MCP token, for a user and
/// conversation (HS256 tenants).
pub async fn mint_token(
    State(app): State<AppState>,
    Authed(tenant): Authed,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    let req: TokenRequest = parse_body(&tenant, &body)?;
    if !crate::ids::is_valid_id(&req.user) {
        return Err(Problem::invalid(
            "/user",
            "user ids match ^[A-Za-z0-9_-]{1,128}$",
        ));
    }
    if !crate::ids::is_valid_id(&req.conversation) {
        return Err(Problem::invalid(
            "/conversation",
            "conversation ids match ^[A-Za-z0-9_-]{1,128}$",
        ));
    }
    let ttl = req.ttl_seconds.unwrap_or(DEFAULT_TOKEN_TTL);
    if ttl == 0 || ttl > MAX_TOKEN_TTL {
        return Err(Problem::invalid(
            "/ttlSeconds",
            format!("ttlSeconds is between 1 and {MAX_TOKEN_TTL}"),
        ));
    }
    let mcp = match req.scope.as_deref() {
        None | Some("page") => false,
        Some(MCP_SCOPE) => true,
        Some(_) => return Err(Problem::invalid("/scope", "scope is page or mcp")),
    };
    let now_ms = toolmark_broker::now_ms();
    let now = now_ms / 1000;
    let claims = PageClaims {
        sub: req.user,
        cnv: req.conversation,
        aud: tenant.id.clone(),
        exp: now + ttl,
        #[allow(clippy::cast_precision_loss)]
        iat: Some(now_ms as f64 / 1000.0),
        nbf: None,
        jti: Some(toolmark_proto::ids::new_call_id()),
        scope: mcp.then(|| MCP_SCOPE.to_owned()),
    };
    let token = tenant.mint(&claims).ok_or_else(|| {
        Problem::invalid("", "this tenant verifies page tokens with a public key; mint them with the matching private key")
    })?;
    let url = if mcp {
        mcp_url(app.public_url.as_deref(), &headers, &tenant.id)
    } else {
        page_url(app.public_url.as_deref(), &headers, &tenant.id, &token)
    };
    let expires_at = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(claims.exp),
    )
    .to_string();
    Ok((
        StatusCode::CREATED,
        Json(json!({"token": token, "expiresAt": expires_at, "url": url})),
    )
        .into_response())
}

/// The base the gateway's URLs start with: `server.public_url` when set, else as the caller
/// reached this gateway (`X-Forwarded-Proto` aware), `http` or `https`.
pub fn base_url(public_url: Option<&str>, headers: &HeaderMap) -> String {
    if let Some(base) = public_url {
        return base.trim_end_matches('/').to_owned();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost");
    let secure = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.eq_ignore_ascii_case("https"));
    format!("{}://{host}", if secure { "https" } else { "http" })
}

/// The hosted MCP endpoint of a tenant (its OAuth audience too).
pub fn mcp_url(public_url: Option<&str>, headers: &HeaderMap, tenant: &str) -> String {
    format!("{}/v1/tenants/{tenant}/mcp", base_url(public_url, headers))
}

/// The page WebSocket URL: under `server.public_url` when set, else as the caller reached this
/// gateway (`X-Forwarded-Proto` aware).
pub fn page_url(
    public_url: Option<&str>,
    headers: &HeaderMap,
    tenant: &str,
    token: &str,
) -> String {
    // http → ws, https → wss, the base's path kept.
    let base = base_url(public_url, headers);
    let ws = base
        .strip_prefix("https://")
        .map(|rest| format!("wss://{rest}"))
        .or_else(|| {
            base.strip_prefix("http://")
                .map(|rest| format!("ws://{rest}"))
        })
        .unwrap_or(base);
    format!("{ws}/v1/tenants/{tenant}/page?token={token}")
}
