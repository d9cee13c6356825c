//! Tenants: create, list, read, change (JSON Merge Patch with `If-Match`) and delete.

use super::*;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CreateBody {
    id: String,
    allowed_origins: Vec<String>,
    token_public_key: Option<String>,
    #[serde(default)]
    pusher: bool,
    webhook_url: Option<String>,
    /// Deliver webhooks to loopback, private and link-local addresses too (default false).
    #[serde(default)]
    webhook_allow_private: bool,
    limits: Option<LimitsBody>,
    /// The tenant's own authorization server for the hosted MCP endpoint.
    #[serde(rename = "mcpOAuth")]
    #[schema(value_type = Option<Object>)]
    mcp_oauth: Option<StoredMcpOAuth>,
}

#[utoipa::path(post, path = "/admin/v1/tenants", tag = "admin", request_body = CreateBody,
    responses((status = 201, description = "Created; its secrets are shown once", body = crate::admin_doc::CreatedTenant), crate::http::doc::Problems),
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
    let (api_key, api_key_plain) = new_api_key(None, Policy::default());
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
        webhook_allow_private: req.webhook_allow_private,
        api_keys: vec![api_key.clone()],
        token_keys: vec![token_key.clone()],
        pusher: pusher.as_ref().map(|(p, _, _)| p.clone()),
        webhook_secrets: webhook.iter().map(|(w, _)| w.clone()).collect(),
        revoked: Vec::new(),
        mcp_oauth: req.mcp_oauth,
        tools: toolmark_config::pins::PinsConfig::default(),
    };
    s.validate(&t)?;
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
    responses((status = 200, description = "A page of tenants, by id", body = crate::admin_doc::TenantPage), crate::http::doc::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn list(
    State(s): State<AdminState>,
    _who: Admin,
    crate::http::QueryOf(q): crate::http::QueryOf<ListQuery>,
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
    responses((status = 200, description = "The tenant, with an ETag", body = crate::admin_doc::TenantView), crate::http::doc::Problems),
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
    request_body(content = Object, description = "A JSON Merge Patch of allowedOrigins, limits, webhookUrl, webhookAllowPrivate", content_type = "application/merge-patch+json"),
    responses((status = 200, description = "The tenant", body = crate::admin_doc::TenantView), crate::http::doc::AdminProblems),
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
            "allowedOrigins" | "limits" | "webhookUrl" | "webhookAllowPrivate" | "mcpOAuth"
        ) {
            return Err(Problem::invalid(
                format!("/{k}"),
                "only allowedOrigins, limits, webhookUrl, webhookAllowPrivate and mcpOAuth can be changed",
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
                    t.allowed_origins = crate::http::parse_value("/allowedOrigins", v.clone())?;
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
                            crate::http::parse_value("/limits", Value::Object(set))?;
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
                match fields.get("webhookAllowPrivate") {
                    None => {}
                    Some(Value::Null) => t.webhook_allow_private = false,
                    Some(Value::Bool(b)) => t.webhook_allow_private = *b,
                    Some(_) => {
                        return Err(Problem::invalid(
                            "/webhookAllowPrivate",
                            "a boolean or null",
                        ));
                    }
                }
                match fields.get("mcpOAuth") {
                    None => {}
                    Some(Value::Null) => t.mcp_oauth = None,
                    // Replaced whole: its fields depend on each other (a JWK Set or a key).
                    Some(v) => {
                        t.mcp_oauth = Some(crate::http::parse_value("/mcpOAuth", v.clone())?)
                    }
                }
                Ok(())
            },
        )
        .await?;
    Ok(with_etag(StatusCode::OK, stored_view(&t), version))
}

#[utoipa::path(delete, path = "/admin/v1/tenants/{id}", tag = "admin", params(crate::admin_doc::TenantId, crate::admin_doc::IfMatch),
    responses((status = 204, description = "Deleted: its pages closed with 4401 on every node"), crate::http::doc::AdminProblems),
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
                s.0.node.traffic.forget(&id);
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
