//! Two tenants with the same user and conversation ids never see each other's pages, calls,
//! events or manifests; a key of one tenant opens nothing of another.

use std::time::Duration;

use serde_json::json;

use crate::harness::{GLOBEX_KEY, Gateway, ready_page, tool};

#[tokio::test]
async fn tenants_with_the_same_ids_are_apart() {
    let gw = Gateway::start().await;
    let acme = gw.acme();
    let globex = gw.agent("globex", GLOBEX_KEY);
    let mut globex_events = globex.events("", None).await;
    let mut acme_page = ready_page(
        &gw,
        "acme",
        "u1",
        "c1",
        json!([tool("acme.secret", json!({}))]),
    )
    .await;

    // Globex sees no page, no manifest, cannot call.
    let state = globex.get("/users/u1/conversations/c1").await;
    assert_eq!(state.body["clientId"], serde_json::Value::Null);
    assert_eq!(state.body["tools"], json!([]));
    let call = globex
        .post(
            "/users/u1/conversations/c1/calls",
            json!({"tool": "acme.secret", "input": {}}),
        )
        .await;
    assert_eq!(
        (call.status, call.body["code"].as_str()),
        (409, Some("no_page"))
    );

    // An acme call is invisible to globex.
    let pending = acme.call_later("u1", "c1", json!({"tool": "acme.secret", "input": {}}));
    let frame = acme_page.recv().await;
    let id = frame["id"].as_str().unwrap().to_owned();
    acme_page
        .answer(&id, json!({"status": "ok", "data": "acme only"}))
        .await;
    assert_eq!(pending.await.unwrap().status, 200);
    assert_eq!(globex.get(&format!("/calls/{id}")).await.status, 404);
    assert_eq!(
        globex
            .post(&format!("/calls/{id}/cancel"), json!({}))
            .await
            .status,
        404
    );
    assert_eq!(acme.get(&format!("/calls/{id}")).await.status, 200);

    // Keys do not cross.
    let cross = gw
        .agent("acme", GLOBEX_KEY)
        .get("/users/u1/conversations/c1")
        .await;
    assert_eq!(
        (cross.status, cross.body["code"].as_str()),
        (401, Some("unauthorized"))
    );
    assert_eq!(
        gw.agent("nosuch", GLOBEX_KEY)
            .get("/users/u1/conversations/c1")
            .await
            .status,
        401
    );

    // No acme event reached globex's stream.
    assert!(
        globex_events
            .next_within(Duration::from_millis(300))
            .await
            .is_none()
    );
    // And acme's stream did see its page's manifest.
    let mut acme_events = acme.events("", Some("0-0")).await;
    let ev = acme_events.next_of("page.manifest").await;
    assert_eq!(ev.data["data"]["tools"][0]["name"], "acme.secret");
}

#[tokio::test]
async fn a_globex_page_does_not_receive_acme_calls() {
    let gw = Gateway::start().await;
    let mut acme_page = ready_page(&gw, "acme", "u1", "c1", json!([tool("t", json!({}))])).await;
    let mut globex_page = gw.page("globex", "u1", "c1").await;
    let pending = gw
        .acme()
        .call_later("u1", "c1", json!({"tool": "t", "input": {}}));
    let frame = acme_page.recv().await;
    assert_eq!(
        globex_page.try_recv_raw(Duration::from_millis(300)).await,
        None,
        "globex's unidentified socket got an acme call"
    );
    acme_page
        .answer(frame["id"].as_str().unwrap(), json!({"status": "ok"}))
        .await;
    assert_eq!(pending.await.unwrap().status, 200);
}
