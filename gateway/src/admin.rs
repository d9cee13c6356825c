//! The admin API (`/admin/v1/…`, on its own listener): tenants created, changed, rotated and
//! deleted at run time, stored in the broker's catalog and applied on every node by
//! [`crate::catalog::Loader`]. Secrets are generated here, shown once in the answer that
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
use toolmark_process::config::admin::{
    StoredApiKey, StoredMcpOAuth, StoredPusher, StoredSecret, StoredTokenKey, place, random_bytes,
};
use toolmark_process::config::tenant::{
    check_limits, check_origin, check_webhook_url, is_valid_app_key,
};
use toolmark_process::config::{
    AdminSettings, ConfigError, Revocation, StoredTenant, TenantLimits, TokenKey,
    is_valid_tenant_id,
};

use crate::api::Body;
use crate::catalog::Loader;
use crate::problem::Problem;

/// What the admin handlers share.
#[derive(Debug, Clone)]
pub struct AdminState(Arc<Inner>);

#[derive(Debug)]
pub struct Inner {
    admin: AdminSettings,
    loader: Arc<Loader>,
}

impl AdminState {
    /// The admin API of `admin`, writing through `loader`'s catalog.
    pub fn new(admin: AdminSettings, loader: Arc<Loader>) -> Self {
        AdminState(Arc::new(Inner { admin, loader }))
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
        .route("/admin/v1/tenants/{id}/api-keys", post(add_api_key))
        .route(
            "/admin/v1/tenants/{id}/api-keys/{key}",
            delete(remove_api_key),
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
        .fallback(|| async { Problem::not_found("Route") })
        .method_not_allowed_fallback(|| async { Problem::method_not_allowed() })
        .with_state(state)
}

/// A request carrying one of the admin keys; holds the key's id (for the audit log).
#[derive(Debug)]
pub struct Admin(String);

impl FromRequestParts<AdminState> for Admin {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, s: &AdminState) -> Result<Self, Problem> {
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let key = crate::auth::bearer(header).ok_or_else(Problem::admin_unauthorized)?;
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
        o.parse().map_err(config_problem)?;
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
        "pusherKey": t.pusher.as_ref().map(|p| &p.key),
        "apiKeys": t.api_keys.iter().map(|k| json!({"apiKeyId": k.id, "expiresAt": k.expires_ms.map(rfc3339)})).collect::<Vec<_>>(),
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
        "apiKeys": t.api_keys.iter().map(|k| json!({"apiKeyId": k.id, "expiresAt": Value::Null})).collect::<Vec<_>>(),
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
            validate(&t)?;
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

fn new_api_key(expires_ms: Option<u64>) -> (StoredApiKey, String) {
    let key = format!("tmk_{}", URL_SAFE_NO_PAD.encode(random_bytes::<24>()));
    let stored = StoredApiKey {
        id: random_id("ak_"),
        hash: crate::auth::key_hash_string(&key),
        expires_ms,
    };
    (stored, key)
}

/// A token key: a fresh HS256 secret (returned), or the given public key.
fn new_token_key(
    sealer: &toolmark_process::config::Sealer,
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

fn new_webhook_secret(
    sealer: &toolmark_process::config::Sealer,
    tenant: &str,
) -> (StoredSecret, String) {
    let id = random_id("ws_");
    let secret = format!("whsec_{}", STANDARD.encode(random_bytes::<32>()));
    let sealed = sealer.seal(&place(tenant, &id), &secret);
    (StoredSecret { id, secret: sealed }, secret)
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CreateBody {
    id: String,
    allowed_origins: Vec<String>,
    token_public_key: Option<String>,
    #[serde(default)]
    pusher: bool,
    webhook_url: Option<String>,
    limits: Option<LimitsBody>,
    /// The tenant's own authorization server for the hosted MCP endpoint.
    #[serde(rename = "mcpOAuth")]
    #[schema(value_type = Option<Object>)]
    mcp_oauth: Option<StoredMcpOAuth>,
}

#[utoipa::path(post, path = "/admin/v1/tenants", tag = "admin", request_body = CreateBody,
    responses((status = 201, description = "Created; its secrets are shown once", body = crate::admin_doc::CreatedTenant), crate::openapi::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn create(
    State(s): State<AdminState>,
    who: Admin,
    body: Body,
) -> Result<Response, Problem> {
    let req: CreateBody = parse(&body)?;
    if !is_valid_tenant_id(&req.id) {
        return Err(Problem::invalid(
            "/id",
            "must match ^[a-z0-9][a-z0-9-]{0,62}$",
        ));
    }
    s.refuse_static(&req.id)?;
    let sealer = s.0.loader.sealer();
    let (api_key, api_key_plain) = new_api_key(None);
    let (token_key, token_secret) =
        new_token_key(sealer, &req.id, req.token_public_key, "/tokenPublicKey")?;
    let pusher = req.pusher.then(|| {
        let key = hex::encode(random_bytes::<10>());
        let secret = hex::encode(random_bytes::<16>());
        debug_assert!(is_valid_app_key(&key));
        (
            StoredPusher {
                key: key.clone(),
                secret: sealer.seal(&place(&req.id, "pusher"), &secret),
            },
            key,
            secret,
        )
    });
    let webhook = req
        .webhook_url
        .as_ref()
        .map(|_| new_webhook_secret(sealer, &req.id));
    let t = StoredTenant {
        id: req.id.clone(),
        created_ms: now_ms(),
        allowed_origins: req.allowed_origins,
        limits: req.limits.unwrap_or_default().onto(TenantLimits::default()),
        webhook_url: req.webhook_url,
        api_keys: vec![api_key.clone()],
        token_keys: vec![token_key.clone()],
        pusher: pusher.as_ref().map(|(p, _, _)| p.clone()),
        webhook_secrets: webhook.iter().map(|(w, _)| w.clone()).collect(),
        revoked: Vec::new(),
        mcp_oauth: req.mcp_oauth,
    };
    validate(&t)?;
    let body = serde_json::to_string(&t).unwrap_or_default();
    let version = match s.0.loader.catalog().put(&t.id, &body, Expect::Absent).await {
        Ok(v) => v,
        Err(CatalogError::Exists) => {
            return Err(Problem::conflict("a tenant with this id exists"));
        }
        Err(CatalogError::Broker(b)) => return Err(b.into()),
        Err(_) => return Err(Problem::conflict("the tenant changed meanwhile")),
    };
    s.audit(&who, "tenant.created", &t.id, json!({})).await;
    s.0.loader.load_one(&t.id).await;
    let mut secrets = json!({
        "apiKeyId": api_key.id,
        "apiKey": api_key_plain,
        "tokenKid": token_key.kid,
    });
    if let Some(secret) = token_secret {
        secrets["tokenSecret"] = json!(secret);
    }
    if let Some((_, key, secret)) = &pusher {
        secrets["pusherKey"] = json!(key);
        secrets["pusherSecret"] = json!(secret);
    }
    if let Some((w, plain)) = &webhook {
        secrets["webhookSecretId"] = json!(w.id);
        secrets["webhookSecret"] = json!(plain);
    }
    Ok(with_etag(
        StatusCode::CREATED,
        json!({"tenant": stored_view(&t), "secrets": secrets}),
        version,
    ))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// 1–1000 (default 100).
    #[param(pattern = "^[0-9]{1,4}$")]
    limit: Option<String>,
    /// The `next` of the previous page.
    cursor: Option<String>,
}

#[utoipa::path(get, path = "/admin/v1/tenants", tag = "admin", params(ListQuery),
    responses((status = 200, description = "A page of tenants, by id", body = crate::admin_doc::TenantPage), crate::openapi::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn list(
    State(s): State<AdminState>,
    _who: Admin,
    crate::api::QueryOf(q): crate::api::QueryOf<ListQuery>,
) -> Result<Response, Problem> {
    let limit = match q.limit.as_deref() {
        None => 100,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=1000).contains(l))
            .ok_or_else(|| Problem::invalid("/limit", "limit is between 1 and 1000"))?,
    };
    let (_, records) = s.0.loader.catalog().records().await?;
    let mut all: Vec<(String, Value)> =
        s.0.loader
            .statics()
            .iter()
            .map(|t| (t.id.clone(), static_view(t)))
            .collect();
    for r in records {
        if let Ok(t) = serde_json::from_str::<StoredTenant>(&r.body)
            && !s.0.loader.is_static(&t.id)
        {
            all.push((t.id.clone(), stored_view(&t)));
        }
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    let after = q.cursor.unwrap_or_default();
    let page: Vec<(String, Value)> = all
        .into_iter()
        .filter(|(id, _)| after.is_empty() || *id > after)
        .take(limit + 1)
        .collect();
    let more = page.len() > limit;
    let page: Vec<(String, Value)> = page.into_iter().take(limit).collect();
    let next = if more {
        page.last().map(|(id, _)| json!(id)).unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    let tenants: Vec<Value> = page.into_iter().map(|(_, v)| v).collect();
    Ok(axum::Json(json!({"tenants": tenants, "next": next})).into_response())
}

#[utoipa::path(get, path = "/admin/v1/tenants/{id}", tag = "admin", params(crate::admin_doc::TenantId),
    responses((status = 200, description = "The tenant, with an ETag", body = crate::admin_doc::TenantView), crate::openapi::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn read(
    State(s): State<AdminState>,
    _who: Admin,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    if let Some(t) = s.0.loader.statics().iter().find(|t| t.id == id) {
        return Ok(with_etag(StatusCode::OK, static_view(t), 0));
    }
    let (version, t) = s.stored(&id).await?;
    Ok(with_etag(StatusCode::OK, stored_view(&t), version))
}

#[utoipa::path(patch, path = "/admin/v1/tenants/{id}", tag = "admin", params(crate::admin_doc::TenantId, crate::admin_doc::IfMatch),
    request_body(content = Object, description = "A JSON Merge Patch of allowedOrigins, limits, webhookUrl", content_type = "application/merge-patch+json"),
    responses((status = 200, description = "The tenant", body = crate::admin_doc::TenantView), crate::openapi::AdminProblems),
    security(("adminKey" = [])))]
pub(crate) async fn patch(
    State(s): State<AdminState>,
    who: Admin,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    AdminState::known_id(&id)?;
    if body.0.is_empty() {
        return Err(Problem::invalid(
            "",
            "a JSON Merge Patch object is required",
        ));
    }
    let doc: Value = parse(&body)?;
    let Value::Object(fields) = doc else {
        return Err(Problem::invalid("", "a JSON Merge Patch object"));
    };
    for k in fields.keys() {
        if !matches!(
            k.as_str(),
            "allowedOrigins" | "limits" | "webhookUrl" | "mcpOAuth"
        ) {
            return Err(Problem::invalid(
                format!("/{k}"),
                "only allowedOrigins, limits, webhookUrl and mcpOAuth can be changed",
            ));
        }
    }
    let expected = if_match(&headers)?;
    let (version, t, ()) = s
        .update(
            &who,
            (
                "tenant.updated",
                json!({"changed": fields.keys().collect::<Vec<_>>()}),
            ),
            &id,
            expected,
            |t| {
                if let Some(v) = fields.get("allowedOrigins") {
                    t.allowed_origins = crate::api::parse_value("/allowedOrigins", v.clone())?;
                }
                match fields.get("limits") {
                    None => {}
                    Some(Value::Null) => t.limits = TenantLimits::default(),
                    Some(Value::Object(l)) => {
                        // Merge Patch: a member set to null goes back to its default.
                        let defaults = limits_json(&TenantLimits::default());
                        let mut set = serde_json::Map::new();
                        for (k, v) in l {
                            let v = if v.is_null() {
                                defaults.get(k).cloned().unwrap_or(Value::Null)
                            } else {
                                v.clone()
                            };
                            set.insert(k.clone(), v);
                        }
                        let body: LimitsBody =
                            crate::api::parse_value("/limits", Value::Object(set))?;
                        t.limits = body.onto(t.limits);
                    }
                    Some(_) => return Err(Problem::invalid("/limits", "an object")),
                }
                match fields.get("webhookUrl") {
                    None => {}
                    Some(Value::Null) => t.webhook_url = None,
                    Some(Value::String(u)) => {
                        if t.webhook_secrets.is_empty() {
                            return Err(Problem::conflict(
                                "add a webhook secret (POST …/webhook-secrets) before a webhookUrl",
                            ));
                        }
                        t.webhook_url = Some(u.clone());
                    }
                    Some(_) => return Err(Problem::invalid("/webhookUrl", "a URL or null")),
                }
                match fields.get("mcpOAuth") {
                    None => {}
                    Some(Value::Null) => t.mcp_oauth = None,
                    // Replaced whole: its fields depend on each other (a JWK Set or a key).
                    Some(v) => t.mcp_oauth = Some(crate::api::parse_value("/mcpOAuth", v.clone())?),
                }
                Ok(())
            },
        )
        .await?;
    Ok(with_etag(StatusCode::OK, stored_view(&t), version))
}

#[utoipa::path(delete, path = "/admin/v1/tenants/{id}", tag = "admin", params(crate::admin_doc::TenantId, crate::admin_doc::IfMatch),
    responses((status = 204, description = "Deleted: its pages closed with 4401 on every node"), crate::openapi::AdminProblems),
    security(("adminKey" = [])))]
pub(crate) async fn remove(
    State(s): State<AdminState>,
    who: Admin,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    AdminState::known_id(&id)?;
    s.refuse_static(&id)?;
    let expected = if_match(&headers)?;
    for _ in 0..8 {
        let (version, _) = s.stored(&id).await?;
        if expected.is_some_and(|e| e != version) {
            return Err(Problem::precondition_failed());
        }
        match s.0.loader.catalog().remove(&id, version).await {
            Ok(()) => {
                s.audit(&who, "tenant.deleted", &id, json!({})).await;
                s.0.loader.load_one(&id).await;
                if let Err(e) = s.0.loader.catalog().drop_tenant(&id).await {
                    tracing::warn!(tenant = %id, error = %e, "deleted tenant's events and queues not dropped; they expire with their retention");
                }
                return Ok(StatusCode::NO_CONTENT.into_response());
            }
            Err(CatalogError::Stale) if expected.is_none() => {}
            Err(CatalogError::Stale) => return Err(Problem::precondition_failed()),
            Err(CatalogError::Missing) => return Err(Problem::not_found("Tenant")),
            Err(CatalogError::Broker(b)) => return Err(b.into()),
            Err(CatalogError::Exists) => return Err(Problem::conflict("exists")),
        }
    }
    Err(Problem::conflict("the tenant kept changing; try again"))
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ApiKeyBody {
    expires_at: Option<String>,
}

#[utoipa::path(post, path = "/admin/v1/tenants/{id}/api-keys", tag = "admin", params(crate::admin_doc::TenantId),
    request_body = ApiKeyBody,
    responses((status = 201, description = "The new key, shown once", body = crate::admin_doc::CreatedApiKey), crate::openapi::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn add_api_key(
    State(s): State<AdminState>,
    who: Admin,
    Path(id): Path<String>,
    body: Body,
) -> Result<Response, Problem> {
    let req: ApiKeyBody = parse(&body)?;
    let expires_ms = match req.expires_at {
        None => None,
        Some(t) => {
            let at = humantime::parse_rfc3339_weak(&t)
                .map_err(|_| Problem::invalid("/expiresAt", "an RFC 3339 timestamp"))?;
            let ms = at
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0);
            if ms <= now_ms() {
                return Err(Problem::invalid("/expiresAt", "must be in the future"));
            }
            Some(ms)
        }
    };
    let (key, plain) = new_api_key(expires_ms);
    let shown = key.id.clone();
    let detail = json!({"apiKeyId": shown, "change": "added"});
    s.update(&who, ("tenant.key_rotated", detail), &id, None, |t| {
        t.api_keys.push(key.clone());
        Ok(())
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({"apiKeyId": shown, "apiKey": plain})),
    )
        .into_response())
}

#[utoipa::path(delete, path = "/admin/v1/tenants/{id}/api-keys/{key}", tag = "admin",
    params(crate::admin_doc::TenantId, ("key" = String, Path, description = "The apiKeyId")),
    responses((status = 204, description = "Removed"), crate::openapi::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn remove_api_key(
    State(s): State<AdminState>,
    who: Admin,
    Path((id, key)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let detail = json!({"apiKeyId": key, "change": "removed"});
    s.update(&who, ("tenant.key_rotated", detail), &id, None, |t| {
        let before = t.api_keys.len();
        t.api_keys.retain(|k| k.id != key);
        if t.api_keys.len() == before {
            return Err(Problem::not_found("API key"));
        }
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TokenKeyBody {
    public_key: Option<String>,
}

#[utoipa::path(post, path = "/admin/v1/tenants/{id}/token-keys", tag = "admin", params(crate::admin_doc::TenantId),
    request_body = TokenKeyBody,
    responses((status = 201, description = "The new key (its HS256 secret shown once)", body = crate::admin_doc::CreatedTokenKey), crate::openapi::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn add_token_key(
    State(s): State<AdminState>,
    who: Admin,
    Path(id): Path<String>,
    body: Body,
) -> Result<Response, Problem> {
    let req: TokenKeyBody = parse(&body)?;
    s.refuse_static(&id)?;
    let (key, secret) = new_token_key(s.0.loader.sealer(), &id, req.public_key, "/publicKey")?;
    let kid = key.kid.clone();
    let detail = json!({"kid": kid, "change": "added"});
    s.update(&who, ("tenant.key_rotated", detail), &id, None, |t| {
        t.token_keys.push(key.clone());
        Ok(())
    })
    .await?;
    let mut out = json!({"kid": kid});
    if let Some(secret) = secret {
        out["tokenSecret"] = json!(secret);
    }
    Ok((StatusCode::CREATED, axum::Json(out)).into_response())
}

#[utoipa::path(delete, path = "/admin/v1/tenants/{id}/token-keys/{kid}", tag = "admin",
    params(crate::admin_doc::TenantId, ("kid" = String, Path, description = "The key's kid")),
    responses((status = 204, description = "Removed: pages whose token it signed are closed with 4401"), crate::openapi::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn remove_token_key(
    State(s): State<AdminState>,
    who: Admin,
    Path((id, kid)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let detail = json!({"kid": kid, "change": "removed"});
    s.update(&who, ("tenant.key_rotated", detail), &id, None, |t| {
        if !t.token_keys.iter().any(|k| k.kid == kid) {
            return Err(Problem::not_found("Token key"));
        }
        if t.token_keys.len() == 1 {
            return Err(Problem::conflict(
                "a tenant keeps at least one token key: add the next one first",
            ));
        }
        t.token_keys.retain(|k| k.kid != kid);
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[utoipa::path(post, path = "/admin/v1/tenants/{id}/webhook-secrets", tag = "admin", params(crate::admin_doc::TenantId),
    responses((status = 201, description = "The new secret, shown once", body = crate::admin_doc::CreatedWebhookSecret), crate::openapi::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn add_webhook_secret(
    State(s): State<AdminState>,
    who: Admin,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    s.refuse_static(&id)?;
    let (secret, plain) = new_webhook_secret(s.0.loader.sealer(), &id);
    let shown = secret.id.clone();
    let detail = json!({"webhookSecretId": shown, "change": "added"});
    s.update(&who, ("tenant.key_rotated", detail), &id, None, |t| {
        t.webhook_secrets.push(secret.clone());
        Ok(())
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({"webhookSecretId": shown, "webhookSecret": plain})),
    )
        .into_response())
}

#[utoipa::path(delete, path = "/admin/v1/tenants/{id}/webhook-secrets/{sid}", tag = "admin",
    params(crate::admin_doc::TenantId, ("sid" = String, Path, description = "The webhookSecretId")),
    responses((status = 204, description = "Removed"), crate::openapi::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn remove_webhook_secret(
    State(s): State<AdminState>,
    who: Admin,
    Path((id, sid)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let detail = json!({"webhookSecretId": sid, "change": "removed"});
    s.update(&who, ("tenant.key_rotated", detail), &id, None, |t| {
        if !t.webhook_secrets.iter().any(|w| w.id == sid) {
            return Err(Problem::not_found("Webhook secret"));
        }
        if t.webhook_secrets.len() == 1 && t.webhook_url.is_some() {
            return Err(Problem::conflict(
                "a tenant with a webhookUrl keeps at least one webhook secret: add the next one first",
            ));
        }
        t.webhook_secrets.retain(|w| w.id != sid);
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct DisconnectBody {
    conversation: Option<String>,
}

#[utoipa::path(post, path = "/admin/v1/tenants/{id}/users/{user}/disconnect", tag = "admin",
    params(crate::admin_doc::TenantId, ("user" = String, Path, description = "The user", pattern = "^[A-Za-z0-9_-]{1,128}$")),
    request_body = DisconnectBody,
    responses((status = 202, description = "The user's pages are being closed with 4401 everywhere"), crate::openapi::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn disconnect(
    State(s): State<AdminState>,
    who: Admin,
    Path((id, user)): Path<(String, String)>,
    body: Body,
) -> Result<Response, Problem> {
    let req: DisconnectBody = parse(&body)?;
    if !crate::ids::is_valid_id(&user) {
        return Err(Problem::invalid(
            "/user",
            "user ids match ^[A-Za-z0-9_-]{1,128}$",
        ));
    }
    if let Some(c) = &req.conversation
        && !crate::ids::is_valid_id(c)
    {
        return Err(Problem::invalid(
            "/conversation",
            "conversation ids match ^[A-Za-z0-9_-]{1,128}$",
        ));
    }
    let at_ms = now_ms();
    let detail = json!({"disconnected": {"user": user, "conversation": req.conversation}});
    s.update(&who, ("tenant.updated", detail), &id, None, |t| {
        t.revoked.retain(|r| r.at_ms + REVOCATION_KEPT_MS > at_ms);
        t.revoked.push(Revocation {
            user: user.clone(),
            conversation: req.conversation.clone(),
            at_ms,
        });
        Ok(())
    })
    .await?;
    Ok(StatusCode::ACCEPTED.into_response())
}

/// How often an audit stream looks for new entries.
const AUDIT_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// `GET /admin/v1/events`: the audit log as Server-Sent Events (`tenant.created`,
/// `tenant.updated`, `tenant.deleted`, `tenant.key_rotated`), from the oldest kept or after
/// `Last-Event-ID`, then live. The log is the broker's, so every node streams the same.
#[utoipa::path(get, path = "/admin/v1/events", tag = "admin",
    responses((status = 200, description = "Server-Sent Events of the audit log: tenant.created, tenant.updated, tenant.deleted, tenant.key_rotated", content_type = "text/event-stream"), crate::openapi::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn events(
    State(s): State<AdminState>,
    _who: Admin,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // One read now: a broker that cannot answer is a 503, not an empty stream.
    let first =
        s.0.loader
            .catalog()
            .audit_log(after.as_deref(), 100)
            .await?;
    let catalog = Arc::clone(s.0.loader.catalog());
    let stream = futures_util::stream::unfold(
        (catalog, after, Some(first)),
        |(catalog, mut after, mut pending)| async move {
            loop {
                let batch = match pending.take() {
                    Some(b) => b,
                    None => {
                        tokio::time::sleep(AUDIT_POLL).await;
                        catalog
                            .audit_log(after.as_deref(), 100)
                            .await
                            .unwrap_or_default()
                    }
                };
                if batch.is_empty() {
                    continue;
                }
                after = batch.last().map(|(id, _)| id.clone());
                let events: Vec<Result<SseEvent, std::convert::Infallible>> = batch
                    .into_iter()
                    .map(|(id, entry)| {
                        let kind = serde_json::from_str::<Value>(&entry)
                            .ok()
                            .and_then(|v| v["type"].as_str().map(str::to_owned))
                            .unwrap_or_else(|| "admin".to_owned());
                        Ok(SseEvent::default().id(id).event(kind).data(entry))
                    })
                    .collect();
                return Some((futures_util::stream::iter(events), (catalog, after, None)));
            }
        },
    );
    let stream = futures_util::StreamExt::flatten(stream);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(std::time::Duration::from_secs(15)))
        .into_response())
}
