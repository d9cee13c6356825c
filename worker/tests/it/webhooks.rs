//! Webhook delivery end to end.

use std::collections::HashMap;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolmark_broker::prelude::*;
use toolmark_config::redis_url;

use serde_json::json;
use toolmark_broker::redis::{RedisBroker, RedisOptions};
use toolmark_broker::{ConvKey, EventType, PageSink};
use toolmark_config::signing::SigningKey;
use toolmark_config::{Overrides, Settings};

use crate::receiver::{Mode, Receiver};
use toolmark_testkit::redis::RedisProc;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

pub(crate) struct NoPages;
impl PageSink for NoPages {
    fn deliver(&self, _: &ConvKey, _: &str, _: Arc<str>) {}
}

/// A worker and tenant `acme` whose webhook is `hook`; the test receivers are on loopback, so
/// the tenant allows private addresses.
fn config_text(redis: &str, prefix: &str, hook: &str, worker: &str) -> String {
    config_text_with(redis, prefix, hook, worker, true)
}

fn config_text_with(
    redis: &str,
    prefix: &str,
    hook: &str,
    worker: &str,
    allow_private: bool,
) -> String {
    format!(
        r#"
[broker]
kind = "redis"
url = "{redis}"
key_prefix = "{prefix}"

[worker]
listen = "127.0.0.1:0"
{worker}

[[tenants]]
id = "acme"
api_keys = []
token_secret = "acme-secret-0123456789abcdef0123456789"
webhook_url = "{hook}"
webhook_secret = "{SECRET}"
webhook_allow_private = {allow_private}
"#
    )
}

/// A broker handle for emitting events as a gateway would.
async fn emitter(redis: &str, prefix: &str) -> Arc<RedisBroker> {
    let opts = RedisOptions {
        prefix: prefix.into(),
        ..RedisOptions::default()
    };
    RedisBroker::connect(
        redis_url::parse(redis).unwrap(),
        "emitter",
        Arc::new(NoPages),
        opts,
    )
    .await
    .unwrap()
}

/// Runs a worker in this process until the returned sender is dropped or fires.
fn spawn_worker(text: &str) -> tokio::sync::oneshot::Sender<()> {
    let config = Settings::load(text, [], &Overrides::default()).expect("valid worker config");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let life = toolmark_process::Lifecycle::new();
    life.stop_on(async move {
        let _ = rx.await;
    });
    tokio::spawn(async move {
        toolmark_worker::run(config, life, |_| {})
            .await
            .expect("worker runs");
    });
    tx
}

async fn wait_for(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn verify(d: &crate::receiver::Delivery) -> bool {
    let key = SigningKey::parse(SECRET).unwrap();
    key.sign(&d.id, d.timestamp.parse().unwrap(), &d.body) == d.signature
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_retried_with_the_same_id_and_a_valid_signature_and_never_redelivered() {
    let redis = RedisProc::start(&[]);
    let hook = Receiver::start(Mode::Ok).await;
    hook.script(&[Mode::Fail, Mode::Fail, Mode::Hang]);
    // A timeout long enough that a busy machine's answer is never taken for the hang.
    let worker = "webhook_timeout_ms = 1500\nwebhook_backoff_base_ms = 100\nwebhook_backoff_max_ms = 400\nwebhook_claim_after_ms = 4000";
    let _stop = spawn_worker(&config_text(&redis.url(), "w1", &hook.url, worker));
    let broker = emitter(&redis.url(), "w1").await;
    let conv = ConvKey::new("acme", "u1", "c1");
    let event = broker
        .emit("acme", EventType::PageManifest, &conv, json!({"rev": 1}))
        .await
        .unwrap();
    wait_for("the delivery", Duration::from_secs(15), || {
        !hook.delivered().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seen = hook.seen();
    assert_eq!(
        seen.len(),
        4,
        "3 failed attempts (500, 500, timeout) and 1 success: {seen:?}"
    );
    assert!(
        seen.iter().all(|d| d.id == event.id),
        "webhook-id is the event id on every attempt"
    );
    let ok = &hook.delivered()[0];
    assert!(verify(ok), "the signature verifies");
    let body: serde_json::Value = serde_json::from_str(&ok.body).unwrap();
    assert_eq!(
        body,
        json!({"type": "page.manifest", "id": event.id, "timestamp": event.timestamp, "data": {"rev": 1}})
    );
    assert_eq!(
        hook.delivered().len(),
        1,
        "nothing is delivered twice after success"
    );
}

fn start_worker_process(config: &std::path::Path) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolmark-worker"));
    cmd.args(["--config", config.to_str().unwrap()])
        .env("RUST_LOG", "warn");
    toolmark_testkit::process::start_listening(toolmark_testkit::process::quiet(cmd)).0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_while_holding_events_is_taken_over() {
    let redis = RedisProc::start(&[]);
    let hook = Receiver::start(Mode::Hang).await;
    let worker = "webhook_timeout_ms = 20000\nwebhook_claim_after_ms = 21000";
    let path = std::env::temp_dir().join(format!("toolmark-worker-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&path, config_text(&redis.url(), "w2", &hook.url, worker)).unwrap();
    let broker = emitter(&redis.url(), "w2").await;
    let mut ids = Vec::new();
    for i in 0..20 {
        let conv = ConvKey::new("acme", &format!("u{i}"), "c1");
        ids.push(
            broker
                .emit("acme", EventType::PageManifest, &conv, json!({"i": i}))
                .await
                .unwrap()
                .id,
        );
    }
    // Started after the events: its first read takes all 20.
    let mut victim = start_worker_process(&path);
    // The victim has read the events and hangs on their deliveries.
    // One delivery hangs; the victim has read (and holds) all 20 in the same batch.
    wait_for(
        "the victim's first attempt",
        Duration::from_secs(10),
        || !hook.seen().is_empty(),
    )
    .await;
    assert_eq!(
        redis_pending(&redis, "w2"),
        20,
        "the victim holds every event"
    );
    let _ = Command::new("kill")
        .args(["-KILL", &victim.id().to_string()])
        .status();
    let _ = victim.wait();
    hook.set(Mode::Ok);
    // Another worker claims what the victim held once it has been idle long enough.
    let taker = "webhook_timeout_ms = 3000\nwebhook_claim_after_ms = 4000";
    let _stop = spawn_worker(&config_text(&redis.url(), "w2", &hook.url, taker));
    wait_for("every event", Duration::from_secs(20), || {
        hook.delivered().len() >= ids.len()
    })
    .await;
    let mut got: Vec<String> = hook.delivered().into_iter().map(|d| d.id).collect();
    got.sort();
    ids.sort();
    assert_eq!(got, ids, "all delivered, none twice");
    std::fs::remove_file(path).unwrap();
}

/// Entries the consumer group has handed out and not yet acknowledged.
fn redis_pending(redis: &RedisProc, prefix: &str) -> usize {
    let out = redis.cli(&["xpending", &format!("{prefix}:{{acme}}:events"), "webhooks"]);
    out.lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_events_after_an_outage_arrive_once_each_in_conversation_order() {
    let outage: u64 = std::env::var("TOOLMARK_TEST_OUTAGE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let redis = RedisProc::start(&[]);
    let hook = Receiver::start(Mode::Fail).await;
    let worker = "webhook_timeout_ms = 3000\nwebhook_backoff_base_ms = 200\nwebhook_backoff_max_ms = 1000\nwebhook_claim_after_ms = 5000";
    let _stop = spawn_worker(&config_text(&redis.url(), "w3", &hook.url, worker));
    let opts = RedisOptions {
        prefix: "w3".into(),
        retention: toolmark_broker::Retention {
            events_per_tenant: 20_000,
            ..toolmark_broker::Retention::default()
        },
        ..RedisOptions::default()
    };
    let broker = RedisBroker::connect(
        redis_url::parse(&redis.url()).unwrap(),
        "emitter",
        Arc::new(NoPages),
        opts,
    )
    .await
    .unwrap();
    let started = Instant::now();
    let mut expected: HashMap<String, Vec<String>> = HashMap::new();
    for i in 0..10_000u32 {
        let user = format!("u{}", i % 20);
        let conv = ConvKey::new("acme", &user, "c1");
        let e = broker
            .emit("acme", EventType::CallResult, &conv, json!({"n": i}))
            .await
            .unwrap();
        expected.entry(user).or_default().push(e.id);
    }
    let left = Duration::from_secs(outage).saturating_sub(started.elapsed());
    tokio::time::sleep(left).await;
    hook.set(Mode::Ok);
    wait_for("all 10,000 events", Duration::from_secs(120), || {
        hook.delivered().len() >= 10_000
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let delivered = hook.delivered();
    assert_eq!(delivered.len(), 10_000, "none twice");
    let mut order: HashMap<String, Vec<String>> = HashMap::new();
    for d in delivered {
        let body: serde_json::Value = serde_json::from_str(&d.body).unwrap();
        let n = body["data"]["n"].as_u64().unwrap();
        order.entry(format!("u{}", n % 20)).or_default().push(d.id);
    }
    assert_eq!(order, expected, "per conversation, in emission order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_failing_past_the_maximum_age_become_dead_letters_and_can_be_retried() {
    let redis = RedisProc::start(&[]);
    let hook = Receiver::start(Mode::Fail).await;
    let worker = "webhook_timeout_ms = 300\nwebhook_backoff_base_ms = 100\nwebhook_backoff_max_ms = 200\nwebhook_max_age_secs = 1\nwebhook_claim_after_ms = 2000";
    let _stop = spawn_worker(&config_text(&redis.url(), "w4", &hook.url, worker));
    let broker = emitter(&redis.url(), "w4").await;
    let conv = ConvKey::new("acme", "u1", "c1");
    let event = broker
        .emit("acme", EventType::CallTimeout, &conv, json!({"id": "x"}))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let failed = loop {
        let f = broker.webhook_failed("acme").await.unwrap();
        if !f.is_empty() {
            break f;
        }
        assert!(
            Instant::now() < deadline,
            "the event never became a dead letter"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(failed[0].event_id, event.id);
    assert_eq!(failed[0].last_error, "500");
    hook.set(Mode::Ok);
    assert!(broker.webhook_retry("acme", &failed[0].id).await.unwrap());
    wait_for("the retried delivery", Duration::from_secs(10), || {
        !hook.delivered().is_empty()
    })
    .await;
    assert_eq!(hook.delivered()[0].id, event.id);
    assert!(broker.webhook_failed("acme").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmations_of_a_page_gone_from_every_node_expire_once() {
    use toolmark_broker::{AdmitLimits, CallBinding, CallKind, PageIdentity, now_ms};
    use toolmark_proto::{AgentMessage, Call, ToolResult};
    let redis = RedisProc::start(&[]);
    let broker = emitter(&redis.url(), "w5").await;
    let conv = ConvKey::new("acme", "u1", "c1");
    broker
        .admit_page(
            &conv,
            &AdmitLimits {
                max_connections: 10,
                max_pages_per_conversation: 10,
            },
        )
        .await
        .unwrap();
    broker.page_identified(&conv, "p1").await.unwrap();
    let call_id = toolmark_broker::partition::new_call_id();
    let binding = CallBinding {
        id: call_id.clone(),
        conv: conv.clone(),
        client_id: "p1".into(),
        tool: "signup.submit".into(),
        kind: CallKind::Call,
        deadline_ms: now_ms() + 60_000,
        node: "emitter".into(),
        untrusted: false,
        respond_async: false,
        caller: None,
    };
    let frame = AgentMessage::Call(Call {
        client_id: "p1".into(),
        id: call_id.clone(),
        rev: None,
        tool: "signup.submit".into(),
        input: json!({}),
    });
    let _waiter = broker.send_call(binding, frame).await.unwrap();
    let from = PageIdentity {
        conv: conv.clone(),
        client_id: "p1".into(),
    };
    let needs = ToolResult::NeedsConfirmation {
        confirm_id: "k1".into(),
        summary: "s".into(),
        changes: None,
    };
    broker.submit_result(&from, &call_id, &needs).await.unwrap();
    assert!(
        broker
            .expire_abandoned_confirmations(Duration::ZERO)
            .await
            .unwrap()
            .is_empty(),
        "the page is still there"
    );
    broker
        .release_page(
            &conv,
            Some("p1"),
            &toolmark_broker::Release::new("r", false),
        )
        .await
        .unwrap();
    // Leased sweeps: wait out the lease of the previous one.
    let deadline = Instant::now() + Duration::from_secs(10);
    let expired = loop {
        let e = broker
            .expire_abandoned_confirmations(Duration::ZERO)
            .await
            .unwrap();
        if !e.is_empty() {
            break e;
        }
        assert!(Instant::now() < deadline, "the confirmation never expired");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(
        (
            expired[0].confirm_id.as_str(),
            expired[0].call_id.as_str(),
            expired[0].tool.as_str()
        ),
        ("k1", call_id.as_str(), "signup.submit")
    );
    assert!(
        broker
            .submit_confirmed(&from, "k1", &ToolResult::Ok { data: None })
            .await
            .is_err(),
        "a late confirmed is rejected"
    );
}

/// Emits one event and waits for it to become a dead letter; its `lastError`.
async fn dead_letter_of_one_event(redis: &RedisProc, prefix: &str) -> String {
    let broker = emitter(&redis.url(), prefix).await;
    let conv = ConvKey::new("acme", "u1", "c1");
    let event = broker
        .emit("acme", EventType::CallTimeout, &conv, json!({"id": "x"}))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let f = broker.webhook_failed("acme").await.unwrap();
        if let Some(f) = f.first() {
            assert_eq!(f.event_id, event.id);
            return f.last_error.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the event never became a dead letter"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const FAIL_FAST: &str = "webhook_timeout_ms = 1000\nwebhook_backoff_base_ms = 100\nwebhook_backoff_max_ms = 200\nwebhook_max_age_secs = 1\nwebhook_claim_after_ms = 2000";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_a_failed_attempt_and_is_never_followed() {
    let redis = RedisProc::start(&[]);
    // A 307 keeps the method, the body and the signature: followed, it would carry a signed
    // event wherever the receiver points (here another route of the same receiver).
    let hook = Receiver::start(Mode::Redirect).await;
    let _stop = spawn_worker(&config_text(&redis.url(), "w6", &hook.url, FAIL_FAST));
    let last_error = dead_letter_of_one_event(&redis, "w6").await;
    assert_eq!(last_error, "307", "a 3xx is a failed attempt");
    assert!(
        hook.seen().len() >= 2,
        "retried like any failure: {:?}",
        hook.seen()
    );
    assert_eq!(hook.followed(), 0, "the redirect was never followed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_to_loopback_are_refused_by_address_and_by_name_unless_the_tenant_allows_them() {
    let redis = RedisProc::start(&[]);
    let hook = Receiver::start(Mode::Ok).await;
    // By address (an IP literal) and by a name that resolves to loopback: the address
    // checked is the one that would be connected to.
    let by_name = hook.url.replace("127.0.0.1", "localhost");
    for (prefix, url) in [("w7", hook.url.clone()), ("w8", by_name)] {
        let stop = spawn_worker(&config_text_with(
            &redis.url(),
            prefix,
            &url,
            FAIL_FAST,
            false,
        ));
        let last_error = dead_letter_of_one_event(&redis, prefix).await;
        assert_eq!(last_error, "refused_address", "{url}");
        assert!(
            hook.seen().is_empty(),
            "nothing reached the receiver through {url}"
        );
        drop(stop);
    }
    // Allowed: delivered.
    let _stop = spawn_worker(&config_text(&redis.url(), "w9", &hook.url, FAIL_FAST));
    let broker = emitter(&redis.url(), "w9").await;
    let conv = ConvKey::new("acme", "u1", "c1");
    broker
        .emit("acme", EventType::CallTimeout, &conv, json!({"id": "y"}))
        .await
        .unwrap();
    wait_for("the allowed delivery", Duration::from_secs(15), || {
        !hook.delivered().is_empty()
    })
    .await;
}
