//! Least privilege across two nodes: every kind of credential is named in the calls it makes
//! (`GET /calls/{id}`, `call.timeout`, `confirmation.resolved`); the tenant's policy for OAuth
//! access tokens and their `toolmark:read` scope; a key's policy changed through one node holds
//! on the other, for the key and the MCP tokens it minted; a key's own rate is one bucket
//! across nodes.

use std::time::{Duration, Instant};

use base64::Engine as _;
use jsonwebtoken::Algorithm::EdDSA;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::admin::{admin, minted};
use crate::agent::confirmed;
use crate::harness::*;
use crate::hosted_mcp::{ISSUER, LivePage, PUBLIC, access_token, client_at};

const T: &str = "least";

fn tools() -> Value {
    json!([
        tool("todo.list", json!({"readOnly": true})),
        tool("todo.add", json!({})),
        tool("todo.delete", json!({"destructive": true})),
        tool("signup.submit", json!({})),
    ])
}

/// An access token of the test authorization server for u1/c1 of [`T`], with `extra` claims.
fn access(extra: &Value) -> String {
    let mut claims = json!({"iss": ISSUER, "aud": format!("{PUBLIC}/v1/tenants/{T}/mcp"),
        "sub": "u1", "cnv": "c1", "exp": now() + 600, "iat": now()});
    claims
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    access_token(EdDSA, "k1", &claims)
}

/// A JWT's `jti`, read from its payload.
fn jti(token: &str) -> String {
    let payload = token.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    let claims: Value = serde_json::from_slice(&bytes).unwrap();
    claims["jti"].as_str().unwrap().to_owned()
}

/// The names an MCP client lists.
async fn listed<S: rmcp::service::Service<rmcp::RoleClient>>(
    service: &rmcp::service::RunningService<rmcp::RoleClient, S>,
) -> Vec<String> {
    let mut names: Vec<String> = service
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    names
}

/// The next call or describe the page receives (the `cancel` of a call that timed out is
/// skipped).
async fn next_call(page: &mut Page) -> Value {
    loop {
        let frame = page.recv().await;
        if frame["type"] != "cancel" {
            return frame;
        }
    }
}

/// Calls `todo__list` through `service` while `page` answers it: the call's id.
async fn mcp_call<S: rmcp::service::Service<rmcp::RoleClient>>(
    service: &rmcp::service::RunningService<rmcp::RoleClient, S>,
    page: &mut LivePage,
) -> String {
    let peer = service.peer().clone();
    let pending = tokio::spawn(async move {
        peer.call_tool(CallToolRequestParams::new("todo__list"))
            .await
    });
    let frame = loop {
        let frame = page.next().await;
        if frame["type"] != "cancel" {
            break frame;
        }
    };
    assert_eq!(frame["tool"], "todo.list", "{frame}");
    let id = frame["id"].as_str().unwrap().to_owned();
    page.answer(&id, json!({"status": "ok", "data": "listed"}));
    assert!(pending.await.unwrap().is_ok());
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_credential_is_named_and_a_narrowed_key_holds_on_every_node() {
    let nodes = Gateway::start_admin_nodes_at(2, Some(PUBLIC)).await;
    let (n1, n2) = (&nodes[0], &nodes[1]);
    let r = admin(
        n1,
        "POST",
        "/admin/v1/tenants",
        Some(json!({"id": T, "allowedOrigins": [ACME_ORIGIN],
            "mcpOAuth": {"issuer": ISSUER, "publicKey": ED_PUB,
                "policy": {"tools": {"deny": ["todo.delete"]}}}})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let key = r.body["secrets"]["apiKey"].as_str().unwrap().to_owned();
    let key_id = r.body["secrets"]["apiKeyId"].as_str().unwrap().to_owned();
    let token = minted(n2, T, &key, "u1", "c1").await;
    let mut page = n2
        .connect(T, &token, Some(ACME_ORIGIN))
        .await
        .expect("page admitted");
    page.manifest(1, tools()).await;
    let (a1, a2) = (n1.agent(T, &key), n2.agent(T, &key));
    a1.wait_current("u1", "c1", &page.client_id).await;
    let conv = "/users/u1/conversations/c1";
    let by_key = json!({"kind": "apiKey", "id": key_id});

    // The API key, through node 1: a call that times out, and one answered needs_confirmation
    // that its page then confirms. Each record and each event names the key.
    let timed_out = a1
        .post(
            &format!("{conv}/calls"),
            json!({"tool": "todo.add", "input": {}, "timeoutMs": 300}),
        )
        .await;
    assert_eq!(
        timed_out.body["outcome"]["status"], "timeout",
        "{}",
        timed_out.body
    );
    let frame = next_call(&mut page).await;
    let timed_out_id = frame["id"].as_str().unwrap().to_owned();
    let pending = a1.call_later(
        "u1",
        "c1",
        json!({"tool": "signup.submit", "input": {}, "timeoutMs": 20000}),
    );
    let frame = next_call(&mut page).await;
    let confirm_id = uuid::Uuid::new_v4().to_string();
    let confirmed_id = frame["id"].as_str().unwrap().to_owned();
    page.answer(
        &confirmed_id,
        json!({"status": "needs_confirmation", "confirmId": confirm_id, "summary": "Sign up?"}),
    )
    .await;
    assert_eq!(pending.await.unwrap().status, 200);
    page.send(confirmed(&page, &confirm_id)).await;
    for id in [&timed_out_id, &confirmed_id] {
        let record = a2.get(&format!("/calls/{id}")).await;
        assert_eq!(record.body["caller"], by_key, "{}", record.body);
    }
    // Both events, in whichever order they were emitted.
    let mut log = a2.events("", Some("0-0")).await;
    let (mut timeout, mut resolved) = (None, None);
    while timeout.is_none() || resolved.is_none() {
        let ev = log.next_within(WAIT).await.unwrap_or_else(|| {
            panic!("call.timeout {timeout:?}, confirmation.resolved {resolved:?}")
        });
        match ev.event.as_str() {
            "call.timeout" => timeout = Some(ev.data["data"].clone()),
            "confirmation.resolved" => resolved = Some(ev.data["data"].clone()),
            _ => {}
        }
    }
    let (timeout, resolved) = (timeout.unwrap(), resolved.unwrap());
    assert_eq!(timeout["id"], timed_out_id.as_str());
    assert_eq!(timeout["caller"], by_key, "{timeout}");
    assert_eq!(resolved["callId"], confirmed_id.as_str());
    assert_eq!(resolved["caller"], by_key, "{resolved}");

    // From here the page answers the describes that MCP listings send by itself.
    let mut page = LivePage::new(page);

    // An MCP token minted by the key, used on node 2.
    let minted_mcp = a1
        .post(
            "/tokens",
            json!({"user": "u1", "conversation": "c1", "scope": "mcp"}),
        )
        .await;
    assert_eq!(minted_mcp.status, 201, "{}", minted_mcp.body);
    let mcp_token = minted_mcp.body["token"].as_str().unwrap().to_owned();
    let mcp_url = n2.url(&format!("/v1/tenants/{T}/mcp"));
    let (mcp, _) = client_at(mcp_url.clone(), &mcp_token, None).await;
    assert_eq!(
        listed(&mcp).await,
        ["signup__submit", "todo__add", "todo__delete", "todo__list"]
    );
    let id = mcp_call(&mcp, &mut page).await;
    let record = a1.get(&format!("/calls/{id}")).await;
    assert_eq!(
        record.body["caller"],
        json!({"kind": "mcpToken", "id": jti(&mcp_token), "apiKeyId": key_id}),
        "{}",
        record.body
    );

    // OAuth access tokens hold the tenant's policy (no todo.delete); `toolmark:read` in their
    // scope, read-only tools besides.
    let (wide, _) = client_at(mcp_url.clone(), &access(&json!({"azp": "desk"})), None).await;
    assert_eq!(
        listed(&wide).await,
        ["signup__submit", "todo__add", "todo__list"]
    );
    let refused = wide
        .call_tool(CallToolRequestParams::new("todo__delete"))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let reader = access(&json!({"scope": "openid toolmark:read", "client_id": "desk"}));
    let (read, _) = client_at(mcp_url.clone(), &reader, None).await;
    assert_eq!(listed(&read).await, ["todo__list"]);
    let refused = read
        .call_tool(CallToolRequestParams::new("todo__add"))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let id = mcp_call(&read, &mut page).await;
    let record = a1.get(&format!("/calls/{id}")).await;
    assert_eq!(
        record.body["caller"],
        json!({"kind": "oauth", "sub": "u1", "clientId": "desk"}),
        "{}",
        record.body
    );
    let reached = page.try_next(Duration::from_millis(200)).await;
    assert!(
        reached.is_none(),
        "a refused call reached the page: {reached:?}"
    );

    // The key narrowed through node 1 to read-only tools and one call a second: node 2 holds
    // it for the key and for the MCP token it minted.
    let patched = admin(
        n1,
        "PATCH",
        &format!("/admin/v1/tenants/{T}/api-keys/{key_id}"),
        Some(json!({"policy": {"hints": "readOnly", "callsPerSecond": 1}})),
    )
    .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    let at = Instant::now();
    loop {
        let state = a2.get(conv).await;
        let names: Vec<&str> = state.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        if names == ["todo.list"] {
            break;
        }
        assert!(at.elapsed() < WAIT, "node 2 still lists {names:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "node 2 held the narrowed policy {:?} after the PATCH",
        at.elapsed()
    );
    assert!(
        at.elapsed() < Duration::from_secs(3),
        "the policy took {:?} to reach node 2",
        at.elapsed()
    );
    let refused = a2
        .post(
            &format!("{conv}/calls"),
            json!({"tool": "todo.add", "input": {}}),
        )
        .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(refused.body["code"], "tool_not_allowed");
    assert_eq!(
        listed(&mcp).await,
        ["todo__list"],
        "the token follows its key"
    );

    // One call a second for the key, whichever node it calls (a burst of two): of six
    // describes through both nodes (the page answers them), no more pass than the two and
    // what refilled meanwhile.
    let started = Instant::now();
    let mut placed = 0;
    for agent in [&a1, &a2, &a1, &a2, &a1, &a2] {
        let a = agent
            .post(
                &format!("{conv}/describe"),
                json!({"tool": "todo.list", "timeoutMs": 5000}),
            )
            .await;
        match a.status {
            429 => assert_eq!(a.body["code"], "rate_limited", "{}", a.body),
            _ => {
                assert_eq!(a.body["outcome"]["status"], "ok", "{}", a.body);
                placed += 1;
            }
        }
    }
    let refilled = started.elapsed().as_secs();
    assert!(
        (2..=3 + refilled).contains(&placed),
        "{placed} placed; the key's bucket held 2 and refilled {refilled}"
    );
    for c in [mcp, wide, read] {
        c.cancel().await.unwrap();
    }
}
