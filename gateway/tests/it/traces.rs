//! One trace per call across nodes (contract, fourth wave, "One trace per call"): two gateway
//! binaries on one Redis export OTLP to a collector of the test's own, which decodes each
//! export with the OpenTelemetry protocol's definitions (OTLP/HTTP protobuf here; gRPC in
//! `binary.rs`). A call from an agent on one node to a page on the other reads as one trace,
//! parented across the nodes; an error and a refusal mark their spans; a hosted MCP
//! `tools/call` with `_meta.traceparent` follows the MCP conventions; a deferred
//! confirmation's resolution links to its call's trace; a trace sampled out makes no span.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;
use serde_json::{Value, json};
use toolmark_testkit::redis::RedisProc;

use crate::agent::Agent;
use crate::harness::{
    ACME_KEY, config_with, fresh_prefix, http_client, page_at, redis_broker, tool,
};

/// One span as the collector received it.
#[derive(Debug, Clone)]
struct Got {
    /// `service.instance.id` of its resource.
    node: String,
    name: String,
    trace: String,
    id: String,
    parent: String,
    attrs: HashMap<String, String>,
    /// 2: error.
    status: i32,
    links: Vec<(String, String)>,
    /// Start and end, ns since the epoch.
    start: u64,
    end: u64,
}

/// The spans of one trace as a waterfall, as `docs/operations.md` shows one: each span's
/// start and length in ms from the trace's first, its node, indented under its parent.
fn waterfall(spans: &[Got]) -> String {
    let first = spans.iter().map(|s| s.start).min().unwrap_or_default();
    let mut out = String::new();
    fn walk(spans: &[Got], parent: &str, depth: usize, first: u64, out: &mut String) {
        let mut children: Vec<&Got> = spans.iter().filter(|s| s.parent == parent).collect();
        children.sort_by_key(|s| s.start);
        for s in children {
            #[allow(clippy::cast_precision_loss)]
            let (at, took) = (
                (s.start - first) as f64 / 1e6,
                (s.end.saturating_sub(s.start)) as f64 / 1e6,
            );
            let error = s
                .attrs
                .get("error.type")
                .map(|e| format!("  error.type={e}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "{at:>8.3} ms {took:>8.3} ms  {:<11} {}{}{error}\n",
                s.node,
                "  ".repeat(depth),
                s.name
            ));
            walk(spans, &s.id, depth + 1, first, out);
        }
    }
    let roots: Vec<String> = spans
        .iter()
        .filter(|s| !spans.iter().any(|p| p.id == s.parent))
        .map(|s| s.parent.clone())
        .collect();
    let mut done = std::collections::HashSet::new();
    for r in roots {
        if done.insert(r.clone()) {
            walk(spans, &r, 0, first, &mut out);
        }
    }
    out
}

fn text(kv: &[KeyValue]) -> HashMap<String, String> {
    kv.iter()
        .map(|a| {
            let v = match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                Some(AnyValue::DoubleValue(d)) => d.to_string(),
                _ => String::new(),
            };
            (a.key.clone(), v)
        })
        .collect()
}

/// An OTLP/HTTP collector: every protobuf body POSTed to `/v1/traces`, decoded.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Got>>>);

impl Collector {
    async fn serve(&self) -> SocketAddr {
        let sink = self.0.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: Bytes| {
                let sink = sink.clone();
                async move {
                    let req = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                    let mut got = sink.lock().unwrap();
                    for r in req.resource_spans {
                        let resource = text(&r.resource.map(|r| r.attributes).unwrap_or_default());
                        let node = resource
                            .get("service.instance.id")
                            .cloned()
                            .unwrap_or_default();
                        for s in r.scope_spans.into_iter().flat_map(|s| s.spans) {
                            got.push(Got {
                                node: node.clone(),
                                name: s.name,
                                trace: hex::encode(&s.trace_id),
                                id: hex::encode(&s.span_id),
                                parent: hex::encode(&s.parent_span_id),
                                attrs: text(&s.attributes),
                                status: s.status.map_or(0, |st| st.code),
                                links: s
                                    .links
                                    .iter()
                                    .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
                                    .collect(),
                                start: s.start_time_unix_nano,
                                end: s.end_time_unix_nano,
                            });
                        }
                    }
                    ""
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    }

    fn of_trace(&self, trace: &str) -> Vec<Got> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|g| g.trace == trace)
            .cloned()
            .collect()
    }

    fn all(&self) -> Vec<Got> {
        self.0.lock().unwrap().clone()
    }

    /// The spans of `trace` once `done` holds of them; fails after 15 s saying what came.
    async fn wait(&self, trace: &str, what: &str, done: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let spans = self.of_trace(trace);
            if done(&spans) {
                return spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: the spans of trace {trace} that came: {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn named<'a>(spans: &'a [Got], name: &str) -> Option<&'a Got> {
    spans.iter().find(|g| g.name == name)
}

struct Node {
    child: Child,
    addr: SocketAddr,
}

impl Node {
    fn start(config: &std::path::Path, id: &str, endpoint: &str) -> Node {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_toolmark-gateway"));
        cmd.args(["--config", config.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0", "--node-id", id])
            .env_remove("RUST_LOG")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("OTEL_BSP_SCHEDULE_DELAY", "100");
        let (child, addr) =
            toolmark_testkit::process::start_listening(toolmark_testkit::process::quiet(cmd));
        Node { child, addr }
    }

    fn agent(&self) -> Agent {
        Agent::new(
            &format!("http://{}", self.addr),
            "acme",
            ACME_KEY,
            http_client(),
        )
    }

    /// A call's request as an agent sends it, in the trace `traceparent` names.
    fn traced_call(
        &self,
        conversation: &str,
        body: Value,
        traceparent: String,
    ) -> tokio::task::JoinHandle<(u16, Value)> {
        let url = format!(
            "http://{}/v1/tenants/acme/users/u1/conversations/{conversation}/calls",
            self.addr
        );
        tokio::spawn(async move {
            let res = http_client()
                .post(url)
                .bearer_auth(ACME_KEY)
                .header("traceparent", traceparent)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = res.status().as_u16();
            (status, res.json().await.unwrap_or(Value::Null))
        })
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh trace id and the `traceparent` of an agent's span in it (`sampled` or not).
fn trace(sampled: bool) -> (String, String) {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let flags = if sampled { "01" } else { "00" };
    (id.clone(), format!("00-{id}-00f067aa0ba902b7-{flags}"))
}

fn config(redis: &RedisProc) -> PathBuf {
    let path = std::env::temp_dir().join(format!("toolmark-traces-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(
        &path,
        config_with(&redis_broker(&redis.url(), &fresh_prefix()), ""),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_across_two_nodes_reads_as_one_trace_and_failures_mark_their_spans() {
    let collector = Collector::default();
    let endpoint = format!("http://{}", collector.serve().await);
    let redis = RedisProc::start(&[]);
    let config = config(&redis);
    let agent_node = Node::start(&config, "agent-node", &endpoint);
    let page_node = Node::start(&config, "page-node", &endpoint);
    let mut page = page_at(page_node.addr, "acme", "u1", "c1").await;
    page.manifest(
        1,
        json!([
            tool("todo.add", json!({})),
            tool("signup.submit", json!({}))
        ]),
    )
    .await;
    agent_node
        .agent()
        .wait_current("u1", "c1", &page.client_id)
        .await;

    // An answered call: one trace, the agent's node's spans and the page's node's, parented.
    let (ok_trace, tp) = trace(true);
    let pending = agent_node.traced_call("c1", json!({"tool": "todo.add", "input": {}}), tp);
    let frame = page.recv().await;
    page.answer(frame["id"].as_str().unwrap(), json!({"status": "ok"}))
        .await;
    assert_eq!(pending.await.unwrap().0, 200);
    let spans = collector
        .wait(&ok_trace, "an answered call", |s| {
            [
                "execute_tool todo.add",
                "send_frame todo.add",
                "page todo.add",
                "receive_answer todo.add",
            ]
            .iter()
            .all(|n| named(s, n).is_some())
        })
        .await;
    let call = named(&spans, "execute_tool todo.add").unwrap();
    assert_eq!(call.node, "agent-node");
    assert_eq!(call.attrs["gen_ai.tool.name"], "todo.add");
    assert_eq!(call.attrs["gen_ai.operation.name"], "execute_tool");
    assert_eq!(call.attrs["toolmark.tenant"], "acme");
    assert!(!call.attrs.contains_key("error.type"), "{call:?}");
    assert_ne!(call.status, 2);
    // The call's span is the agent's request span's child, which continues the agent's span.
    let request = spans
        .iter()
        .find(|g| g.id == call.parent)
        .expect("the request span");
    assert_eq!(request.parent, "00f067aa0ba902b7");
    assert_eq!(request.node, "agent-node");
    for name in [
        "send_frame todo.add",
        "page todo.add",
        "receive_answer todo.add",
    ] {
        let s = named(&spans, name).unwrap();
        assert_eq!(s.node, "page-node", "{name}");
        assert_eq!(s.parent, call.id, "{name} is the call span's child");
        assert_eq!(s.attrs["toolmark.call.id"], frame["id"].as_str().unwrap());
    }
    for s in &spans {
        assert_eq!(
            s.attrs.get("service.instance.id"),
            Some(&s.node),
            "every span names its node: {s:?}"
        );
    }
    // The waterfall `docs/operations.md` shows (`--nocapture` prints it).
    eprintln!("trace {ok_trace}:\n{}", waterfall(&spans));

    // A page that answers `error`: the call's span and the page's say so.
    let (error_trace, tp) = trace(true);
    let pending = agent_node.traced_call("c1", json!({"tool": "todo.add", "input": {}}), tp);
    let frame = page.recv().await;
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "error", "message": "Tool failed"}),
    )
    .await;
    assert_eq!(pending.await.unwrap().0, 200);
    let spans = collector
        .wait(&error_trace, "a failed call", |s| {
            named(s, "execute_tool todo.add").is_some() && named(s, "page todo.add").is_some()
        })
        .await;
    for name in ["execute_tool todo.add", "page todo.add"] {
        let s = named(&spans, name).unwrap();
        assert_eq!(
            s.attrs.get("error.type").map(String::as_str),
            Some("error"),
            "{s:?}"
        );
        assert_eq!(s.status, 2, "{name}: error status");
    }

    // A refused call (no page in the conversation): the request's span and the call's.
    let (refused_trace, tp) = trace(true);
    let (status, body) = agent_node
        .traced_call("nobody", json!({"tool": "todo.add", "input": {}}), tp)
        .await
        .unwrap();
    let code = body["code"].as_str().unwrap().to_owned();
    assert!(status >= 400, "{status} {body}");
    let spans = collector
        .wait(&refused_trace, "a refused call", |s| {
            named(s, "execute_tool todo.add").is_some()
                && s.iter()
                    .any(|g| g.parent == "00f067aa0ba902b7" && g.status == 2)
        })
        .await;
    let call = named(&spans, "execute_tool todo.add").unwrap();
    assert_eq!(call.attrs.get("error.type"), Some(&code), "{call:?}");
    assert_eq!(call.status, 2);

    // A deferred confirmation: its resolution on the page's node links to the call's trace.
    let (confirm_trace, tp) = trace(true);
    let pending = agent_node.traced_call("c1", json!({"tool": "signup.submit", "input": {}}), tp);
    let frame = page.recv().await;
    let confirm_id = uuid::Uuid::new_v4().to_string();
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "needs_confirmation", "confirmId": confirm_id, "summary": "Sign up?"}),
    )
    .await;
    assert_eq!(pending.await.unwrap().0, 200);
    page.send(json!({"protocol": 1, "type": "confirmed", "clientId": page.client_id, "confirmId": confirm_id, "result": {"status": "ok"}}))
        .await;
    let call = collector
        .wait(&confirm_trace, "a deferred confirmation's call", |s| {
            named(s, "execute_tool signup.submit").is_some()
        })
        .await;
    let call = named(&call, "execute_tool signup.submit").unwrap().clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let resolved = loop {
        if let Some(r) = collector
            .all()
            .into_iter()
            .find(|g| g.name == "resolve_confirmation signup.submit")
        {
            break r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no resolve_confirmation span"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(resolved.node, "page-node");
    assert_eq!(
        resolved.links,
        vec![(confirm_trace.clone(), call.id.clone())]
    );

    // A trace sampled out makes no span on either node: a sampled trace sent after it arrives
    // whole while none of it does.
    let (unsampled, tp) = trace(false);
    let pending = agent_node.traced_call("c1", json!({"tool": "todo.add", "input": {}}), tp);
    let frame = page.recv().await;
    page.answer(frame["id"].as_str().unwrap(), json!({"status": "ok"}))
        .await;
    assert_eq!(pending.await.unwrap().0, 200);
    let (after, tp) = trace(true);
    let pending = agent_node.traced_call("c1", json!({"tool": "todo.add", "input": {}}), tp);
    let frame = page.recv().await;
    page.answer(frame["id"].as_str().unwrap(), json!({"status": "ok"}))
        .await;
    assert_eq!(pending.await.unwrap().0, 200);
    collector
        .wait(&after, "the sampled trace after the unsampled one", |s| {
            named(s, "receive_answer todo.add").is_some()
                && named(s, "execute_tool todo.add").is_some()
        })
        .await;
    assert!(
        collector.of_trace(&unsampled).is_empty(),
        "{:?}",
        collector.of_trace(&unsampled)
    );
    drop((agent_node, page_node));
    let _ = std::fs::remove_file(config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_tool_call_continues_its_meta_traceparent_under_the_mcp_conventions() {
    let collector = Collector::default();
    let endpoint = format!("http://{}", collector.serve().await);
    let redis = RedisProc::start(&[]);
    let config = config(&redis);
    let node = Node::start(&config, "mcp-node", &endpoint);
    let mut page = page_at(node.addr, "acme", "u1", "c1").await;
    page.manifest(1, json!([tool("todo.add", json!({}))])).await;
    let agent = node.agent();
    agent.wait_current("u1", "c1", &page.client_id).await;
    let minted = agent
        .post(
            "/tokens",
            json!({"user": "u1", "conversation": "c1", "scope": "mcp"}),
        )
        .await;
    assert_eq!(minted.status, 201, "{}", minted.body);
    let token = minted.body["token"].as_str().unwrap().to_owned();
    let endpoint = format!("http://{}/v1/tenants/acme/mcp", node.addr);
    let (trace_id, tp) = trace(true);
    let call = {
        let (endpoint, token) = (endpoint.clone(), token.clone());
        tokio::spawn(async move {
            http_client()
                .post(endpoint)
                .bearer_auth(token)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/call")
                .header("mcp-name", "todo__add")
                .json(
                    &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                        "name": "todo__add", "arguments": {},
                        "_meta": {
                            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                            "io.modelcontextprotocol/clientCapabilities": {},
                            "traceparent": tp,
                        }
                    }}),
                )
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        })
    };
    let frame = page.recv().await;
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "refused", "code": "busy", "message": "Not now"}),
    )
    .await;
    let answer = call.await.unwrap();
    assert!(answer.contains("\"isError\":true"), "{answer}");
    let spans = collector
        .wait(&trace_id, "an MCP tool call", |s| {
            named(s, "tools/call todo__add").is_some() && named(s, "page todo.add").is_some()
        })
        .await;
    let mcp = named(&spans, "tools/call todo__add").unwrap();
    assert_eq!(
        mcp.parent, "00f067aa0ba902b7",
        "continues _meta.traceparent"
    );
    assert_eq!(mcp.attrs["mcp.method.name"], "tools/call");
    assert_eq!(mcp.attrs["gen_ai.tool.name"], "todo__add");
    assert_eq!(mcp.attrs["gen_ai.operation.name"], "execute_tool");
    assert_eq!(mcp.attrs["service.instance.id"], "mcp-node");
    // A refusal by the page is a JSON-RPC success with isError: the span says it failed.
    assert_eq!(
        mcp.attrs.get("error.type").map(String::as_str),
        Some("refused")
    );
    assert_eq!(mcp.status, 2);
    // The MCP duration metric, by method only.
    let metrics = http_client()
        .get(format!("http://{}/metrics", node.addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("toolmark_mcp_operation_duration_seconds_count{method=\"tools/call\"} 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("mcp_operation"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    drop(node);
    let _ = std::fs::remove_file(config);
}

/// Work done for a call after its request ended reads from the call's trace: the webhook of an
/// async call's `call.result` is a span of its own trace linked to the call's span, whose
/// context the receiver gets as `traceparent`; a call whose agent's node died is timed out by
/// another node's sweep in a `timeout {tool}` span linked to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_calls_webhook_and_a_swept_timeout_link_to_the_calls_trace() {
    let (hook, hits) = crate::harness::webhook_receiver().await;

    let collector = Collector::default();
    let endpoint = format!("http://{}", collector.serve().await);
    let redis = RedisProc::start(&[]);
    let path = std::env::temp_dir().join(format!("toolmark-traces-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(
        &path,
        config_with(
            &redis_broker(&redis.url(), &fresh_prefix()),
            &format!(
                "webhook_url = \"{hook}\"\nwebhook_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nwebhook_allow_private = true"
            ),
        ),
    )
    .unwrap();
    let agent_node = Node::start(&path, "agent-node", &endpoint);
    let page_node = Node::start(&path, "page-node", &endpoint);
    let mut page = page_at(page_node.addr, "acme", "u1", "c1").await;
    page.manifest(1, json!([tool("todo.add", json!({}))])).await;
    agent_node
        .agent()
        .wait_current("u1", "c1", &page.client_id)
        .await;

    // An async call, answered: its call.result's webhook links to the call's trace.
    let (async_trace, tp) = trace(true);
    let res = http_client()
        .post(format!(
            "http://{}/v1/tenants/acme/users/u1/conversations/c1/calls",
            agent_node.addr
        ))
        .bearer_auth(ACME_KEY)
        .header("traceparent", tp)
        .header("prefer", "respond-async")
        .json(&json!({"tool": "todo.add", "input": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let frame = page.recv().await;
    page.answer(frame["id"].as_str().unwrap(), json!({"status": "ok"}))
        .await;
    let call = collector
        .wait(&async_trace, "the async call's span", |s| {
            named(s, "execute_tool todo.add").is_some()
        })
        .await;
    let call = named(&call, "execute_tool todo.add").unwrap().clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let (webhook, header) = loop {
        let header = hits
            .lock()
            .unwrap()
            .iter()
            .find(|h| h.event["type"] == "call.result")
            .map(|h| h.traceparent.clone());
        let span = collector
            .all()
            .into_iter()
            .find(|g| g.name == "webhook call.result");
        if let (Some(span), Some(header)) = (span, header) {
            break (span, header);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no linked webhook span and delivery; deliveries {:?}",
            hits.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(webhook.trace, async_trace, "a trace of its own");
    assert_eq!(webhook.links, vec![(async_trace.clone(), call.id.clone())]);
    assert_eq!(
        webhook.attrs["toolmark.call.id"],
        frame["id"].as_str().unwrap()
    );
    assert_eq!(webhook.attrs["toolmark.tenant"], "acme");
    assert_ne!(webhook.status, 2);
    assert_eq!(
        header,
        format!("00-{}-{}-01", webhook.trace, webhook.id),
        "the receiver continues the delivery's span"
    );

    // A call whose agent's node dies: the page's node sweeps it past its deadline.
    let (swept_trace, tp) = trace(true);
    let pending = agent_node.traced_call(
        "c1",
        json!({"tool": "todo.add", "input": {}, "timeoutMs": 1000}),
        tp,
    );
    let frame = page.recv().await;
    let call = collector
        .wait(&swept_trace, "the swept call's frame span", |s| {
            named(s, "send_frame todo.add").is_some()
        })
        .await;
    let call_span = named(&call, "send_frame todo.add").unwrap().parent.clone();
    drop(agent_node);
    let _ = pending.await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let timeout = loop {
        if let Some(s) = collector
            .all()
            .into_iter()
            .find(|g| g.name == "timeout todo.add")
        {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no sweep span for the orphaned call"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(timeout.node, "page-node");
    assert_eq!(timeout.links, vec![(swept_trace, call_span)]);
    assert_eq!(
        timeout.attrs["toolmark.call.id"],
        frame["id"].as_str().unwrap()
    );
    assert_eq!(timeout.attrs["error.type"], "timeout");
    assert_eq!(timeout.status, 2);
    drop(page_node);
    let _ = std::fs::remove_file(path);
}
