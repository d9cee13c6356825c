//! Brokers under test: one builder for memory, Redis and Redis Cluster, a recording page sink,
//! and waiting with deadlines.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use toolmark_config::redis_url;

use serde_json::json;
use toolmark_broker::memory::MemoryBroker;
use toolmark_broker::redis::{RedisBroker, RedisOptions};
use toolmark_broker::{
    AdmitLimits, CallBinding, CallKind, ConvKey, PageIdentity, PageSink, Retention, SharedBroker,
    now_ms,
};
use toolmark_proto::{AgentMessage, Call, ToolResult};

use toolmark_testkit::redis::{RedisCluster, RedisProc};

/// Where the broker's state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Redis,
    Cluster,
}

/// Frames delivered to this node's pages.
#[derive(Debug, Default)]
pub struct Sink(Mutex<Vec<(ConvKey, String, String)>>);

impl PageSink for Sink {
    fn deliver(&self, conv: &ConvKey, client_id: &str, frame: Arc<str>) {
        self.0
            .lock()
            .unwrap()
            .push((conv.clone(), client_id.to_owned(), frame.to_string()));
    }
}

impl Sink {
    pub fn frames(&self) -> Vec<String> {
        self.0.lock().unwrap().iter().map(|f| f.2.clone()).collect()
    }
}

static REDIS: OnceLock<RedisProc> = OnceLock::new();
static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();

/// The shared Redis Cluster.
pub fn cluster() -> &'static RedisCluster {
    CLUSTER.get_or_init(RedisCluster::start)
}

/// The URL of the shared server (or cluster) of `backend`.
pub fn url(backend: Backend) -> String {
    match backend {
        Backend::Memory => String::new(),
        Backend::Redis => REDIS.get_or_init(|| RedisProc::start(&[])).url(),
        Backend::Cluster => cluster().url(),
    }
}

/// Retention compressed for tests: every limit is crossed within seconds.
pub fn short() -> Retention {
    Retention {
        finished_calls: Duration::from_millis(500),
        confirmations: Duration::from_secs(30),
        conversations: Duration::from_millis(1500),
        events_per_tenant: 1000,
        event_bytes_per_tenant: 1 << 20,
        confirm_abandon_grace: Duration::ZERO,
        gone_manifests: Duration::from_millis(700),
    }
}

/// The nodes of one test: they share one state (one process for memory, one key prefix for
/// Redis), each with its own page sink.
pub struct Nodes {
    pub backend: Backend,
    prefix: String,
    url: String,
    retention: Retention,
    memory: Option<(Arc<MemoryBroker>, Arc<Sink>)>,
}

impl Nodes {
    pub fn new(backend: Backend, retention: Retention) -> Nodes {
        Nodes {
            backend,
            prefix: format!("t{}", uuid::Uuid::new_v4().simple()),
            url: url(backend),
            retention,
            memory: None,
        }
    }

    /// A node with heartbeat `heartbeat` (Redis). The memory broker has one node only: every
    /// call returns the same one. [`toolmark_broker::Broker::close`] stops a Redis node (its
    /// heartbeat ends: the node is gone for the others).
    pub async fn node_with(
        &mut self,
        name: &str,
        heartbeat: Duration,
    ) -> (SharedBroker, Arc<Sink>) {
        if self.backend == Backend::Memory {
            let (b, s) = self.memory.get_or_insert_with(|| {
                let sink = Arc::new(Sink::default());
                let b = Arc::new(MemoryBroker::with_retention(
                    name,
                    sink.clone(),
                    self.retention,
                ));
                (b, sink)
            });
            return (b.clone(), s.clone());
        }
        let sink = Arc::new(Sink::default());
        let opts = RedisOptions {
            retention: self.retention,
            heartbeat,
            prefix: self.prefix.clone(),
            ..RedisOptions::default()
        };
        let b = RedisBroker::connect(
            redis_url::parse(&self.url).unwrap(),
            name,
            sink.clone(),
            opts,
        )
        .await
        .expect("the broker connects");
        (b, sink)
    }

    /// The key prefix of these nodes' state (Redis).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub async fn node(&mut self, name: &str) -> (SharedBroker, Arc<Sink>) {
        self.node_with(name, Duration::from_millis(200)).await
    }
}

/// How many of a UUID's 128 bits take both values across `ids`: 122 for version 4 UUIDs
/// whose random bits are all random (given enough of them), fewer when some encode something.
pub fn varying_bits(ids: &[String]) -> u32 {
    let (mut ones, mut zeros) = (0u128, 0u128);
    for id in ids {
        let u = uuid::Uuid::parse_str(id).expect("a UUID").as_u128();
        ones |= u;
        zeros |= !u;
    }
    (ones & zeros).count_ones()
}

pub fn conv() -> ConvKey {
    ConvKey::new("t", "u", "c")
}

pub fn page(conv: &ConvKey, client: &str) -> PageIdentity {
    PageIdentity {
        conv: conv.clone(),
        client_id: client.into(),
    }
}

pub const LIMITS: AdmitLimits = AdmitLimits {
    max_connections: 100,
    max_pages_per_conversation: 50,
};

/// Binds and sends a call of `todo.add` to `client` with `timeout`.
pub async fn call(
    b: &SharedBroker,
    conv: &ConvKey,
    client: &str,
    timeout: Duration,
) -> (String, toolmark_broker::OutcomeWaiter) {
    call_as(b, conv, client, timeout, false).await
}

/// [`call`], async (`Prefer: respond-async`) when `respond_async`.
pub async fn call_as(
    b: &SharedBroker,
    conv: &ConvKey,
    client: &str,
    timeout: Duration,
    respond_async: bool,
) -> (String, toolmark_broker::OutcomeWaiter) {
    let id = b.mint_call_id(conv);
    let binding = CallBinding {
        id: id.clone(),
        conv: conv.clone(),
        client_id: client.into(),
        tool: "todo.add".into(),
        kind: CallKind::Call,
        deadline_ms: now_ms() + u64::try_from(timeout.as_millis()).unwrap(),
        node: b.node_id().into(),
        untrusted: true,
        respond_async,
        caller: None,
    };
    let frame = AgentMessage::Call(Call {
        client_id: client.into(),
        id: id.clone(),
        rev: None,
        tool: "todo.add".into(),
        input: json!({}),
    });
    let waiter = b
        .send_call(binding, frame)
        .await
        .expect("the call is bound");
    (id, waiter)
}

/// An agent's call of `todo.add` to `conv`, with the tenant's rate `per_second`.
pub fn request(conv: &ConvKey, per_second: u32) -> toolmark_broker::CallRequest {
    toolmark_broker::CallRequest {
        id: toolmark_broker::partition::new_call_id(),
        conv: conv.clone(),
        kind: CallKind::Call,
        tool: "todo.add".into(),
        llm_name: None,
        input: json!({"title": "milk"}),
        rev: None,
        deadline_ms: now_ms() + 30_000,
        respond_async: false,
        calls_per_second: per_second,
        caller: None,
        gate: None,
        caller_rate: None,
        trace: None,
    }
}

/// A page load `client` of `conv` connected to `b`: admitted, identified, with a manifest.
pub async fn connected_page(b: &SharedBroker, conv: &ConvKey, client: &str) {
    b.admit_page(conv, &LIMITS).await.unwrap();
    b.page_identified(conv, client).await.unwrap();
    let m = toolmark_proto::Manifest {
        client_id: client.into(),
        rev: 1,
        tools: vec![],
    };
    b.put_manifest(conv, &m, &frame_name()).await.unwrap();
}

pub fn needs(confirm_id: &str) -> ToolResult {
    ToolResult::NeedsConfirmation {
        confirm_id: confirm_id.into(),
        summary: "s".into(),
        changes: None,
    }
}

pub fn ok() -> ToolResult {
    ToolResult::Ok { data: None }
}

/// A page's final outcome of a confirmation.
pub fn confirmed_ok() -> ToolResult {
    ToolResult::Ok {
        data: Some(json!("done")),
    }
}

/// A release of a page socket that announces nothing, under a name of its own.
pub fn release() -> toolmark_broker::Release {
    toolmark_broker::Release::new(frame_name(), false)
}

/// A name for a page's frame, unique in this test process and between processes (as a node's
/// frame names are).
pub fn frame_name() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static PROCESS: OnceLock<String> = OnceLock::new();
    let process =
        PROCESS.get_or_init(|| format!("{}-{}", std::process::id(), toolmark_broker::now_ms()));
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("frame:{process}:{n}")
}

/// Polls `check` until it returns `Some`, failing after `within`.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs one contract test on every backend, each as its own test.
#[macro_export]
macro_rules! contract {
    ($name:ident) => {
        mod $name {
            use $crate::support::Backend;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$name(Backend::Memory).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$name(Backend::Redis).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis_cluster() {
                super::$name(Backend::Cluster).await;
            }
        }
    };
}

/// What [`until_refused`] saw: calls placed, calls refused, and the time they took.
pub struct Spent {
    pub placed: u32,
    pub refused: u32,
    pub elapsed: Duration,
}

/// Spends a tenant's rate sixteen calls at a time until it has refused `refusals` of them, so
/// that the calls outrun the bucket's refill on a busy machine too (one at a time, a
/// millisecond each, they never spend 1,000 a second). `take(i)` is one call of task `i`:
/// `true` placed, `false` refused. Fails after 60 s with what it saw.
pub async fn until_refused<F, Fut>(refusals: u32, take: F) -> Spent
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    let placed = Arc::new(AtomicU32::new(0));
    let refused = Arc::new(AtomicU32::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..16 {
        let (take, placed, refused) = (take.clone(), placed.clone(), refused.clone());
        tasks.spawn(async move {
            while refused.load(Relaxed) < refusals && Instant::now() < deadline {
                if take(i).await {
                    placed.fetch_add(1, Relaxed);
                } else {
                    refused.fetch_add(1, Relaxed);
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let spent = Spent {
        placed: placed.load(Relaxed),
        refused: refused.load(Relaxed),
        elapsed: started.elapsed(),
    };
    assert!(
        spent.refused >= refusals,
        "the bucket was never spent: {} placed in {:.1?}, no faster than its refill",
        spent.placed,
        spent.elapsed
    );
    spent
}
