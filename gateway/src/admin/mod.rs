//! The admin API (`/admin/v1/…`, on its own listener): tenants created, changed, rotated and
//! deleted at run time, stored in the broker's catalog and applied on every node by
//! [`crate::tenant_sync::Loader`]. Secrets are generated here, shown once in the answer that
//! created them, and stored hashed (API keys) or sealed (everything else). Every write is a
//! compare-and-set on the tenant's version, so concurrent changes never lose one another.

use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde::Deserialize;
use serde_json::{Value, json};
use subtle::ConstantTimeEq;
use toolmark_broker::catalog::{CatalogError, Expect};
use toolmark_config::admin::{
    StoredApiKey, StoredMcpOAuth, StoredPusher, StoredSecret, StoredTokenKey, place, random_bytes,
};
use toolmark_config::policy::Policy;
use toolmark_config::tenant::{check_limits, check_origin, check_webhook_url, is_valid_app_key};
use toolmark_config::{
    AdminSettings, ConfigError, Revocation, StoredTenant, TenantLimits, TokenKey,
    is_valid_tenant_id,
};

use toolmark_broker::webhook::WebhookQueue;

use crate::http::Body;
use crate::http::problem::Problem;
use crate::tenant_sync::Loader;

pub(crate) mod console;
pub(crate) mod debug;
pub(crate) mod events;
pub(crate) mod pins;
pub(crate) mod secrets;
pub(crate) mod stats;
pub(crate) mod tenants;

use events::events;
use secrets::{
    add_api_key, add_token_key, add_webhook_secret, disconnect, patch_api_key, remove_api_key,
    remove_token_key, remove_webhook_secret,
};
use tenants::{create, list, patch, read, remove};

/// What the admin handlers share.
#[derive(Debug, Clone)]
pub struct AdminState(Arc<Inner>);

#[derive(Debug)]
pub struct Inner {
    admin: AdminSettings,
    loader: Arc<Loader>,
    /// `server.public_url`: an authorization server of a tenant needs it (the audience).
    public_url: Option<String>,
    /// What the stats, the pins and the debug views read of the node.
    node: Node,
    /// The webhook queues, read for their backlog (`None`: this node cannot read them).
    webhooks: Option<WebhookReads>,
}

/// What the admin API reads of the node it runs on (built by `serve.rs`).
#[derive(Debug)]
pub struct Node {
    /// The node's tenants (a tenant's stats, pins and debug views name one of them).
    pub tenants: crate::tenants::Tenants,
    /// Shared state: the tenants' connections and traffic, tools seen, events, dead letters.
    pub broker: toolmark_broker::SharedBroker,
    /// This node's sockets (the stats' conversations).
    pub registry: Arc<crate::registry::Registry>,
    /// This node's calls and refusals per tenant.
    pub traffic: Arc<crate::traffic::Traffic>,
    /// The process's stop token: the debug event tail ends with the drain.
    pub life: toolmark_process::Lifecycle,
}

/// The webhook queues as the stats read them.
#[derive(Clone)]
pub(crate) struct WebhookReads(Arc<dyn WebhookQueue>);

impl std::fmt::Debug for WebhookReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookReads")
    }
}

impl AdminState {
    /// The admin API of `admin`, writing through `loader`'s catalog, on the node whose parts
    /// are `node` and whose public URL is `public_url`.
    pub fn new(
        admin: AdminSettings,
        loader: Arc<Loader>,
        public_url: Option<String>,
        node: Node,
        webhooks: Option<Arc<dyn WebhookQueue>>,
    ) -> Self {
        AdminState(Arc::new(Inner {
            admin,
            loader,
            public_url,
            node,
            webhooks: webhooks.map(WebhookReads),
        }))
    }

    /// The same rules as the config file, with JSON pointers for names; an authorization
    /// server needs the node's `server.public_url`, the audience of its tokens.
    fn validate(&self, t: &StoredTenant) -> Result<(), Problem> {
        validate(t)?;
        if t.mcp_oauth.is_some() && self.0.public_url.is_none() {
            return Err(Problem::invalid(
                "/mcpOAuth",
                "an authorization server needs server.public_url set on the gateway: the audience of its access tokens is the endpoint's public URL, never taken from a request",
            ));
        }
        Ok(())
    }
}

/// Longest a page token may live (`POST …/tokens`); a revocation older than this (plus the
/// clock leeway) covers no token that could still be valid, so it is pruned.
const REVOCATION_KEPT_MS: u64 = (86_400 + crate::tenants::TOKEN_LEEWAY_SECS) * 1000;

/// The admin API routes.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/admin/v1/tenants", post(create).get(list))
        .route(
            "/admin/v1/tenants/{id}",
            get(read).patch(patch).delete(remove),
        )
        .route(
            "/admin/v1/tenants/{id}/tools",
            get(pins::get_tools).put(pins::put_tools),
        )
        .route("/admin/v1/tenants/{id}/tools/seen", get(pins::seen_tools))
        .route("/admin/v1/tenants/{id}/api-keys", post(add_api_key))
        .route(
            "/admin/v1/tenants/{id}/api-keys/{key}",
            delete(remove_api_key).patch(patch_api_key),
        )
        .route("/admin/v1/tenants/{id}/token-keys", post(add_token_key))
        .route(
            "/admin/v1/tenants/{id}/token-keys/{kid}",
            delete(remove_token_key),
        )
        .route(
            "/admin/v1/tenants/{id}/webhook-secrets",
            post(add_webhook_secret),
        )
        .route(
            "/admin/v1/tenants/{id}/webhook-secrets/{sid}",
            delete(remove_webhook_secret),
        )
        .route(
            "/admin/v1/tenants/{id}/users/{user}/disconnect",
            post(disconnect),
        )
        .route("/admin/v1/events", get(events))
        .route("/admin/v1/audit", get(events::audit))
        .route("/admin/console", get(console::page))
        .route("/admin/console/{file}", get(console::asset))
        .route("/admin/v1/stats", get(stats::cluster_stats))
        .route("/admin/v1/tenants/{id}/stats", get(stats::tenant_stats))
        .route("/admin/v1/tenants/{id}/events", get(debug::tail))
        .route(
            "/admin/v1/tenants/{id}/webhooks/failed",
            get(debug::dead_letters),
        )
        .route(
            "/admin/v1/tenants/{id}/webhooks/failed/{dl}/retry",
            post(debug::retry),
        )
        .fallback(|| async { Problem::not_found("Route") })
        .method_not_allowed_fallback(|| async { Problem::method_not_allowed() })
        .with_state(state)
}

/// A request carrying one of the admin keys; holds the key's id (for the audit log).
#[derive(Debug)]
pub struct Admin(String);

/// The fewest characters an admin key may have.
pub const MIN_ADMIN_KEY_CHARS: usize = 16;

impl FromRequestParts<AdminState> for Admin {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, s: &AdminState) -> Result<Self, Problem> {
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let key = crate::auth::bearer(header).ok_or_else(Problem::admin_unauthorized)?;
        // The file holds only hashes, whose keys' length cannot be checked there: a key too
        // short to resist guessing never authenticates, whatever hash it matches.
        if key.chars().count() < MIN_ADMIN_KEY_CHARS {
            return Err(Problem::admin_unauthorized());
        }
        let h = crate::auth::hash_key(key);
        // Every stored hash compared, each in constant time.
        let found = s.0.admin.api_keys.iter().fold(None, |acc, stored| {
            if bool::from(stored.ct_eq(&h)) {
                Some(hex::encode(&stored[..4]))
            } else {
                acc
            }
        });
        found.map(Admin).ok_or_else(Problem::admin_unauthorized)
    }
}

fn config_problem(e: ConfigError) -> Problem {
    Problem::invalid(e.key, e.reason)
}

fn now_ms() -> u64 {
    toolmark_broker::now_ms()
}

fn random_id(prefix: &str) -> String {
    format!("{prefix}{}", hex::encode(random_bytes::<6>()))
}

/// Parses a JSON body strictly; errors carry the JSON pointer.
fn parse<T: serde::de::DeserializeOwned>(body: &Body) -> Result<T, Problem> {
    let body = if body.0.is_empty() {
        &b"{}"[..]
    } else {
        &body.0[..]
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let v = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let pointer = if path == "." {
            String::new()
        } else {
            format!("/{}", path.replace('.', "/"))
        };
        Problem::invalid(pointer, e.into_inner().to_string())
    })?;
    de.end().map_err(|e| Problem::invalid("", e.to_string()))?;
    Ok(v)
}

/// Limits as the admin API takes them: camelCase (the config file's snake_case names also
/// accepted), each optional (unset keeps the current or default value).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct LimitsBody {
    #[serde(alias = "max_connections")]
    max_connections: Option<u64>,
    #[serde(alias = "max_pages_per_conversation")]
    max_pages_per_conversation: Option<u32>,
    #[serde(alias = "page_messages_per_second")]
    page_messages_per_second: Option<u32>,
    #[serde(alias = "calls_per_second")]
    calls_per_second: Option<u32>,
    #[serde(alias = "max_message_bytes")]
    max_message_bytes: Option<usize>,
    #[serde(alias = "default_call_timeout_ms")]
    default_call_timeout_ms: Option<u64>,
    #[serde(alias = "max_call_timeout_ms")]
    max_call_timeout_ms: Option<u64>,
}

impl LimitsBody {
    fn onto(self, mut l: TenantLimits) -> TenantLimits {
        if let Some(v) = self.max_connections {
            l.max_connections = v;
        }
        if let Some(v) = self.max_pages_per_conversation {
            l.max_pages_per_conversation = v;
        }
        if let Some(v) = self.page_messages_per_second {
            l.page_messages_per_second = v;
        }
        if let Some(v) = self.calls_per_second {
            l.calls_per_second = v;
        }
        if let Some(v) = self.max_message_bytes {
            l.max_message_bytes = v;
        }
        if let Some(v) = self.default_call_timeout_ms {
            l.default_call_timeout_ms = v;
        }
        if let Some(v) = self.max_call_timeout_ms {
            l.max_call_timeout_ms = v;
        }
        l
    }
}

/// `limits.max_connections` (the config rule's key) → `/limits/maxConnections`.
fn limits_pointer(config_key: &str) -> String {
    let mut out = String::from("/");
    let mut upper = false;
    for c in config_key.chars() {
        match c {
            '.' => out.push('/'),
            '_' => upper = true,
            c if upper => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
}

/// The same rules as the config file, with JSON pointers for names.
fn validate(t: &StoredTenant) -> Result<(), Problem> {
    for (j, o) in t.allowed_origins.iter().enumerate() {
        check_origin(o, &format!("/allowedOrigins/{j}")).map_err(config_problem)?;
    }
    check_limits(t.limits, &|k: &str| limits_pointer(k)).map_err(config_problem)?;
    if let Some(u) = &t.webhook_url {
        check_webhook_url(u, "/webhookUrl").map_err(config_problem)?;
    }
    if let Some(o) = &t.mcp_oauth {
        o.parse(t.webhook_allow_private).map_err(config_problem)?;
    }
    Ok(())
}

fn limits_json(l: &TenantLimits) -> Value {
    json!({
        "maxConnections": l.max_connections,
        "maxPagesPerConversation": l.max_pages_per_conversation,
        "pageMessagesPerSecond": l.page_messages_per_second,
        "callsPerSecond": l.calls_per_second,
        "maxMessageBytes": l.max_message_bytes,
        "defaultCallTimeoutMs": l.default_call_timeout_ms,
        "maxCallTimeoutMs": l.max_call_timeout_ms,
    })
}

fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

/// A stored tenant as the admin API shows it: no secret, only ids.
fn stored_view(t: &StoredTenant) -> Value {
    json!({
        "id": t.id,
        "source": "admin",
        "createdAt": rfc3339(t.created_ms),
        "allowedOrigins": t.allowed_origins,
        "limits": limits_json(&t.limits),
        "webhookUrl": t.webhook_url,
        "webhookAllowPrivate": t.webhook_allow_private,
        "pusherKey": t.pusher.as_ref().map(|p| &p.key),
        "apiKeys": t.api_keys.iter().map(|k| json!({"apiKeyId": k.id, "expiresAt": k.expires_ms.map(rfc3339), "policy": k.policy})).collect::<Vec<_>>(),
        "tokenKeys": t.token_keys.iter().map(|k| json!({"kid": k.kid, "kind": if k.secret.is_some() { "hs256" } else { "public_key" }})).collect::<Vec<_>>(),
        "webhookSecrets": t.webhook_secrets.iter().map(|s| json!({"webhookSecretId": s.id})).collect::<Vec<_>>(),
        "mcpOAuth": t.mcp_oauth,
    })
}

/// A config file's tenant as the admin API shows it.
fn static_view(t: &crate::tenants::Tenant) -> Value {
    let mut origins: Vec<&String> = t.origins.iter().collect();
    origins.sort();
    json!({
        "id": t.id,
        "source": "config",
        "allowedOrigins": origins,
        "limits": limits_json(&t.limits),
        "pusherKey": t.pusher.first().map(|p| &p.key),
        "apiKeys": t.api_keys.iter().map(|k| json!({"apiKeyId": k.id, "expiresAt": Value::Null, "policy": k.policy})).collect::<Vec<_>>(),
        "tokenKeys": t.tokens.iter().map(|(kid, k)| json!({"kid": kid.as_ref(), "kind": if k.can_mint() { "hs256" } else { "public_key" }})).collect::<Vec<_>>(),
    })
}

fn etag(version: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{version}\"")).unwrap_or(HeaderValue::from_static("\"0\""))
}

fn with_etag(status: StatusCode, body: Value, version: u64) -> Response {
    let mut res = (status, axum::Json(body)).into_response();
    res.headers_mut().insert(header::ETAG, etag(version));
    res
}

/// The version an `If-Match` names (`"7"`, `W/"7"`); `Err` when it names none we could have
/// given.
fn if_match(headers: &HeaderMap) -> Result<Option<u64>, Problem> {
    let Some(v) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let v = v.to_str().unwrap_or_default().trim();
    let v = v.strip_prefix("W/").unwrap_or(v).trim_matches('"');
    v.parse()
        .map(Some)
        .map_err(|_| Problem::precondition_failed())
}

impl AdminState {
    /// A path id that cannot name a tenant names none (404), whatever else the request says.
    fn known_id(id: &str) -> Result<(), Problem> {
        if is_valid_tenant_id(id) {
            Ok(())
        } else {
            Err(Problem::not_found("Tenant"))
        }
    }

    fn refuse_static(&self, id: &str) -> Result<(), Problem> {
        if self.0.loader.is_static(id) {
            Err(Problem::static_tenant())
        } else {
            Ok(())
        }
    }

    async fn stored(&self, id: &str) -> Result<(u64, StoredTenant), Problem> {
        let record = self
            .0
            .loader
            .catalog()
            .record(id)
            .await?
            .ok_or_else(|| Problem::not_found("Tenant"))?;
        let t = serde_json::from_str(&record.body)
            .map_err(|_| Problem::unavailable(std::time::Duration::from_secs(1)))?;
        Ok((record.version, t))
    }

    /// Read, change, write back if unchanged meanwhile; retried on a concurrent change unless
    /// the caller named the version it changes (`If-Match`), which is then a 412. `change`
    /// returns what the answer shows.
    async fn update<R>(
        &self,
        who: &Admin,
        (kind, detail): (&'static str, Value),
        id: &str,
        expected: Option<u64>,
        mut change: impl FnMut(&mut StoredTenant) -> Result<R, Problem>,
    ) -> Result<(u64, StoredTenant, R), Problem> {
        self.refuse_static(id)?;
        for _ in 0..8 {
            let (version, mut t) = self.stored(id).await?;
            if expected.is_some_and(|e| e != version) {
                return Err(Problem::precondition_failed());
            }
            let out = change(&mut t)?;
            self.validate(&t)?;
            let body = serde_json::to_string(&t).unwrap_or_default();
            match self
                .0
                .loader
                .catalog()
                .put(id, &body, Expect::Version(version))
                .await
            {
                Ok(v) => {
                    self.audit(who, kind, id, detail).await;
                    self.0.loader.load_one(id).await;
                    return Ok((v, t, out));
                }
                Err(CatalogError::Stale) if expected.is_none() => {}
                Err(CatalogError::Stale) => return Err(Problem::precondition_failed()),
                Err(CatalogError::Missing) => return Err(Problem::not_found("Tenant")),
                Err(CatalogError::Exists) => return Err(Problem::conflict("exists")),
                Err(CatalogError::Broker(b)) => return Err(b.into()),
            }
        }
        Err(Problem::conflict("the tenant kept changing; try again"))
    }
}

impl AdminState {
    /// Records an admin change: a log line, and an entry of the audit log that
    /// `GET /admin/v1/events` streams. A change whose entry the broker cannot take is still
    /// logged here.
    async fn audit(&self, who: &Admin, kind: &'static str, tenant: &str, detail: Value) {
        tracing::info!(target: "toolmark::admin", admin_key = %who.0, kind, tenant, %detail, "admin change");
        let entry = json!({
            "type": kind,
            "tenant": tenant,
            "adminKeyId": who.0,
            "at": rfc3339(now_ms()),
            "detail": detail,
        });
        if let Err(e) = self.0.loader.catalog().audit(&entry.to_string()).await {
            tracing::warn!(tenant, kind, error = %e, "admin change not in the audit log");
        }
    }
}

fn new_api_key(expires_ms: Option<u64>, policy: Policy) -> (StoredApiKey, String) {
    let key = format!("tmk_{}", URL_SAFE_NO_PAD.encode(random_bytes::<24>()));
    let stored = StoredApiKey {
        id: random_id("ak_"),
        hash: crate::auth::key_hash_string(&key),
        expires_ms,
        policy,
    };
    (stored, key)
}

/// A token key: a fresh HS256 secret (returned), or the given public key.
fn new_token_key(
    sealer: &toolmark_config::Sealer,
    tenant: &str,
    public_key: Option<String>,
    pointer: &str,
) -> Result<(StoredTokenKey, Option<String>), Problem> {
    let kid = random_id("k_");
    match public_key {
        Some(pem) => {
            TokenKey::public_pem(&pem).map_err(|e| Problem::invalid(pointer, e.to_string()))?;
            Ok((
                StoredTokenKey {
                    kid,
                    secret: None,
                    public_key: Some(pem),
                },
                None,
            ))
        }
        None => {
            let secret = URL_SAFE_NO_PAD.encode(random_bytes::<32>());
            let sealed = sealer.seal(&place(tenant, &kid), &secret);
            Ok((
                StoredTokenKey {
                    kid,
                    secret: Some(sealed),
                    public_key: None,
                },
                Some(secret),
            ))
        }
    }
}

fn new_webhook_secret(sealer: &toolmark_config::Sealer, tenant: &str) -> (StoredSecret, String) {
    let id = random_id("ws_");
    let secret = format!("whsec_{}", STANDARD.encode(random_bytes::<32>()));
    let sealed = sealer.seal(&place(tenant, &id), &secret);
    (StoredSecret { id, secret: sealed }, secret)
}
