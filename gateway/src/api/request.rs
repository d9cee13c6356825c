//! What an agent API request carries: the path tenant, authenticated with one of its API keys,
//! and a body parsed strictly under that tenant's message size limit.

use std::marker::PhantomData;
use std::sync::Arc;

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::api::state::ApiState;
use crate::caller::Caller;
use crate::http::{Body, Problem, parse_json};
use crate::tenants::Tenant;
use toolmark_config::policy::Scope;

/// The scope a door of the agent API needs, named by the door's type: each handler takes
/// `Authed<ItsScope>`, so the check is made once, by the extractor, before the handler runs,
/// and a handler cannot forget it.
pub trait Door: Send + Sync + 'static {
    /// The scope; `None` for a door any key of the tenant may use.
    const SCOPE: Option<Scope>;
}

/// Calls, describes, `llm-tools`, invoke, a call's resource and cancel, the conversation state.
#[derive(Debug, Clone, Copy)]
pub struct Calls;
impl Door for Calls {
    const SCOPE: Option<Scope> = Some(Scope::Calls);
}

/// `/events` and the webhooks' dead letters.
#[derive(Debug, Clone, Copy)]
pub struct Events;
impl Door for Events {
    const SCOPE: Option<Scope> = Some(Scope::Events);
}

/// `POST /tokens` (an MCP token needs [`Calls`] too: [`Caller::require_mcp`]).
#[derive(Debug, Clone, Copy)]
pub struct Tokens;
impl Door for Tokens {
    const SCOPE: Option<Scope> = Some(Scope::Tokens);
}

/// The webhook retry.
#[derive(Debug, Clone, Copy)]
pub struct Webhooks;
impl Door for Webhooks {
    const SCOPE: Option<Scope> = Some(Scope::Webhooks);
}

/// A door that names no scope (`/inbound`, the bridge of a Laravel app's own backend).
#[derive(Debug, Clone, Copy)]
pub struct AnyKey;
impl Door for AnyKey {
    const SCOPE: Option<Scope> = None;
}

/// A request authenticated with one of the path tenant's API keys, whose policy covers the
/// door's scope `D`: the tenant, and the key as the caller (its policy from the tenant
/// snapshot). A key outside the scope is refused here, 403 `scope_denied`.
#[derive(Debug, Clone)]
pub struct Authed<D: Door>(pub Arc<Tenant>, pub Caller, pub PhantomData<D>);

impl<D: Door> FromRequestParts<ApiState> for Authed<D> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, app: &ApiState) -> Result<Self, Problem> {
        let params = RawPathParams::from_request_parts(parts, app)
            .await
            .map_err(|_| Problem::unauthorized())?;
        let tenant_id = params
            .iter()
            .find(|(k, _)| *k == "tenant")
            .map(|(_, v)| v.to_owned())
            .ok_or_else(Problem::unauthorized)?;
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let key = crate::auth::bearer(header).ok_or_else(Problem::unauthorized)?;
        let tenant = app
            .tenants
            .get(&tenant_id)
            .ok_or_else(Problem::unauthorized)?;
        let Some(key) = tenant.key(key) else {
            return Err(Problem::unauthorized());
        };
        let caller = Caller::ApiKey {
            id: key.id.clone(),
            policy: Arc::new(key.policy.clone()),
        };
        crate::ops::Credential::note(&parts.extensions, &caller);
        if let Some(scope) = D::SCOPE {
            caller.require(scope, &app.metrics)?;
        }
        Ok(Authed(tenant, caller, PhantomData))
    }
}

/// Parses a JSON body strictly, under the tenant's message size limit; errors carry the JSON
/// pointer of the offending field.
pub fn parse_body<T: DeserializeOwned>(tenant: &Tenant, Body(body): &Body) -> Result<T, Problem> {
    parse_json(body, tenant.limits.max_message_bytes)
}
