//! `POST /users/{u}/conversations/{c}/inbound`: a page → agent message forwarded by the
//! tenant's own same-origin bridge endpoint (Laravel Echo pages), after its session and CSRF
//! checks. It gets exactly the checks a page WebSocket frame gets (`crate::page::frames`): 202 when
//! accepted, problem+json `invalid_request` with the `reason` when refused.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use std::time::Duration;

use toolmark_broker::{ConvKey, RateLimited};
use toolmark_proto::{DecodeError, Limits};

use super::request::{AnyKey, Authed};
use crate::http::problem::Problem;
use crate::http::{Body, check_ids};
use crate::page::frames::{self, Refused};
use crate::state::AppState;
use crate::tenants::Tenant;

/// `POST /users/{u}/conversations/{c}/inbound`
#[utoipa::path(post, path = "/v1/tenants/{tenant}/users/{user}/conversations/{conversation}/inbound",
    tag = "inbound",
    params(crate::http::doc::TenantPath, crate::http::doc::ConversationPath),
    request_body(content = Object, description = "One bridge protocol v1 page message (manifest, result, confirmed, changed), forwarded by the app's backend for a Laravel Echo page"),
    responses((status = 202, description = "Accepted and applied"), crate::http::doc::Problems),
    security(("apiKey" = [])))]
pub async fn inbound(
    State(app): State<AppState>,
    Authed(tenant, _, _): Authed<AnyKey>,
    Path((_, user, conversation)): Path<(String, String, String)>,
    Body(body): Body,
) -> Result<StatusCode, Problem> {
    check_ids(&user, &conversation)?;
    let conv = ConvKey::new(&tenant.id, &user, &conversation);
    accept(&app, &tenant, &conv, &body).await?;
    Ok(StatusCode::ACCEPTED)
}

/// Checks and applies one forwarded page message of `conv`.
pub async fn accept(
    app: &AppState,
    tenant: &Tenant,
    conv: &ConvKey,
    body: &[u8],
) -> Result<(), Problem> {
    if !tenant.inbound_rate.take(conv) {
        app.metrics.inbound_rejected("rate_limited");
        return Err(Problem {
            detail: "The conversation's page message rate is exhausted.".into(),
            ..Problem::rate_limited(RateLimited {
                retry_after: Duration::from_secs(1),
            })
        }
        .with_reason("rate_limited"));
    }
    let limits = Limits::with_max_bytes(tenant.limits.max_message_bytes);
    let message = frames::decode(app, body, &limits).map_err(problem)?;
    // An Echo page never binds a socket, so its clientId is checked the other way round: a
    // clientId bound to a live page socket (any node) belongs to that page, not to this one.
    let state = app.broker.conversation(conv).await?;
    if state
        .pages
        .iter()
        .any(|p| p.client_id == message.client_id())
    {
        return Err(problem(frames::client_mismatch(app)));
    }
    frames::dispatch(app, conv, message, body.len())
        .await
        .map_err(problem)
}

/// The answer to a refused page message (public for the fuzz targets).
pub fn problem(refused: Refused) -> Problem {
    let reason = refused.reason();
    match refused {
        Refused::Decode(DecodeError::TooLarge { limit, .. }) => {
            Problem::too_large(limit).with_reason(reason)
        }
        Refused::Decode(e) => match e.pointer() {
            Some(p) => Problem::invalid(p, e.to_string()).with_reason(reason),
            None => Problem::refused(reason, e.to_string()),
        },
        Refused::ClientMismatch => {
            Problem::invalid("/clientId", refused.to_string()).with_reason(reason)
        }
        Refused::Rejected(r) => Problem::refused(reason, format!("The message was refused: {r}.")),
        Refused::Broker(e) => e.into(),
    }
}
