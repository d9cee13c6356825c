//! The doors the fourth wave closed (issue 52), each tried as the review tried it: a key's
//! scopes on the hosted MCP endpoint for every credential kind, events and dead letters and the
//! call resource held to the reader's policy, idempotency keys per API key, globs regardless
//! of case, event streams bounded per tenant and per key, a deleted tenant's figures and the
//! requests that fail authentication kept apart.

use std::time::{Duration, Instant};

use jsonwebtoken::Algorithm::EdDSA;
use serde_json::{Value, json};

use crate::admin::admin;
use crate::agent::Agent;
use crate::harness::*;
use crate::hosted_mcp::{ISSUER, PUBLIC, access_token};

const TOKENS_ONLY: &str = "key-acme-tokens";
const NOTES: &str = "key-acme-notes";
const READER: &str = "key-acme-reader";
const OTHER: &str = "key-acme-other";
const CAREFUL: &str = "key-acme-careful";

/// acme with five more keys: one that may only mint tokens, one for `notes.list` only, a
/// read-only one, another with every right, and one that may not delete.
fn doors_config(server: &str) -> String {
    let keys = format!(
        r#"api_keys = ["{acme}", {{hash = "{tokens}", id = "tokens", policy = {{scopes = ["tokens"]}}}}, {{hash = "{notes}", id = "notes", policy = {{tools = {{allow = ["notes.list"]}}}}}}, {{hash = "{reader}", id = "reader", policy = {{hints = "readOnly"}}}}, "{other}", {{hash = "{careful}", id = "careful", policy = {{tools = {{deny = ["*.delete*"]}}}}}}]"#,
        acme = hash(ACME_KEY),
        tokens = hash(TOKENS_ONLY),
        notes = hash(NOTES),
        reader = hash(READER),
        other = hash(OTHER),
        careful = hash(CAREFUL),
    );
    let text = config_toml("")
        .replacen(&format!("api_keys = [\"{}\"]", hash(ACME_KEY)), &keys, 1)
        .replacen("[server]\n", &format!("[server]\n{server}"), 1);
    assert!(
        text.contains("id = \"careful\""),
        "acme's keys were replaced"
    );
    text
}

async fn gateway() -> Gateway {
    Gateway::start_config(&doors_config(""), None).await
}

fn notes_tools() -> Value {
    json!([
        tool("notes.list", json!({"readOnly": true})),
        tool("notes.add", json!({})),
        tool("notes.DeleteAll", json!({"destructive": true})),
    ])
}

/// A raw `initialize` to a tenant's hosted MCP endpoint with `token`: (status, body).
async fn mcp_initialize(url: &str, token: &str) -> (u16, Value) {
    let res = http_client()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "doors", "version": "1"}}}))
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let body = res.text().await.unwrap();
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

/// An async call (`Prefer: respond-async`) of `tool` through `agent`: its id.
async fn async_call(gw: &Gateway, agent: &Agent, tool: &str) -> String {
    let res = gw
        .http
        .post(agent.url("/users/u1/conversations/c1/calls"))
        .bearer_auth(&agent.key)
        .header("prefer", "respond-async")
        .json(&json!({"tool": tool, "input": {}, "timeoutMs": 20000}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202, "{tool}");
    let body: Value = res.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_key_without_calls_mints_no_mcp_token_and_no_credential_passes_its_scopes() {
    let gw = gateway().await;
    let tokens = gw.agent("acme", TOKENS_ONLY);
    let mcp = tokens
        .post(
            "/tokens",
            json!({"user": "u1", "conversation": "c1", "scope": "mcp"}),
        )
        .await;
    assert_eq!(mcp.status, 403, "{}", mcp.body);
    assert_eq!(mcp.body["code"], "scope_denied");
    // What the key is for still works: page tokens.
    let page = tokens
        .post("/tokens", json!({"user": "u1", "conversation": "c1"}))
        .await;
    assert_eq!(page.status, 201, "{}", page.body);
    // A key with `calls` mints one, and it is served.
    let minted = gw
        .acme()
        .post(
            "/tokens",
            json!({"user": "u1", "conversation": "c1", "scope": "mcp"}),
        )
        .await;
    let token = minted.body["token"].as_str().unwrap();
    let (status, body) = mcp_initialize(&gw.url("/v1/tenants/acme/mcp"), token).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        gw.metric("toolmark_policy_refusals_total{reason=\"scope_denied\"}")
            .await
            >= 1.0
    );
}

#[tokio::test]
async fn an_mcp_credential_is_held_to_its_keys_scopes_as_they_are_now() {
    const T: &str = "scoped";
    let nodes = Gateway::start_admin_nodes_at(1, Some(PUBLIC)).await;
    let gw = &nodes[0];
    // The tenant's OAuth access tokens may only read events.
    let r = admin(
        gw,
        "POST",
        "/admin/v1/tenants",
        Some(json!({"id": T, "allowedOrigins": [ACME_ORIGIN],
            "mcpOAuth": {"issuer": ISSUER, "publicKey": ED_PUB,
                "policy": {"scopes": ["events"]}}})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let key = r.body["secrets"]["apiKey"].as_str().unwrap().to_owned();
    let key_id = r.body["secrets"]["apiKeyId"].as_str().unwrap().to_owned();
    let endpoint = gw.url(&format!("/v1/tenants/{T}/mcp"));
    let access = access_token(
        EdDSA,
        "k1",
        &json!({"iss": ISSUER, "aud": format!("{PUBLIC}/v1/tenants/{T}/mcp"),
            "sub": "u1", "cnv": "c1", "exp": now() + 600, "iat": now()}),
    );
    let (status, body) = mcp_initialize(&endpoint, &access).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "scope_denied", "{body}");

    // An MCP token of the key works, until the key is narrowed to minting tokens: from then
    // on it is refused (within the second a policy change takes).
    let agent = gw.agent(T, &key);
    let minted = agent
        .post(
            "/tokens",
            json!({"user": "u1", "conversation": "c1", "scope": "mcp"}),
        )
        .await;
    assert_eq!(minted.status, 201, "{}", minted.body);
    let token = minted.body["token"].as_str().unwrap().to_owned();
    assert_eq!(mcp_initialize(&endpoint, &token).await.0, 200);
    let patched = admin(
        gw,
        "PATCH",
        &format!("/admin/v1/tenants/{T}/api-keys/{key_id}"),
        Some(json!({"policy": {"scopes": ["tokens"]}})),
    )
    .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    let at = Instant::now();
    loop {
        let (status, body) = mcp_initialize(&endpoint, &token).await;
        if status == 403 {
            assert_eq!(body["code"], "scope_denied", "{body}");
            break;
        }
        assert!(at.elapsed() < WAIT, "still {status} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let again = agent
        .post(
            "/tokens",
            json!({"user": "u1", "conversation": "c1", "scope": "mcp"}),
        )
        .await;
    assert_eq!(again.status, 403, "{}", again.body);
    assert_eq!(again.body["code"], "scope_denied");
}

/// Reads `events` until `until` holds for one, each event's (type, tool) in order.
async fn read_until(
    events: &mut crate::agent::Events,
    until: impl Fn(&crate::agent::Sse) -> bool,
) -> Vec<(String, Value)> {
    let mut seen = Vec::new();
    loop {
        let ev = events
            .next_within(WAIT)
            .await
            .unwrap_or_else(|| panic!("the awaited event never came; saw {seen:?}"));
        seen.push((ev.event.clone(), ev.data["data"].clone()));
        if until(&ev) {
            return seen;
        }
    }
}

#[tokio::test]
async fn an_event_reader_sees_only_the_tools_its_key_may_call() {
    let gw = gateway().await;
    let mut page = ready_page(&gw, "acme", "u1", "c1", notes_tools()).await;
    let acme = gw.acme();
    // The full key adds a note, then lists them; the page answers both with data.
    let added = async_call(&gw, &acme, "notes.add").await;
    let frame = page.recv().await;
    page.answer(&added, json!({"status": "ok", "data": "secret note"}))
        .await;
    assert_eq!(frame["id"], added.as_str());
    let listed = async_call(&gw, &acme, "notes.list").await;
    page.recv().await;
    page.answer(&listed, json!({"status": "ok", "data": ["a note"]}))
        .await;

    // By name (`notes.list` only) and by hints (read-only tools only), from the log's start.
    for key in [NOTES, READER] {
        let reader = gw.agent("acme", key);
        let mut events = reader.events("", Some("0-0")).await;
        let seen = read_until(&mut events, |e| e.data["data"]["id"] == listed.as_str()).await;
        for (kind, data) in &seen {
            assert_ne!(data["id"], added.as_str(), "{key} read {kind} {data}");
            if kind == "page.manifest" {
                let names: Vec<&str> = data["tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t["name"].as_str().unwrap())
                    .collect();
                assert_eq!(names, ["notes.list"], "{key}");
            }
        }
        assert!(
            seen.iter().any(|(k, _)| k == "page.manifest"),
            "{key}: {seen:?}"
        );
    }
    // The full key sees both.
    let mut all = acme.events("", Some("0-0")).await;
    let seen = read_until(&mut all, |e| e.data["data"]["id"] == listed.as_str()).await;
    assert!(
        seen.iter().any(|(_, d)| d["id"] == added.as_str()),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_call_resource_and_its_cancel_hold_the_readers_policy() {
    let gw = gateway().await;
    let mut page = ready_page(&gw, "acme", "u1", "c1", notes_tools()).await;
    let id = async_call(&gw, &gw.acme(), "notes.add").await;
    assert_eq!(page.recv().await["id"], id.as_str());
    for key in [NOTES, READER] {
        let reader = gw.agent("acme", key);
        let read = reader.get(&format!("/calls/{id}")).await;
        assert_eq!(read.status, 403, "{key}: {}", read.body);
        assert_eq!(read.body["code"], "tool_not_allowed");
        let cancel = reader.post(&format!("/calls/{id}/cancel"), json!({})).await;
        assert_eq!(cancel.status, 403, "{key}: {}", cancel.body);
        assert_eq!(cancel.body["code"], "tool_not_allowed");
    }
    assert!(
        page.try_recv(Duration::from_millis(300)).await.is_none(),
        "a refused cancel reached the page"
    );
    // The call is still the full key's to read and to cancel.
    let read = gw.acme().get(&format!("/calls/{id}")).await;
    assert_eq!((read.status, &read.body["state"]), (200, &json!("pending")));
    let cancel = gw
        .acme()
        .post(&format!("/calls/{id}/cancel"), json!({}))
        .await;
    assert_eq!(cancel.status, 202, "{}", cancel.body);
    assert_eq!(page.recv().await["type"], "cancel");
}

#[tokio::test]
async fn an_idempotency_key_belongs_to_the_api_key_that_sent_it() {
    let gw = gateway().await;
    let mut page = ready_page(&gw, "acme", "u1", "c1", notes_tools()).await;
    let send = |key: &str, body: Value| {
        let req = gw
            .http
            .post(
                gw.agent("acme", key)
                    .url("/users/u1/conversations/c1/calls"),
            )
            .bearer_auth(key)
            .header("idempotency-key", "order-1")
            .json(&body);
        tokio::spawn(async move { Agent::read(req.send().await.unwrap()).await })
    };
    let body = json!({"tool": "notes.add", "input": {"text": "a"}, "timeoutMs": 10000});
    let first = send(ACME_KEY, body.clone());
    let frame = page.recv().await;
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "ok", "data": "first"}),
    )
    .await;
    assert_eq!(first.await.unwrap().body["outcome"]["data"], "first");
    // The same key again: the same answer, no frame.
    let repeat = send(ACME_KEY, body.clone()).await.unwrap();
    assert_eq!(repeat.body["outcome"]["data"], "first");
    assert!(page.try_recv(Duration::from_millis(200)).await.is_none());
    // Another key with the same value: a call of its own, answered by the page; with another
    // body, no 422 telling it the value exists.
    let other = send(OTHER, body.clone());
    let frame = page.recv().await;
    assert_ne!(frame["id"], repeat.body["id"]);
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "ok", "data": "second"}),
    )
    .await;
    assert_eq!(other.await.unwrap().body["outcome"]["data"], "second");
    let different = send(
        NOTES,
        json!({"tool": "notes.list", "input": {}, "timeoutMs": 10000}),
    );
    let frame = page.recv().await;
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "ok", "data": "third"}),
    )
    .await;
    let different = different.await.unwrap();
    assert_eq!(different.status, 200, "{}", different.body);
}

#[tokio::test]
async fn a_deny_glob_holds_regardless_of_case() {
    let gw = gateway().await;
    let mut page = ready_page(&gw, "acme", "u1", "c1", notes_tools()).await;
    let careful = gw.agent("acme", CAREFUL);
    let a = careful
        .post(
            "/users/u1/conversations/c1/calls",
            json!({"tool": "notes.DeleteAll", "input": {}}),
        )
        .await;
    assert_eq!(a.status, 403, "{}", a.body);
    assert_eq!(a.body["code"], "tool_not_allowed");
    assert!(page.try_recv(Duration::from_millis(300)).await.is_none());
    let state = careful.get("/users/u1/conversations/c1").await;
    let names: Vec<&str> = state.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["notes.list", "notes.add"]);
}

/// Opens `GET /events` with `key`: the status, and the response (kept open while held).
async fn open_stream(gw: &Gateway, key: &str) -> (u16, reqwest::Response) {
    let res = gw
        .http
        .get(gw.url("/v1/tenants/acme/events"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res)
}

#[tokio::test]
async fn event_streams_are_bounded_per_key_and_per_tenant() {
    let gw = Gateway::start_config(
        &doors_config("max_event_streams_per_key = 2\nmax_event_streams_per_tenant = 3\n"),
        None,
    )
    .await;
    let (s1, first) = open_stream(&gw, ACME_KEY).await;
    let (s2, _second) = open_stream(&gw, ACME_KEY).await;
    assert_eq!((s1, s2), (200, 200));
    let (status, over) = open_stream(&gw, ACME_KEY).await;
    assert_eq!(status, 429);
    assert!(over.headers().contains_key("retry-after"));
    let problem: Value = over.json().await.unwrap();
    assert_eq!(problem["code"], "rate_limited", "{problem}");
    assert!(
        problem["detail"].as_str().unwrap().contains("key"),
        "{problem}"
    );
    // Another key has places of its own, up to the tenant's bound.
    let (s3, _third) = open_stream(&gw, OTHER).await;
    assert_eq!(s3, 200);
    let (status, over) = open_stream(&gw, OTHER).await;
    assert_eq!(status, 429);
    let problem: Value = over.json().await.unwrap();
    assert!(
        problem["detail"].as_str().unwrap().contains("tenant"),
        "{problem}"
    );
    // A reader that leaves gives its place back.
    drop(first);
    let at = Instant::now();
    loop {
        let (status, res) = open_stream(&gw, ACME_KEY).await;
        if status == 200 {
            drop(res);
            break;
        }
        assert!(at.elapsed() < WAIT, "the place was never given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_tenant_created_again_starts_with_no_figures_and_failed_logins_are_counted_apart() {
    const T: &str = "reborn";
    let nodes = Gateway::start_admin_nodes(1).await;
    let gw = &nodes[0];
    let create = || {
        admin(
            gw,
            "POST",
            "/admin/v1/tenants",
            Some(json!({"id": T, "allowedOrigins": [ACME_ORIGIN]})),
        )
    };
    let r = create().await;
    assert_eq!(r.status, 201, "{}", r.body);
    let key = r.body["secrets"]["apiKey"].as_str().unwrap().to_owned();
    // One refusal of its own (no page), and three requests with a wrong key.
    let agent = gw.agent(T, &key);
    let refused = agent
        .post(
            "/users/u1/conversations/c1/calls",
            json!({"tool": "x.y", "input": {}}),
        )
        .await;
    assert_eq!(refused.body["code"], "no_page", "{}", refused.body);
    for _ in 0..3 {
        let a = gw
            .agent(T, "not-a-key")
            .get("/users/u1/conversations/c1")
            .await;
        assert_eq!(a.status, 401);
    }
    let stats = |path: String| async move {
        let at = Instant::now();
        loop {
            let s = admin(gw, "GET", &path, None).await;
            assert_eq!(s.status, 200, "{}", s.body);
            let cluster = &s.body["cluster"];
            if cluster["unauthenticated"] == 3 && cluster["refusals"]["no_page"] == 1 {
                return s.body;
            }
            assert!(at.elapsed() < WAIT, "{}", s.body);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let body = stats(format!("/admin/v1/tenants/{T}/stats")).await;
    assert_eq!(
        body["cluster"]["refusals"].get("unauthorized"),
        None,
        "{body}"
    );
    assert_eq!(body["node"]["unauthenticated"], 3, "{body}");

    // Deleted and created again under its id: none of its predecessor's figures.
    let deleted = admin(gw, "DELETE", &format!("/admin/v1/tenants/{T}"), None).await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    let r = create().await;
    assert_eq!(r.status, 201, "{}", r.body);
    let s = admin(gw, "GET", &format!("/admin/v1/tenants/{T}/stats"), None).await;
    assert_eq!(s.status, 200, "{}", s.body);
    assert_eq!(s.body["cluster"]["refusals"], json!({}), "{}", s.body);
    assert_eq!(s.body["cluster"]["unauthenticated"], 0, "{}", s.body);
    assert_eq!(s.body["node"]["refusals"], json!({}), "{}", s.body);
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_to_readers_that_never_read_holds_a_bounded_window() {
    use std::io::Write as _;
    // The replay is the same code on Redis and on a Cluster: once on the memory broker, once on
    // Redis (where the review took a node from 83 to 2,315 MB).
    if toolmark_testkit::redis::mode() == toolmark_testkit::redis::Mode::Cluster {
        eprintln!("runs in the memory and redis suites");
        return;
    }
    // The gateway as a process of its own, so that its memory is its own.
    let config = std::env::temp_dir().join(format!("toolmark-doors-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&config, config_toml("")).unwrap();
    // `TOOLMARK_GATEWAY_BIN` runs the same attack on another build (an older release).
    let bin = std::env::var("TOOLMARK_GATEWAY_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_toolmark-gateway").to_owned());
    let mut cmd = std::process::Command::new(bin);
    cmd.args(["--config", config.to_str().unwrap()])
        .env_remove("RUST_LOG");
    let (mut child, addr) =
        toolmark_testkit::process::start_listening(toolmark_testkit::process::quiet(cmd));
    let pid = child.id();
    let acme = Agent::new(&format!("http://{addr}"), "acme", ACME_KEY, http_client());
    let mut page = page_at(addr, "acme", "u1", "c1").await;
    page.manifest(1, notes_tools()).await;
    acme.wait_current("u1", "c1", &page.client_id).await;

    // The log filled to its bound (16 MiB) with async results of ~400 KB of small objects,
    // which take several times their size once parsed. A live reader (no replay) hears the
    // last one, so the log is whole before memory is first read.
    let mut live = acme.events("", None).await;
    let data: Vec<Value> = (0..20_000).map(|i| json!({"n": i, "s": "ab"})).collect();
    let data = Value::Array(data);
    let mut results = 0;
    let mut last = String::new();
    while results < 44 {
        let res = acme
            .http
            .post(acme.url("/users/u1/conversations/c1/calls"))
            .bearer_auth(&acme.key)
            .header("prefer", "respond-async")
            .json(&json!({"tool": "notes.list", "input": {}, "timeoutMs": 20000}))
            .send()
            .await
            .unwrap();
        if res.status() == 429 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        assert_eq!(res.status(), 202);
        let frame = page.recv().await;
        last = frame["id"].as_str().unwrap().to_owned();
        page.answer(&last, json!({"status": "ok", "data": data}))
            .await;
        results += 1;
    }
    while live.next_of("call.result").await.data["data"]["id"] != last.as_str() {}
    drop(live);

    let before = rss_kib(pid);
    // Twelve readers that ask for the whole log and never read a byte.
    let readers: Vec<std::net::TcpStream> = (0..12)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            write!(
                s,
                "GET /v1/tenants/acme/events HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {ACME_KEY}\r\nLast-Event-ID: 0-0\r\n\r\n"
            )
            .unwrap();
            s
        })
        .collect();
    // Memory is watched while they stay.
    let watch = Instant::now();
    let mut most = before;
    while watch.elapsed() < Duration::from_secs(4) {
        most = most.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let grown_mib = most.saturating_sub(before) / 1024;
    eprintln!(
        "12 readers that never read a full log: RSS {} → {} MiB (+{grown_mib} MiB)",
        before / 1024,
        most / 1024
    );
    assert!(
        grown_mib < 160,
        "12 readers that never read grew the node by {grown_mib} MiB"
    );
    // A reader that reads is still served the whole retained log meanwhile, to the last result.
    let mut reading = acme.events("", Some("0-0")).await;
    let mut got = 0;
    loop {
        let e = reading
            .next_within(WAIT)
            .await
            .unwrap_or_else(|| panic!("the replay stopped after {got} results"));
        if e.event == "call.result" {
            got += 1;
            if e.data["data"]["id"] == last.as_str() {
                break;
            }
        }
    }
    assert!(got >= 30, "only {got} results retained");
    drop(readers);
    let _ = child.kill();
    let _ = child.wait();
    std::fs::remove_file(config).unwrap();
}
