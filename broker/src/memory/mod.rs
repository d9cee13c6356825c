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

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use litemap::LiteMap;
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};
use toolmark_proto::{AgentMessage, Cancel, Manifest, ToolResult};

use crate::{
    AdmitError, AdmitLimits, Broker, BrokerError, CallBinding, CallRecord, CallState,
    ConfirmBinding, ConvKey, ConversationState, Event, EventFeed, EventType, Outcome,
    OutcomeWaiter, PageIdentity, PageInfo, PageLeft, PageSink, RateLimited, RawEvent, Rejection,
    SubmitError, TakeError, Watch, event_id_after, now_ms,
};

pub use crate::model::Retention;
use crate::model::{self, ConfirmSweep, Found, Presence};
use call_table::{CallEntry, CallKey, CallShards, PendingCall};
use recent::{EMISSIONS_KEPT, Recent};

/// Hands `outcome` to each of `listeners`.
fn tell(listeners: Vec<oneshot::Sender<Outcome>>, outcome: &Outcome) {
    for l in listeners {
        let _ = l.send(outcome.clone());
    }
}

/// One tenant set's counted sessions: id → (holder, when it lapses).
type PlaceSet = HashMap<String, (String, Instant)>;

struct ConfirmEntry {
    binding: ConfirmBinding,
    used: bool,
    /// Used by its page's `confirmed` (not expired by the sweep).
    confirmed: bool,
    expires: Instant,
    /// When the sweep first saw its page certainly gone (ms), `None` while it may be present.
    absent_since: Option<u64>,
}

/// ConfirmIds are minted by pages: bindings are kept per conversation (confirmId, then the
/// conversations that used it), so one conversation's page cannot squat another's id.
type Confirms = HashMap<String, HashMap<ConvKey, ConfirmEntry>>;

#[derive(Default)]
struct Conv {
    current: Option<String>,
    /// Latest manifest of each page, with the order in which it arrived. A conversation
    /// holds one page or a few, so a sorted vector (sized on first use for one) rather than a
    /// hash table, which allocates room for four.
    manifests: LiteMap<String, (u64, Manifest)>,
    next_seq: u64,
    sockets: u32,
    /// Identified sockets of each page load (a sorted vector, as `manifests`).
    pages: LiteMap<String, u32>,
    idle_since: Option<Instant>,
    /// When a draining node closed this conversation's sockets.
    drained_at: Option<Instant>,
    /// Calls sent to this conversation that may still be pending (pruned lazily).
    pending: std::collections::HashSet<String>,
    /// Page loads whose last socket closed, and when: their manifest stays for a silent
    /// reconnect (the seed: a reconnect does not re-send it) and, unless it is the current
    /// page's, goes `retention.gone_manifests` later, at most [`model::GONE_MANIFESTS_KEPT`] at
    /// once ([`bound_gone`]), as on Redis.
    left: HashMap<String, Instant>,
    /// Names announced once for the conversation's life ([`crate::Pages::announce_once`]): a
    /// vector, empty without an allocation for the many conversations that announce nothing.
    announced: Vec<String>,
}

/// The gone page loads of `c` other than its current page keep their manifests for `grace`
/// after they left, and at most [`model::GONE_MANIFESTS_KEPT`] of them at once, the oldest to
/// leave going first (`bound_gone` of the Redis scripts).
fn bound_gone(c: &mut Conv, grace: Duration, now: Instant) {
    let current = c.current.clone();
    let mut others: Vec<(Instant, String)> = c
        .left
        .iter()
        .filter(|(id, _)| current.as_deref() != Some(id.as_str()))
        .map(|(id, at)| (*at, id.clone()))
        .collect();
    others.sort();
    let over = others.len().saturating_sub(model::GONE_MANIFESTS_KEPT);
    for (i, (at, id)) in others.into_iter().enumerate() {
        if i < over || now.duration_since(at) >= grace {
            c.left.remove(&id);
            c.manifests.remove(&id);
        }
    }
}

#[derive(Default)]
struct State {
    convs: HashMap<ConvKey, Conv>,
    tenant_sockets: HashMap<String, u64>,
    /// Releases of page sockets by name, with what each meant: a release asked again is
    /// applied once. This broker always answers, so nothing asks again in practice: the last
    /// [`RECENT_KEPT`] are kept, for [`crate::ONCE_TTL`] at most.
    released: Recent<PageLeft>,
}

/// An event as the log keeps it: the payload serialized (a fraction of a `Value` tree's size).
struct StoredEvent {
    id: Box<str>,
    kind: EventType,
    timestamp: Box<str>,
    user: Box<str>,
    conversation: Box<str>,
    data: Box<str>,
}

impl StoredEvent {
    fn from_event(e: &Event) -> Self {
        StoredEvent {
            id: e.id.as_str().into(),
            kind: e.kind,
            timestamp: e.timestamp.as_str().into(),
            user: e.user.as_str().into(),
            conversation: e.conversation.as_str().into(),
            data: e.data.to_string().into_boxed_str(),
        }
    }

    /// Bytes its body takes in the log (what retention bounds).
    fn size(&self) -> u64 {
        (self.id.len()
            + self.timestamp.len()
            + self.user.len()
            + self.conversation.len()
            + self.data.len()) as u64
    }

    fn to_raw(&self) -> crate::RawEvent {
        crate::RawEvent::store(
            &self.id,
            self.kind,
            &self.timestamp,
            &self.user,
            &self.conversation,
            &self.data,
        )
    }
}

struct TenantLog {
    events: VecDeque<StoredEvent>,
    /// Bytes of the retained events' bodies.
    bytes: u64,
    last: (u64, u64),
    live: broadcast::Sender<Event>,
    /// Names of [`Events::emit_once`] emissions.
    once: Recent<()>,
}

impl TenantLog {
    fn new() -> Self {
        TenantLog {
            events: VecDeque::new(),
            bytes: 0,
            last: (0, 0),
            live: broadcast::channel(1024).0,
            once: Recent::new(EMISSIONS_KEPT),
        }
    }

    /// At most `limit` retained events after `after`, oldest first (ids increase along the log).
    fn page(&self, after: &str, limit: usize) -> Vec<crate::RawEvent> {
        let start = self
            .events
            .partition_point(|e| !event_id_after(&e.id, after));
        self.events
            .range(start..)
            .take(limit)
            .map(StoredEvent::to_raw)
            .collect()
    }
}

/// How many traced calls' trace contexts the memory broker keeps ([`Calls::call_trace`]), at
/// most [`crate::ONCE_TTL`] each: a webhook or a timeout comes within the call's life.
const TRACES_KEPT: usize = 16_384;

/// Shared state of one gateway process.
pub struct MemoryBroker {
    node: String,
    sink: Arc<dyn PageSink>,
    retention: Retention,
    calls: CallShards,
    confirms: Mutex<Confirms>,
    state: Mutex<State>,
    logs: Mutex<HashMap<String, TenantLog>>,
    webhooks: Mutex<HashMap<String, webhooks::WebhookTenant>>,
    /// Each tenant's call rate: its bucket's theoretical arrival time ([`model::Gcra`]), µs.
    rates: Mutex<HashMap<String, u64>>,
    catalog: Mutex<catalog::Tenants>,
    /// The front doors' records and idempotency keys: what → (record, expiry).
    sessions: Mutex<HashMap<sessions::Stored, (String, Instant)>>,
    /// Counted sessions per tenant set.
    places: Mutex<HashMap<String, PlaceSet>>,
    /// Each tenant's traffic entries: node → stored entry ([`crate::traffic`]).
    traffic: Mutex<HashMap<String, HashMap<String, String>>>,
    /// Each tenant's tool definitions presented ([`crate::seen`]).
    seen: Mutex<HashMap<String, Vec<crate::seen::SeenTool>>>,
    /// The trace contexts of traced calls ([`Calls::call_trace`]), by call id.
    traces: Mutex<recent::Recent<String>>,
    emitted: crate::Emitted,
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

fn cancel_frame(binding: &CallBinding) -> Arc<str> {
    AgentMessage::Cancel(Cancel {
        client_id: binding.client_id.clone(),
        id: binding.id.clone(),
    })
    .to_json()
    .into()
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
            calls: CallShards::default(),
            confirms: Mutex::default(),
            state: Mutex::default(),
            logs: Mutex::default(),
            webhooks: Mutex::default(),
            rates: Mutex::default(),
            catalog: Mutex::default(),
            traces: Mutex::new(recent::Recent::new(TRACES_KEPT)),
            emitted: crate::Emitted::default(),
            sessions: Mutex::default(),
            places: Mutex::default(),
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
                tell(p.listeners(), &Outcome::Timeout);
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
            let mut st = lock(&self.state);
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
            let mut st = lock(&self.state);
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

/// The conversation's open sockets as the model counts them.
fn presence(c: &Conv) -> Presence {
    let identified: u32 = c.pages.values().sum();
    Presence {
        identified: c.pages.iter().map(|(id, n)| (id.clone(), *n)).collect(),
        unidentified: c.sockets.saturating_sub(identified),
    }
}

/// Inserts into a small per-conversation map, allocating room for exactly one entry when it
/// is empty (a vector's first push makes room for four).
fn insert_small<V>(map: &mut LiteMap<String, V>, key: String, value: V) {
    if map.is_empty() {
        *map = LiteMap::with_capacity(1);
    }
    map.insert(key, value);
}

/// D23's choice of the page new calls go to ([`model::current_page`]).
fn effective_current(c: &Conv) -> Option<String> {
    model::current_page(c.current.as_deref(), &presence(c), |id| {
        c.manifests.get(id).map(|(seq, _)| *seq)
    })
}

#[async_trait]
impl Broker for MemoryBroker {
    fn node_id(&self) -> &str {
        &self.node
    }

    async fn ready(&self) -> Result<(), BrokerError> {
        Ok(())
    }

    /// The state lives in this process and ends with it: there is no connection to close.
    async fn close(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CallKind;
    use crate::prelude::*;
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
        assert!(b.submit_result(&page("p1"), "a", ok()).await.is_ok());
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
            b.submit_result(&page("p1"), "b", ok()).await,
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
