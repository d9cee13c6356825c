//! What an operator looks at in one tenant while debugging it, with the admin key rather than
//! the tenant's own: the tail of its event stream, and its webhook dead letters (listed, and
//! put back in their conversation's queue). The same broker reads as the agent API's
//! `GET …/events` and `…/webhooks/failed`.

use std::convert::Infallible;

use axum::response::sse::{KeepAlive, Sse};
use futures_util::stream::StreamExt;

use std::collections::VecDeque;

use toolmark_broker::{EVENT_PAGE, RawEvent, handle};

use crate::event_feed::{DeadLetters, replay_then_live, to_sse};

use super::*;

/// How many retained events a tail starts with, at most.
pub(crate) const TAIL: usize = 50;

/// How far back a tail without `Last-Event-ID` starts: the read is bounded by time as well as
/// by [`TAIL`], never the whole retained log.
const TAIL_MS: u64 = 60_000;

/// The `{id}` of a dead letter.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct DeadLetterPath {
    /// The tenant.
    id: String,
    /// The dead letter's id.
    dl: String,
}

/// The tenant, as this node knows it, or 404.
fn known(s: &AdminState, id: &str) -> Result<(), Problem> {
    AdminState::known_id(id)?;
    if s.0.node.tenants.get(id).is_some() {
        Ok(())
    } else {
        Err(Problem::not_found("Tenant"))
    }
}

/// `GET /admin/v1/tenants/{id}/events`: the tenant's events as Server-Sent Events (the
/// agent API's stream, all users): the newest 50 of its last minute, or those after
/// `Last-Event-ID`, then live.
#[utoipa::path(get, path = "/admin/v1/tenants/{id}/events", tag = "admin", operation_id = "admin_tenant_events",
    params(crate::admin_doc::TenantId),
    responses((status = 200, description = "Server-Sent Events of the tenant (the newest 50 of the last minute, or those after Last-Event-ID, then live): page.manifest, page.disconnected, call.result, call.timeout, confirmation.resolved (docs/events.md)", content_type = "text/event-stream"),
        crate::http::doc::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn tail(
    State(s): State<AdminState>,
    _who: Admin,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    known(&s, &id)?;
    let last_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let since = format!("{}-0", now_ms().saturating_sub(TAIL_MS));
    let feed =
        s.0.node
            .broker
            .events(&id, Some(last_id.as_deref().unwrap_or(&since)))
            .await?;
    let broker = &s.0.node.broker;
    let mut feed = feed;
    if last_id.is_none() {
        // The newest TAIL of the last minute: the minute read a page at a time, keeping at
        // most TAIL raw entries.
        let mut newest: VecDeque<RawEvent> = std::mem::take(&mut feed.backlog).into();
        let mut more = newest.len() >= EVENT_PAGE;
        while more && let Some(from) = newest.back().map(|e| e.id.clone()) {
            let page = broker.events_after(&id, &from, EVENT_PAGE).await?;
            more = page.len() >= EVENT_PAGE;
            newest.extend(page);
            while newest.len() > TAIL {
                newest.pop_front();
            }
        }
        feed.backlog = newest.into();
    }
    let events = replay_then_live(
        handle::events(broker),
        id.clone(),
        feed,
        Some(last_id.unwrap_or(since)),
    )
    .map(|e| Ok::<_, Infallible>(to_sse(&e)));
    let shutdown = s.0.node.life.stopping().clone();
    let events = events.take_until(async move { shutdown.cancelled().await });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(std::time::Duration::from_secs(15)))
        .into_response())
}

/// `GET /admin/v1/tenants/{id}/webhooks/failed`: the tenant's webhook dead letters, oldest
/// first, each with its attempts and last error.
#[utoipa::path(get, path = "/admin/v1/tenants/{id}/webhooks/failed", tag = "admin", operation_id = "admin_webhooks_failed",
    params(crate::admin_doc::TenantId),
    responses((status = 200, description = "The dead letters", body = DeadLetters), crate::http::doc::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn dead_letters(
    State(s): State<AdminState>,
    _who: Admin,
    Path(id): Path<String>,
) -> Result<axum::Json<DeadLetters>, Problem> {
    known(&s, &id)?;
    let failed = s.0.node.broker.webhook_failed(&id).await?;
    Ok(axum::Json(DeadLetters { failed }))
}

/// `POST /admin/v1/tenants/{id}/webhooks/failed/{dl}/retry`: puts a dead letter back at the end
/// of its conversation's queue, due now. Audited as `tenant.webhook_retried`.
#[utoipa::path(post, path = "/admin/v1/tenants/{id}/webhooks/failed/{dl}/retry", tag = "admin", operation_id = "admin_webhook_retry",
    params(DeadLetterPath),
    responses((status = 202, description = "Back in its conversation's queue"), crate::http::doc::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn retry(
    State(s): State<AdminState>,
    who: Admin,
    Path((id, dl)): Path<(String, String)>,
) -> Result<Response, Problem> {
    known(&s, &id)?;
    if s.0.node.broker.webhook_retry(&id, &dl).await? {
        s.audit(
            &who,
            "tenant.webhook_retried",
            &id,
            json!({"deadLetterId": dl}),
        )
        .await;
        Ok(StatusCode::ACCEPTED.into_response())
    } else {
        Err(Problem::not_found("Dead letter"))
    }
}
