//! Inbound limits and hostile frames: each is dropped, counted and never answered, and the
//! socket keeps working where the seed says it should.

use std::time::Duration;

use serde_json::json;

use crate::harness::{Gateway, Page, ready_page, tool};

/// Proves the socket still works: a new manifest from it becomes the conversation's state.
async fn still_works(gw: &Gateway, page: &mut Page, rev: u64) {
    page.manifest(rev, json!([tool("todo.add", json!({}))]))
        .await;
    let deadline = tokio::time::Instant::now() + crate::harness::WAIT;
    loop {
        let s = gw.acme().get("/users/u1/conversations/c1").await;
        if s.body["rev"] == rev {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "socket stopped working: {}",
            s.body
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn padded_result(client_id: &str, total: usize) -> String {
    let head = format!(
        r#"{{"protocol":1,"type":"result","clientId":"{client_id}","id":"x","result":{{"status":"ok","data":""#
    );
    let tail = r#""}}"#;
    format!(
        "{head}{}{tail}",
        "x".repeat(total - head.len() - tail.len())
    )
}

#[tokio::test]
async fn bad_frames_are_dropped_counted_and_the_socket_lives_on() {
    let gw = Gateway::start().await;
    let mut page = ready_page(&gw, "acme", "u1", "c1", json!([])).await;
    let cid = page.client_id.clone();

    page.send_raw(padded_result(&cid, 1_048_577)).await;
    gw.wait_metric("toolmark_inbound_rejected_total{reason=\"too_large\"}", 1.0)
        .await;
    still_works(&gw, &mut page, 2).await;

    let deep = format!(
        r#"{{"protocol":1,"type":"result","clientId":"{cid}","id":"x","result":{{"status":"ok","data":{}{}}}}}"#,
        "[".repeat(63),
        "]".repeat(63)
    );
    page.send_raw(deep).await;
    gw.wait_metric("toolmark_inbound_rejected_total{reason=\"too_deep\"}", 1.0)
        .await;
    still_works(&gw, &mut page, 3).await;

    page.send_raw("this is not json".into()).await;
    gw.wait_metric("toolmark_inbound_rejected_total{reason=\"malformed\"}", 1.0)
        .await;
    page.send_binary(b"{\"protocol\":1}".to_vec()).await;
    gw.wait_metric("toolmark_inbound_rejected_total{reason=\"binary\"}", 1.0)
        .await;
    page.send(json!({"protocol": 1, "type": "call", "clientId": cid, "id": "i", "tool": "todo.add", "input": {}})).await;
    gw.wait_metric(
        "toolmark_inbound_rejected_total{reason=\"wrong_direction\"}",
        1.0,
    )
    .await;
    page.send(json!({"protocol": 2, "type": "changed", "clientId": cid, "rev": 1}))
        .await;
    gw.wait_metric(
        "toolmark_inbound_rejected_total{reason=\"unsupported_protocol\"}",
        1.0,
    )
    .await;
    page.send(json!({"protocol": 1, "type": "changed", "clientId": cid, "rev": 1, "extra": true}))
        .await;
    gw.wait_metric("toolmark_inbound_rejected_total{reason=\"invalid\"}", 1.0)
        .await;
    still_works(&gw, &mut page, 4).await;
    // Nothing was ever answered.
    assert_eq!(page.try_recv(Duration::from_millis(200)).await, None);
}

#[tokio::test]
async fn exactly_one_mebibyte_is_accepted() {
    let gw = Gateway::start().await;
    let mut page = ready_page(&gw, "acme", "u1", "c1", json!([])).await;
    let frame = padded_result(&page.client_id, 1_048_576);
    page.send_raw(frame).await;
    // Valid and within limits: it reaches the broker and is rejected there as an unknown id.
    gw.wait_metric(
        "toolmark_results_rejected_total{reason=\"unknown_id\"}",
        1.0,
    )
    .await;
    assert_eq!(
        gw.metric("toolmark_inbound_rejected_total{reason=\"too_large\"}")
            .await,
        0.0
    );
}

#[tokio::test]
async fn a_frame_over_4_mib_closes_with_1009() {
    let gw = Gateway::start().await;
    let mut page = gw.page("acme", "u1", "c1").await;
    page.send_raw_lossy("x".repeat(5 * 1024 * 1024)).await;
    assert_eq!(page.closed().await, 1009);
}

#[tokio::test]
async fn repeated_invalid_frames_close_with_1008() {
    let gw = Gateway::start().await;
    let mut page = gw.page("acme", "u1", "c1").await;
    for _ in 0..20 {
        page.send_raw("{}".into()).await;
    }
    assert_eq!(page.closed().await, 1008);
}

#[tokio::test]
async fn frames_with_another_clientid_are_dropped_and_claiming_a_live_page_closes() {
    let gw = Gateway::start().await;
    let mut p1 = ready_page(&gw, "acme", "u1", "c1", json!([])).await;
    let mut p2 = ready_page(&gw, "acme", "u1", "c1", json!([])).await;
    // p1 speaks as an unknown clientId: dropped.
    p1.send(json!({"protocol": 1, "type": "changed", "clientId": "someone-else", "rev": 9}))
        .await;
    gw.wait_metric(
        "toolmark_inbound_rejected_total{reason=\"client_mismatch\"}",
        1.0,
    )
    .await;
    // p1 speaks as p2, which is connected: policy close.
    let forged =
        json!({"protocol": 1, "type": "manifest", "clientId": p2.client_id, "rev": 9, "tools": []});
    p1.send(forged).await;
    assert_eq!(p1.closed().await, 1008);
    // p2 is unaffected.
    still_works_as(&gw, &mut p2).await;
}

#[tokio::test]
async fn a_first_frame_claiming_a_live_tabs_clientid_closes_and_a_dead_sockets_is_taken_over() {
    let gw = Gateway::start().await;
    let mut tab = ready_page(&gw, "acme", "u1", "c1", json!([])).await;
    // Another socket's very first frame names the live tab's clientId: the tab answers the
    // gateway's ping (its socket is being read), so the claim is refused with 1008.
    let mut rogue = gw.page("acme", "u1", "c1").await;
    let forged = json!({"protocol": 1, "type": "manifest", "clientId": tab.client_id, "rev": 2, "tools": []});
    rogue.send(forged).await;
    let (code, _) = tokio::join!(rogue.closed(), tab.try_recv(Duration::from_secs(4)));
    assert_eq!(code, 1008);
    still_works_as(&gw, &mut tab).await;
    // The tab's connection goes half-open (nothing reads it any more, so it answers nothing),
    // and the same page load reconnects on a new socket: that socket takes the clientId over.
    let mut back = gw.page("acme", "u1", "c1").await;
    back.client_id = tab.client_id.clone();
    back.manifest(3, json!([])).await;
    let agent = gw.acme();
    let call = agent.call_later(
        "u1",
        "c1",
        json!({"tool": "x.y", "input": {}, "timeoutMs": 10000}),
    );
    let frame = back.recv().await;
    assert_eq!(frame["type"], "call");
    back.answer(frame["id"].as_str().unwrap(), json!({"status": "ok"}))
        .await;
    let answer = call.await.unwrap();
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(answer.body["outcome"]["status"], "ok");
    drop(tab);
}

async fn still_works_as(gw: &Gateway, page: &mut Page) {
    page.manifest(5, json!([])).await;
    gw.acme().wait_current("u1", "c1", &page.client_id).await;
}

#[tokio::test]
async fn the_per_socket_message_rate_drops_the_excess() {
    let gw = Gateway::start_with("[tenants.limits]\npage_messages_per_second = 1").await;
    let mut page = gw.page("acme", "u1", "c1").await;
    let cid = page.client_id.clone();
    for rev in 0..8 {
        page.send(json!({"protocol": 1, "type": "changed", "clientId": cid, "rev": rev}))
            .await;
    }
    // Burst is twice the rate: 2 pass, 6 are dropped, or one fewer for each second a busy
    // machine took to read them (at most two here, or the wait below fails).
    gw.wait_metric(
        "toolmark_inbound_rejected_total{reason=\"rate_limited\"}",
        4.0,
    )
    .await;
    assert!(
        gw.metric("toolmark_inbound_rejected_total{reason=\"rate_limited\"}")
            .await
            <= 6.0
    );
}
