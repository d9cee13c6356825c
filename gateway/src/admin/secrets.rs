//! A tenant's secrets and users: API keys, token keys and webhook secrets added and removed
//! while pages stay connected, and `disconnect` of a user.

use super::*;

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ApiKeyBody {
    expires_at: Option<String>,
    /// What the key may do (`docs/admin-api.md`, "API key policies"); everything when absent.
    #[schema(value_type = Option<Object>)]
    policy: Option<Value>,
}

/// `PATCH …/api-keys/{apiKeyId}`: the key's new policy.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ApiKeyPatch {
    /// Replaces the key's policy (`{}`: everything).
    #[schema(value_type = Object)]
    policy: Value,
}

/// A policy of the admin API's body at `/policy`, checked strictly.
fn policy_of(v: Value) -> Result<Policy, Problem> {
    crate::http::parse_value("/policy", v)
}

#[utoipa::path(post, path = "/admin/v1/tenants/{id}/api-keys", tag = "admin", params(crate::admin_doc::TenantId),
    request_body = ApiKeyBody,
    responses((status = 201, description = "The new key, shown once", body = crate::admin_doc::CreatedApiKey), crate::http::doc::Problems),
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
    let policy = req.policy.map(policy_of).transpose()?.unwrap_or_default();
    let (key, plain) = new_api_key(expires_ms, policy);
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

#[utoipa::path(patch, path = "/admin/v1/tenants/{id}/api-keys/{key}", tag = "admin",
    params(crate::admin_doc::TenantId, ("key" = String, Path, description = "The apiKeyId")),
    request_body = ApiKeyPatch,
    responses((status = 200, description = "The key with its new policy"), crate::http::doc::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn patch_api_key(
    State(s): State<AdminState>,
    who: Admin,
    Path((id, key)): Path<(String, String)>,
    body: Body,
) -> Result<Response, Problem> {
    let req: ApiKeyPatch = parse(&body)?;
    let policy = policy_of(req.policy)?;
    let shown = serde_json::to_value(&policy).unwrap_or_default();
    let detail = json!({"apiKeyId": key, "change": "policy", "policy": shown});
    let mut expires_ms = None;
    s.update(&who, ("tenant.key_policy", detail), &id, None, |t| {
        let k = t
            .api_keys
            .iter_mut()
            .find(|k| k.id == key)
            .ok_or_else(|| Problem::not_found("API key"))?;
        k.policy = policy.clone();
        expires_ms = k.expires_ms;
        Ok(())
    })
    .await?;
    Ok(axum::Json(json!({
        "apiKeyId": key,
        "expiresAt": expires_ms.map(super::rfc3339),
        "policy": shown,
    }))
    .into_response())
}

#[utoipa::path(delete, path = "/admin/v1/tenants/{id}/api-keys/{key}", tag = "admin",
    params(crate::admin_doc::TenantId, ("key" = String, Path, description = "The apiKeyId")),
    responses((status = 204, description = "Removed"), crate::http::doc::Problems),
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
    responses((status = 201, description = "The new key (its HS256 secret shown once)", body = crate::admin_doc::CreatedTokenKey), crate::http::doc::Problems),
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
    responses((status = 204, description = "Removed: pages whose token it signed are closed with 4401"), crate::http::doc::Problems),
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
    responses((status = 201, description = "The new secret, shown once", body = crate::admin_doc::CreatedWebhookSecret), crate::http::doc::Problems),
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
    responses((status = 204, description = "Removed"), crate::http::doc::Problems),
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
    responses((status = 202, description = "The user's pages are being closed with 4401 everywhere"), crate::http::doc::Problems),
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
