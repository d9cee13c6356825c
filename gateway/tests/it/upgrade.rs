//! A rolling upgrade as an operator lives it (issue 54, `docs/releases.md`): nodes of the
//! previous release (the binary `TOOLMARK_PREVIOUS_GATEWAY` names; `make upgrade-test` builds
//! it from git) and of this build on one Redis, both ways. Calls, describes, async calls and
//! their events (read by SSE on the other release's node, and delivered as webhooks by both
//! releases' jobs from one consumer group, each once), deferred confirmations and their
//! resolution, an MCP task called on one release's node and polled on the other's, a page
//! moving from an old node to a new one, then every node replaced one at a time under calls,
//! and the rollback.
//!
//! These tests need the previous release's binary: `cargo test` leaves them ignored, and
//! `make upgrade-test` (a step of `make test`) builds it and runs them (`--ignored`), failing
//! if the binary cannot be built.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;
use toolmark_testkit::redis::RedisProc;

use crate::agent::Agent;
use crate::harness::{
    ACME_KEY, config_with, fresh_prefix, http_client, page_at, redis_broker, tool,
};

/// The previous release's binary, or a failure that says how to get it.
fn previous() -> PathBuf {
    let path = std::env::var_os("TOOLMARK_PREVIOUS_GATEWAY").unwrap_or_else(|| {
        panic!("TOOLMARK_PREVIOUS_GATEWAY is not set: run `make upgrade-test`, which builds the previous release from git")
    });
    let path = PathBuf::from(path);
    assert!(path.exists(), "{} does not exist", path.display());
    path
}

fn current() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_toolmark-gateway"))
}

/// One node: a binary of either release, on the shared config.
struct Node {
    child: Child,
    addr: SocketAddr,
    what: &'static str,
}

impl Node {
    fn start(bin: &Path, config: &Path, id: &str, what: &'static str) -> Node {
        let mut cmd = std::process::Command::new(bin);
        cmd.args(["--config", config.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0", "--node-id", id])
            .env("RUST_LOG", "warn");
        let (child, addr) =
            toolmark_testkit::process::start_listening(toolmark_testkit::process::quiet(cmd));
        Node { child, addr, what }
    }

    fn agent(&self) -> Agent {
        Agent::new(
            &format!("http://{}", self.addr),
            "acme",
            ACME_KEY,
            http_client(),
        )
    }

    /// SIGTERM, as a rollout does: the node drains (503 for new requests, pages closed with
    /// a code they reconnect after), then exits.
    fn drain(mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tools() -> serde_json::Value {
    json!([
        tool("todo.add", json!({})),
        tool("signup.submit", json!({}))
    ])
}

fn config(redis: &RedisProc) -> PathBuf {
    config_hooked(redis, None)
}

/// The shared config; with `hook`, acme's events are POSTed there (every node runs the jobs:
/// the nodes of both releases deliver from one consumer group).
fn config_hooked(redis: &RedisProc, hook: Option<&str>) -> PathBuf {
    let path = std::env::temp_dir().join(format!("toolmark-upgrade-{}.toml", uuid::Uuid::new_v4()));
    let tenant = hook.map_or_else(String::new, |hook| {
        format!(
            "webhook_url = \"{hook}\"\nwebhook_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nwebhook_allow_private = true"
        )
    });
    std::fs::write(
        &path,
        config_with(&redis_broker(&redis.url(), &fresh_prefix()), &tenant),
    )
    .unwrap();
    path
}

/// Through `agent_node`, to a page on `page_node` (each of either release): a sync call, a
/// describe, an async call whose `call.result` a reader on the page's node hears once, and a
/// deferred confirmation whose `confirmation.resolved` it hears once.
async fn across(agent_node: &Node, page_node: &Node, user: &str) {
    let what = format!("agent on {}, page on {}", agent_node.what, page_node.what);
    let mut page = page_at(page_node.addr, "acme", user, "c1").await;
    page.manifest(1, tools()).await;
    let agent = agent_node.agent();
    agent.wait_current(user, "c1", &page.client_id).await;
    let mut events = page_node
        .agent()
        .events(&format!("?user={user}"), None)
        .await;

    let pending = agent.call_later(user, "c1", json!({"tool": "todo.add", "input": {}}));
    crate::harness::answer_ok(&mut page, pending, "sync").await;

    let describe = {
        let agent = agent.clone();
        let path = format!("{}/describe", agent.conv(user, "c1"));
        tokio::spawn(async move { agent.post(&path, json!({"tool": "todo.add"})).await })
    };
    let frame = page.recv().await;
    assert_eq!(frame["type"], "describe", "{what}: {frame}");
    let full = json!({"name": "todo.add", "llmName": "todo__add", "description": "d", "hints": {}, "inputSchema": {"type": "object"}});
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "ok", "data": full}),
    )
    .await;
    let a = describe.await.unwrap();
    assert_eq!(
        a.body["outcome"]["data"]["inputSchema"],
        json!({"type": "object"}),
        "{what}: describe {}",
        a.body
    );

    let res = agent
        .http
        .post(agent.url(&format!("{}/calls", agent.conv(user, "c1"))))
        .bearer_auth(&agent.key)
        .header("prefer", "respond-async")
        .json(&json!({"tool": "todo.add", "input": {}, "timeoutMs": 20000}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202, "{what}: async");
    let started: serde_json::Value = res.json().await.unwrap();
    let id = started["id"].as_str().unwrap().to_owned();
    let frame = page.recv().await;
    page.answer(&id, json!({"status": "ok", "data": "later"}))
        .await;
    assert_eq!(frame["id"], id.as_str());
    let ev = events.next_of("call.result").await;
    assert_eq!(ev.data["data"]["id"], id.as_str(), "{what}: {:?}", ev.data);
    let record = agent.get(&format!("/calls/{id}")).await;
    assert_eq!(
        record.body["outcome"]["data"], "later",
        "{what}: {}",
        record.body
    );

    let confirm_id = crate::agent::needs_confirmation_by(&agent, user, &mut page).await;
    let approved = crate::agent::confirmed(&page, &confirm_id);
    page.send(approved).await;
    let resolved = events.next_of("confirmation.resolved").await;
    assert_eq!(
        resolved.data["data"]["confirmId"],
        confirm_id.as_str(),
        "{what}"
    );
    // Announced once.
    while let Some(ev) = events.next_within(Duration::from_millis(500)).await {
        assert_ne!(ev.event, "confirmation.resolved", "{what}: announced twice");
    }
}

/// An rmcp client of acme's hosted MCP endpoint on `node` that declares tasks, at the session
/// revision both releases speak.
async fn task_client(
    node: &Node,
    token: &str,
) -> rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig> {
    use rmcp::ServiceExt as _;
    use rmcp::model::{ClientCapabilities, ClientConfig, ProtocolVersion};
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let url = format!("http://{}/v1/tenants/acme/mcp", node.addr);
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token.to_owned());
    let mut info = ClientConfig::default();
    info.capabilities = ClientCapabilities::builder().enable_tasks().build();
    info.protocol_version = ProtocolVersion::V_2025_11_25;
    info.serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("the MCP client connects")
}

/// A consequential tool called through the hosted MCP endpoint of `caller_node` becomes a task
/// when the page on `page_node` defers its confirmation; polled through `poller_node` (another
/// release's), it ends `completed` with the page's result once the page confirms.
async fn mcp_task_across(caller_node: &Node, poller_node: &Node, page_node: &Node, user: &str) {
    use rmcp::model::{CallToolRequestParams, CallToolResponse, GetTaskParams};
    let what = format!(
        "task called on {}, polled on {}, page on {}",
        caller_node.what, poller_node.what, page_node.what
    );
    let mut page = page_at(page_node.addr, "acme", user, "c1").await;
    page.manifest(
        1,
        json!([tool("todo.delete", json!({"destructive": true}))]),
    )
    .await;
    caller_node
        .agent()
        .wait_current(user, "c1", &page.client_id)
        .await;
    let minted = caller_node
        .agent()
        .post(
            "/tokens",
            json!({"user": user, "conversation": "c1", "scope": "mcp"}),
        )
        .await;
    assert_eq!(minted.status, 201, "{what}: {}", minted.body);
    let token = minted.body["token"].as_str().unwrap().to_owned();
    let caller = task_client(caller_node, &token).await;
    let poller = task_client(poller_node, &token).await;
    let peer = caller.peer().clone();
    let pending = tokio::spawn(async move {
        peer.call_tool_once(CallToolRequestParams::new("todo__delete"))
            .await
            .expect("the call is answered")
    });
    let frame = page.recv().await;
    let id = frame["id"].as_str().unwrap().to_owned();
    page.answer(
        &id,
        json!({"status": "needs_confirmation", "confirmId": format!("cf-{user}"), "summary": "Delete"}),
    )
    .await;
    let task = match pending.await.unwrap() {
        CallToolResponse::Task(t) => serde_json::to_value(t.task).unwrap(),
        other => panic!("{what}: a task, not {other:?}"),
    };
    assert_eq!(task["taskId"], id.as_str(), "{what}: {task}");
    assert_eq!(task["status"], "working", "{what}: {task}");
    page.send(
        json!({"protocol": 1, "type": "confirmed", "clientId": page.client_id,
        "confirmId": format!("cf-{user}"), "result": {"status": "ok", "data": "deleted"}}),
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let ended = loop {
        let t = poller
            .peer()
            .get_task(GetTaskParams::new(&id))
            .await
            .map(|r| serde_json::to_value(r.task).unwrap())
            .unwrap_or_else(|e| panic!("{what}: tasks/get: {e}"));
        if t["status"] != "working" {
            break t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: never ended: {t}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(ended["status"], "completed", "{what}: {ended}");
    caller.cancel().await.unwrap();
    poller.cancel().await.unwrap();
}

/// Nodes of the previous release and of this build serve one deployment, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the previous release's binary: make upgrade-test (in make test)"]
async fn nodes_of_the_previous_release_and_of_this_one_serve_each_others_calls_and_events() {
    let old_bin = previous();
    let redis = RedisProc::start(&[]);
    let (hook, delivered) = crate::harness::webhook_receiver().await;
    let config = config_hooked(&redis, Some(&hook));
    let old = Node::start(&old_bin, &config, "old-1", "the previous release");
    let new = Node::start(&current(), &config, "new-1", "this build");
    across(&new, &old, "u1").await;
    across(&old, &new, "u2").await;

    // The webhook got each async call's result and each resolution once, signed, whichever
    // release's node delivered it.
    let wanted = |d: &[crate::harness::Delivery]| {
        ["call.result", "confirmation.resolved"]
            .map(|kind| d.iter().filter(|h| h.event["type"] == kind).count())
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while wanted(&delivered.lock().unwrap()) != [2, 2] {
        assert!(
            tokio::time::Instant::now() < deadline,
            "webhooks across releases: {:?}",
            delivered.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    {
        let d = delivered.lock().unwrap();
        assert!(d.iter().all(|h| h.signed), "{d:?}");
        let mut ids: Vec<&str> = d.iter().map(|h| h.id.as_str()).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n, "an event delivered twice: {d:?}");
        for user in ["u1", "u2"] {
            assert!(
                d.iter()
                    .any(|h| h.event["type"] == "call.result" && h.event["data"]["user"] == user),
                "{user}: {d:?}"
            );
        }
    }

    mcp_task_across(&old, &new, &new, "u4").await;
    mcp_task_across(&new, &old, &old, "u5").await;

    // A page of the old node reconnects to the new one when the old one drains.
    let mut page = page_at(old.addr, "acme", "u3", "c1").await;
    page.manifest(1, tools()).await;
    new.agent().wait_current("u3", "c1", &page.client_id).await;
    old.drain();
    let code = page.closed().await;
    assert_eq!(
        code, 1001,
        "a draining node closes pages with going away: they reconnect"
    );
    let mut moved = page_at(new.addr, "acme", "u3", "c1").await;
    moved.manifest(2, tools()).await;
    let agent = new.agent();
    agent.wait_current("u3", "c1", &moved.client_id).await;
    let pending = agent.call_later("u3", "c1", json!({"tool": "todo.add", "input": {}}));
    crate::harness::answer_ok(&mut moved, pending, "moved").await;
}

/// Every node replaced one at a time under a steady stream of calls (the upgrade), then back
/// (the rollback): every call is answered by its page, except 503s from a node while it drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the previous release's binary: make upgrade-test (in make test)"]
async fn a_rolling_replacement_and_its_rollback_lose_no_call() {
    let old_bin = previous();
    let new_bin = current();
    let redis = RedisProc::start(&[]);
    let config = config(&redis);
    // Pages live on a node of their own that stays (their node's release is covered above);
    // the agents' nodes are replaced.
    let pages_node = Node::start(&old_bin, &config, "pages", "the previous release");
    let mut agents = vec![
        Node::start(&old_bin, &config, "a-1", "the previous release"),
        Node::start(&old_bin, &config, "a-2", "the previous release"),
    ];
    let mut page = page_at(pages_node.addr, "acme", "u1", "c1").await;
    page.manifest(1, tools()).await;
    agents[0]
        .agent()
        .wait_current("u1", "c1", &page.client_id)
        .await;
    // The page answers every call it gets.
    let answering = tokio::spawn(async move {
        loop {
            let frame = page.recv().await;
            if let Some(id) = frame["id"].as_str() {
                page.answer(id, json!({"status": "ok", "data": "done"}))
                    .await;
            }
        }
    });

    let stop = Arc::new(AtomicBool::new(false));
    let (ok, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let targets: Arc<std::sync::Mutex<Vec<SocketAddr>>> = Arc::new(std::sync::Mutex::new(
        agents.iter().map(|n| n.addr).collect(),
    ));
    let load = {
        let (stop, ok, refused, targets) =
            (stop.clone(), ok.clone(), refused.clone(), targets.clone());
        tokio::spawn(async move {
            let http = http_client();
            let mut i = 0usize;
            let mut wrong = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let addr = {
                    let t = targets.lock().unwrap();
                    t[i % t.len()]
                };
                i += 1;
                let agent = Agent::new(&format!("http://{addr}"), "acme", ACME_KEY, http.clone());
                let a = agent
                    .post(
                        &format!("{}/calls", agent.conv("u1", "c1")),
                        json!({"tool": "todo.add", "input": {}, "timeoutMs": 10000}),
                    )
                    .await;
                match a.status {
                    200 if a.body["outcome"]["data"] == "done" => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    503 | 0 => {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => wrong.push(format!("{} {}", a.status, a.body)),
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            wrong
        })
    };
    let roll = |from: &'static str, bin: PathBuf, agents: &mut Vec<Node>, tag: &str| {
        let mut next = Vec::new();
        for (j, old) in std::mem::take(agents).into_iter().enumerate() {
            let fresh = Node::start(&bin, &config, &format!("{tag}-{j}"), from);
            {
                let mut t = targets.lock().unwrap();
                t.retain(|a| *a != old.addr);
                t.push(fresh.addr);
            }
            old.drain();
            next.push(fresh);
        }
        *agents = next;
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    roll("this build", new_bin, &mut agents, "new");
    let after_upgrade = ok.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    roll("the previous release", old_bin, &mut agents, "back");
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let wrong = load.await.unwrap();
    answering.abort();
    let (ok, refused) = (ok.load(Ordering::Relaxed), refused.load(Ordering::Relaxed));
    eprintln!(
        "rolling replacement and rollback: {ok} calls answered, {refused} refused with 503 by a draining node"
    );
    assert!(
        wrong.is_empty(),
        "calls neither answered nor refused: {wrong:?}"
    );
    assert!(
        after_upgrade > 0 && ok > after_upgrade,
        "calls went on through both rolls"
    );
}

/// A node refuses to start beside a live node of a release it cannot serve with, or one that
/// cannot serve with it (exit 2, naming both releases), and starts beside one it can; a node
/// that announces nothing is a release up to 0.4.0, which this one serves beside.
#[test]
fn a_node_refuses_to_start_beside_a_release_it_cannot_serve_with() {
    if toolmark_testkit::redis::mode() != toolmark_testkit::redis::Mode::Memory {
        return eprintln!("runs once, in the memory suite");
    }
    let redis = RedisProc::start(&[]);
    let prefix = fresh_prefix();
    let path = std::env::temp_dir().join(format!("toolmark-upgrade-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&path, config_with(&redis_broker(&redis.url(), &prefix), "")).unwrap();
    let this = env!("CARGO_PKG_VERSION");
    // A live node: heartbeat now, with `announced` (or none).
    let live = |node: &str, announced: Option<&str>| {
        let now = toolmark_broker::now_ms().to_string();
        redis.cli(&["zadd", &format!("{prefix}:nodes"), &now, node]);
        if let Some(a) = announced {
            redis.cli(&[
                "zadd",
                &format!("{prefix}:nodes:release"),
                &now,
                &format!("{node}\n{a}"),
            ]);
        }
    };
    let start = || {
        std::process::Command::new(current())
            .args(["--config", path.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0", "--node-id", "starting"])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let refused = |why: &str, names: &[&str]| {
        let out = start().wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{why}: {stderr}");
        for n in names {
            assert!(stderr.contains(n), "{why}: names {n}: {stderr}");
        }
    };
    // Beside a newer release that no longer serves beside this one (a rollback too far).
    live("ahead-1", Some("99.0.0 98.0.0"));
    refused("a rollback too far", &["ahead-1", "99.0.0", "98.0.0", this]);
    redis.cli(&[
        "del",
        &format!("{prefix}:nodes"),
        &format!("{prefix}:nodes:release"),
    ]);
    // Beside a release older than the oldest this one serves beside.
    live("behind-1", Some("0.2.0 0.1.0"));
    refused(
        "an upgrade that skips a release",
        &["behind-1", "0.2.0", this],
    );
    redis.cli(&[
        "del",
        &format!("{prefix}:nodes"),
        &format!("{prefix}:nodes:release"),
    ]);
    // Beside the previous release (announcing nothing) and one of its own kind: it starts.
    live("previous-1", None);
    live("same-1", Some(&format!("{this} 0.3.0")));
    let mut child = start();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("listening on"), "it starts: {line:?}");
    // And announces its own release for the next node to read.
    let announced = redis.cli(&["zrange", &format!("{prefix}:nodes:release"), "0", "-1"]);
    assert!(
        announced.contains(&format!("starting\n{this} 0.3.0")),
        "{announced:?}"
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(path);
}
