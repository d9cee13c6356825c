//! Least privilege for agent credentials: API keys with policies (scopes, tool globs, hint
//! levels) enforced on every path of the agent API and the hosted MCP endpoint, and the MCP
//! tokens such a key mints, which never widen it.

use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::harness::*;

const READER: &str = "key-acme-reader";
const TODO: &str = "key-acme-todo";
const EVENTS: &str = "key-acme-events";

/// acme with three more keys: a read-only one, one for `todo.*` but nothing that deletes, and
/// one that may only read events.
async fn gateway() -> Gateway {
    let keys = format!(
        r#"api_keys = ["{acme}", {{hash = "{reader}", id = "reader", policy = {{hints = "readOnly"}}}}, {{hash = "{todo}", id = "todo", policy = {{tools = {{allow = ["todo.*", "signup.fill"], deny = ["*.delete*"]}}}}}}, {{hash = "{events}", policy = {{scopes = ["events"]}}}}]"#,
        acme = hash(ACME_KEY),
        reader = hash(READER),
        todo = hash(TODO),
        events = hash(EVENTS),
    );
    let text = config_toml("").replacen(&format!("api_keys = [\"{}\"]", hash(ACME_KEY)), &keys, 1);
    assert!(
        text.contains("id = \"reader\""),
        "acme's keys were replaced"
    );
    Gateway::start_config(&text, None).await
}

fn tools() -> Value {
    json!([
        tool("todo.list", json!({"readOnly": true})),
        tool("todo.add", json!({})),
        tool("todo.delete", json!({"destructive": true})),
        tool("todo.deleteAll", json!({})),
        tool("order.submit", json!({"consequential": true})),
    ])
}

async fn page(gw: &Gateway) -> Page {
    let mut page = gw.page("acme", "u1", "c1").await;
    page.manifest(1, tools()).await;
    gw.acme().wait_current("u1", "c1", &page.client_id).await;
    page
}

fn names(tools: &Value) -> Vec<String> {
    tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_read_only_key_sees_and_calls_only_read_only_tools_on_every_path() {
    let gw = gateway().await;
    let mut page = page(&gw).await;
    let reader = gw.agent("acme", READER);

    let state = reader.get("/users/u1/conversations/c1").await;
    assert_eq!(state.status, 200, "{}", state.body);
    assert_eq!(names(&state.body["tools"]), ["todo.list"]);
    let llm = reader.get("/users/u1/conversations/c1/llm-tools").await;
    let described = llm.body["tools"][0]["description"].as_str().unwrap();
    assert!(described.contains("todo.list"), "{described}");
    assert!(!described.contains("todo.add"), "{described}");

    for (path, body) in [
        ("/calls", json!({"tool": "todo.add", "input": {}})),
        ("/describe", json!({"tool": "todo.add"})),
        (
            "/llm-tools/invoke",
            json!({"name": "page_call", "input": {"tool": "todo.delete", "input": {}}}),
        ),
        ("/calls", json!({"tool": "todo.unknown", "input": {}})),
    ] {
        let a = reader
            .post(&format!("/users/u1/conversations/c1{path}"), body.clone())
            .await;
        assert_eq!(a.status, 403, "{path} {body}: {}", a.body);
        assert_eq!(a.body["code"], "tool_not_allowed");
    }
    assert!(
        page.try_recv(Duration::from_millis(300)).await.is_none(),
        "a refused call never reaches the page"
    );
    let ok = reader.call_later(
        "u1",
        "c1",
        json!({"tool": "todo.list", "input": {}, "timeoutMs": 10000}),
    );
    answer_ok(&mut page, ok, "listed").await;
    // The full key is untouched.
    let a = gw
        .acme()
        .post(
            "/users/u1/conversations/c1/describe",
            json!({"tool": "todo.add", "timeoutMs": 200}),
        )
        .await;
    assert_ne!(a.status, 403, "{}", a.body);
    assert!(
        gw.metric("toolmark_policy_refusals_total{reason=\"tool_not_allowed\"}")
            .await
            >= 4.0
    );
}

#[tokio::test]
async fn a_deny_glob_beats_an_allow_glob() {
    let gw = gateway().await;
    let mut page = page(&gw).await;
    let todo = gw.agent("acme", TODO);
    for tool in ["todo.delete", "todo.deleteAll", "order.submit"] {
        let a = todo
            .post(
                "/users/u1/conversations/c1/calls",
                json!({"tool": tool, "input": {}}),
            )
            .await;
        assert_eq!(
            (a.status, &a.body["code"]),
            (403, &json!("tool_not_allowed")),
            "{tool}"
        );
    }
    let state = todo.get("/users/u1/conversations/c1").await;
    assert_eq!(names(&state.body["tools"]), ["todo.list", "todo.add"]);
    let ok = todo.call_later(
        "u1",
        "c1",
        json!({"tool": "todo.add", "input": {}, "timeoutMs": 10000}),
    );
    answer_ok(&mut page, ok, "added").await;
}

#[tokio::test]
async fn a_key_outside_its_scopes_is_refused_with_scope_denied() {
    let gw = gateway().await;
    let events = gw.agent("acme", EVENTS);
    for (status, a) in [
        (
            403,
            events
                .post("/tokens", json!({"user": "u1", "conversation": "c1"}))
                .await,
        ),
        (
            403,
            events
                .post(
                    "/users/u1/conversations/c1/calls",
                    json!({"tool": "todo.list", "input": {}}),
                )
                .await,
        ),
        (403, events.get("/users/u1/conversations/c1").await),
        (
            403,
            events.post("/webhooks/failed/x/retry", json!({})).await,
        ),
    ] {
        assert_eq!(a.status, status, "{}", a.body);
        assert_eq!(a.body["code"], "scope_denied");
    }
    let failed = events.get("/webhooks/failed").await;
    assert_eq!(failed.status, 200, "{}", failed.body);
    // A read-only key has every scope: it mints tokens.
    let minted = gw
        .agent("acme", READER)
        .post("/tokens", json!({"user": "u1", "conversation": "c1"}))
        .await;
    assert_eq!(minted.status, 201, "{}", minted.body);
}

/// The names an MCP client lists.
async fn mcp_names<S: rmcp::service::Service<rmcp::RoleClient>>(
    service: &rmcp::service::RunningService<rmcp::RoleClient, S>,
) -> Vec<String> {
    service
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect()
}

#[tokio::test]
async fn an_mcp_token_holds_its_keys_policy_and_never_widens_it() {
    let gw = gateway().await;
    let mut page = crate::hosted_mcp::LivePage::new(page(&gw).await);
    // Asking for more than the key has gives no more.
    let minted = gw
        .agent("acme", READER)
        .post(
            "/tokens",
            json!({"user": "u1", "conversation": "c1", "scope": "mcp", "policy": {"hints": "any"}}),
        )
        .await;
    assert_eq!(minted.status, 201, "{}", minted.body);
    let token = minted.body["token"].as_str().unwrap().to_owned();
    let (service, _) = crate::hosted_mcp::client_for(&gw, &token).await;
    assert_eq!(mcp_names(&service).await, ["todo__list"]);
    let refused = service
        .call_tool(CallToolRequestParams::new("todo__add"))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    // A token narrowed at minting: the full key's token, limited to `todo.list`.
    let narrowed = gw
        .acme()
        .post(
            "/tokens",
            json!({"user": "u1", "conversation": "c1", "scope": "mcp", "policy": {"tools": {"allow": ["todo.list"]}}}),
        )
        .await;
    let token = narrowed.body["token"].as_str().unwrap().to_owned();
    let (narrow, _) = crate::hosted_mcp::client_for(&gw, &token).await;
    assert_eq!(mcp_names(&narrow).await, ["todo__list"]);
    let pending = {
        let peer = narrow.peer().clone();
        tokio::spawn(async move {
            peer.call_tool(CallToolRequestParams::new("todo__list"))
                .await
        })
    };
    let frame = page.next().await;
    page.answer(frame["id"].as_str().unwrap(), json!({"status": "ok"}));
    assert!(pending.await.unwrap().is_ok());
    service.cancel().await.unwrap();
    narrow.cancel().await.unwrap();
}
