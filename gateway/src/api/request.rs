//! What an agent API request carries: the path tenant, authenticated with one of its API keys,
//! and a body parsed strictly under that tenant's message size limit.

use std::sync::Arc;

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::caller::Caller;
use crate::http::{Body, Problem, parse_json};
use crate::state::AppState;
use crate::tenants::Tenant;

/// A request authenticated with one of the path tenant's API keys: the tenant, and the key as
/// the caller (its policy from the tenant snapshot).
#[derive(Debug, Clone)]
pub struct Authed(pub Arc<Tenant>, pub Caller);

impl FromRequestParts<AppState> for Authed {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, Problem> {
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
        Ok(Authed(tenant, caller))
    }
}

/// Parses a JSON body strictly, under the tenant's message size limit; errors carry the JSON
/// pointer of the offending field.
pub fn parse_body<T: DeserializeOwned>(tenant: &Tenant, Body(body): &Body) -> Result<T, Problem> {
    parse_json(body, tenant.limits.max_message_bytes)
}
