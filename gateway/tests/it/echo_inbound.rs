//! Echo pages end to end: calls on the Pusher channel, answers through `/inbound` with exactly
//! the checks of a page WebSocket frame (limits, validation, clientId, bindings, single use,
//! deadlines, rate), both transports in one conversation, and across nodes.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::harness::{ACME_PUSHER_KEY, Answer, Gateway, WAIT};
use crate::pusher::{Echo, EchoPage, channel, tools};

#[tokio::test]
async fn an_echo_page_gets_calls_on_its_channel_and_answers_through_inbound() {
    let gw = Gateway::start().await;
    let mut echo = Echo::connect(gw.addr, ACME_PUSHER_KEY).await;
    echo.send(json!({"event": "pusher:ping", "data": {}})).await;
    assert_eq!(echo.next().await["event"], "pusher:pong");
    echo.subscribe(&channel("u1", "c1")).await;

    let page = EchoPage::new(gw.acme(), "u1", "c1");
    let a = page.manifest(1).await;
    assert_eq!(a.status, 202, "{}", a.body);
    gw.acme().wait_current("u1", "c1", &page.client_id).await;

    let pending = gw.acme().call_later(
        "u1",
        "c1",
        json!({"tool": "todo.add", "input": {"text": "milk"}}),
    );
    let call = echo.message().await;
    assert_eq!(call["type"], "call");
    assert_eq!(call["clientId"], page.client_id.as_str());
    assert_eq!(call["input"], json!({"text": "milk"}));
    let id = call["id"].as_str().unwrap().to_owned();
    let a = page
        .answer(&id, json!({"status": "ok", "data": "added"}))
        .await;
    assert_eq!(a.status, 202, "{}", a.body);
    let outcome = pending.await.unwrap();
    assert_eq!(outcome.status, 200, "{}", outcome.body);
    assert_eq!(
        outcome.body["outcome"],
        json!({"status": "ok", "data": "added"})
    );

    // Single use: the same result again is refused with its reason, and counted.
    let a = page
        .answer(&id, json!({"status": "ok", "data": "again"}))
        .await;
    assert_eq!(
        (a.status, a.body["code"].as_str()),
        (400, Some("invalid_request"))
    );
    assert_eq!(a.body["reason"], "duplicate");
    assert_eq!(
        a.headers["content-type"], "application/problem+json",
        "{}",
        a.body
    );
    gw.wait_metric("toolmark_results_rejected_total{reason=\"duplicate\"}", 1.0)
        .await;

    // Unsubscribing releases the page: no socket left, no page to call.
    echo.send(json!({"event": "pusher:unsubscribe", "data": {"channel": channel("u1", "c1")}}))
        .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let a = gw
            .acme()
            .post(
                "/users/u1/conversations/c1/calls",
                json!({"tool": "todo.add", "input": {}, "timeoutMs": 200}),
            )
            .await;
        if a.status == 409 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still routed: {}",
            a.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn confirmations_and_late_results_over_inbound() {
    let gw = Gateway::start().await;
    let mut echo = Echo::connect(gw.addr, ACME_PUSHER_KEY).await;
    echo.subscribe(&channel("u1", "c1")).await;
    let page = EchoPage::new(gw.acme(), "u1", "c1");
    page.manifest(1).await;
    gw.acme().wait_current("u1", "c1", &page.client_id).await;
    let mut events = gw.acme().events("?conversation=c1", None).await;

    let pending = gw
        .acme()
        .call_later("u1", "c1", json!({"tool": "signup.submit", "input": {}}));
    let id = echo.message().await["id"].as_str().unwrap().to_owned();
    let confirm_id = uuid::Uuid::new_v4().to_string();
    page.answer(
        &id,
        json!({"status": "needs_confirmation", "confirmId": confirm_id, "summary": "Submit"}),
    )
    .await;
    assert_eq!(
        pending.await.unwrap().body["outcome"]["status"],
        "needs_confirmation"
    );
    let confirmed = |cid: &str| json!({"protocol": 1, "type": "confirmed", "clientId": page.client_id, "confirmId": cid, "result": {"status": "ok"}});
    let a = page
        .post(confirmed(&uuid::Uuid::new_v4().to_string()))
        .await;
    assert_eq!(
        (a.status, a.body["reason"].as_str()),
        (400, Some("unknown_confirm"))
    );
    let a = page.post(confirmed(&confirm_id)).await;
    assert_eq!(a.status, 202, "{}", a.body);
    let ev = events.next_of("confirmation.resolved").await;
    assert_eq!(ev.data["data"]["callId"], id.as_str());
    let a = page.post(confirmed(&confirm_id)).await;
    assert_eq!(
        (a.status, a.body["reason"].as_str()),
        (400, Some("duplicate"))
    );

    // A result after the deadline: the page got the cancel on its channel, and `late`.
    let pending = gw.acme().call_later(
        "u1",
        "c1",
        json!({"tool": "todo.add", "input": {}, "timeoutMs": 200}),
    );
    let id = echo.message().await["id"].as_str().unwrap().to_owned();
    assert_eq!(
        pending.await.unwrap().body["outcome"],
        json!({"status": "timeout"})
    );
    let cancel = echo.message().await;
    assert_eq!(
        (cancel["type"].as_str(), cancel["id"].as_str()),
        (Some("cancel"), Some(id.as_str()))
    );
    let a = page.answer(&id, json!({"status": "ok"})).await;
    assert_eq!((a.status, a.body["reason"].as_str()), (400, Some("late")));
    gw.wait_metric("toolmark_results_rejected_total{reason=\"late\"}", 1.0)
        .await;
}

/// A gateway with 2 KiB messages, a current Echo page of u1/c1 (and its subscription, kept
/// open), and a call pending on that page with its id.
async fn echo_page_with_a_call() -> (Gateway, Echo, EchoPage, JoinHandle<Answer>, String) {
    let gw = Gateway::start_with("[tenants.limits]\nmax_message_bytes = 2048\n").await;
    let mut echo = Echo::connect(gw.addr, ACME_PUSHER_KEY).await;
    echo.subscribe(&channel("u1", "c1")).await;
    let page = EchoPage::new(gw.acme(), "u1", "c1");
    page.manifest(1).await;
    gw.acme().wait_current("u1", "c1", &page.client_id).await;
    let pending = gw.acme().call_later(
        "u1",
        "c1",
        json!({"tool": "todo.add", "input": {}, "timeoutMs": 5000}),
    );
    let id = echo.message().await["id"].as_str().unwrap().to_owned();
    (gw, echo, page, pending, id)
}

/// A forged result of call `id`, claiming to come from `client`.
fn result(client: &str, id: &str) -> Value {
    json!({"protocol": 1, "type": "result", "clientId": client, "id": id, "result": {"status": "ok", "data": "forged"}})
}

/// The real page still answers its call.
async fn the_real_page_still_answers(page: &EchoPage, id: &str, pending: JoinHandle<Answer>) {
    assert_eq!(
        page.answer(id, json!({"status": "ok", "data": "real"}))
            .await
            .status,
        202
    );
    assert_eq!(pending.await.unwrap().body["outcome"]["data"], "real");
}

#[tokio::test]
async fn inbound_refuses_results_of_another_conversation_user_or_client() {
    let (gw, _echo, page, pending, id) = echo_page_with_a_call().await;

    // Forwarded for another conversation, another user, or claiming another clientId.
    for (user, conv) in [("u1", "c2"), ("u2", "c1")] {
        let a = EchoPage::new(gw.acme(), user, conv)
            .post(result(&page.client_id, &id))
            .await;
        assert_eq!(
            (a.status, a.body["reason"].as_str()),
            (400, Some("mismatch")),
            "{user}/{conv}"
        );
    }
    let a = page
        .post(result(&uuid::Uuid::new_v4().to_string(), &id))
        .await;
    assert_eq!(a.body["reason"], "mismatch");
    gw.wait_metric("toolmark_results_rejected_total{reason=\"mismatch\"}", 3.0)
        .await;
    let a = page
        .answer(&uuid::Uuid::new_v4().to_string(), json!({"status": "ok"}))
        .await;
    assert_eq!(a.body["reason"], "unknown_id");

    the_real_page_still_answers(&page, &id, pending).await;
}

#[tokio::test]
async fn inbound_has_the_limits_and_validation_of_a_page_frame() {
    let (gw, _echo, page, pending, id) = echo_page_with_a_call().await;

    // Limits and validation, as for a page frame.
    let big = page
        .post(json!({"protocol": 1, "type": "result", "clientId": page.client_id, "id": id, "result": {"status": "ok", "data": "x".repeat(4096)}}))
        .await;
    assert_eq!(
        (
            big.status,
            big.body["code"].as_str(),
            big.body["reason"].as_str()
        ),
        (413, Some("payload_too_large"), Some("too_large"))
    );
    let raw = gw
        .http
        .post(gw.acme().url("/users/u1/conversations/c1/inbound"))
        .bearer_auth(&gw.acme().key)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 400);
    let body: Value = raw.json().await.unwrap();
    assert_eq!(body["reason"], "malformed");
    let a = page
        .post(json!({"protocol": 1, "type": "result", "clientId": page.client_id, "id": id, "result": {"status": "maybe"}}))
        .await;
    assert_eq!(
        (a.status, a.body["reason"].as_str()),
        (400, Some("invalid"))
    );
    assert!(
        a.body["pointer"].as_str().unwrap().starts_with("/result"),
        "{}",
        a.body
    );
    let a = page
        .post(json!({"protocol": 1, "type": "call", "clientId": page.client_id, "id": id, "tool": "x", "input": {}}))
        .await;
    assert_eq!(a.body["reason"], "wrong_direction");
    gw.wait_metric("toolmark_inbound_rejected_total{reason=\"too_large\"}", 1.0)
        .await;
    gw.wait_metric("toolmark_inbound_rejected_total{reason=\"malformed\"}", 1.0)
        .await;

    the_real_page_still_answers(&page, &id, pending).await;
}

#[tokio::test]
async fn inbound_refuses_the_client_id_of_a_live_socket_and_another_tenants_key() {
    let (gw, _echo, page, pending, id) = echo_page_with_a_call().await;

    // A clientId bound to a live page socket belongs to that page.
    let mut ws_page = gw.page("acme", "u1", "c1").await;
    ws_page.manifest(1, tools()).await;
    gw.acme().wait_current("u1", "c1", &ws_page.client_id).await;
    let a = page
        .post(json!({"protocol": 1, "type": "manifest", "clientId": ws_page.client_id, "rev": 9, "tools": []}))
        .await;
    assert_eq!(
        (a.status, a.body["reason"].as_str()),
        (400, Some("client_mismatch"))
    );

    // Another tenant's key, or none.
    let a = crate::harness::Agent::new(
        &gw.url(""),
        "acme",
        crate::harness::GLOBEX_KEY,
        gw.http.clone(),
    )
    .post(
        "/users/u1/conversations/c1/inbound",
        result(&page.client_id, &id),
    )
    .await;
    assert_eq!(a.status, 401);

    // The real page still answers, though the WebSocket page is current now.
    the_real_page_still_answers(&page, &id, pending).await;
}

#[tokio::test]
async fn websocket_and_echo_pages_share_a_conversation() {
    let gw = Gateway::start().await;
    let mut ws_page = gw.page("acme", "u1", "c1").await;
    ws_page.manifest(1, tools()).await;
    gw.acme().wait_current("u1", "c1", &ws_page.client_id).await;
    let mut echo = Echo::connect(gw.addr, ACME_PUSHER_KEY).await;
    echo.subscribe(&channel("u1", "c1")).await;

    // The WebSocket page is current: it gets the call; the Echo subscription (clientId
    // unknown) sees it too and its page ignores it (rule 1).
    let pending = gw
        .acme()
        .call_later("u1", "c1", json!({"tool": "todo.add", "input": {}}));
    let call = ws_page.recv().await;
    let seen = echo.message().await;
    assert_eq!(seen["clientId"], ws_page.client_id.as_str());
    ws_page
        .answer(
            call["id"].as_str().unwrap(),
            json!({"status": "ok", "data": "ws"}),
        )
        .await;
    assert_eq!(pending.await.unwrap().body["outcome"]["data"], "ws");

    // A new page load on Echo publishes its manifest: it takes over (D23), and the
    // WebSocket page (bound to its own clientId) no longer gets calls.
    let page = EchoPage::new(gw.acme(), "u1", "c1");
    assert_eq!(page.manifest(1).await.status, 202);
    gw.acme().wait_current("u1", "c1", &page.client_id).await;
    let pending = gw
        .acme()
        .call_later("u1", "c1", json!({"tool": "todo.add", "input": {}}));
    let call = echo.message().await;
    assert_eq!(call["clientId"], page.client_id.as_str());
    assert!(ws_page.try_recv(Duration::from_millis(200)).await.is_none());
    // The WebSocket page cannot answer the Echo page's call.
    ws_page
        .answer(
            call["id"].as_str().unwrap(),
            json!({"status": "ok", "data": "forged"}),
        )
        .await;
    gw.wait_metric("toolmark_results_rejected_total{reason=\"mismatch\"}", 1.0)
        .await;
    page.answer(
        call["id"].as_str().unwrap(),
        json!({"status": "ok", "data": "echo"}),
    )
    .await;
    assert_eq!(pending.await.unwrap().body["outcome"]["data"], "echo");

    // The Echo page goes away (unsubscribed): the WebSocket page, still connected with a
    // manifest, takes over again.
    drop(echo);
    gw.acme().wait_current("u1", "c1", &ws_page.client_id).await;
}

#[tokio::test]
async fn echo_pages_work_across_nodes() {
    let nodes = Gateway::start_nodes(2, "").await;
    let (n1, n2) = (&nodes[0], &nodes[1]);
    let mut echo = Echo::connect(n1.addr, ACME_PUSHER_KEY).await;
    echo.subscribe(&channel("u1", "c1")).await;
    // The app's bridge forwards to node 2; the agent calls through node 2 as well.
    let page = EchoPage::new(n2.acme(), "u1", "c1");
    assert_eq!(page.manifest(1).await.status, 202);
    n2.acme().wait_current("u1", "c1", &page.client_id).await;
    let pending = n2
        .acme()
        .call_later("u1", "c1", json!({"tool": "todo.add", "input": {"n": 2}}));
    let call = echo.message().await;
    let id = call["id"].as_str().unwrap().to_owned();
    // Forwarded for another conversation on node 1: refused there too.
    let a = EchoPage::new(n1.acme(), "u1", "c2").post(json!({"protocol": 1, "type": "result", "clientId": page.client_id, "id": id, "result": {"status": "ok"}})).await;
    assert_eq!(a.body["reason"], "mismatch");
    assert_eq!(
        page.answer(&id, json!({"status": "ok", "data": "across"}))
            .await
            .status,
        202
    );
    assert_eq!(pending.await.unwrap().body["outcome"]["data"], "across");
    assert!(echo.try_message(Duration::from_millis(200)).await.is_none());
}

#[tokio::test]
async fn inbound_has_a_message_rate_per_conversation() {
    let gw = Gateway::start_with("[tenants.limits]\npage_messages_per_second = 1\n").await;
    let page = EchoPage::new(gw.acme(), "u1", "c1");
    let started = std::time::Instant::now();
    assert_eq!(
        [page.manifest(0).await.status, page.manifest(1).await.status],
        [202, 202],
        "the burst is twice the rate"
    );
    // Then refused, but for what the rate refilled meanwhile (one a second on a busy machine).
    let mut rev = 2;
    let a = loop {
        let a = page.manifest(rev).await;
        if a.status != 202 {
            break a;
        }
        rev += 1;
        let refilled = started.elapsed().as_secs() + 1;
        assert!(rev - 2 <= refilled, "{} accepted past the burst", rev - 2);
    };
    assert_eq!(
        (a.status, a.body["reason"].as_str()),
        (429, Some("rate_limited"))
    );
    assert!(a.headers.contains_key("retry-after"));
    gw.wait_metric(
        "toolmark_inbound_rejected_total{reason=\"rate_limited\"}",
        1.0,
    )
    .await;
    // Another conversation has its own rate.
    let other = EchoPage::new(gw.acme(), "u1", "c2");
    assert_eq!(other.manifest(1).await.status, 202);
}

/// Frames that wait behind one another on an Echo socket leave in batches (as a page socket's
/// do): a burst of calls to one Echo page reaches it whole, each call once, and every call is
/// answered.
#[tokio::test]
async fn a_burst_of_calls_reaches_an_echo_page_whole_each_call_once() {
    const CALLS: usize = 40;
    let gw = Gateway::start().await;
    let mut echo = Echo::connect(gw.addr, ACME_PUSHER_KEY).await;
    echo.subscribe(&channel("u1", "c1")).await;
    let page = EchoPage::new(gw.acme(), "u1", "c1");
    let a = page.manifest(1).await;
    assert_eq!(a.status, 202, "{}", a.body);
    gw.acme().wait_current("u1", "c1", &page.client_id).await;

    let pending: Vec<JoinHandle<Answer>> = (0..CALLS)
        .map(|i| {
            gw.acme().call_later(
                "u1",
                "c1",
                json!({"tool": "todo.add", "input": {"text": format!("item {i}")}}),
            )
        })
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    let mut texts = std::collections::BTreeSet::new();
    while seen.len() < CALLS {
        let call = echo.message().await;
        assert_eq!(call["type"], "call", "{call}");
        let id = call["id"].as_str().unwrap().to_owned();
        assert!(seen.insert(id.clone()), "call {id} reached the page twice");
        texts.insert(call["input"]["text"].as_str().unwrap().to_owned());
        let a = page.answer(&id, json!({"status": "ok", "data": id})).await;
        assert_eq!(a.status, 202, "{}", a.body);
    }
    assert_eq!(texts.len(), CALLS);
    for p in pending {
        let outcome = p.await.unwrap();
        assert_eq!(outcome.status, 200, "{}", outcome.body);
    }
    assert!(
        echo.try_message(Duration::from_millis(200)).await.is_none(),
        "a frame beyond the calls"
    );
}
