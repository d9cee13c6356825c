//! A tenant's event feed as a reader takes it: its retained events after a resume point, then
//! its live ones ([`replay_then_live`]), each as a Server-Sent Event ([`to_sse`]); and the shape
//! of its webhook dead letters. Read by the agent API's `/events` and `/webhooks/failed` and by
//! the admin API's debug views, each with its own checks.

use std::sync::Arc;

use axum::response::sse::Event as SseEvent;
use futures_util::stream::{self, Stream};
use tokio::sync::broadcast::error::RecvError;
use toolmark_broker::{EVENT_PAGE, Event, Events, RawEvent, event_id_after};

/// The tenant's webhook dead letters.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct DeadLetters {
    /// Oldest first: `{id, event, attempts, lastError, failedAt}`.
    #[schema(value_type = Vec<Object>)]
    pub failed: Vec<toolmark_broker::webhook::DeadLetter>,
}

/// An event as a Server-Sent Event: its id, its type and its body.
pub fn to_sse(e: &Event) -> SseEvent {
    SseEvent::default()
        .id(e.id.clone())
        .event(e.kind.as_str())
        .data(e.body().to_string())
}

/// Where a replay stands.
enum Phase {
    /// Taking the retained events: the rest of the page read last, the id of the last event
    /// taken, and whether a page may follow.
    Replay {
        page: std::vec::IntoIter<RawEvent>,
        last: Option<String>,
        more: bool,
        next: usize,
    },
    /// Following the live feed after `seen`.
    Live { seen: Option<String> },
    /// Over: the reader resumes with `Last-Event-ID`.
    Done,
}

/// The tenant's retained events after the resume point, then its live ones, in order and each
/// once. The log is read a page at a time, only when the reader took the page before, and an
/// event is parsed only as it is taken: a reader that does not read holds one page of raw
/// entries. A page that cannot be read, or a reader that lags behind the live feed, ends the
/// stream (never skips): the reader resumes from its last id.
pub fn replay_then_live(
    broker: Arc<dyn Events>,
    tenant: String,
    feed: toolmark_broker::EventFeed,
    after: Option<String>,
) -> impl Stream<Item = Event> + Send {
    let more = feed.backlog.len() >= EVENT_PAGE;
    let next = next_page(&feed.backlog);
    let phase = Phase::Replay {
        page: feed.backlog.into_iter(),
        last: after,
        more,
        next,
    };
    stream::unfold((phase, feed.live), move |(mut phase, mut live)| {
        let (broker, tenant) = (Arc::clone(&broker), tenant.clone());
        async move {
            loop {
                phase = match phase {
                    Phase::Replay {
                        mut page,
                        last,
                        more,
                        next,
                    } => {
                        if let Some(raw) = page.next() {
                            let last = Some(raw.id.clone());
                            let then = Phase::Replay {
                                page,
                                last,
                                more,
                                next,
                            };
                            match raw.parse() {
                                Some(e) => return Some((e, (then, live))),
                                None => then,
                            }
                        } else if let (true, Some(from)) = (more, last.as_deref()) {
                            match broker.events_after(&tenant, from, next).await {
                                Ok(read) => Phase::Replay {
                                    more: read.len() >= next,
                                    next: next_page(&read),
                                    page: read.into_iter(),
                                    last,
                                },
                                Err(e) => {
                                    tracing::debug!(tenant, error = %e, "event replay ended: the reader resumes");
                                    Phase::Done
                                }
                            }
                        } else {
                            Phase::Live { seen: last }
                        }
                    }
                    Phase::Live { seen } => match live.recv().await {
                        Ok(e) if seen.as_deref().is_none_or(|s| event_id_after(&e.id, s)) => {
                            let next = Phase::Live {
                                seen: Some(e.id.clone()),
                            };
                            return Some((e, (next, live)));
                        }
                        Ok(_) => Phase::Live { seen },
                        Err(RecvError::Lagged(_) | RecvError::Closed) => Phase::Done,
                    },
                    Phase::Done => return None,
                };
            }
        }
    })
}

/// How many events the read after `page` takes.
fn next_page(page: &[RawEvent]) -> usize {
    toolmark_broker::next_event_page(page.iter().map(RawEvent::size).max().unwrap_or(0))
}
