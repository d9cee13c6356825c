//! Who calls the hosted MCP endpoint: every request carries `Authorization: Bearer <MCP token>`
//! (minted by `POST …/tokens` with `"scope": "mcp"`), which names the user and the
//! conversation. A page token is refused here, as an MCP token is on a page socket. A request
//! inside a session must come with a token of the user and conversation that began it.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawPathParams, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use toolmark_broker::ConvKey;

use super::sessions::{SESSION_HEADER, owner_key};
use super::streams::Streams;
use crate::problem::Problem;
use crate::state::AppState;
use crate::tenants::Tenant;

/// What an MCP request may reach: one conversation of one user of one tenant.
#[derive(Debug, Clone)]
pub struct McpGrant {
    /// The tenant.
    pub tenant: Arc<Tenant>,
    /// The user (`sub`).
    pub user: String,
    /// The conversation (`cnv`).
    pub conversation: String,
}

impl McpGrant {
    /// The conversation's broker key.
    pub fn conv(&self) -> ConvKey {
        ConvKey::new(&self.tenant.id, &self.user, &self.conversation)
    }

    fn owner(&self) -> Owner {
        Owner {
            tenant: self.tenant.id.clone(),
            user: self.user.clone(),
            conversation: self.conversation.clone(),
        }
    }
}

/// Who began a session, kept beside it in the broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Owner {
    tenant: String,
    user: String,
    conversation: String,
}

/// The auth layer's state: the node's handles and its open MCP streams.
#[derive(Debug, Clone)]
pub struct Door {
    /// The node.
    pub app: AppState,
    /// Its open streams.
    pub streams: Arc<Streams>,
    /// The JWK Sets of the tenants' authorization servers.
    pub key_sets: Arc<super::oauth::KeySets>,
}

/// Whether the request opens a stream that stays open: a `GET`, or a POSTed
/// `subscriptions/listen` (the body is read, bounded, and put back).
async fn lasting(req: Request) -> Result<(Request, bool), Response> {
    match *req.method() {
        Method::GET => return Ok((req, true)),
        Method::POST => {}
        _ => return Ok((req, false)),
    }
    let (parts, body) = req.into_parts();
    let limit = toolmark_process::config::MAX_FRAME_BYTES;
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return Err(Problem::too_large(limit).into_response());
    };
    let listen = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .is_some_and(|m| m.get("method").and_then(|v| v.as_str()) == Some("subscriptions/listen"));
    Ok((Request::from_parts(parts, Body::from(bytes)), listen))
}

/// A 401 with the `WWW-Authenticate` challenge of the endpoint: for a tenant with its own
/// authorization server, where its RFC 9728 metadata is; else the gateway's realm.
fn unauthorized(app: &AppState, tenant: Option<&Tenant>, headers: &HeaderMap) -> Response {
    let mut response = Problem::unauthorized().into_response();
    let challenge = match tenant {
        Some(t) if t.mcp_oauth.is_some() => {
            let base = crate::api::conversations::base_url(app.public_url.as_deref(), headers);
            HeaderValue::from_str(&format!(
                "Bearer resource_metadata=\"{base}{}\"",
                super::metadata_path(&t.id)
            ))
            .ok()
        }
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

/// Checks the token (and the session's owner), then lets the MCP transport answer; records the
/// owner of a session that an `initialize` just began, and ends a session the client deletes.
pub async fn authenticate(
    State(door): State<Door>,
    params: RawPathParams,
    req: Request,
    next: Next,
) -> Response {
    let app = &door.app;
    let Some(tenant) = params
        .iter()
        .find(|(k, _)| *k == "tenant")
        .and_then(|(_, id)| app.tenants.get(id))
    else {
        return unauthorized(app, None, req.headers());
    };
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let Some(token) = crate::auth::bearer(presented) else {
        return unauthorized(app, Some(&tenant), req.headers());
    };
    let grant = match tenant.verify_mcp(token) {
        Ok((claims, _)) => McpGrant {
            tenant: Arc::clone(&tenant),
            user: claims.sub,
            conversation: claims.cnv,
        },
        Err(e) => {
            // Not a token of the tenant's own keys: perhaps an access token of its
            // authorization server, whose audience is this endpoint.
            let verified = match &tenant.mcp_oauth {
                Some(oauth) => {
                    let resource = crate::api::conversations::mcp_url(
                        app.public_url.as_deref(),
                        req.headers(),
                        &tenant.id,
                    );
                    super::oauth::verify(oauth, &door.key_sets, token, &resource).await
                }
                None => Err(e.to_string()),
            };
            match verified {
                Ok((user, conversation)) => McpGrant {
                    tenant: Arc::clone(&tenant),
                    user,
                    conversation,
                },
                Err(why) => {
                    tracing::debug!(tenant = %tenant.id, error = %why, "MCP token refused");
                    return unauthorized(app, Some(&tenant), req.headers());
                }
            }
        }
    };
    let session = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let idle = app.hosted_mcp.session_idle;
    if let Some(id) = &session {
        match app.broker.session(&owner_key(id), idle).await {
            Ok(Some(stored)) => {
                let owner: Option<Owner> = serde_json::from_str(&stored).ok();
                if owner.as_ref() != Some(&grant.owner()) {
                    return unknown_session();
                }
                // The session's initialize is kept as long as its owner: a node that holds the
                // session in memory serves it without reading it, and another node may have
                // to restore it from there later.
                let _ = app
                    .broker
                    .session(&super::sessions::state_key(id), idle)
                    .await;
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
        if let Err(e) = super::sessions::end(&app.broker, id).await {
            return Problem::from(e).into_response();
        }
        let _ = next.run(req).await;
        return StatusCode::NO_CONTENT.into_response();
    }
    // A stream that stays open (a session's `GET`, a `subscriptions/listen`) takes a place.
    let (req, lasting) = match lasting(req).await {
        Ok(r) => r,
        Err(response) => return response,
    };
    let place = if lasting {
        let limits = &app.hosted_mcp;
        match door.streams.take(
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
    req.extensions_mut().insert(grant);
    let mut response = next.run(req).await;
    if let Some(place) = place
        && response.status().is_success()
    {
        response = super::streams::holding(response, place);
    }
    // An `initialize` began a session: remember whose it is before the client learns its id.
    if session.is_none()
        && let Some(id) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
    {
        let body = serde_json::to_string(&owner).unwrap_or_default();
        if let Err(e) = app.broker.put_session(&owner_key(id), &body, idle).await {
            tracing::warn!(error = %e, "MCP session not stored");
            return Problem::from(e).into_response();
        }
    }
    response
}
