//! The worker's sweeps against a real Redis: a call whose node died is timed out and announced,
//! and a confirmation of a page that is gone expires once the 60 s grace of D23 has passed.

use std::sync::Arc;
use std::time::{Duration, Instant};
use toolmark_config::redis_url;

use serde_json::json;
use toolmark_broker::redis::{RedisBroker, RedisOptions};
use toolmark_broker::{
    AdmitLimits, CallBinding, CallKind, ConvKey, Event, PageIdentity, SharedBroker, now_ms,
};
use toolmark_config::{Overrides, Settings};
use toolmark_proto::{AgentMessage, Call, ToolResult};
use toolmark_testkit::redis::RedisProc;

use crate::webhooks::NoPages;

/// A gateway node as the broker sees it (this test plays its part).
async fn node(redis: &RedisProc, prefix: &str, id: &str) -> SharedBroker {
    let opts = RedisOptions {
        prefix: prefix.into(),
        ..RedisOptions::default()
    };
    RedisBroker::connect(
        redis_url::parse(&redis.url()).unwrap(),
        id,
        Arc::new(NoPages),
        opts,
    )
    .await
    .unwrap()
}

/// Starts a worker without webhooks; returns its `/metrics` URL and the sender that stops it.
async fn worker(redis: &RedisProc, prefix: &str) -> (String, tokio::sync::oneshot::Sender<()>) {
    let text = format!(
        "[broker]\nkind = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{prefix}\"\n\n[worker]\nlisten = \"127.0.0.1:0\"\n\n[[tenants]]\nid = \"acme\"\napi_keys = []\ntoken_secret = \"acme-secret-0123456789abcdef0123456789\"\n",
        redis.url()
    );
    let settings = Settings::load(&text, [], &Overrides::default()).expect("valid config");
    let life = toolmark_process::Lifecycle::new();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    life.stop_on(async move {
        let _ = stopped.await;
    });
    let (bound, addr) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        toolmark_worker::run(settings, life, move |a| {
            let _ = bound.send(a);
        })
        .await
        .expect("worker runs");
    });
    let addr = addr.await.expect("the worker is listening");
    (format!("http://{addr}/metrics"), stop)
}

/// Waits (up to `within`) for an event of `kind` in the tenant's log.
async fn event_of(reader: &SharedBroker, kind: &str, within: Duration) -> Event {
    let deadline = Instant::now() + within;
    loop {
        let feed = reader.retained("acme", "0-0").await.unwrap();
        if let Some(e) = feed.into_iter().find(|e| e.kind.as_str() == kind) {
            return e;
        }
        assert!(
            Instant::now() < deadline,
            "no {kind} event within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of a counter on the worker's `/metrics`.
async fn counter(metrics: &str, name: &str) -> f64 {
    let text = reqwest::get(metrics).await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn call_to(
    conv: &ConvKey,
    client: &str,
    node: &str,
    deadline_ms: u64,
) -> (CallBinding, AgentMessage) {
    let id = toolmark_broker::partition::new_call_id();
    let binding = CallBinding {
        id: id.clone(),
        conv: conv.clone(),
        client_id: client.into(),
        tool: "signup.submit".into(),
        kind: CallKind::Call,
        deadline_ms,
        node: node.into(),
        untrusted: false,
        respond_async: false,
        caller: None,
    };
    let frame = AgentMessage::Call(Call {
        client_id: client.into(),
        id,
        rev: None,
        tool: "signup.submit".into(),
        input: json!({}),
    });
    (binding, frame)
}

/// A Redis of its own, a reader of the tenant's events, a running worker and one node that
/// plays a gateway.
struct Stage {
    _redis: RedisProc,
    reader: SharedBroker,
    metrics: String,
    _stop: tokio::sync::oneshot::Sender<()>,
    gateway: SharedBroker,
}

async fn stage(gateway_id: &str) -> Stage {
    let redis = RedisProc::start(&[]);
    let reader = node(&redis, "sw", "reader").await;
    let (metrics, stop) = worker(&redis, "sw").await;
    let gateway = node(&redis, "sw", gateway_id).await;
    Stage {
        _redis: redis,
        reader,
        metrics,
        _stop: stop,
        gateway,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_node_died_is_timed_out_and_announced_by_the_worker() {
    // Bound whole: its Redis and its worker live until the end of the test.
    let stage = stage("doomed").await;
    let (reader, metrics, doomed) = (&stage.reader, &stage.metrics, &stage.gateway);
    let conv = ConvKey::new("acme", "u1", "c1");
    let (binding, frame) = call_to(&conv, "p1", "doomed", now_ms() + 300);
    let id = binding.id.clone();
    let _waiter = doomed.send_call(binding, frame).await.unwrap();
    // The node that waits for the call dies before the deadline: nobody is left to time it out
    // but the worker.
    doomed.close().await;
    let ev = event_of(reader, "call.timeout", Duration::from_secs(10)).await;
    assert_eq!(ev.data["id"], id.as_str(), "{}", ev.data);
    let record = reader
        .call("acme", &id)
        .await
        .unwrap()
        .expect("the call is kept");
    assert_eq!(record.state, toolmark_broker::CallState::TimedOut);
    assert_eq!(
        counter(metrics, "toolmark_deadline_sweeps_total").await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_of_a_gone_page_expires_after_the_grace_and_is_announced() {
    let stage = stage("gw").await;
    let (reader, metrics, gateway) = (&stage.reader, &stage.metrics, &stage.gateway);
    let conv = ConvKey::new("acme", "u1", "c1");
    let limits = AdmitLimits {
        max_connections: 10,
        max_pages_per_conversation: 10,
    };
    gateway.admit_page(&conv, &limits).await.unwrap();
    gateway.page_identified(&conv, "p1").await.unwrap();
    let (binding, frame) = call_to(&conv, "p1", "gw", now_ms() + 60_000);
    let _waiter = gateway.send_call(binding.clone(), frame).await.unwrap();
    let confirm_id = uuid::Uuid::new_v4().to_string();
    let from = PageIdentity {
        conv: conv.clone(),
        client_id: "p1".into(),
    };
    let needs = ToolResult::NeedsConfirmation {
        confirm_id: confirm_id.clone(),
        summary: "Submit the sign-up form".into(),
        changes: None,
    };
    gateway
        .submit_result(&from, &binding.id, &needs)
        .await
        .unwrap();
    // The page goes away before the user decides, and does not come back.
    let gone_at = Instant::now();
    assert!(
        gateway
            .release_page(
                &conv,
                Some("p1"),
                &toolmark_broker::Release::new("r", false)
            )
            .await
            .unwrap()
            .page_gone
    );
    let ev = event_of(reader, "confirmation.resolved", Duration::from_secs(75)).await;
    assert!(
        gone_at.elapsed() >= toolmark_broker::CONFIRM_ABANDON_GRACE,
        "expired after {:?}, within the grace",
        gone_at.elapsed()
    );
    assert_eq!(ev.data["confirmId"], confirm_id.as_str());
    assert_eq!(
        ev.data["outcome"]["code"], "confirmation_expired",
        "{}",
        ev.data
    );
    assert_eq!(
        counter(metrics, "toolmark_confirmations_expired_total").await,
        1.0
    );
}
