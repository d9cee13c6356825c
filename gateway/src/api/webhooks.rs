//! Webhook dead letters: events whose delivery failed for longer than the maximum age, listed
//! and put back in their conversation's queue on request.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::request::Authed;
use crate::http::problem::Problem;
use crate::state::AppState;
use toolmark_config::policy::Scope;

/// The tenant's webhook dead letters.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct DeadLetters {
    /// Oldest first: `{id, event, attempts, lastError, failedAt}`.
    #[schema(value_type = Vec<Object>)]
    pub failed: Vec<toolmark_broker::webhook::DeadLetter>,
}

/// The `{id}` of a dead letter.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct DeadLetterPath {
    /// The dead letter's id.
    id: String,
}

/// `GET /webhooks/failed`
#[utoipa::path(get, path = "/v1/tenants/{tenant}/webhooks/failed", tag = "webhooks",
    params(crate::http::doc::TenantPath),
    responses((status = 200, description = "The dead letters", body = DeadLetters), crate::http::doc::Problems),
    security(("apiKey" = [])))]
pub async fn failed(
    State(app): State<AppState>,
    Authed(tenant, caller): Authed,
) -> Result<Json<DeadLetters>, Problem> {
    caller.require(Scope::Events, &app.metrics)?;
    let failed = app.broker.webhook_failed(&tenant.id).await?;
    Ok(Json(DeadLetters { failed }))
}

/// `POST /webhooks/failed/{id}/retry`
#[utoipa::path(post, path = "/v1/tenants/{tenant}/webhooks/failed/{id}/retry", tag = "webhooks",
    params(crate::http::doc::TenantPath, DeadLetterPath),
    responses((status = 202, description = "Back in its conversation's queue"), crate::http::doc::Problems),
    security(("apiKey" = [])))]
pub async fn retry(
    State(app): State<AppState>,
    Authed(tenant, caller): Authed,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, Problem> {
    caller.require(Scope::Webhooks, &app.metrics)?;
    if app.broker.webhook_retry(&tenant.id, &id).await? {
        Ok(StatusCode::ACCEPTED.into_response())
    } else {
        Err(Problem::not_found("Dead letter"))
    }
}
