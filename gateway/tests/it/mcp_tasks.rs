//! Confirmations and long calls reach the agent: MCP tasks on the hosted endpoint, driven by
//! rmcp's client declaring the tasks extension (at the stateless 2026-07-28 revision and at the
//! 2025-11-25 session revision), with the page, the call and the polls on different nodes; and
//! `GET /calls/{id}` following a call's confirmation with `?wait`.

use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, ProtocolVersion, TaskStatusNotificationParams,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::agent::Agent;
use crate::harness::*;
use crate::hosted_mcp::{LivePage, mcp_token, page_tools};

/// A client that declares tasks (or not) and tells the test of every `notifications/tasks`.
#[derive(Clone)]
struct TaskClient {
    info: ClientConfig,
    ended: mpsc::UnboundedSender<Value>,
}

impl ClientHandler for TaskClient {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn on_task_status(
        &self,
        params: TaskStatusNotificationParams,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.ended.send(serde_json::to_value(params).unwrap());
    }
}

type Service = RunningService<RoleClient, TaskClient>;

/// An rmcp client of acme's endpoint on `gw` that declares tasks: at the stateless 2026-07-28
/// revision (`None`), or at `version` with a session.
async fn task_client(
    gw: &Gateway,
    token: &str,
    version: Option<ProtocolVersion>,
) -> (Service, mpsc::UnboundedReceiver<Value>) {
    task_client_declaring(gw, token, version, true).await
}

/// [`task_client`], declaring tasks or not.
async fn task_client_declaring(
    gw: &Gateway,
    token: &str,
    version: Option<ProtocolVersion>,
    tasks: bool,
) -> (Service, mpsc::UnboundedReceiver<Value>) {
    let url = gw.url("/v1/tenants/acme/mcp");
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token.to_owned());
    let transport = StreamableHttpClientTransport::from_config(config);
    let mut info = ClientConfig::default();
    if tasks {
        info.capabilities = ClientCapabilities::builder().enable_tasks().build();
    }
    let (ended, notes) = mpsc::unbounded_channel();
    let client = TaskClient { info, ended };
    let service = match version {
        Some(v) => {
            let mut client = client;
            client.info.protocol_version = v;
            client.serve(transport).await
        }
        None => {
            client
                .serve_with_lifecycle(
                    transport,
                    ClientLifecycleMode::Discover {
                        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    },
                )
                .await
        }
    }
    .expect("the MCP client connects");
    (service, notes)
}

/// Calls `name` in a task of its own: its answer, a result or a task.
fn call_later(service: &Service, name: &str) -> tokio::task::JoinHandle<CallToolResponse> {
    let peer = service.peer().clone();
    let name = name.to_owned();
    tokio::spawn(async move {
        peer.call_tool_once(CallToolRequestParams::new(name))
            .await
            .expect("the call is answered")
    })
}

/// The task a call was answered with, as JSON.
fn task_of(response: CallToolResponse) -> Value {
    match response {
        CallToolResponse::Task(t) => serde_json::to_value(t.task).unwrap(),
        other => panic!("a task, not {other:?}"),
    }
}

/// `tasks/get` of `id` as JSON (the detailed task), or the error's message.
async fn get(service: &Service, id: &str) -> Result<Value, String> {
    service
        .peer()
        .get_task(GetTaskParams::new(id))
        .await
        .map(|r| serde_json::to_value(r.task).unwrap())
        .map_err(|e| e.to_string())
}

/// Polls `tasks/get` at the task's own interval until it is no longer `working`.
async fn until_ended(service: &Service, id: &str, within: Duration) -> Value {
    let until = Instant::now() + within;
    loop {
        let t = get(service, id).await.expect("the task is found");
        if t["status"] != "working" {
            return t;
        }
        assert!(Instant::now() < until, "the task never ended: {t}");
        tokio::time::sleep(Duration::from_millis(t["pollIntervalMs"].as_u64().unwrap())).await;
    }
}

/// `GET /calls/{id}?wait=N` through `gw`: (status, body).
async fn call_waited(gw: &Gateway, id: &str, wait: u64) -> (u16, Value) {
    let a = gw.acme().get(&format!("/calls/{id}?wait={wait}")).await;
    (a.status, a.body)
}

/// `GET /calls/{id}?wait=N` through `gw`, in a task of its own: how long it was held, and the
/// call it answered.
fn wait_later(gw: &Gateway, id: &str, wait: u64) -> tokio::task::JoinHandle<(Duration, Value)> {
    let url = gw.url(&format!("/v1/tenants/acme/calls/{id}?wait={wait}"));
    let key = gw.acme().key.clone();
    tokio::spawn(async move {
        let started = Instant::now();
        let body: Value = http_client()
            .get(url)
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (started.elapsed(), body)
    })
}

/// Three nodes, the page on node 1: (nodes, page).
async fn three_nodes() -> (Vec<Gateway>, LivePage) {
    let nodes = Gateway::start_nodes(3, "").await;
    let page = LivePage::new(page_across(&nodes[0], &nodes[1], page_tools()).await);
    (nodes, page)
}

#[tokio::test]
async fn a_confirmation_approved_past_the_clients_timeout_completes_its_task_on_any_node() {
    // Three nodes share the suite's Redis: in the memory suite that is the same plain Redis as
    // in the redis suite, where this 70-second scenario runs once. What it crosses is time (a
    // confirmation past the client's minute, a `?wait` held its whole minute), not topology:
    // the task's record, the call and its confirmation on Redis Cluster are the other tests of
    // this file, in the redis-cluster suite.
    if toolmark_testkit::redis::mode() != toolmark_testkit::redis::Mode::Redis {
        eprintln!("runs in the redis suite (TOOLMARK_TEST_BROKER=redis)");
        return;
    }
    let (nodes, mut page) = three_nodes().await;
    let token = mcp_token(&nodes[1], "u1", "c1").await;
    let (caller, _) = task_client(&nodes[1], &token, None).await;
    let (poller, _) = task_client(&nodes[2], &token, None).await;
    let mut log = nodes[2].acme().events("", None).await;

    let pending = call_later(&caller, "todo__delete");
    let frame = page.next().await;
    let id = frame["id"].as_str().unwrap().to_owned();
    page.answer(
        &id,
        json!({"status": "needs_confirmation", "confirmId": "cf-late", "summary": "Delete the todo"}),
    );
    let task = task_of(pending.await.unwrap());
    assert_eq!(task["taskId"], id.as_str(), "{task}");
    assert_eq!(task["status"], "working");
    assert_eq!(task["statusMessage"], "Delete the todo");
    assert!(task["ttlMs"].as_u64().unwrap() >= 900_000, "{task}");
    assert!(task["pollIntervalMs"].as_u64().is_some(), "{task}");

    // Through another node, the call and its task wait on the confirmation.
    let polled = get(&poller, &id).await.unwrap();
    assert_eq!(
        (&polled["status"], &polled["statusMessage"]),
        (&json!("working"), &json!("Delete the todo"))
    );
    let (status, call) = call_waited(&nodes[2], &id, 1).await;
    assert_eq!(status, 200, "{call}");
    assert_eq!(
        call["confirmation"],
        json!({"confirmId": "cf-late", "state": "pending"})
    );
    // Held the whole minute, then still pending (the user takes 70 s).
    let held = wait_later(&nodes[2], &id, 60);
    tokio::time::sleep(Duration::from_secs(62)).await;
    let (waited, body) = held.await.unwrap();
    assert!(waited >= Duration::from_secs(59), "{waited:?}");
    assert_eq!(body["confirmation"]["state"], "pending", "{body}");
    let following = wait_later(&nodes[2], &id, 30);
    tokio::time::sleep(Duration::from_secs(8)).await;
    page.confirmed("cf-late", json!({"status": "ok", "data": "deleted"}));

    // `?wait` answers as soon as the confirmation resolved, on node 3.
    let (_, body) = tokio::time::timeout(Duration::from_secs(25), following)
        .await
        .expect("the held request answers once the confirmation resolves")
        .unwrap();
    assert_eq!(body["confirmation"]["state"], "resolved", "{body}");
    assert_eq!(
        body["confirmation"]["outcome"],
        json!({"status": "ok", "data": "deleted"})
    );
    assert!(body["confirmation"]["resolvedAt"].is_string(), "{body}");

    // The task completes with the page's final outcome, through node 3.
    let done = until_ended(&poller, &id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"status": "ok", "data": "deleted"})
    );
    assert_eq!(done["result"]["isError"], false);
    // And again, the same (it was kept with the task).
    assert_eq!(get(&poller, &id).await.unwrap()["result"], done["result"]);

    // Exactly one confirmation.resolved, with that outcome.
    let ev = log.next_of("confirmation.resolved").await;
    assert_eq!(ev.data["data"]["callId"], id.as_str());
    assert_eq!(
        ev.data["data"]["outcome"],
        done["result"]["structuredContent"]
    );
    let mut all = nodes[0].acme().events("", Some("0-0")).await;
    let mut resolved = 0;
    while let Some(e) = all.next_within(Duration::from_secs(2)).await {
        if e.event == "confirmation.resolved" && e.data["data"]["confirmId"] == "cf-late" {
            resolved += 1;
        }
    }
    assert_eq!(resolved, 1, "confirmation.resolved exactly once");
    caller.cancel().await.unwrap();
    poller.cancel().await.unwrap();
}

#[tokio::test]
async fn a_slow_tool_becomes_a_task_and_a_session_hears_its_end() {
    let (nodes, mut page) = three_nodes().await;
    let token = mcp_token(&nodes[1], "u1", "c1").await;
    let (session, mut ended) =
        task_client(&nodes[1], &token, Some(ProtocolVersion::V_2025_11_25)).await;
    let started = Instant::now();
    let pending = call_later(&session, "todo__add");
    let frame = page.next().await;
    let id = frame["id"].as_str().unwrap().to_owned();
    // `mcp.task_after_ms` (3 s by default) passes without an answer: a task.
    let task = task_of(pending.await.unwrap());
    assert!(started.elapsed() >= Duration::from_millis(2900));
    assert_eq!(
        (&task["taskId"], &task["status"]),
        (&json!(id), &json!("working"))
    );
    // The page answers 8 s after the call.
    tokio::time::sleep(Duration::from_secs(8).saturating_sub(started.elapsed())).await;
    page.answer(&id, json!({"status": "ok", "data": {"added": 1}}));
    // The session's stream hears the end, whichever node the answer reached.
    let note = tokio::time::timeout(WAIT, ended.recv())
        .await
        .expect("notifications/tasks arrives")
        .unwrap();
    assert_eq!(
        (&note["taskId"], &note["status"]),
        (&json!(id), &json!("completed"))
    );
    assert_eq!(
        note["result"]["structuredContent"],
        json!({"status": "ok", "data": {"added": 1}})
    );
    let polled = get(&session, &id).await.unwrap();
    assert_eq!(polled["result"], note["result"]);
    session.cancel().await.unwrap();

    // A client that does not declare tasks waits for the slow page, as before.
    let (plain, _) = task_client_declaring(&nodes[2], &token, None, false).await;
    let pending = call_later(&plain, "todo__add");
    let frame = page.next().await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    page.answer(frame["id"].as_str().unwrap(), json!({"status": "ok"}));
    match pending.await.unwrap() {
        CallToolResponse::Complete(r) => {
            assert_eq!(
                serde_json::to_value(r).unwrap()["structuredContent"],
                json!({"status": "ok"})
            );
        }
        other => panic!("a result, not {other:?}"),
    }
    plain.cancel().await.unwrap();
}

#[tokio::test]
async fn rejected_and_expired_confirmations_complete_as_error_results() {
    let (nodes, mut page) = three_nodes().await;
    let token = mcp_token(&nodes[1], "u1", "c1").await;
    let (client, _) = task_client(&nodes[2], &token, None).await;
    for (confirm_id, last) in [
        ("cf-no", json!({"status": "cancelled", "by": "operator"})),
        (
            "cf-old",
            json!({"status": "refused", "code": "confirmation_expired", "message": "The confirmation expired or was already used"}),
        ),
    ] {
        let pending = call_later(&client, "todo__delete");
        let frame = page.next().await;
        let id = frame["id"].as_str().unwrap().to_owned();
        page.answer(
            &id,
            json!({"status": "needs_confirmation", "confirmId": confirm_id, "summary": "Delete?"}),
        );
        task_of(pending.await.unwrap());
        page.confirmed(confirm_id, last.clone());
        let done = until_ended(&client, &id, WAIT).await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["result"]["structuredContent"], last);
        assert_eq!(done["result"]["isError"], true, "{done}");
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_task_is_cancelled_in_either_state_and_only_its_owner_sees_it() {
    let (nodes, mut page) = three_nodes().await;
    let token = mcp_token(&nodes[1], "u1", "c1").await;
    let (client, _) = task_client(&nodes[1], &token, None).await;

    // Pending at the page: the page gets the protocol cancel.
    let pending = call_later(&client, "todo__add");
    let running = page.next().await;
    let running_id = running["id"].as_str().unwrap().to_owned();
    task_of(pending.await.unwrap());
    let stranger = mcp_token(&nodes[1], "u2", "c1").await;
    let (other, _) = task_client(&nodes[2], &stranger, None).await;
    assert!(
        get(&other, &running_id)
            .await
            .unwrap_err()
            .contains("task not found")
    );
    assert!(
        other
            .peer()
            .cancel_task(CancelTaskParams::new(running_id.clone()))
            .await
            .unwrap_err()
            .to_string()
            .contains("task not found")
    );
    client
        .peer()
        .cancel_task(CancelTaskParams::new(running_id.clone()))
        .await
        .unwrap();
    let cancel = page.next().await;
    assert_eq!(
        (&cancel["type"], &cancel["id"]),
        (&json!("cancel"), &json!(running_id))
    );
    assert_eq!(
        get(&client, &running_id).await.unwrap()["status"],
        "cancelled"
    );

    // Waiting on a confirmation: cancelled, and the confirmation still resolves.
    let pending = call_later(&client, "todo__delete");
    let frame = page.next().await;
    let id = frame["id"].as_str().unwrap().to_owned();
    page.answer(
        &id,
        json!({"status": "needs_confirmation", "confirmId": "cf-c", "summary": "Delete?"}),
    );
    task_of(pending.await.unwrap());
    client
        .peer()
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .unwrap();
    assert_eq!(get(&client, &id).await.unwrap()["status"], "cancelled");
    page.confirmed("cf-c", json!({"status": "ok"}));
    let (_, call) = call_waited(&nodes[0], &id, 10).await;
    assert_eq!(call["confirmation"]["state"], "resolved", "{call}");
    assert_eq!(get(&client, &id).await.unwrap()["status"], "cancelled");
    client.cancel().await.unwrap();
    other.cancel().await.unwrap();
}

#[tokio::test]
async fn tasks_and_waits_outlive_the_node_that_made_them() {
    let broker = redis_broker(&toolmark_testkit::redis::shared_url(), &fresh_prefix());
    let config = config_with(&broker, "");
    let node = |i: usize| Gateway::start_config(&config, Some(format!("node-{i}")));
    let mut nodes = [node(1).await, node(2).await];
    let mut page = LivePage::new(page_across(&nodes[0], &nodes[1], page_tools()).await);
    let token = mcp_token(&nodes[1], "u1", "c1").await;
    let (client, _) = task_client(&nodes[1], &token, None).await;
    let pending = call_later(&client, "todo__delete");
    let frame = page.next().await;
    let id = frame["id"].as_str().unwrap().to_owned();
    page.answer(
        &id,
        json!({"status": "needs_confirmation", "confirmId": "cf-r", "summary": "Delete?"}),
    );
    task_of(pending.await.unwrap());
    client.cancel().await.unwrap();
    // The node that made the task stops; a new node serves the poll.
    nodes[1].stop();
    let n3 = node(3).await;
    let (client, _) = task_client(&n3, &token, None).await;
    assert_eq!(get(&client, &id).await.unwrap()["status"], "working");
    let waiting = wait_later(&n3, &id, 20);
    page.confirmed("cf-r", json!({"status": "ok", "data": "gone"}));
    let (_, body) = tokio::time::timeout(WAIT, waiting).await.unwrap().unwrap();
    assert_eq!(body["confirmation"]["state"], "resolved", "{body}");
    let done = until_ended(&client, &id, WAIT).await;
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"status": "ok", "data": "gone"})
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn get_call_waits_for_its_answer_and_checks_the_wait() {
    let gw = Gateway::start().await;
    let mut page = gw.page("acme", "u1", "c1").await;
    page.manifest(1, json!([tool("todo.add", json!({}))])).await;
    gw.acme().wait_current("u1", "c1", &page.client_id).await;
    let agent = gw.acme();
    let placed = Agent::read(
        agent
            .http
            .post(agent.url("/users/u1/conversations/c1/calls"))
            .bearer_auth(&agent.key)
            .header("prefer", "respond-async")
            .json(&json!({"tool": "todo.add", "input": {}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(placed.status, 202, "{}", placed.body);
    let id = placed.body["id"].as_str().unwrap().to_owned();
    let frame = page.recv().await;
    let held = wait_later(&gw, &id, 30);
    page.answer(frame["id"].as_str().unwrap(), json!({"status": "ok"}))
        .await;
    let (_, body) = tokio::time::timeout(Duration::from_secs(10), held)
        .await
        .expect("the held request answers once the call is answered")
        .unwrap();
    assert_eq!(body["state"], "answered", "{body}");
    assert!(body.get("confirmation").is_none(), "{body}");
    for bad in ["0", "61", "x"] {
        let a = gw.acme().get(&format!("/calls/{id}?wait={bad}")).await;
        assert_eq!(a.status, 400, "{bad}: {}", a.body);
        assert_eq!(a.body["code"], "invalid_request");
    }
}

/// One stateless 2026-07-28 JSON-RPC request declaring tasks, as `docs/hosted-mcp.md` shows it:
/// the answer's `result`.
async fn raw(endpoint: &str, token: &str, id: u64, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    // The 2026-07-28 revision names the method and its target in headers too (SEP-2243).
    let name = params["name"]
        .as_str()
        .or(params["taskId"].as_str())
        .unwrap_or_default()
        .to_owned();
    let text = http_client()
        .post(endpoint)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name)
        .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let answer: Value = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .chain(std::iter::once(text.as_str()))
        .find_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .unwrap_or_else(|| panic!("a JSON-RPC answer: {text}"));
    assert_eq!(answer["id"], id, "{answer}");
    answer["result"].clone()
}

#[tokio::test]
async fn raw_json_rpc_polls_a_task_to_its_end_as_the_docs_show() {
    let (nodes, mut page) = three_nodes().await;
    let token = mcp_token(&nodes[1], "u1", "c1").await;
    let (via2, via3) = (
        nodes[1].url("/v1/tenants/acme/mcp"),
        nodes[2].url("/v1/tenants/acme/mcp"),
    );
    let pending = {
        let token = token.clone();
        tokio::spawn(async move {
            let call = json!({"name": "todo__delete", "arguments": {}});
            raw(&via2, &token, 1, "tools/call", call).await
        })
    };
    let frame = page.next().await;
    let id = frame["id"].as_str().unwrap().to_owned();
    page.answer(
        &id,
        json!({"status": "needs_confirmation", "confirmId": "cf-raw", "summary": "Delete the todo"}),
    );
    let created = pending.await.unwrap();
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(created["statusMessage"], "Delete the todo");
    let got = raw(&via3, &token, 2, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(got["status"], "working", "{got}");
    page.confirmed("cf-raw", json!({"status": "ok", "data": "deleted"}));
    let until = Instant::now() + WAIT;
    let done = loop {
        let got = raw(&via3, &token, 3, "tasks/get", json!({"taskId": id})).await;
        if got["status"] != "working" {
            break got;
        }
        assert!(Instant::now() < until, "{got}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"status": "ok", "data": "deleted"})
    );
}

/// An MCP token of `key` (acme) for u1/c1.
async fn token_of(gw: &Gateway, key: &str) -> String {
    let a = gw
        .agent("acme", key)
        .post(
            "/tokens",
            json!({"user": "u1", "conversation": "c1", "scope": "mcp"}),
        )
        .await;
    assert_eq!(a.status, 201, "{}", a.body);
    a.body["token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_task_is_served_only_to_the_caller_that_made_it_and_may_call_its_tool() {
    // acme with two more keys: another with every right, and one for `todo.list` only.
    const OTHER: &str = "key-acme-other";
    const NARROW: &str = "key-acme-narrow";
    let keys = format!(
        r#"api_keys = ["{acme}", "{other}", {{hash = "{narrow}", id = "narrow", policy = {{tools = {{allow = ["todo.list"]}}}}}}]"#,
        acme = hash(ACME_KEY),
        other = hash(OTHER),
        narrow = hash(NARROW),
    );
    let text = config_toml("").replacen(&format!("api_keys = [\"{}\"]", hash(ACME_KEY)), &keys, 1);
    assert!(
        text.contains("id = \"narrow\""),
        "acme's keys were replaced"
    );
    let gw = Gateway::start_config(&text, None).await;
    let mut page = LivePage::new(ready_page(&gw, "acme", "u1", "c1", page_tools()).await);

    // The full key's token makes a task of `todo.delete`: its page asks for a confirmation.
    let (maker, _) = task_client(&gw, &token_of(&gw, ACME_KEY).await, None).await;
    let pending = call_later(&maker, "todo__delete");
    let frame = page.next().await;
    let id = frame["id"].as_str().unwrap().to_owned();
    page.answer(
        &id,
        json!({"status": "needs_confirmation", "confirmId": "cf-own", "summary": "Delete it"}),
    );
    let task = task_of(pending.await.unwrap());
    assert_eq!(task["taskId"], id.as_str(), "{task}");

    // Another token of the same key: the same caller, served.
    let (same, _) = task_client(&gw, &token_of(&gw, ACME_KEY).await, None).await;
    assert_eq!(get(&same, &id).await.unwrap()["status"], "working");

    // A token of a key that may not call `todo.delete`, and a token of another key with every
    // right: neither finds the task, nor cancels it, nor hears of its end.
    let (narrow, mut narrow_notes) = task_client(&gw, &token_of(&gw, NARROW).await, None).await;
    let (other, mut other_notes) = task_client(&gw, &token_of(&gw, OTHER).await, None).await;
    for (who, client) in [("narrow", &narrow), ("other", &other)] {
        let found = get(client, &id).await;
        assert!(
            found.as_ref().is_err_and(|e| e.contains("task not found")),
            "{who}: {found:?}"
        );
        let cancelled = client
            .peer()
            .cancel_task(CancelTaskParams::new(id.clone()))
            .await;
        assert!(cancelled.is_err(), "{who} cancelled: {cancelled:?}");
    }
    assert!(
        page.try_next(Duration::from_millis(300)).await.is_none(),
        "a refused cancel reached the page"
    );
    // The maker's task is untouched: the page confirms and it completes, for its maker.
    page.confirmed("cf-own", json!({"status": "ok", "data": "deleted"}));
    let done = until_ended(&maker, &id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    for (who, notes) in [("narrow", &mut narrow_notes), ("other", &mut other_notes)] {
        let heard = tokio::time::timeout(Duration::from_millis(500), notes.recv()).await;
        assert!(
            !matches!(heard, Ok(Some(ref n)) if n["taskId"] == id.as_str()),
            "{who} heard of the task: {heard:?}"
        );
    }
    assert!(get(&narrow, &id).await.is_err());
    for c in [maker, same, narrow, other] {
        c.cancel().await.unwrap();
    }
}
