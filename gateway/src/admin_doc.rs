//! The admin API's answers as the OpenAPI document describes them (`crate::openapi`). The
//! handlers (`crate::admin`) build them; `make api` fuzzes the admin listener against these
//! schemas, so a drift between the two fails.

use serde::Serialize;
use utoipa::{IntoParams, ToSchema};

/// One pinned definition.
#[derive(Debug, Serialize, ToSchema)]
pub struct PinnedToolView {
    /// The tool's name.
    name: String,
    /// `sha256:` + the hex SHA-256 of the RFC 8785 form of the manifest entry's
    /// `{name, title?, description, hints}`.
    #[schema(pattern = "^sha256:[0-9a-f]{64}$")]
    digest: String,
}

/// A tenant's pinned tool definitions.
#[derive(Debug, Serialize, ToSchema)]
pub struct PinsView {
    /// `off` (nothing checked), `report` (shown, marked and announced) or `enforce` (hidden
    /// and refused).
    #[schema(pattern = "^(off|report|enforce)$")]
    mode: String,
    /// At most 1,000.
    tools: Vec<PinnedToolView>,
}

/// A tool definition a page of the tenant presented.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SeenToolView {
    name: String,
    #[schema(pattern = "^sha256:[0-9a-f]{64}$")]
    digest: String,
    /// Whether the tenant pins this definition now.
    pinned: bool,
    /// RFC 3339.
    first_seen: String,
    /// RFC 3339 (written at most once a minute per node).
    last_seen: String,
}

/// The tool definitions the tenant's pages presented.
#[derive(Debug, Serialize, ToSchema)]
pub struct SeenToolsView {
    tools: Vec<SeenToolView>,
}

/// A tenant's limits.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LimitsView {
    max_connections: u64,
    max_pages_per_conversation: u32,
    page_messages_per_second: u32,
    calls_per_second: u32,
    max_message_bytes: u64,
    default_call_timeout_ms: u64,
    max_call_timeout_ms: u64,
}

/// An API key, without its secret.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyView {
    api_key_id: String,
    /// RFC 3339, or null.
    expires_at: Option<String>,
}

/// A token key, without its secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenKeyView {
    kid: String,
    /// `hs256` or `public_key`.
    #[schema(pattern = "^(hs256|public_key)$")]
    kind: String,
}

/// A webhook secret, without its value.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookSecretView {
    webhook_secret_id: String,
}

/// A tenant, without secrets. `source` is `admin`, or `config` for the file's (read-only)
/// tenants, which have no `createdAt`, `webhookUrl` or `webhookSecrets`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantView {
    id: String,
    #[schema(pattern = "^(admin|config)$")]
    source: String,
    created_at: Option<String>,
    allowed_origins: Vec<String>,
    limits: LimitsView,
    webhook_url: Option<String>,
    /// Webhooks may go to loopback, private and link-local addresses (stored tenants only).
    webhook_allow_private: Option<bool>,
    pusher_key: Option<String>,
    api_keys: Vec<ApiKeyView>,
    token_keys: Vec<TokenKeyView>,
    webhook_secrets: Option<Vec<WebhookSecretView>>,
    /// The tenant's own authorization server for the hosted MCP endpoint (`issuer`, `jwksUrl`
    /// or `publicKey`, `defaultConversation`), or null.
    #[serde(rename = "mcpOAuth")]
    #[schema(value_type = Option<Object>)]
    mcp_oauth: Option<serde_json::Value>,
}

/// The secrets of a created tenant, shown once.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedSecrets {
    api_key_id: String,
    api_key: String,
    token_kid: String,
    token_secret: Option<String>,
    pusher_key: Option<String>,
    pusher_secret: Option<String>,
    webhook_secret_id: Option<String>,
    webhook_secret: Option<String>,
}

/// `POST /admin/v1/tenants`' answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedTenant {
    tenant: TenantView,
    secrets: CreatedSecrets,
}

/// A page of tenants.
#[derive(Debug, Serialize, ToSchema)]
pub struct TenantPage {
    tenants: Vec<TenantView>,
    /// The cursor of the next page, or null.
    next: Option<String>,
}

/// A new API key, shown once.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedApiKey {
    api_key_id: String,
    api_key: String,
}

/// A new token key (`tokenSecret` for an HS256 key, shown once).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedTokenKey {
    kid: String,
    token_secret: Option<String>,
}

/// A new webhook secret, shown once.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedWebhookSecret {
    webhook_secret_id: String,
    webhook_secret: String,
}

/// The `{id}` of a tenant.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct TenantId {
    /// `^[a-z0-9][a-z0-9-]{0,62}$`
    #[param(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    id: String,
}

/// `If-Match` of a change.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub struct IfMatch {
    /// The ETag of the version the change is made to (412 when it is no longer current).
    #[param(rename = "If-Match")]
    if_match: Option<String>,
}
