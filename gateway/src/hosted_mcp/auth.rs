//! Who calls the hosted MCP endpoint: every request carries `Authorization: Bearer <MCP token>`
//! (minted by `POST …/tokens` with `"scope": "mcp"`), which names the user and the
//! conversation. A page token is refused here, as an MCP token is on a page socket. A request
//! inside a session must come with a token of the user and conversation that began it.
//!
//! A tenant with its own authorization server (`mcp_issuer`) also takes its access tokens,
//! whose audience must be the endpoint under `server.public_url`: never a URL made from the
//! request's `Host` or forwarded headers. Either kind of credential is checked against the
//! tenant's revocations on every request, and a revocation ends the streams and sessions it
//! covers ([`super::live::Live::revoke`]).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawPathParams, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::grant::{McpGrant, Owner};
use super::sessions::{SESSION_HEADER, owner_key};
use super::state::McpState;
use crate::caller::Caller;
use crate::http::problem::Problem;
use crate::tenants::{Grant, Tenant};

/// The auth layer's state: the node's handles.
#[derive(Debug, Clone)]
pub struct Door {
    /// The node.
    pub app: McpState,
    /// The JWK Sets of the tenants' authorization servers.
    pub key_sets: Arc<super::oauth::KeySets>,
}

/// The JSON-RPC method of a POSTed message (the body is read, bounded, and put back); `None`
/// for other methods or a body that is not one JSON-RPC message.
async fn method_of(req: Request) -> Result<(Request, Option<String>), Response> {
    if req.method() != Method::POST {
        return Ok((req, None));
    }
    let (parts, body) = req.into_parts();
    let limit = toolmark_config::MAX_FRAME_BYTES;
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return Err(Problem::too_large(limit).into_response());
    };
    // One message is an object (a derived struct would also read an array).
    let object = bytes.trim_ascii_start().first() == Some(&b'{');
    let method = object
        .then(|| serde_json::from_slice::<Message<'_>>(&bytes).ok())
        .flatten()
        .and_then(|m| m.method)
        .map(std::borrow::Cow::into_owned);
    Ok((Request::from_parts(parts, Body::from(bytes)), method))
}

/// What the auth layer reads of a JSON-RPC message: its method, nothing else (the rest is
/// skipped, not built: rmcp parses the message).
#[derive(serde::Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
}

/// A 401 with the `WWW-Authenticate` challenge of the endpoint: for a tenant with its own
/// authorization server, where its RFC 9728 metadata is (under `server.public_url`); else the
/// gateway's realm.
fn unauthorized(app: &McpState, tenant: Option<&Tenant>) -> Response {
    let mut response = Problem::unauthorized().into_response();
    let challenge = match (tenant, app.public_url.as_deref()) {
        (Some(t), Some(base)) if t.mcp_oauth.is_some() => HeaderValue::from_str(&format!(
            "Bearer resource_metadata=\"{}{}\"",
            base.trim_end_matches('/'),
            super::metadata_path(&t.id)
        ))
        .ok(),
        _ => None,
    };
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        challenge.unwrap_or(HeaderValue::from_static("Bearer realm=\"toolmark\"")),
    );
    response
}

/// 404 for a session this node's broker does not hold (expired, deleted, or another user's):
/// the client starts a new one with `initialize`.
fn unknown_session() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}"#,
    )
        .into_response()
}

/// Who presents `token` to `tenant`'s endpoint: an MCP token of the tenant's keys, or an
/// access token of its authorization server for the endpoint under `server.public_url`;
/// either is refused once a revocation covers it.
async fn credential(door: &Door, tenant: &Arc<Tenant>, token: &str) -> Result<McpGrant, String> {
    let e = match tenant.verify_mcp(token) {
        Ok((claims, grant)) => {
            // The token holds the policy of the key that minted it, as the key is now: a key
            // narrowed narrows its tokens, a key deleted ends them.
            let caller = match &claims.akid {
                Some(id) => {
                    let key = tenant
                        .key_by_id(id)
                        .ok_or_else(|| "the API key that minted it is gone".to_owned())?;
                    Caller::McpToken {
                        id: claims.jti.clone().unwrap_or_default(),
                        api_key_id: id.clone(),
                        key: Arc::new(key.policy.clone()),
                        narrowed: Arc::new(claims.pol.clone().unwrap_or_default()),
                    }
                }
                // Minted before tokens named their key: every right of the tenant's keys.
                None => Caller::unrestricted("mcp-token"),
            };
            return Ok(McpGrant {
                tenant: Arc::clone(tenant),
                user: claims.sub,
                conversation: claims.cnv,
                grant,
                oauth: false,
                caller,
            });
        }
        Err(e) => e,
    };
    // Not a token of the tenant's own keys: perhaps an access token of its authorization
    // server, whose audience is this endpoint's public URL.
    let Some(oauth) = &tenant.mcp_oauth else {
        return Err(e.to_string());
    };
    let Some(resource) = super::resource(door.app.public_url.as_deref(), &tenant.id) else {
        return Err(
            "server.public_url is not set: no audience to check an access token against".into(),
        );
    };
    let allow_private = tenant.webhook_allow_private;
    let access =
        super::oauth::verify(oauth, &door.key_sets, token, &resource, allow_private).await?;
    // The tenant's policy for its issuer's tokens, held to read-only tools for a token whose
    // scope says `toolmark:read`.
    let policy = if access.read_only {
        oauth.policy.clone().read_only()
    } else {
        oauth.policy.clone()
    };
    let caller = Caller::OAuth {
        sub: access.user.clone(),
        client_id: access.client_id.clone(),
        policy: Arc::new(policy),
    };
    let grant = McpGrant {
        caller,
        tenant: Arc::clone(tenant),
        user: access.user,
        conversation: access.conversation,
        grant: Grant {
            kid: None,
            iat_ms: access.iat_ms,
        },
        oauth: true,
    };
    if !grant.admitted_by(tenant) {
        return Err("revoked".into());
    }
    Ok(grant)
}

/// Checks the token (and the session's owner), then lets the MCP transport answer; records the
/// owner of a session that an `initialize` just began (counted within the session bounds), and
/// ends a session the client deletes.
pub async fn authenticate(
    State(door): State<Door>,
    params: RawPathParams,
    req: Request,
    next: Next,
) -> Response {
    let app = &door.app;
    let live = &app.live;
    let Some(tenant) = params
        .iter()
        .find(|(k, _)| *k == "tenant")
        .and_then(|(_, id)| app.tenants.get(id))
    else {
        return unauthorized(app, None);
    };
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let Some(token) = crate::auth::bearer(presented) else {
        return unauthorized(app, Some(&tenant));
    };
    let grant = match credential(&door, &tenant, token).await {
        Ok(grant) => grant,
        Err(why) => {
            tracing::debug!(tenant = %tenant.id, error = %why, "MCP token refused");
            return unauthorized(app, Some(&tenant));
        }
    };
    crate::ops::Credential::note(req.extensions(), &grant.caller);
    // The key's scopes hold here as on the agent API: a credential without `calls` neither
    // lists nor calls tools (a key narrowed after minting narrows its tokens at once).
    if let Err(p) = grant.caller.require_mcp(&app.metrics) {
        return p.into_response();
    }
    let session = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let idle = app.settings.session_idle;
    if let Some(id) = &session {
        match app.broker.kept(&owner_key(id), idle).await {
            Ok(Some(stored)) => {
                let owner: Option<Owner> = serde_json::from_str(&stored).ok();
                if owner.as_ref() != Some(&grant.owner()) {
                    return unknown_session();
                }
                // The session's initialize is kept as long as its owner: a node that holds the
                // session in memory serves it without reading it, and another node may have
                // to restore it from there later.
                let _ = app.broker.kept(&super::sessions::state_key(id), idle).await;
                live.used(&grant, id).await;
            }
            Ok(None) => return unknown_session(),
            Err(e) => return Problem::from(e).into_response(),
        }
    }
    if let Some(id) = &session
        && req.method() == Method::DELETE
    {
        // The client ends its session: gone from the broker first, so that no node serves it
        // again; then from this node's memory, where it may be (or not, on another node).
        if let Err(e) = live.end(&grant, id).await {
            return Problem::from(e).into_response();
        }
        let _ = next.run(req).await;
        return StatusCode::NO_CONTENT.into_response();
    }
    let (req, method) = match method_of(req).await {
        Ok(r) => r,
        Err(response) => return response,
    };
    // An `initialize` costs one call of the tenant's rate, before any session exists.
    let initialize = session.is_none() && method.as_deref() == Some("initialize");
    if initialize
        && let Err(e) = app
            .broker
            .take_call(&tenant.id, tenant.limits.calls_per_second)
            .await
    {
        return Problem::from(e).into_response();
    }
    // A stream that stays open (a session's `GET`, a `subscriptions/listen`) takes a place.
    let lasting = req.method() == Method::GET || method.as_deref() == Some("subscriptions/listen");
    let place = if lasting {
        let limits = &app.settings;
        match live.streams.take(
            &grant,
            limits.max_streams_per_tenant,
            limits.max_streams_per_token,
        ) {
            Ok(place) => Some(place),
            Err(p) => return p.into_response(),
        }
    } else {
        None
    };
    let owner = grant.owner();
    let mut req = req;
    req.extensions_mut().insert(grant.clone());
    let mut response = next.run(req).await;
    if let Some(place) = place
        && response.status().is_success()
    {
        response = super::streams::holding(response, place);
    }
    // An `initialize` began a session: counted within the bounds (or ended at once), and its
    // owner remembered before the client learns its id.
    if session.is_none()
        && let Some(id) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    {
        if let Err(p) = live.begin(&grant, &id).await {
            return p.into_response();
        }
        let body = serde_json::to_string(&owner).unwrap_or_default();
        if let Err(e) = app.broker.keep(&owner_key(&id), &body, idle).await {
            tracing::warn!(error = %e, "MCP session not stored");
            let _ = live.end(&grant, &id).await;
            return Problem::from(e).into_response();
        }
    }
    response
}
