//! The `toolmark-gateway` binary as an operator runs it: flags, exit codes, the listening line,
//! SIGTERM, and OTLP trace export (HTTP and gRPC) with the caller's trace context.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

use crate::harness::config_toml;

const BIN: &str = env!("CARGO_BIN_EXE_toolmark-gateway");

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout),
    )
}

fn temp_config(text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("toolmark-test-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn flags_and_config_errors_exit_with_the_documented_codes() {
    let (code, out) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--config"), "{out}");
    // The release as semver, then the commit it was built from.
    let (code, out) = run(&["--version"]);
    assert_eq!(code, 0);
    assert_eq!(
        out.lines().next(),
        Some(
            format!(
                "toolmark-gateway {} ({})",
                env!("CARGO_PKG_VERSION"),
                toolmark_process::REVISION
            )
            .as_str()
        ),
        "{out}"
    );
    let semver = env!("CARGO_PKG_VERSION").split('.').collect::<Vec<_>>();
    assert!(
        semver.len() == 3 && semver.iter().all(|n| n.parse::<u64>().is_ok()),
        "{out}"
    );
    let (code, out) = run(&["--nope"]);
    assert_eq!(code, 2);
    assert_eq!(out.trim().lines().count(), 1, "{out}");
    assert!(out.contains("--nope"), "{out}");
    let bad = temp_config(&config_toml("[tenants.limits]\ncalls_per_second = 0"));
    let (code, out) = run(&["--config", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert_eq!(
        out.trim(),
        "toolmark-gateway: config: tenants[3].limits.calls_per_second: must be greater than 0"
    );
    let (code, out) = run(&["--config", bad.to_str().unwrap(), "--check-config"]);
    assert_eq!(code, 2, "{out}");
    std::fs::remove_file(bad).unwrap();
    let good = temp_config(&config_toml(""));
    assert_eq!(
        run(&["--config", good.to_str().unwrap(), "--check-config"]).0,
        0
    );
    std::fs::remove_file(good).unwrap();
    let (code, out) = run(&["--listen", "0.0.0.0:0"]);
    assert_eq!(code, 2);
    assert!(out.contains("server.listen"), "{out}");
    let (code, out) = run(&["--config", "/nonexistent/toolmark.toml"]);
    assert_eq!(code, 2, "{out}");
}

/// Starts the binary and returns it with its bound address (read from the listening line).
fn start(args: &[&str], envs: &[(&str, &str)]) -> (Child, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args).envs(envs.iter().copied());
    let (child, addr) =
        toolmark_testkit::process::start_listening(toolmark_testkit::process::quiet(cmd));
    (child, addr.to_string())
}

/// Starts the binary on a test config with `envs` (and no inherited `RUST_LOG`), its stderr
/// piped: the config's path (to remove), the child, its address and its stderr.
fn start_logging(
    envs: &[(&str, &str)],
) -> (
    std::path::PathBuf,
    Child,
    std::net::SocketAddr,
    std::process::ChildStderr,
) {
    let config = temp_config(&config_toml(""));
    let mut cmd = Command::new(BIN);
    cmd.args([
        "--config",
        config.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ])
    .env_remove("RUST_LOG")
    .envs(envs.iter().copied())
    .stderr(Stdio::piped());
    let (mut child, addr) = toolmark_testkit::process::start_listening(cmd);
    let stderr = child.stderr.take().unwrap();
    (config, child, addr, stderr)
}

/// A gateway's JSON log lines, read as they come on a thread of their own.
struct JsonLines(tokio::sync::mpsc::UnboundedReceiver<serde_json::Value>);

impl JsonLines {
    fn read(stderr: std::process::ChildStderr) -> JsonLines {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        JsonLines(rx)
    }

    /// The next line that `matches`; panics with `what` after [`crate::harness::WAIT`].
    async fn next_where(
        &mut self,
        what: &str,
        matches: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        tokio::time::timeout(crate::harness::WAIT, async {
            loop {
                let v = self.0.recv().await.expect("the gateway logs");
                if matches(&v) {
                    return v;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{what}"))
    }
}

fn sigterm(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

/// Waits (without blocking the test's runtime, which may serve a collector) for the exit code.
async fn wait_exit(child: &mut Child) -> i32 {
    for _ in 0..200 {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    panic!("the gateway did not exit after SIGTERM");
}

#[tokio::test]
async fn dev_mode_serves_the_demo_and_sigterm_exits_zero() {
    let (mut child, addr) = start(&["--listen", "127.0.0.1:0"], &[]);
    let http = crate::harness::http_client();
    assert_eq!(
        http.get(format!("http://{addr}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let demo = http
        .get(format!("http://{addr}/demo"))
        .send()
        .await
        .unwrap();
    assert_eq!(demo.status(), 200);
    assert!(demo.text().await.unwrap().contains("/demo/assets/"));
    let session: serde_json::Value = http
        .get(format!("http://{addr}/demo/session"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(session["tenant"], "dev");
    // The dev API key is for the demo's own pages only: a rebound name (the attacker's own
    // Host), a cross-site fetch (Origin, Sec-Fetch-Site) get a 403 and no key.
    let url = format!("http://{addr}/demo/session");
    let port = addr.rsplit_once(':').map(|(_, p)| p.to_owned()).unwrap();
    let refused = [
        vec![("host", "attacker.example".to_owned())],
        vec![("host", format!("attacker.example:{port}"))],
        vec![("host", format!("10.0.0.1:{port}"))],
        vec![("origin", "https://attacker.example".to_owned())],
        vec![("sec-fetch-site", "cross-site".to_owned())],
        vec![("sec-fetch-site", "same-site".to_owned())],
    ];
    for headers in refused {
        let mut req = http.get(&url);
        for (k, v) in &headers {
            req = req.header(*k, v);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 403, "{headers:?}");
        let body = r.text().await.unwrap();
        assert!(
            body.contains("\"forbidden\"") && !body.contains("tmk_dev_"),
            "{body}"
        );
    }
    // The demo's own fetches: same origin, by either loopback name.
    for (host, origin) in [
        (addr.to_string(), format!("http://{addr}")),
        (
            format!("localhost:{port}"),
            format!("http://localhost:{port}"),
        ),
    ] {
        let r = http
            .get(&url)
            .header("host", &host)
            .header("origin", &origin)
            .header("sec-fetch-site", "same-origin")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{host}");
    }
    sigterm(&child);
    assert_eq!(wait_exit(&mut child).await, 0);
}

/// Starts the binary with the OTLP settings `otel` (and a batch due after 100 ms), sends one
/// agent request carrying `trace_id` in its `traceparent`, and waits up to 10 s, while the node
/// still runs, for `arrived(trace_id as bytes)`; then stops the node (exit 0). Whether the
/// span arrived.
async fn one_traced_request(
    otel: &[(&str, &str)],
    trace_id: &str,
    arrived: impl Fn(&[u8]) -> bool,
) -> bool {
    let config = temp_config(&config_toml(""));
    let mut envs = otel.to_vec();
    envs.push(("OTEL_BSP_SCHEDULE_DELAY", "100"));
    let (mut child, addr) = start(
        &[
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        &envs,
    );
    let res = crate::harness::http_client()
        .get(format!(
            "http://{addr}/v1/tenants/acme/users/u1/conversations/c1"
        ))
        .bearer_auth(crate::harness::ACME_KEY)
        .header("traceparent", format!("00-{trace_id}-00f067aa0ba902b7-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let raw_id = hex::decode(trace_id).unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        while !arrived(&raw_id) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .is_ok();
    sigterm(&child);
    assert_eq!(wait_exit(&mut child).await, 0);
    std::fs::remove_file(config).unwrap();
    seen
}

#[tokio::test]
async fn spans_are_exported_over_otlp_with_the_callers_trace_id() {
    // A minimal OTLP/HTTP collector: records every body POSTed to /v1/traces.
    let bodies: Arc<Mutex<Vec<Bytes>>> = Arc::default();
    let sink = bodies.clone();
    let collector = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push(body);
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector_addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, collector).await });

    let endpoint = format!("http://{collector_addr}");
    let arrived = |id: &[u8]| {
        bodies
            .lock()
            .unwrap()
            .iter()
            .any(|b| b.windows(id.len()).any(|w| w == id))
    };
    assert!(
        one_traced_request(
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
            "4bf92f3577b34da6a3ce929d0e0e4736",
            arrived,
        )
        .await,
        "no exported span carries the caller's trace id"
    );
}

/// A real OTLP/gRPC collector: the `TraceService` of the OpenTelemetry protocol's own
/// definitions, served by tonic over HTTP/2; records each request's trace ids.
#[derive(Clone, Default)]
struct GrpcCollector(Arc<Mutex<Vec<Vec<u8>>>>);

#[tonic::async_trait]
impl TraceService for GrpcCollector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let ids = request
            .into_inner()
            .resource_spans
            .into_iter()
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans)
            .map(|span| span.trace_id);
        self.0.lock().unwrap().extend(ids);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl GrpcCollector {
    /// Serves on an ephemeral port, with TLS when given an identity; the port.
    async fn serve(&self, tls: Option<tonic::transport::Identity>) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut builder = tonic::transport::Server::builder();
        if let Some(identity) = tls {
            builder = builder
                .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
                .unwrap();
        }
        let server = builder
            .add_service(TraceServiceServer::new(self.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
        tokio::spawn(server);
        port
    }

    fn holds(&self, trace_id: &[u8]) -> bool {
        self.0.lock().unwrap().iter().any(|id| id == trace_id)
    }
}

#[tokio::test]
async fn spans_are_exported_over_otlp_grpc_when_the_protocol_says_grpc() {
    let collector = GrpcCollector::default();
    let port = collector.serve(None).await;
    let endpoint = format!("http://127.0.0.1:{port}");
    assert!(
        one_traced_request(
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
            "0af7651916cd43dd8448eb211c80319c",
            |id| collector.holds(id),
        )
        .await,
        "no span with the caller's trace id reached the gRPC collector"
    );
}

#[tokio::test]
async fn spans_reach_a_grpc_collector_over_tls_verified_against_the_system_roots() {
    // The collector serves TLS with the test certificate for `localhost`; the gateway trusts
    // it only through SSL_CERT_FILE, the system roots' override.
    let keys = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/keys");
    let identity = tonic::transport::Identity::from_pem(
        std::fs::read(format!("{keys}/tls.crt")).unwrap(),
        std::fs::read(format!("{keys}/tls.key")).unwrap(),
    );
    let collector = GrpcCollector::default();
    let port = collector.serve(Some(identity)).await;
    let endpoint = format!("https://localhost:{port}");
    let ca = format!("{keys}/ca.crt");
    assert!(
        one_traced_request(
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("SSL_CERT_FILE", &ca),
            ],
            "5b8efff798038103d269b633813fc60c",
            |id| collector.holds(id),
        )
        .await,
        "no span with the caller's trace id reached the collector over TLS"
    );
}

#[test]
fn an_otlp_protocol_the_gateway_does_not_speak_is_a_config_error_naming_the_variable() {
    let good = temp_config(&config_toml(""));
    for bad in ["http/json", "grpcs", "HTTP"] {
        let out = Command::new(BIN)
            .args(["--config", good.to_str().unwrap(), "--check-config"])
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", bad)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(
            err.trim()
                .starts_with("toolmark-gateway: OTEL_EXPORTER_OTLP_PROTOCOL: "),
            "{bad}: {err}"
        );
    }
    for fine in ["grpc", "http/protobuf"] {
        let out = Command::new(BIN)
            .args(["--config", good.to_str().unwrap(), "--check-config"])
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", fine)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{fine}");
    }
    std::fs::remove_file(good).unwrap();
}

#[tokio::test]
async fn each_page_logs_under_its_own_span_and_no_other() {
    let (config, mut child, addr, stderr) =
        start_logging(&[("RUST_LOG", "toolmark_gateway=debug")]);
    let log = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    // Pages open side by side, each speaking, so that their tasks interleave on the runtime's
    // threads; then the drain makes every page log its end.
    let mut pages = Vec::new();
    for i in 0..12 {
        let mut page = crate::harness::page_at(addr, "acme", &format!("u{i}"), "c1").await;
        page.manifest(1, serde_json::json!([])).await;
        pages.push(page);
    }
    // A page is admitted after its upgrade: one still being admitted when the drain begins is
    // refused with 1001 and never logs its end. Drain once all twelve are in.
    crate::harness::wait_metric_at(
        &crate::harness::http_client(),
        addr,
        "toolmark_page_connections{transport=\"websocket\"}",
        12.0,
    )
    .await;
    sigterm(&child);
    // The pages read their 1001 and do not answer it: the node's release and log lines must
    // not wait for them.
    for page in &mut pages {
        assert_eq!(page.closed().await, 1001);
    }
    assert_eq!(wait_exit(&mut child).await, 0);
    std::fs::remove_file(config).unwrap();
    let lines = log.join().unwrap();
    let ended: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("page socket ended"))
        .collect();
    assert_eq!(ended.len(), 12, "{lines:#?}");
    for l in ended {
        assert_eq!(
            l.matches("page{").count(),
            1,
            "a line names other pages: {l}"
        );
    }
}

#[tokio::test]
async fn a_rejected_result_is_logged_at_the_default_level_naming_its_page() {
    // The default level: RUST_LOG unset. A page's frames are handled in no span there, so the
    // line itself must say whose result it was.
    let (config, mut child, addr, stderr) = start_logging(&[("TOOLMARK_LOG_FORMAT", "json")]);
    let mut lines = JsonLines::read(stderr);
    let mut page = crate::harness::page_at(addr, "acme", "u-log", "c-log").await;
    page.manifest(1, serde_json::json!([])).await;
    let id = uuid::Uuid::new_v4().to_string();
    page.answer(&id, serde_json::json!({"status": "ok"})).await;
    let line = lines
        .next_where("a result rejected line at the default level", |v| {
            v["fields"]["message"] == "result rejected"
        })
        .await;
    assert_eq!(line["level"], "INFO", "{line}");
    let fields = &line["fields"];
    assert_eq!(fields["tenant"], "acme", "{line}");
    assert_eq!(fields["user"], "u-log", "{line}");
    assert_eq!(fields["conversation"], "c-log", "{line}");
    assert_eq!(fields["call_id"], id.as_str(), "{line}");
    assert_eq!(fields["reason"], "unknown_id", "{line}");
    drop(page);
    sigterm(&child);
    assert_eq!(wait_exit(&mut child).await, 0);
    std::fs::remove_file(config).unwrap();
}

#[tokio::test]
async fn a_stateless_mcp_request_logs_its_access_line_and_no_line_of_the_mcp_library() {
    // The default level: RUST_LOG unset. rmcp logs every stateless request it serves (the
    // service's start, with the client's capabilities, and its end) at info: held at warn.
    let library = mcp_library_lines(&[("TOOLMARK_LOG_FORMAT", "json")]).await;
    assert!(
        library.is_empty(),
        "rmcp lines at the default level: {library:?}"
    );
    // Named in RUST_LOG, they are back.
    let env = [
        ("TOOLMARK_LOG_FORMAT", "json"),
        ("RUST_LOG", "info,rmcp=info"),
    ];
    let library = mcp_library_lines(&env).await;
    assert!(!library.is_empty(), "RUST_LOG named rmcp=info");
}

/// The lines of rmcp that a gateway started with `envs` logs while it answers one stateless
/// MCP request, up to that request's access line and the access line of a later request.
async fn mcp_library_lines(envs: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let (config, mut child, addr, stderr) = start_logging(envs);
    let mut lines = JsonLines::read(stderr);
    let http = crate::harness::http_client();
    let acme = crate::harness::Agent::new(
        &format!("http://{addr}"),
        "acme",
        crate::harness::ACME_KEY,
        http.clone(),
    );
    let minted = acme
        .post(
            "/tokens",
            serde_json::json!({"user": "u1", "conversation": "c1", "scope": "mcp"}),
        )
        .await;
    assert_eq!(minted.status, 201, "{}", minted.body);
    let token = minted.body["token"]
        .as_str()
        .expect("an MCP token")
        .to_owned();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let r = http
        .post(format!("http://{addr}/v1/tenants/acme/mcp"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let answer = r.text().await.unwrap();
    assert!(
        answer.contains(r#""tools":[]"#),
        "no page is open: {answer}"
    );
    let mut seen = Vec::new();
    for (route, then) in [("/v1/tenants/{tenant}/mcp", true), ("/healthz", false)] {
        loop {
            let v = lines
                .next_where("the request's access line", |_| true)
                .await;
            let done = v["target"] == "toolmark_gateway::access" && v["fields"]["route"] == route;
            seen.push(v);
            if done {
                break;
            }
        }
        if then {
            let r = http
                .get(format!("http://{addr}/healthz"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
    }
    sigterm(&child);
    assert_eq!(wait_exit(&mut child).await, 0);
    std::fs::remove_file(config).unwrap();
    seen.retain(|v| v["target"].as_str().is_some_and(|t| t.starts_with("rmcp")));
    seen
}

#[tokio::test]
async fn every_request_has_an_access_log_line_at_info_with_route_status_duration_and_tenant() {
    // The default level: RUST_LOG unset.
    let (config, mut child, addr, stderr) = start_logging(&[("TOOLMARK_LOG_FORMAT", "json")]);
    let mut lines = JsonLines::read(stderr);
    let http = crate::harness::http_client();
    let id = uuid::Uuid::new_v4();
    let r = http
        .get(format!("http://{addr}/v1/tenants/acme/calls/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let line = lines
        .next_where("an access line at the default level", |v| {
            v["target"] == "toolmark_gateway::access"
        })
        .await;
    assert_eq!(line["level"], "INFO", "{line}");
    let fields = &line["fields"];
    assert_eq!(fields["route"], "/v1/tenants/{tenant}/calls/{id}", "{line}");
    assert_eq!(fields["method"], "GET", "{line}");
    assert_eq!(fields["status"], 401, "{line}");
    assert_eq!(fields["tenant"], "acme", "{line}");
    assert!(
        fields["duration_ms"].as_f64().is_some_and(|d| d >= 0.0),
        "{line}"
    );
    // The route is the template: the call id is not in the line's fields (the request span
    // carries the path).
    assert!(!fields.to_string().contains(&id.to_string()), "{line}");
    assert_eq!(
        fields["credential"], "",
        "no credential was accepted: {line}"
    );
    // With acme's key: the line names the key by its id (a config key's: the first 12 hex
    // digits of its hash), never by its secret.
    let r = http
        .get(format!("http://{addr}/v1/tenants/acme/calls/{id}"))
        .bearer_auth(crate::harness::ACME_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let line = lines
        .next_where("the access line of the keyed request", |v| {
            v["target"] == "toolmark_gateway::access" && v["fields"]["status"] == 404
        })
        .await;
    let hash = crate::harness::hash(crate::harness::ACME_KEY);
    let hex = hash.strip_prefix("sha256:").unwrap();
    let key_id = &hex[..12];
    assert_eq!(
        line["fields"]["credential"],
        format!("apiKey:{key_id}"),
        "{line}"
    );
    assert!(
        !line.to_string().contains(crate::harness::ACME_KEY),
        "{line}"
    );
    sigterm(&child);
    assert_eq!(wait_exit(&mut child).await, 0);
    std::fs::remove_file(config).unwrap();
}
