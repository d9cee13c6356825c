//! `Idempotency-Key` on the agent API: a repeated request runs once, on any node, and gets the
//! first one's answer; the same key with another request is 422.

use std::time::Duration;

use serde_json::{Value, json};

use crate::agent::{Agent, Answer};
use crate::harness::*;

/// POSTs `body` to `path` of u1/c1 with `Idempotency-Key: key` (and `Prefer: respond-async`
/// when `later`).
async fn keyed(agent: &Agent, path: &str, body: Value, key: &str, later: bool) -> Answer {
    let mut req = agent
        .http
        .post(agent.url(&format!("{}{path}", agent.conv("u1", "c1"))))
        .bearer_auth(&agent.key)
        .header("idempotency-key", key)
        .json(&body);
    if later {
        req = req.header("prefer", "respond-async");
    }
    Agent::read(req.send().await.unwrap()).await
}

/// The page receives no frame (a repeat never reaches it).
async fn nothing_more(page: &mut Page) {
    assert_eq!(page.try_recv(Duration::from_millis(300)).await, None);
}

#[tokio::test]
async fn concurrent_repeats_on_two_nodes_run_once_and_share_the_answer() {
    let nodes = Gateway::start_nodes(2, "").await;
    let (n1, n2) = (&nodes[0], &nodes[1]);
    let mut page = page_across(n1, n2, json!([tool("todo.add", json!({}))])).await;
    let body = json!({"tool": "todo.add", "input": {"text": "milk", "n": 1}});
    let first = {
        let (a, b) = (n1.acme(), body.clone());
        tokio::spawn(async move { keyed(&a, "/calls", b, "order-1", false).await })
    };
    // The same request in another key order, through the other node, at the same time.
    let same: Value =
        serde_json::from_str(r#"{"input": {"n": 1, "text": "milk"}, "tool": "todo.add"}"#).unwrap();
    let second = {
        let a = n2.acme();
        tokio::spawn(async move { keyed(&a, "/calls", same, "order-1", false).await })
    };
    let frame = page.recv().await;
    nothing_more(&mut page).await;
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "ok", "data": 7}),
    )
    .await;
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!(
        (first.status, second.status),
        (200, 200),
        "{} {}",
        first.body,
        second.body
    );
    assert_eq!(first.body, second.body);
    assert_eq!(first.body["id"], frame["id"]);
    assert_eq!(first.body["outcome"], json!({"status": "ok", "data": 7}));

    // Later, on either node: the same answer, and still no frame.
    let again = keyed(&n2.acme(), "/calls", body.clone(), "order-1", false).await;
    assert_eq!((again.status, &again.body), (200, &first.body));
    // Asked to respond async: 202 with the same call.
    let later = keyed(&n1.acme(), "/calls", body.clone(), "order-1", true).await;
    assert_eq!(later.status, 202);
    assert_eq!(later.body["id"], frame["id"]);
    assert_eq!(
        later.headers["location"].to_str().unwrap(),
        format!("/v1/tenants/acme/calls/{}", frame["id"].as_str().unwrap())
    );
    nothing_more(&mut page).await;

    // The same key with another body, or for another route: 422.
    let other = keyed(
        &n1.acme(),
        "/calls",
        json!({"tool": "todo.add", "input": {"text": "eggs"}}),
        "order-1",
        false,
    )
    .await;
    assert_eq!(
        (other.status, other.body["code"].as_str()),
        (422, Some("idempotency_mismatch"))
    );
    let other = keyed(
        &n2.acme(),
        "/describe",
        json!({"tool": "todo.add"}),
        "order-1",
        false,
    )
    .await;
    assert_eq!(other.status, 422);
    // Keys are per tenant: globex's "order-1" is its own.
    assert_eq!(
        n1.agent("globex", GLOBEX_KEY)
            .http
            .post(
                n1.agent("globex", GLOBEX_KEY)
                    .url("/users/u1/conversations/c1/calls")
            )
            .bearer_auth(GLOBEX_KEY)
            .header("idempotency-key", "order-1")
            .json(&body)
            .send()
            .await
            .unwrap()
            .status(),
        409,
        "globex has no page: its own request ran"
    );
    nothing_more(&mut page).await;
}

#[tokio::test]
async fn a_repeat_while_the_call_is_pending_waits_for_its_outcome() {
    let gw = Gateway::start().await;
    let mut page = ready_page(
        &gw,
        "acme",
        "u1",
        "c1",
        json!([tool("todo.add", json!({}))]),
    )
    .await;
    let body = json!({"tool": "todo.add", "input": {}});
    let first = {
        let (a, b) = (gw.acme(), body.clone());
        tokio::spawn(async move { keyed(&a, "/calls", b, "k-pending", false).await })
    };
    let frame = page.recv().await;
    let repeat = {
        let (a, b) = (gw.acme(), body.clone());
        tokio::spawn(async move { keyed(&a, "/calls", b, "k-pending", false).await })
    };
    nothing_more(&mut page).await;
    assert!(!repeat.is_finished(), "the repeat waits for the outcome");
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "ok", "data": "done"}),
    )
    .await;
    let (first, repeat) = (first.await.unwrap(), repeat.await.unwrap());
    assert_eq!(repeat.status, 200);
    assert_eq!(first.body, repeat.body);
}

#[tokio::test]
async fn a_first_request_that_fails_before_its_call_leaves_the_key_free() {
    let gw = Gateway::start().await;
    let body = json!({"tool": "todo.add", "input": {}});
    let refused = keyed(&gw.acme(), "/calls", body.clone(), "k-retry", false).await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    let mut page = ready_page(
        &gw,
        "acme",
        "u1",
        "c1",
        json!([tool("todo.add", json!({}))]),
    )
    .await;
    let retried = {
        let (a, b) = (gw.acme(), body.clone());
        tokio::spawn(async move { keyed(&a, "/calls", b, "k-retry", false).await })
    };
    let frame = page.recv().await;
    page.answer(frame["id"].as_str().unwrap(), json!({"status": "ok"}))
        .await;
    assert_eq!(retried.await.unwrap().status, 200);
}

#[tokio::test]
async fn invoke_and_describe_repeats_are_answered_once_and_bad_keys_refused() {
    let gw = Gateway::start().await;
    let mut page = ready_page(
        &gw,
        "acme",
        "u1",
        "c1",
        json!([tool("todo.list", json!({"untrustedContent": true}))]),
    )
    .await;
    let body = json!({"name": "page_call", "input": {"tool": "todo.list", "input": {}}});
    let first = {
        let (a, b) = (gw.acme(), body.clone());
        tokio::spawn(async move { keyed(&a, "/llm-tools/invoke", b, "inv-1", false).await })
    };
    let frame = page.recv().await;
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "ok", "data": ["x"]}),
    )
    .await;
    let first = first.await.unwrap();
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["content"]["untrustedContent"], json!(true));
    let again = keyed(&gw.acme(), "/llm-tools/invoke", body, "inv-1", false).await;
    assert_eq!((again.status, &again.body), (200, &first.body));

    let describe = json!({"tool": "todo.list"});
    let first = {
        let (a, b) = (gw.acme(), describe.clone());
        tokio::spawn(async move { keyed(&a, "/describe", b, "desc-1", true).await })
    };
    let frame = page.recv().await;
    assert_eq!(frame["type"], "describe");
    let first = first.await.unwrap();
    assert_eq!(first.status, 202);
    let again = keyed(&gw.acme(), "/describe", describe, "desc-1", true).await;
    assert_eq!((again.status, &again.body["id"]), (202, &first.body["id"]));
    nothing_more(&mut page).await;

    for bad in ["has space", &"k".repeat(256), "tab\tkey"] {
        let r = gw
            .http
            .post(gw.acme().url("/users/u1/conversations/c1/calls"))
            .bearer_auth(ACME_KEY)
            .header("idempotency-key", bad)
            .json(&json!({"tool": "todo.list"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{bad:?}");
    }
    nothing_more(&mut page).await;
}

/// Repeats of a pending call, on another node than the first request, wait for the call's
/// outcome notification: while they wait, none of them reads the broker (counted with
/// `MONITOR` on a Redis of this test's own); then each gets the page's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_of_a_pending_call_wait_on_its_outcome_without_polling_the_broker() {
    let redis = toolmark_testkit::redis::RedisProc::start(&[]);
    let broker = redis_broker(&redis.url(), &fresh_prefix());
    let n1 = Gateway::start_config(&config_with(&broker, ""), Some("node-1".into())).await;
    let n2 = Gateway::start_config(&config_with(&broker, ""), Some("node-2".into())).await;
    let mut page = page_across(&n1, &n2, json!([tool("todo.add", json!({}))])).await;
    let body = json!({"tool": "todo.add", "input": {"text": "milk"}});
    let monitor = redis.monitor();
    let first = {
        let (a, b) = (n1.acme(), body.clone());
        tokio::spawn(async move { keyed(&a, "/calls", b, "order-9", false).await })
    };
    let frame = page.recv().await;
    monitor.mark("claimed");
    let repeats: Vec<_> = (0..10)
        .map(|_| {
            let (a, b) = (n2.acme(), body.clone());
            tokio::spawn(async move { keyed(&a, "/calls", b, "order-9", false).await })
        })
        .collect();
    // Every repeat has read the key's record (one GET each after its SET NX)...
    let reads = |from: &str, to: &str| {
        monitor
            .client_lines(from, to)
            .iter()
            .filter(|l| l.contains("order-9") && l.to_ascii_lowercase().contains("\"get\""))
            .count()
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut n = 0;
    loop {
        monitor.mark(&format!("look-{n}"));
        if reads("claimed", &format!("look-{n}")) >= 10 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the repeats never read the key"
        );
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // ...and from then on, for a second of waiting, none reads it again (a poll every 50 ms
    // would be 200 reads).
    monitor.mark("waiting");
    tokio::time::sleep(Duration::from_secs(1)).await;
    monitor.mark("answered");
    assert_eq!(
        reads("waiting", "answered"),
        0,
        "the repeats poll the broker"
    );
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "ok", "data": "milk added"}),
    )
    .await;
    let first = first.await.unwrap();
    assert_eq!(first.status, 200, "{}", first.body);
    for r in repeats {
        let r = r.await.unwrap();
        assert_eq!((r.status, &r.body), (200, &first.body));
    }
    nothing_more(&mut page).await;
}
