//! Many gateway nodes over one Redis (or Redis Cluster in cluster mode): calls, describes and
//! cancels across nodes, pages moving between nodes, attackers on other nodes, cluster-wide
//! limits and events across nodes. Faults (a Redis restart, SIGKILL, a drain) are in `faults`.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{
    ACME_ORIGIN, ACME_SECRET, GLOBEX_KEY, Gateway, WAIT, claims, connect_at, hs256, page_at,
    refused_at, tool,
};

pub fn tools() -> serde_json::Value {
    json!([
        tool("todo.add", json!({})),
        tool("signup.submit", json!({"consequential": true}))
    ])
}

#[tokio::test]
async fn calls_describes_and_cancels_cross_nodes() {
    let nodes = Gateway::start_nodes(3, "").await;
    let (n1, n2, n3) = (&nodes[0], &nodes[1], &nodes[2]);
    let mut page = crate::harness::page_across(n1, n2, tools()).await;

    // A call made on node 2 reaches the page on node 1.
    let pending = n2
        .acme()
        .call_later("u1", "c1", json!({"tool": "todo.add", "input": {"x": 1}}));
    crate::harness::answer_ok(&mut page, pending, "from node 1").await;

    // A describe made on node 3.
    let acme3 = n3.acme();
    let describe = tokio::spawn(async move {
        acme3
            .post(
                "/users/u1/conversations/c1/describe",
                json!({"tool": "todo.add"}),
            )
            .await
    });
    let frame = page.recv().await;
    assert_eq!(frame["type"], "describe");
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "ok", "data": {"inputSchema": {}}}),
    )
    .await;
    assert_eq!(describe.await.unwrap().body["outcome"]["status"], "ok");

    // A cancel made on node 1 for a call made on node 2.
    let id = crate::harness::cancel_round_trip(&n2.acme(), &n1.acme(), &mut page).await;
    // Any node reads any call.
    assert_eq!(
        n3.acme().get(&format!("/calls/{id}")).await.body["state"],
        "answered"
    );
}

#[tokio::test]
async fn a_page_moving_to_another_node_between_call_and_answer_is_accepted() {
    let nodes = Gateway::start_nodes(3, "").await;
    let mut page = crate::harness::page_across(&nodes[0], &nodes[1], tools()).await;
    let pending = nodes[1].acme().call_later(
        "u1",
        "c1",
        json!({"tool": "todo.add", "input": {}, "timeoutMs": 10000}),
    );
    let frame = page.recv().await;
    let client_id = page.client_id.clone();
    drop(page);
    // The same page load reconnects to node 3 and answers there.
    let mut moved = page_at(nodes[2].addr, "acme", "u1", "c1").await;
    moved.client_id = client_id;
    moved
        .answer(
            frame["id"].as_str().unwrap(),
            json!({"status": "ok", "data": "moved"}),
        )
        .await;
    let a = pending.await.unwrap();
    assert_eq!(
        a.body["outcome"],
        json!({"status": "ok", "data": "moved"}),
        "{}",
        a.body
    );
    // And it keeps receiving calls there, before it ever speaks first.
    let pending = nodes[0]
        .acme()
        .call_later("u1", "c1", json!({"tool": "todo.add", "input": {}}));
    let frame = moved.recv().await;
    moved
        .answer(frame["id"].as_str().unwrap(), json!({"status": "ok"}))
        .await;
    assert_eq!(pending.await.unwrap().status, 200);
}

#[tokio::test]
async fn attackers_on_another_node_are_rejected() {
    let nodes = Gateway::start_nodes(2, "").await;
    let (n1, n2) = (&nodes[0], &nodes[1]);
    let mut page = crate::harness::page_across(n1, n2, tools()).await;
    let pending = n1.acme().call_later(
        "u1",
        "c1",
        json!({"tool": "signup.submit", "input": {}, "timeoutMs": 10000}),
    );
    let frame = page.recv().await;
    let id = frame["id"].as_str().unwrap().to_owned();
    let forged = json!({"status": "ok", "data": "forged"});
    let mut other_page = n2.page("acme", "u1", "c1").await;
    other_page.answer(&id, forged.clone()).await;
    let mut other_user = n2.page("acme", "u2", "c1").await;
    other_user.client_id.clone_from(&page.client_id);
    other_user.answer(&id, forged.clone()).await;
    let mut other_tenant = n2.page("globex", "u1", "c1").await;
    other_tenant.client_id.clone_from(&page.client_id);
    other_tenant.answer(&id, forged.clone()).await;
    n2.wait_metric("toolmark_results_rejected_total{reason=\"mismatch\"}", 3.0)
        .await;
    other_page
        .answer(&uuid::Uuid::new_v4().to_string(), forged.clone())
        .await;
    n2.wait_metric(
        "toolmark_results_rejected_total{reason=\"unknown_id\"}",
        1.0,
    )
    .await;

    let confirm_id = uuid::Uuid::new_v4().to_string();
    page.answer(
        &id,
        json!({"status": "needs_confirmation", "confirmId": confirm_id, "summary": "s"}),
    )
    .await;
    assert_eq!(
        pending.await.unwrap().body["outcome"]["status"],
        "needs_confirmation"
    );
    // A duplicate of the real answer, sent from node 2 by the same page load reconnected there.
    let mut same_page_elsewhere = n2.page("acme", "u1", "c1").await;
    same_page_elsewhere.client_id.clone_from(&page.client_id);
    same_page_elsewhere.answer(&id, forged).await;
    n2.wait_metric("toolmark_results_rejected_total{reason=\"duplicate\"}", 1.0)
        .await;
    // The confirmation, from another page on node 2, then from its own page: once.
    let confirmed = |client: &str| json!({"protocol": 1, "type": "confirmed", "clientId": client, "confirmId": confirm_id, "result": {"status": "ok"}});
    other_page
        .send(confirmed(&other_page.client_id.clone()))
        .await;
    n2.wait_metric("toolmark_results_rejected_total{reason=\"mismatch\"}", 4.0)
        .await;
    let mut events = n2.acme().events("", None).await;
    page.send(confirmed(&page.client_id.clone())).await;
    let ev = events.next_of("confirmation.resolved").await;
    assert_eq!(ev.data["data"]["callId"], id.as_str());
    assert_eq!(ev.data["data"]["tool"], "signup.submit");
    same_page_elsewhere
        .send(confirmed(&page.client_id.clone()))
        .await;
    n2.wait_metric("toolmark_results_rejected_total{reason=\"duplicate\"}", 2.0)
        .await;
}

#[tokio::test]
async fn tenants_are_apart_across_nodes() {
    let nodes = Gateway::start_nodes(3, "").await;
    let mut globex_events = nodes[2].agent("globex", GLOBEX_KEY).events("", None).await;
    let mut page = crate::harness::page_across(&nodes[0], &nodes[1], tools()).await;
    let globex = nodes[1].agent("globex", GLOBEX_KEY);
    assert_eq!(
        globex.get("/users/u1/conversations/c1").await.body["clientId"],
        serde_json::Value::Null
    );
    assert_eq!(
        globex
            .post(
                "/users/u1/conversations/c1/calls",
                json!({"tool": "todo.add"})
            )
            .await
            .status,
        409
    );
    let pending = nodes[1]
        .acme()
        .call_later("u1", "c1", json!({"tool": "todo.add", "input": {}}));
    let frame = page.recv().await;
    let id = frame["id"].as_str().unwrap().to_owned();
    page.answer(&id, json!({"status": "ok"})).await;
    assert_eq!(pending.await.unwrap().status, 200);
    assert_eq!(
        nodes[2]
            .agent("globex", GLOBEX_KEY)
            .get(&format!("/calls/{id}"))
            .await
            .status,
        404
    );
    assert!(
        globex_events
            .next_within(Duration::from_millis(300))
            .await
            .is_none()
    );
}

#[tokio::test]
async fn events_are_read_from_any_node_and_resume_there() {
    let nodes = Gateway::start_nodes(3, "").await;
    let mut live = nodes[1].acme().events("?conversation=c1", None).await;
    let mut page = nodes[0].page("acme", "u1", "c1").await;
    page.manifest(1, tools()).await;
    let first = live.next_of("page.manifest").await;
    page.manifest(2, tools()).await;
    let second = live.next_of("page.manifest").await;
    let mut resumed = nodes[2]
        .acme()
        .events("?conversation=c1", Some(&first.id))
        .await;
    let got = resumed.next_within(WAIT).await.unwrap();
    assert_eq!(
        (got.id, got.data["data"]["rev"].clone()),
        (second.id, json!(2))
    );
}

#[tokio::test]
async fn the_tenant_call_rate_and_connection_count_hold_across_nodes() {
    let nodes = Gateway::start_nodes(
        2,
        "[tenants.limits]\ncalls_per_second = 5\nmax_connections = 4",
    )
    .await;
    // Burst 10, shared: alternate nodes; at most 10 pass the limit, and what the bucket
    // refilled while the calls went (5 a second, one more for the token being refilled).
    let started = std::time::Instant::now();
    let mut passed = 0;
    for i in 0..20 {
        let a = nodes[i % 2]
            .acme()
            .post("/users/u1/conversations/c1/calls", json!({"tool": "t"}))
            .await;
        match a.status {
            409 => passed += 1,
            429 => {}
            other => panic!("unexpected {other}: {}", a.body),
        }
    }
    let refilled = (started.elapsed().as_secs_f64() * 5.0).floor() as u32;
    assert!(
        (10..=11 + refilled).contains(&passed),
        "{passed} calls passed a shared burst of 10 (refilled {refilled} meanwhile)"
    );

    let token = hs256(ACME_SECRET, &claims("acme", "u1", "c9"));
    let mut held = Vec::new();
    for n in [0, 0, 1, 1] {
        held.push(
            connect_at(nodes[n].addr, "acme", &token, Some(ACME_ORIGIN))
                .await
                .expect("within the limit"),
        );
    }
    assert_eq!(
        refused_at(nodes[0].addr, "acme", &token, Some(ACME_ORIGIN)).await,
        4429
    );
    assert_eq!(
        refused_at(nodes[1].addr, "acme", &token, Some(ACME_ORIGIN)).await,
        4429
    );
    drop(held.pop());
    let deadline = Instant::now() + WAIT;
    while connect_at(nodes[0].addr, "acme", &token, Some(ACME_ORIGIN))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "a released socket was never counted down"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
