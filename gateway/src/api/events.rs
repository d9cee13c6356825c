//! `GET /events?user=&conversation=`: the tenant's events as Server-Sent Events, resumable with
//! `Last-Event-ID`. A reader too slow for the live feed is ended; it resumes from its last id.
//!
//! What a reader holds is bounded in bytes, whatever the log holds and however slowly it reads:
//! a replay reads the log a page of raw entries at a time ([`toolmark_broker::EVENT_PAGE`]),
//! only when the reader has taken the page before, and parses one event at a time; open streams
//! are bounded per tenant and per key on each node ([`crate::places::EventStreams`]). A reader
//! sees only the events of tools its key may call, and a `page.manifest` lists only those
//! ([`Sight`]).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::stream::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::Value;
use toolmark_broker::{ConvKey, EventType, SharedBroker, handle};
use toolmark_config::policy::ToolFacts;

use super::request::{Authed, Events};
use crate::api::state::ApiState;
use crate::caller::Caller;
use crate::event_feed::{replay_then_live, to_sse};
use crate::http::problem::Problem;

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

/// What an event reader may see under its policy: every event of the tools it may call (by
/// name and by the hints the page's manifest gives them), a `page.manifest` trimmed to those
/// tools. The hints of a call's tool are those of the conversation's manifest the reader last
/// saw, else its current one (read once per conversation and kept, at most
/// [`SIGHT_CONVERSATIONS`] conversations).
pub(crate) struct Sight {
    caller: Caller,
    broker: SharedBroker,
    tenant: String,
    /// The tenant's pins: in `enforce`, a `page.manifest` lists only pinned definitions.
    pins: Arc<toolmark_config::pins::Pins>,
    facts: HashMap<(String, String), HashMap<String, ToolFacts>>,
}

/// How many conversations' tool hints a reader keeps; past it, it starts again empty.
const SIGHT_CONVERSATIONS: usize = 256;

/// What a manifest entry says of itself.
fn entry_facts(entry: &Value) -> ToolFacts {
    let hint = |name: &str| {
        entry
            .get("hints")
            .and_then(|h| h.get(name))
            .and_then(Value::as_bool)
            == Some(true)
    };
    ToolFacts {
        read_only: hint("readOnly"),
        destructive: hint("destructive"),
    }
}

impl Sight {
    /// The sight of `caller` over `tenant`'s events.
    pub(crate) fn new(
        caller: Caller,
        broker: SharedBroker,
        tenant: &crate::tenants::Tenant,
    ) -> Self {
        Sight {
            caller,
            broker,
            tenant: tenant.id.clone(),
            pins: Arc::clone(&tenant.pins),
            facts: HashMap::new(),
        }
    }

    /// `kind`'s `data` of the conversation (`user`, `conversation`) as the reader may see it;
    /// `None` when it may not see it at all.
    pub(crate) async fn view(
        &mut self,
        kind: EventType,
        user: &str,
        conversation: &str,
        mut data: Value,
    ) -> Option<Value> {
        let enforced = self.pins.mode == toolmark_config::pins::PinMode::Enforce;
        if kind == EventType::PageManifest && enforced {
            // The definitions the tenant did not pin are not there for any reader.
            if let Some(tools) = data.get_mut("tools").and_then(Value::as_array_mut) {
                tools.retain(|entry| {
                    toolmark_proto::ToolManifestSummary::from_value(entry.clone())
                        .is_ok_and(|t| self.pins.holds(&t.name, t.digest()))
                });
            }
        }
        if !self.caller.limits_tools() {
            return Some(data);
        }
        match kind {
            EventType::PageManifest => {
                let mut facts = HashMap::new();
                if let Some(tools) = data.get_mut("tools").and_then(Value::as_array_mut) {
                    for entry in tools.iter() {
                        if let Some(name) = entry.get("name").and_then(Value::as_str) {
                            facts.insert(name.to_owned(), entry_facts(entry));
                        }
                    }
                    tools.retain(|entry| {
                        entry
                            .get("name")
                            .and_then(Value::as_str)
                            .is_some_and(|name| self.caller.allows(name, entry_facts(entry)))
                    });
                }
                self.remember((user.to_owned(), conversation.to_owned()), facts);
                Some(data)
            }
            EventType::PageDisconnected => Some(data),
            EventType::CallResult
            | EventType::CallTimeout
            | EventType::ConfirmationResolved
            | EventType::ToolUnpinned
            | EventType::ToolChanged => {
                let tool = data.get("tool").and_then(Value::as_str)?;
                self.allows(user, conversation, tool).await.then_some(data)
            }
        }
    }

    /// Whether the reader may call `tool` of the conversation: by name alone when its hints
    /// cannot change the answer, else by the hints of the conversation's manifest.
    async fn allows(&mut self, user: &str, conversation: &str, tool: &str) -> bool {
        let widest = ToolFacts {
            read_only: true,
            destructive: false,
        };
        let narrowest = ToolFacts {
            read_only: false,
            destructive: true,
        };
        if !self.caller.allows(tool, widest) {
            return false;
        }
        if self.caller.allows(tool, narrowest) {
            return true;
        }
        let key = (user.to_owned(), conversation.to_owned());
        if !self.facts.contains_key(&key) {
            let conv = ConvKey::new(&self.tenant, user, conversation);
            let Ok(state) = self.broker.conversation(&conv).await else {
                return false;
            };
            let facts = state
                .tools
                .iter()
                .map(|t| (t.name.clone(), toolmark_broker::facts_of(&t.hints)))
                .collect();
            self.remember(key.clone(), facts);
        }
        let facts = self
            .facts
            .get(&key)
            .and_then(|f| f.get(tool))
            .copied()
            .unwrap_or_default();
        self.caller.allows(tool, facts)
    }

    fn remember(&mut self, key: (String, String), facts: HashMap<String, ToolFacts>) {
        if self.facts.len() >= SIGHT_CONVERSATIONS && !self.facts.contains_key(&key) {
            self.facts.clear();
        }
        self.facts.insert(key, facts);
    }
}

/// The SSE handler.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/events", tag = "events",
    params(crate::http::doc::TenantPath, EventQuery, ResumeHeader),
    responses((status = 200, description = "Server-Sent Events: page.manifest, page.disconnected, call.result, call.timeout, confirmation.resolved (docs/events.md)", content_type = "text/event-stream"),
        crate::http::doc::Problems),
    security(("apiKey" = [])))]
pub async fn stream(
    State(app): State<ApiState>,
    Authed(tenant, caller, _): Authed<Events>,
    crate::http::QueryOf(q): crate::http::QueryOf<EventQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, Problem> {
    let place = app.event_streams.take(&tenant.id, &caller)?;
    let last_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let feed = app.broker.events(&tenant.id, last_id.as_deref()).await?;
    let events = replay_then_live(
        handle::events(&app.broker),
        tenant.id.clone(),
        feed,
        last_id,
    );
    let sight = Sight::new(caller, Arc::clone(&app.broker), &tenant);
    let sight = Arc::new(tokio::sync::Mutex::new(sight));
    let events = events
        .filter(move |e| {
            let wanted = q.user.as_deref().is_none_or(|u| u == e.user)
                && q.conversation
                    .as_deref()
                    .is_none_or(|c| c == e.conversation);
            std::future::ready(wanted)
        })
        .filter_map(move |mut e| {
            let sight = Arc::clone(&sight);
            async move {
                let data = std::mem::take(&mut e.data);
                let data = sight
                    .lock()
                    .await
                    .view(e.kind, &e.user, &e.conversation, data)
                    .await?;
                e.data = data;
                Some(Ok(to_sse(&e)))
            }
        })
        .map(move |item| {
            let _held = &place;
            item
        });
    let shutdown = app.life.stopping().clone();
    let events = events.take_until(async move { shutdown.cancelled().await });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
