//! Webhook dead letters: events whose delivery failed for longer than the maximum age, listed
//! and put back in their conversation's queue on request.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use std::sync::Arc;

use toolmark_broker::EventType;

use super::request::{Authed, Events, Webhooks};
use crate::api::state::ApiState;
use crate::event_feed::DeadLetters;
use crate::http::problem::Problem;

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
    State(app): State<ApiState>,
    Authed(tenant, caller, _): Authed<Events>,
) -> Result<Json<DeadLetters>, Problem> {
    let mut failed = app.broker.webhook_failed(&tenant.id).await?;
    // Held to the reader's policy as the event stream is: dead letters of tools it may not
    // call are left out, a manifest lists only the tools it may call.
    if caller.limits_tools() {
        let mut sight = super::events::Sight::new(caller, Arc::clone(&app.broker), &tenant);
        let mut kept = Vec::with_capacity(failed.len());
        for mut letter in failed {
            let kind = letter
                .event
                .get("type")
                .and_then(|t| serde_json::from_value::<EventType>(t.clone()).ok());
            let (user, conversation) = letter
                .conversation
                .split_once('/')
                .map(|(u, c)| (u.to_owned(), c.to_owned()))
                .unwrap_or_default();
            let Some(kind) = kind else { continue };
            let data = letter.event.get_mut("data").map(std::mem::take);
            let Some(data) = data else { continue };
            if let Some(seen) = sight.view(kind, &user, &conversation, data).await {
                letter.event["data"] = seen;
                kept.push(letter);
            }
        }
        failed = kept;
    }
    Ok(Json(DeadLetters { failed }))
}

/// `POST /webhooks/failed/{id}/retry`
#[utoipa::path(post, path = "/v1/tenants/{tenant}/webhooks/failed/{id}/retry", tag = "webhooks",
    params(crate::http::doc::TenantPath, DeadLetterPath),
    responses((status = 202, description = "Back in its conversation's queue"), crate::http::doc::Problems),
    security(("apiKey" = [])))]
pub async fn retry(
    State(app): State<ApiState>,
    Authed(tenant, _, _): Authed<Webhooks>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, Problem> {
    if app.broker.webhook_retry(&tenant.id, &id).await? {
        Ok(StatusCode::ACCEPTED.into_response())
    } else {
        Err(Problem::not_found("Dead letter"))
    }
}
