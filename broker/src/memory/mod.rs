//! The embedded broker: all shared state in one process, behind short `std` mutex sections
//! (no `.await` while locked). Deliveries to pages go straight to the node's [`PageSink`].

mod call_table;
mod calls;
mod catalog;
mod confirmations;
mod events;
mod limits;
mod packed;
mod pages;
mod recent;
mod seen;
mod sessions;
mod traffic;
mod webhooks;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use async_trait::async_trait;

use crate::{
    Broker, BrokerError, CallRecord, CallRequest, CallState, CallTarget, CallView, Outcome,
    PageSink, PlaceError, now_ms,
};

pub use crate::model::Retention;
use call_table::{CallEntry, CallKey, CallTable};
use calls::{cancel_frame, tell};
use confirmations::Confirms;
use events::EventLogs;
use pages::{Conversations, bound_gone, insert_small};
use sessions::Records;

/// Shared state of one gateway process: one part per domain, each owning its state behind its
/// own lock (the file of its domain says what it keeps), composed here. A check-and-mark that
/// spans two parts takes their locks in one order: the conversations, then a call shard.
pub struct MemoryBroker {
    node: String,
    sink: Arc<dyn PageSink>,
    retention: Retention,
    /// Calls and describes by id, and the trace contexts of traced ones ([`calls`]).
    calls: CallTable,
    /// Deferred confirmations, per confirmId and conversation ([`confirmations`]).
    confirms: Mutex<Confirms>,
    /// Conversations: their sockets, pages and manifests, and the tenants' socket counts
    /// ([`pages`]).
    pages: Mutex<Conversations>,
    /// The tenants' event logs and what this process emitted ([`events`]).
    events: EventLogs,
    /// The tenants' webhook queues ([`webhooks`]).
    webhooks: Mutex<HashMap<String, webhooks::WebhookTenant>>,
    /// Each tenant's call rate: its bucket's theoretical arrival time ([`model::Gcra`]), µs
    /// ([`limits`]).
    rates: Mutex<HashMap<String, u64>>,
    /// The tenants of the admin API ([`catalog`]).
    catalog: Mutex<catalog::Tenants>,
    /// The front doors' records, idempotency keys and counted sessions ([`sessions`]).
    records: Records,
    /// Each tenant's traffic entries: node → stored entry ([`crate::traffic`]).
    traffic: Mutex<HashMap<String, HashMap<String, String>>>,
    /// Each tenant's tool definitions presented ([`crate::seen`]).
    seen: Mutex<HashMap<String, Vec<crate::seen::SeenTool>>>,
}

impl std::fmt::Debug for MemoryBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBroker")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl MemoryBroker {
    /// A broker delivering to `sink`, with default retention.
    pub fn new(node: impl Into<String>, sink: Arc<dyn PageSink>) -> Self {
        Self::with_retention(node, sink, Retention::default())
    }

    /// A broker with explicit retention.
    pub fn with_retention(
        node: impl Into<String>,
        sink: Arc<dyn PageSink>,
        retention: Retention,
    ) -> Self {
        MemoryBroker {
            node: node.into(),
            sink,
            retention,
            calls: CallTable::default(),
            confirms: Mutex::default(),
            pages: Mutex::default(),
            events: EventLogs::default(),
            webhooks: Mutex::default(),
            rates: Mutex::default(),
            catalog: Mutex::default(),
            records: Records::default(),
            traffic: Mutex::default(),
            seen: Mutex::default(),
        }
    }

    /// Removes what retention allows and times out pending calls whose deadline passed with no
    /// one left to do it. Returns the calls it timed out.
    pub fn sweep(&self) -> Vec<CallRecord> {
        let now = Instant::now();
        let now_ms = now_ms();
        let mut timed_out = Vec::new();
        let mut frames = Vec::new();
        let finished_for = self.retention.finished_calls;
        for shard in &self.calls.shards {
            let mut calls = lock(shard);
            calls.retain(|_, e| e.kept_at(now));
            for e in calls.values_mut() {
                let CallEntry::Pending(p) = e else { continue };
                if !crate::Deadline::at(p.record.binding.deadline_ms).swept_at(now_ms) {
                    continue;
                }
                p.record.state = CallState::TimedOut;
                p.record.outcome = Some(Outcome::Timeout);
                tell(p.listeners(), Outcome::Timeout);
                frames.push((
                    p.record.binding.conv.clone(),
                    p.record.binding.client_id.clone(),
                    cancel_frame(&p.record.binding),
                ));
                let record = p.record.clone();
                self.announce_now(&crate::Change::Call(record.clone()));
                *e = CallEntry::finished(&record, now + finished_for, &self.node);
                timed_out.push(record);
            }
        }
        lock(&self.confirms).retain(|_, convs| {
            convs.retain(|_, c| c.expires > now);
            !convs.is_empty()
        });
        {
            // Forget finished calls in the conversations' pending sets (state, then a shard:
            // no path holds a shard while taking the state lock).
            let mut st = lock(&self.pages);
            for c in st.convs.values_mut() {
                c.pending.retain(|id| {
                    self.calls
                        .shard(id)
                        .get(&CallKey::of(id))
                        .is_some_and(CallEntry::is_pending)
                });
            }
        }
        {
            let mut st = lock(&self.pages);
            let idle_for = self.retention.conversations;
            for c in st.convs.values_mut() {
                bound_gone(c, self.retention.gone_manifests, now);
            }
            st.convs.retain(|_, c| {
                c.sockets > 0
                    || c.idle_since
                        .is_none_or(|t| now.duration_since(t) < idle_for)
            });
        }
        for (conv, client_id, frame) in frames {
            self.sink.deliver(&conv, &client_id, frame);
        }
        timed_out
    }

    pub(crate) fn webhooks_lock(&self) -> MutexGuard<'_, HashMap<String, webhooks::WebhookTenant>> {
        lock(&self.webhooks)
    }

    /// Number of calls held (pending and recently finished), for tests and metrics.
    pub fn calls_held(&self) -> usize {
        self.calls.shards.iter().map(|s| lock(s).len()).sum()
    }
}

#[async_trait]
impl Broker for MemoryBroker {
    fn node_id(&self) -> &str {
        &self.node
    }

    async fn ready(&self) -> Result<(), BrokerError> {
        Ok(())
    }

    /// Read under the conversations' lock, from the stored manifest: nothing of it is copied
    /// but what the call's binding keeps.
    async fn call_target(&self, req: &mut CallRequest) -> Result<Option<CallTarget>, PlaceError> {
        let st = lock(&self.pages);
        let view = st
            .convs
            .get(&req.conv)
            .map_or_else(CallView::default, pages::Conv::call_view);
        req.target_in(view)
    }

    /// The state lives in this process and ends with it: there is no connection to close.
    async fn close(&self) {}
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use toolmark_proto::{AgentMessage, ToolResult};

    use super::*;
    use crate::prelude::*;
    use crate::{
        AdmitError, AdmitLimits, CallBinding, CallKind, ConvKey, Event, EventType, PageIdentity,
        RawEvent, Rejection, SubmitError, event_id_after,
    };
    use serde_json::json;
    use toolmark_proto::Call;

    #[derive(Default)]
    struct Frames(Mutex<Vec<(ConvKey, String, String)>>);
    impl PageSink for Frames {
        fn deliver(&self, conv: &ConvKey, client_id: &str, frame: Arc<str>) {
            lock(&self.0).push((conv.clone(), client_id.to_owned(), frame.to_string()));
        }
    }

    fn setup() -> (Arc<Frames>, MemoryBroker) {
        let frames = Arc::new(Frames::default());
        (frames.clone(), MemoryBroker::new("n1", frames))
    }

    fn binding(id: &str, deadline_ms: u64) -> CallBinding {
        CallBinding {
            id: id.into(),
            conv: ConvKey::new("t", "u", "c"),
            client_id: "p1".into(),
            tool: "todo.add".into(),
            kind: CallKind::Call,
            deadline_ms,
            node: "n1".into(),
            untrusted: false,
            respond_async: false,
            caller: None,
        }
    }

    fn frame(id: &str) -> AgentMessage {
        AgentMessage::Call(Call {
            client_id: "p1".into(),
            id: id.into(),
            rev: None,
            tool: "todo.add".into(),
            input: json!({}),
        })
    }

    fn page(client: &str) -> PageIdentity {
        PageIdentity {
            conv: ConvKey::new("t", "u", "c"),
            client_id: client.into(),
        }
    }

    fn ok() -> ToolResult {
        ToolResult::Ok { data: None }
    }

    #[tokio::test]
    async fn a_result_and_a_timeout_never_both_win() {
        let (frames, b) = setup();
        let rx = b
            .send_call(binding("a", now_ms() + 60_000), frame("a"))
            .await
            .unwrap();
        assert!(b.submit_result(&page("p1"), "a", &ok()).await.is_ok());
        assert_eq!(
            b.time_out(&ConvKey::new("t", "u", "c"), "a").await.unwrap(),
            None
        );
        assert_eq!(rx.await.unwrap(), Outcome::Result(ok()));

        let rx = b
            .send_call(binding("b", now_ms() + 60_000), frame("b"))
            .await
            .unwrap();
        assert!(
            b.time_out(&ConvKey::new("t", "u", "c"), "b")
                .await
                .unwrap()
                .is_some()
        );
        assert_eq!(
            b.submit_result(&page("p1"), "b", &ok()).await,
            Err(SubmitError::Rejected(Rejection::Late))
        );
        assert_eq!(rx.await.unwrap(), Outcome::Timeout);
        let sent = lock(&frames.0);
        assert!(
            sent.last().unwrap().2.contains(r#""type":"cancel""#),
            "timeout sends a cancel"
        );
    }

    #[tokio::test]
    async fn sweep_times_out_orphans_and_forgets_finished_calls() {
        let frames = Arc::new(Frames::default());
        let retention = Retention {
            finished_calls: Duration::ZERO,
            ..Retention::default()
        };
        let b = MemoryBroker::with_retention("n1", frames, retention);
        let rx = b
            .send_call(binding("old", now_ms() - 5_000), frame("old"))
            .await
            .unwrap();
        let swept = b.sweep();
        assert_eq!(swept.len(), 1);
        assert_eq!(rx.await.unwrap(), Outcome::Timeout);
        b.sweep();
        assert_eq!(b.calls_held(), 0);
    }

    #[tokio::test]
    async fn page_limits_count_sockets_and_release_them() {
        let (_, b) = setup();
        let conv = ConvKey::new("t", "u", "c");
        let limits = AdmitLimits {
            max_connections: 3,
            max_pages_per_conversation: 2,
        };
        b.admit_page(&conv, &limits).await.unwrap();
        b.admit_page(&conv, &limits).await.unwrap();
        assert_eq!(
            b.admit_page(&conv, &limits).await,
            Err(AdmitError::ConversationPages)
        );
        let other = ConvKey::new("t", "u", "c2");
        b.admit_page(&other, &limits).await.unwrap();
        assert_eq!(
            b.admit_page(&other, &limits).await,
            Err(AdmitError::TenantConnections)
        );
        b.page_identified(&conv, "p1").await.unwrap();
        assert!(
            b.release_page(&conv, Some("p1"), &crate::Release::new("r", false))
                .await
                .unwrap()
                .page_gone
        );
        b.admit_page(&other, &limits).await.unwrap();
    }

    #[tokio::test]
    async fn events_resume_after_an_id_and_tenants_are_apart() {
        let (_, b) = setup();
        let conv = ConvKey::new("t", "u", "c");
        let e1 = b
            .emit("t", EventType::PageManifest, &conv, json!({"n": 1}))
            .await
            .unwrap();
        let e2 = b
            .emit("t", EventType::CallTimeout, &conv, json!({"n": 2}))
            .await
            .unwrap();
        b.emit("other", EventType::CallTimeout, &conv, json!({"n": 3}))
            .await
            .unwrap();
        assert!(event_id_after(&e2.id, &e1.id));
        let feed = b.events("t", Some(&e1.id)).await.unwrap();
        let parsed: Vec<Event> = feed.backlog.iter().filter_map(RawEvent::parse).collect();
        assert_eq!(parsed, vec![e2]);
        assert!(b.events("t", None).await.unwrap().backlog.is_empty());
        let all = b.retained("other", "0-0").await.unwrap();
        assert_eq!(all.len(), 1);
    }
}
