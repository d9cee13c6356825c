//! Webhook dead letters: events whose delivery failed for longer than the maximum age, listed
//! and put back in their conversation's queue on request.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::Authed;
use crate::problem::Problem;
use crate::state::AppState;

/// `GET /webhooks/failed`
pub async fn failed(
    State(app): State<AppState>,
    Authed(tenant): Authed,
) -> Result<Json<serde_json::Value>, Problem> {
    let failed = app.broker.webhook_failed(&tenant.id).await?;
    Ok(Json(json!({ "failed": failed })))
}

/// `POST /webhooks/failed/{id}/retry`
pub async fn retry(
    State(app): State<AppState>,
    Authed(tenant): Authed,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, Problem> {
    if app.broker.webhook_retry(&tenant.id, &id).await? {
        Ok(StatusCode::ACCEPTED.into_response())
    } else {
        Err(Problem::not_found("Dead letter"))
    }
}
