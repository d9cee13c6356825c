//! The seed's security MUSTs, each attacked: forged results from other sockets, unknown and
//! duplicate ids, late results, and unseen or reused confirmIds. None reaches the agent.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{Gateway, ready_page, tool};

fn todo() -> Value {
    json!([
        tool("todo.add", json!({})),
        tool("signup.submit", json!({"consequential": true}))
    ])
}

const OK_REAL: &str = "from the addressed page";

/// Starts a call to `p1` and returns (the pending answer, the call frame the page got).
async fn pending_call(
    gw: &Gateway,
    page: &mut crate::harness::Page,
    user: &str,
    conv: &str,
) -> (tokio::task::JoinHandle<crate::harness::Answer>, Value) {
    let pending = gw.acme().call_later(
        user,
        conv,
        json!({"tool": "todo.add", "input": {"text": "milk"}, "timeoutMs": 5000}),
    );
    let frame = page.recv().await;
    assert_eq!(frame["type"], "call");
    assert_eq!(frame["clientId"], page.client_id.as_str());
    (pending, frame)
}

#[tokio::test]
async fn results_from_other_pages_users_conversations_and_tenants_are_rejected() {
    let gw = Gateway::start().await;
    let mut p1 = ready_page(&gw, "acme", "u1", "c1", todo()).await;
    let (pending, frame) = pending_call(&gw, &mut p1, "u1", "c1").await;
    let id = frame["id"].as_str().unwrap().to_owned();
    let forged = json!({"status": "ok", "data": "forged"});

    // Another page of the same conversation (its own clientId).
    let mut other_page = gw.page("acme", "u1", "c1").await;
    other_page.answer(&id, forged.clone()).await;
    // Another user, same conversation id, claiming p1's clientId.
    let mut other_user = gw.page("acme", "u2", "c1").await;
    other_user.client_id.clone_from(&p1.client_id);
    other_user.answer(&id, forged.clone()).await;
    // Another conversation of the same user.
    let mut other_conv = gw.page("acme", "u1", "c2").await;
    other_conv.client_id.clone_from(&p1.client_id);
    other_conv.answer(&id, forged.clone()).await;
    // Another tenant with the same user and conversation ids.
    let mut other_tenant = gw.page("globex", "u1", "c1").await;
    other_tenant.client_id.clone_from(&p1.client_id);
    other_tenant.answer(&id, forged.clone()).await;

    gw.wait_metric("toolmark_results_rejected_total{reason=\"mismatch\"}", 4.0)
        .await;
    p1.answer(&id, json!({"status": "ok", "data": OK_REAL}))
        .await;
    let answer = pending.await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        answer.body["outcome"],
        json!({"status": "ok", "data": OK_REAL})
    );
}

#[tokio::test]
async fn unknown_and_duplicate_results_are_rejected() {
    let gw = Gateway::start().await;
    let mut p1 = ready_page(&gw, "acme", "u1", "c1", todo()).await;
    p1.answer(&uuid::Uuid::new_v4().to_string(), json!({"status": "ok"}))
        .await;
    gw.wait_metric(
        "toolmark_results_rejected_total{reason=\"unknown_id\"}",
        1.0,
    )
    .await;

    let (pending, frame) = pending_call(&gw, &mut p1, "u1", "c1").await;
    let id = frame["id"].as_str().unwrap().to_owned();
    p1.answer(&id, json!({"status": "ok", "data": 1})).await;
    p1.answer(&id, json!({"status": "ok", "data": 2})).await;
    gw.wait_metric("toolmark_results_rejected_total{reason=\"duplicate\"}", 1.0)
        .await;
    let answer = pending.await.unwrap();
    assert_eq!(answer.body["outcome"], json!({"status": "ok", "data": 1}));
    let record = gw.acme().get(&format!("/calls/{id}")).await;
    assert_eq!(record.body["state"], "answered");
    assert_eq!(record.body["outcome"]["data"], 1);
}

#[tokio::test]
async fn a_late_result_is_rejected_after_the_timeout_and_the_page_gets_a_cancel() {
    let gw = Gateway::start().await;
    let mut p1 = ready_page(&gw, "acme", "u1", "c1", todo()).await;
    let mut events = gw.acme().events("?user=u1&conversation=c1", None).await;
    let pending = gw.acme().call_later(
        "u1",
        "c1",
        json!({"tool": "todo.add", "input": {}, "timeoutMs": 300}),
    );
    let frame = p1.recv().await;
    let id = frame["id"].as_str().unwrap().to_owned();
    let answer = pending.await.unwrap();
    assert_eq!(answer.body["outcome"], json!({"status": "timeout"}));
    let cancel = p1.recv().await;
    assert_eq!(
        cancel,
        json!({"protocol": 1, "type": "cancel", "clientId": p1.client_id, "id": id})
    );
    let ev = events.next_of("call.timeout").await;
    assert_eq!(ev.data["data"]["id"], id.as_str());
    p1.answer(&id, json!({"status": "ok", "data": "too late"}))
        .await;
    gw.wait_metric("toolmark_results_rejected_total{reason=\"late\"}", 1.0)
        .await;
    let record = gw.acme().get(&format!("/calls/{id}")).await;
    assert_eq!(record.body["state"], "timed_out");
    assert_eq!(record.body["outcome"], json!({"status": "timeout"}));
}

#[tokio::test]
async fn a_call_whose_agent_hung_up_still_times_out_and_the_page_gets_its_cancel() {
    // The call's supervision runs inside the agent's request: when the request goes away,
    // the deadline must still be kept.
    let gw = Gateway::start().await;
    let mut p1 = ready_page(&gw, "acme", "u1", "c1", todo()).await;
    let mut events = gw.acme().events("?user=u1&conversation=c1", None).await;
    let pending = gw.acme().call_later(
        "u1",
        "c1",
        json!({"tool": "todo.add", "input": {}, "timeoutMs": 2000}),
    );
    let frame = p1.recv().await;
    let id = frame["id"].as_str().unwrap().to_owned();
    // The agent hangs up: its request, and its connection, are gone before the deadline.
    pending.abort();
    let Err(hung_up) = pending.await else {
        panic!("the call was answered before its agent hung up")
    };
    assert!(hung_up.is_cancelled());
    let cancel = p1.recv().await;
    assert_eq!(
        cancel,
        json!({"protocol": 1, "type": "cancel", "clientId": p1.client_id, "id": id})
    );
    let ev = events.next_of("call.timeout").await;
    assert_eq!(ev.data["data"]["id"], id.as_str());
    let record = gw.acme().get(&format!("/calls/{id}")).await;
    assert_eq!(record.body["state"], "timed_out");
    assert_eq!(record.body["outcome"], json!({"status": "timeout"}));
    // The supervision itself ended it (the deadline sweep, a second or more later, would
    // also have sent the cancel, but never counts the call).
    gw.wait_metric(
        "toolmark_calls_total{kind=\"call\",outcome=\"timeout\"}",
        1.0,
    )
    .await;
}

#[tokio::test]
async fn confirmations_are_single_use_and_bound_to_their_page() {
    let gw = Gateway::start().await;
    let mut p1 = ready_page(&gw, "acme", "u1", "c1", todo()).await;
    let mut events = gw.acme().events("?conversation=c1", None).await;
    let pending = gw
        .acme()
        .call_later("u1", "c1", json!({"tool": "signup.submit", "input": {}}));
    let frame = p1.recv().await;
    let id = frame["id"].as_str().unwrap().to_owned();
    let confirm_id = uuid::Uuid::new_v4().to_string();
    p1.answer(&id, json!({"status": "needs_confirmation", "confirmId": confirm_id, "summary": "Submit the form",
        "changes": [{"path": "password", "after": "[redacted]"}]}))
        .await;
    let answer = pending.await.unwrap();
    assert_eq!(answer.body["outcome"]["status"], "needs_confirmation");

    let confirmed = |client: &str, cid: &str| json!({"protocol": 1, "type": "confirmed", "clientId": client, "confirmId": cid, "result": {"status": "ok", "data": {"submitted": true}}});
    // A confirmId never seen.
    p1.send(confirmed(
        &p1.client_id.clone(),
        &uuid::Uuid::new_v4().to_string(),
    ))
    .await;
    gw.wait_metric(
        "toolmark_results_rejected_total{reason=\"unknown_confirm\"}",
        1.0,
    )
    .await;
    // The right confirmId from another page of the conversation.
    let mut other = gw.page("acme", "u1", "c1").await;
    other
        .send(confirmed(&other.client_id.clone(), &confirm_id))
        .await;
    gw.wait_metric("toolmark_results_rejected_total{reason=\"mismatch\"}", 1.0)
        .await;
    // The right page: accepted once, emitted once.
    p1.send(confirmed(&p1.client_id.clone(), &confirm_id)).await;
    let ev = events.next_of("confirmation.resolved").await;
    let d = &ev.data["data"];
    assert_eq!(d["confirmId"], confirm_id.as_str());
    assert_eq!(d["callId"], id.as_str());
    assert_eq!(d["tool"], "signup.submit");
    assert_eq!(d["clientId"], p1.client_id.as_str());
    assert_eq!(
        d["outcome"],
        json!({"status": "ok", "data": {"submitted": true}})
    );
    assert_eq!(d["toolResultMessage"]["content"]["untrustedContent"], true);
    assert_eq!(d["toolResultMessage"]["content"]["result"], d["outcome"]);
    // Reused.
    p1.send(confirmed(&p1.client_id.clone(), &confirm_id)).await;
    gw.wait_metric("toolmark_results_rejected_total{reason=\"duplicate\"}", 1.0)
        .await;
    assert!(
        events
            .next_within(Duration::from_millis(300))
            .await
            .is_none_or(|e| e.event != "confirmation.resolved")
    );
}

#[tokio::test]
async fn call_ids_are_unguessable_and_bound_before_sending() {
    let gw = Gateway::start().await;
    let mut p1 = ready_page(&gw, "acme", "u1", "c1", todo()).await;
    let mut ids = Vec::new();
    // 160 calls of one conversation: a bit of the 122 random ones that never changes across
    // them encodes something (chance 2^-159 each).
    for i in 0..160 {
        let pending = gw
            .acme()
            .call_later("u1", "c1", json!({"tool": "todo.add", "input": {}}));
        let frame = p1.recv().await;
        let id = frame["id"].as_str().unwrap().to_owned();
        if i < 3 {
            // The binding exists by the time the page sees the call.
            let record = gw.acme().get(&format!("/calls/{id}")).await;
            assert_eq!(record.body["state"], "pending");
            assert_eq!(record.body["clientId"], p1.client_id.as_str());
        }
        p1.answer(&id, json!({"status": "ok"})).await;
        assert_eq!(pending.await.unwrap().body["id"], id.as_str());
        assert!(toolmark_proto::ids::looks_unguessable(&id), "{id}");
        ids.push(id);
    }
    let (mut ones, mut zeros) = (0u128, 0u128);
    for id in &ids {
        let u = uuid::Uuid::parse_str(id).unwrap();
        assert_eq!(u.get_version_num(), 4, "{id}");
        ones |= u.as_u128();
        zeros |= !u.as_u128();
    }
    assert_eq!(
        (ones & zeros).count_ones(),
        122,
        "bits that vary across the ids"
    );
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 160);
}
