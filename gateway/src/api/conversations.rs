//! Conversation state, LLM tool definitions and page-token minting.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use toolmark_broker::ConvKey;
use toolmark_proto::llm::{LlmFormat, tool_definitions};
use utoipa::ToSchema;

use super::request::{Authed, Calls, Tokens, parse_body};
use crate::api::state::ApiState;
use crate::http::problem::Problem;
use crate::http::{Body, check_ids};
use crate::tenants::{MCP_SCOPE, PageClaims};

/// Default and largest lifetime of a minted page token.
const DEFAULT_TOKEN_TTL: u64 = 3600;
const MAX_TOKEN_TTL: u64 = 86_400;

/// A conversation as the agent sees it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConversationView {
    /// The user.
    pub user: String,
    /// The conversation.
    pub conversation: String,
    /// The page new calls go to, if any.
    pub client_id: Option<String>,
    /// Its manifest revision.
    pub rev: Option<u64>,
    /// Its tools (manifest entries: name, llmName, title, description, hints, mode).
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<toolmark_proto::ToolManifestSummary>,
    /// Connected pages.
    #[schema(value_type = Vec<Object>)]
    pub pages: Vec<toolmark_broker::PageInfo>,
}

/// `GET /users/{u}/conversations/{c}`
#[utoipa::path(get, path = "/v1/tenants/{tenant}/users/{user}/conversations/{conversation}",
    tag = "conversations", params(crate::http::doc::TenantPath, crate::http::doc::ConversationPath),
    responses((status = 200, description = "The conversation's current page, manifest and pages", body = ConversationView), crate::http::doc::Problems),
    security(("apiKey" = [])))]
pub async fn state(
    State(app): State<ApiState>,
    Authed(tenant, caller, _): Authed<Calls>,
    Path((_, user, conversation)): Path<(String, String, String)>,
) -> Result<Json<ConversationView>, Problem> {
    check_ids(&user, &conversation)?;
    let conv = ConvKey::new(&tenant.id, &user, &conversation);
    let s = app.broker.conversation(&conv).await?;
    Ok(Json(ConversationView {
        user,
        conversation,
        client_id: s.client_id,
        rev: s.rev,
        tools: caller.visible(tenant.pinned_view(s.tools)),
        pages: s.pages,
    }))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FormatQuery {
    /// `anthropic` (default) or `openai`.
    #[param(pattern = "^(anthropic|openai)$")]
    format: Option<String>,
}

/// `page_call` and `page_describe` for the conversation's current page.
#[derive(Debug, Serialize, ToSchema)]
pub struct LlmTools {
    /// The two tool definitions, in the chosen provider's shape.
    #[schema(value_type = Vec<Object>)]
    pub tools: Value,
    /// The manifest revision they render.
    pub rev: Option<u64>,
    /// Their ETag (also in the `ETag` header; `If-None-Match` answers 304).
    pub etag: String,
}

/// `GET /users/{u}/conversations/{c}/llm-tools?format=anthropic|openai`
#[utoipa::path(get, path = "/v1/tenants/{tenant}/users/{user}/conversations/{conversation}/llm-tools",
    tag = "llm-tools", params(crate::http::doc::TenantPath, crate::http::doc::ConversationPath, FormatQuery),
    responses((status = 200, description = "page_call and page_describe", body = LlmTools), (status = 304, description = "Unchanged since If-None-Match"),
        crate::http::doc::Problems),
    security(("apiKey" = [])))]
pub async fn llm_tools(
    State(app): State<ApiState>,
    Authed(tenant, caller, _): Authed<Calls>,
    Path((_, user, conversation)): Path<(String, String, String)>,
    crate::http::QueryOf(q): crate::http::QueryOf<FormatQuery>,
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
    // `page_call` renders only the tools this caller may call.
    let tools = tool_definitions(&caller.visible(tenant.pinned_view(s.tools)), format);
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
    let body = LlmTools {
        tools,
        rev: s.rev,
        etag,
    };
    Ok(([(header::ETAG, etag_header)], Json(body)).into_response())
}

/// `POST /tokens`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TokenRequest {
    /// The user (`sub`).
    #[schema(pattern = "^[A-Za-z0-9_-]{1,128}$")]
    user: String,
    /// The conversation (`cnv`).
    #[schema(pattern = "^[A-Za-z0-9_-]{1,128}$")]
    conversation: String,
    /// Lifetime, 1–86400 s (default 3600).
    #[schema(minimum = 1, maximum = 86_400)]
    ttl_seconds: Option<u64>,
    /// `"mcp"` for the hosted MCP endpoint; absent (or `"page"`) for a page socket.
    #[schema(pattern = "^(page|mcp)$")]
    scope: Option<String>,
    /// For an MCP token: narrows the minting key's policy (never widens it).
    #[schema(value_type = Option<Object>)]
    policy: Option<Value>,
}

/// A minted token.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Token {
    /// The JWT.
    pub token: String,
    /// RFC 3339.
    pub expires_at: String,
    /// The page WebSocket URL (with the token), or the MCP endpoint for an MCP token.
    pub url: String,
}

/// `POST /tokens`: a page token, or with `"scope": "mcp"` an MCP token, for a user and
/// conversation (HS256 tenants).
#[utoipa::path(post, path = "/v1/tenants/{tenant}/tokens", tag = "tokens",
    params(crate::http::doc::TenantPath), request_body = TokenRequest,
    responses((status = 201, description = "The minted token", body = Token), crate::http::doc::Problems),
    security(("apiKey" = [])))]
pub async fn mint_token(
    State(app): State<ApiState>,
    Authed(tenant, caller, _): Authed<Tokens>,
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
    if mcp {
        caller.require_mcp(&app.metrics)?;
    }
    let narrowed = match (req.policy, mcp) {
        (None, _) => None,
        (Some(p), true) => Some(crate::http::parse_value("/policy", p)?),
        (Some(_), false) => {
            return Err(Problem::invalid(
                "/policy",
                "a policy narrows an MCP token only",
            ));
        }
    };
    let akid = match (&caller, mcp) {
        (crate::caller::Caller::ApiKey { id, .. }, true) => Some(id.clone()),
        _ => None,
    };
    let now_ms = toolmark_broker::now_ms();
    let now = now_ms / 1000;
    let claims = PageClaims {
        akid,
        pol: narrowed,
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
        Json(Token {
            token,
            expires_at,
            url,
        }),
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
