//! Pages coming and going: reloads (D23), connection limits, disconnect events, ops endpoints
//! and the SIGTERM drain.

use std::time::Duration;

use serde_json::json;

use crate::harness::{ACME_ORIGIN, ACME_SECRET, Gateway, claims, hs256, ready_page, tool};

#[tokio::test]
async fn a_reload_takes_over_new_calls_and_the_old_page_can_still_answer() {
    let gw = Gateway::start().await;
    let tools = json!([tool("todo.add", json!({}))]);
    let mut old = ready_page(&gw, "acme", "u1", "c1", tools.clone()).await;
    let first = gw
        .acme()
        .call_later("u1", "c1", json!({"tool": "todo.add", "input": {"n": 1}}));
    let first_frame = old.recv().await;
    // Full reload: a new page load with a new clientId publishes its manifest.
    let mut new = ready_page(&gw, "acme", "u1", "c1", tools).await;
    let second = gw
        .acme()
        .call_later("u1", "c1", json!({"tool": "todo.add", "input": {"n": 2}}));
    let second_frame = new.recv().await;
    assert_eq!(second_frame["clientId"], new.client_id.as_str());
    assert_eq!(
        old.try_recv_raw(Duration::from_millis(200)).await,
        None,
        "the old page got the new call"
    );
    // The old page answers its own call before the deadline: accepted.
    old.answer(
        first_frame["id"].as_str().unwrap(),
        json!({"status": "ok", "data": "old"}),
    )
    .await;
    new.answer(
        second_frame["id"].as_str().unwrap(),
        json!({"status": "ok", "data": "new"}),
    )
    .await;
    let (a, b) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!(
        (
            a.body["clientId"].as_str(),
            a.body["outcome"]["data"].as_str()
        ),
        (Some(old.client_id.as_str()), Some("old"))
    );
    assert_eq!(
        (
            b.body["clientId"].as_str(),
            b.body["outcome"]["data"].as_str()
        ),
        (Some(new.client_id.as_str()), Some("new"))
    );
    let state = gw.acme().get("/users/u1/conversations/c1").await;
    assert_eq!(state.body["pages"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_reconnected_page_receives_calls_before_it_speaks() {
    let gw = Gateway::start().await;
    let page = ready_page(&gw, "acme", "u1", "c1", json!([tool("t", json!({}))])).await;
    let client_id = page.client_id.clone();
    drop(page);
    // The same page load reconnects: it does not resend its manifest.
    let mut again = gw.page("acme", "u1", "c1").await;
    again.client_id = client_id.clone();
    let deadline = tokio::time::Instant::now() + crate::harness::WAIT;
    let pending = loop {
        let s = gw.acme().get("/users/u1/conversations/c1").await;
        if s.body["pages"].as_array().is_some_and(Vec::is_empty) {
            break gw
                .acme()
                .call_later("u1", "c1", json!({"tool": "t", "input": {}}));
        }
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let frame = again.recv().await;
    assert_eq!(frame["clientId"], client_id.as_str());
    again
        .answer(frame["id"].as_str().unwrap(), json!({"status": "ok"}))
        .await;
    assert_eq!(pending.await.unwrap().body["outcome"]["status"], "ok");
}

#[tokio::test]
async fn connection_limits_close_with_4429() {
    let gw = Gateway::start_with(
        "[tenants.limits]\nmax_pages_per_conversation = 2\nmax_connections = 3",
    )
    .await;
    let token = |conv: &str| hs256(ACME_SECRET, &claims("acme", "u1", conv));
    let _a = gw
        .connect("acme", &token("c1"), Some(ACME_ORIGIN))
        .await
        .unwrap();
    let b = gw
        .connect("acme", &token("c1"), Some(ACME_ORIGIN))
        .await
        .unwrap();
    assert_eq!(
        gw.refused("acme", &token("c1"), Some(ACME_ORIGIN)).await,
        4429
    );
    let _c = gw
        .connect("acme", &token("c2"), Some(ACME_ORIGIN))
        .await
        .unwrap();
    assert_eq!(
        gw.refused("acme", &token("c3"), Some(ACME_ORIGIN)).await,
        4429
    );
    // A closed socket frees its place.
    drop(b);
    let deadline = tokio::time::Instant::now() + crate::harness::WAIT;
    while gw
        .connect("acme", &token("c3"), Some(ACME_ORIGIN))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the closed socket was never released"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_page_that_leaves_emits_page_disconnected() {
    let gw = Gateway::start().await;
    let mut events = gw.acme().events("", None).await;
    let page = ready_page(&gw, "acme", "u1", "c1", json!([])).await;
    let client_id = page.client_id.clone();
    drop(page);
    let ev = events.next_of("page.disconnected").await;
    assert_eq!(
        ev.data["data"],
        json!({"user": "u1", "conversation": "c1", "clientId": client_id})
    );
}

#[tokio::test]
async fn ops_endpoints_answer() {
    let gw = Gateway::start().await;
    assert_eq!(
        gw.http
            .get(gw.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        gw.http
            .get(gw.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let nowhere = gw.http.get(gw.url("/nowhere")).send().await.unwrap();
    assert_eq!(nowhere.status(), 404);
    let _page = ready_page(&gw, "acme", "u1", "c1", json!([])).await;
    let text = gw.metrics().await;
    let build = format!(
        "toolmark_build_info{{version=\"{}\",revision=\"{}\"}} 1",
        toolmark_process::VERSION,
        toolmark_process::REVISION
    );
    for name in [
        build.as_str(),
        "toolmark_page_connections{transport=\"websocket\"} 1",
        "toolmark_page_connections{transport=\"echo\"} 0",
        // By route template (never the path), method and status; no route is `unmatched`.
        "toolmark_http_requests_total{route=\"/healthz\",method=\"GET\",status=\"200\"} 1",
        "toolmark_http_requests_total{route=\"/readyz\",method=\"GET\",status=\"200\"} 1",
        "toolmark_http_requests_total{route=\"unmatched\",method=\"GET\",status=\"404\"} 1",
        "toolmark_http_requests_total{route=\"/v1/tenants/{tenant}/page\",method=\"GET\",status=\"101\"} 1",
        "toolmark_http_request_duration_seconds_count{route=\"/healthz\"} 1",
        "toolmark_calls_total",
        "toolmark_call_duration_seconds_bucket",
        "toolmark_results_rejected_total{reason=\"late\"} 0",
        "toolmark_inbound_rejected_total{reason=\"too_large\"} 0",
    ] {
        assert!(text.contains(name), "{name} missing from\n{text}");
    }
    // On Redis, every script's round trip is measured: the page's admission counted it.
    if toolmark_testkit::redis::mode() != toolmark_testkit::redis::Mode::Memory {
        let admitted = "toolmark_redis_script_duration_seconds_count{script=\"count_up\"}";
        assert!(text.contains(admitted), "{admitted} missing from\n{text}");
    }
}

#[tokio::test]
async fn sigterm_drains_pages_with_1001_and_refuses_new_calls_with_503() {
    let config = crate::harness::config_toml("")
        .replace("drain_timeout_ms = 2000", "drain_timeout_ms = 8000");
    let mut gw = Gateway::start_config(&config, None).await;
    let mut page = ready_page(&gw, "acme", "u1", "c1", json!([tool("t", json!({}))])).await;
    let pending = gw.acme().call_later(
        "u1",
        "c1",
        json!({"tool": "t", "input": {}, "timeoutMs": 3000}),
    );
    let _frame = page.recv().await;
    gw.stop();
    // While the call is in flight (3 s), the node answers but is not ready and takes no calls.
    let deadline = tokio::time::Instant::now() + crate::harness::WAIT;
    loop {
        let ready = gw.http.get(gw.url("/readyz")).send().await.unwrap();
        if ready.status() == 503 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "readyz never turned 503"
        );
    }
    let refused = gw
        .acme()
        .post("/users/u1/conversations/c1/calls", json!({"tool": "t"}))
        .await;
    assert_eq!(
        (refused.status, refused.body["code"].as_str()),
        (503, Some("unavailable"))
    );
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(page.closed().await, 1001);
    // The in-flight call finishes (here by its deadline) before the process stops.
    assert_eq!(pending.await.unwrap().body["outcome"]["status"], "timeout");
    let task = gw.task.take().unwrap();
    tokio::time::timeout(Duration::from_secs(8), task)
        .await
        .expect("the gateway exits after the drain")
        .unwrap();
}

#[tokio::test]
async fn a_call_sent_before_a_reconnect_reaches_the_page_again() {
    let gw = Gateway::start().await;
    let mut page = ready_page(&gw, "acme", "u1", "c1", json!([tool("t", json!({}))])).await;
    let pending = gw.acme().call_later(
        "u1",
        "c1",
        json!({"tool": "t", "input": {}, "timeoutMs": 10000}),
    );
    let first = page.recv().await;
    // The socket drops before the page answered; the same page load reconnects.
    let (client_id, seen) = (page.client_id.clone(), std::mem::take(&mut page.seen));
    drop(page);
    let mut again = gw.page("acme", "u1", "c1").await;
    again.client_id = client_id;
    // It is handed the pending call again (a page that did not get it would need it) ...
    let frame = again
        .try_recv_raw(crate::harness::WAIT)
        .await
        .expect("the pending call is sent again");
    assert_eq!(frame["id"], first["id"]);
    // ... and, remembering the id, a real page just goes on and answers it.
    again.seen = seen;
    again
        .answer(
            first["id"].as_str().unwrap(),
            json!({"status": "ok", "data": "after reconnect"}),
        )
        .await;
    assert_eq!(
        pending.await.unwrap().body["outcome"]["data"],
        "after reconnect"
    );
}

#[tokio::test]
async fn a_page_that_closes_gets_the_close_handshake_answered() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    let gw = Gateway::start().await;
    let mut page = gw.page("acme", "u1", "c1").await;
    page.ws
        .send(Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "bye".into(),
        })))
        .await
        .unwrap();
    // The gateway answers with a close frame before it drops the connection.
    let answer = tokio::time::timeout(crate::harness::WAIT, async {
        loop {
            match page.ws.next().await {
                Some(Ok(Message::Close(frame))) => return Some(frame),
                Some(Ok(_)) => {}
                _ => return None,
            }
        }
    })
    .await
    .expect("the gateway answers in time");
    assert!(
        answer.is_some(),
        "the connection ended without a close frame"
    );
}
