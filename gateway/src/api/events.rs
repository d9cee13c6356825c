//! `GET /events?user=&conversation=`: the tenant's events as Server-Sent Events, resumable with
//! `Last-Event-ID`. A reader too slow for the live feed is ended; it resumes from its last id.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::stream::{self, Stream, StreamExt};
use serde::Deserialize;
use tokio_stream::wrappers::BroadcastStream;
use toolmark_broker::{Event, event_id_after};

use super::request::Authed;
use crate::http::problem::Problem;
use crate::state::AppState;
use toolmark_config::policy::Scope;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventQuery {
    /// Only this user's events.
    user: Option<String>,
    /// Only this conversation's events.
    conversation: Option<String>,
}

/// The `Last-Event-ID` header of a resumed stream.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
struct ResumeHeader {
    /// The id of the last event received: the stream goes on after it.
    #[param(rename = "Last-Event-ID")]
    last_event_id: Option<String>,
}

/// An event as a Server-Sent Event: its id, its type and its body.
pub(crate) fn to_sse(e: &Event) -> SseEvent {
    SseEvent::default()
        .id(e.id.clone())
        .event(e.kind.as_str())
        .data(e.body().to_string())
}

/// The live events of a feed that come after `seen` (the last event sent, or the reader's
/// `Last-Event-ID`) and that `wanted` keeps, as Server-Sent Events; a reader that lags ends
/// here and resumes with `Last-Event-ID`. The agent API's stream and the admin API's tail.
pub(crate) fn live_after(
    live: tokio::sync::broadcast::Receiver<Event>,
    mut seen: Option<String>,
    wanted: impl Fn(&Event) -> bool + Send + 'static,
) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send {
    BroadcastStream::new(live)
        .take_while(|r| std::future::ready(r.is_ok()))
        .filter_map(move |r| {
            let item = match r {
                Ok(e) if seen.as_deref().is_none_or(|s| event_id_after(&e.id, s)) => {
                    seen = Some(e.id.clone());
                    wanted(&e).then(|| Ok(to_sse(&e)))
                }
                _ => None,
            };
            std::future::ready(item)
        })
}

/// The SSE handler.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/events", tag = "events",
    params(crate::http::doc::TenantPath, EventQuery, ResumeHeader),
    responses((status = 200, description = "Server-Sent Events: page.manifest, page.disconnected, call.result, call.timeout, confirmation.resolved (docs/events.md)", content_type = "text/event-stream"),
        crate::http::doc::Problems),
    security(("apiKey" = [])))]
pub async fn stream(
    State(app): State<AppState>,
    Authed(tenant, caller): Authed,
    crate::http::QueryOf(q): crate::http::QueryOf<EventQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, Problem> {
    caller.require(Scope::Events, &app.metrics)?;
    let last_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let feed = app.broker.events(&tenant.id, last_id.as_deref()).await?;
    let wanted = move |e: &Event| {
        q.user.as_deref().is_none_or(|u| u == e.user)
            && q.conversation
                .as_deref()
                .is_none_or(|c| c == e.conversation)
    };
    let wanted_live = wanted.clone();
    let seen = feed.backlog.last().map(|e| e.id.clone()).or(last_id);
    let backlog = stream::iter(
        feed.backlog
            .into_iter()
            .filter(move |e| wanted(e))
            .map(|e| Ok(to_sse(&e))),
    );
    let live = live_after(feed.live, seen, wanted_live);
    let shutdown = app.life.stopping().clone();
    let events = backlog
        .chain(live)
        .take_until(async move { shutdown.cancelled().await });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
