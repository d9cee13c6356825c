//! Starts a gateway on 127.0.0.1:0 with test tenants, and drives it as a page (WebSocket) and
//! as an agent backend (HTTP).

use base64::Engine as _;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Bytes, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use toolmark_config::{Overrides, Settings};

pub use crate::agent::{Agent, Answer};

pub const ACME_SECRET: &str = "acme-secret-0123456789abcdef0123456789";
pub const GLOBEX_SECRET: &str = "globex-secret-0123456789abcdef012345678";
pub const ACME_KEY: &str = "key-acme";
pub const GLOBEX_KEY: &str = "key-globex";
pub const ACME_ORIGIN: &str = "https://app.acme.example";
pub const GLOBEX_ORIGIN: &str = "https://app.globex.example";
pub const ACME_PUSHER_KEY: &str = "acme-key";
pub const ACME_PUSHER_SECRET: &str = "acme-pusher-secret";
pub const GLOBEX_PUSHER_KEY: &str = "globex-key";
pub const GLOBEX_PUSHER_SECRET: &str = "globex-pusher-secret";
pub const ED_PUB: &str = include_str!("keys/ed25519.pub");
pub const ED_KEY: &str = include_str!("keys/ed25519.key");
pub const EC_PUB: &str = include_str!("keys/p256.pub");
pub const EC_KEY: &str = include_str!("keys/p256.key");

/// How long a test waits for something that should happen.
pub const WAIT: Duration = Duration::from_secs(5);

/// An HTTP client for the tests. reqwest is built with rustls and no default crypto provider
/// (the gateway picks ring), so the provider is installed first.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

pub fn hash(key: &str) -> String {
    toolmark_gateway::auth::key_hash_string(key)
}

/// The standard test tenants on the suite's broker; `extra` is appended to the TOML (e.g.
/// `[tenants.limits]` of the last tenant).
pub fn config_toml(extra: &str) -> String {
    config_with(&suite_broker(), extra)
}

/// A `[broker]` section for the suite's mode: empty (memory), or the shared Redis under a
/// prefix of its own.
pub fn suite_broker() -> String {
    match toolmark_testkit::redis::mode() {
        toolmark_testkit::redis::Mode::Memory => String::new(),
        _ => redis_broker(&toolmark_testkit::redis::shared_url(), &fresh_prefix()),
    }
}

pub fn fresh_prefix() -> String {
    format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

pub fn redis_broker(url: &str, prefix: &str) -> String {
    format!("[broker]\nkind = \"redis\"\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\n")
}

/// The standard tenants with an explicit `[broker]` section. The test gateways stand in for a
/// deployment without `toolmark-worker`: with Redis they run the jobs themselves
/// (`server.run_jobs`; the memory broker always does).
pub fn config_with(broker: &str, extra: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
drain_timeout_ms = 2000
run_jobs = true

{broker}

[[tenants]]
id = "globex"
api_keys = ["{globex}"]
token_secret = "{GLOBEX_SECRET}"
allowed_origins = ["{GLOBEX_ORIGIN}"]
pusher_key = "{GLOBEX_PUSHER_KEY}"
pusher_secret = "{GLOBEX_PUSHER_SECRET}"

[[tenants]]
id = "edco"
api_keys = ["{ed}"]
token_public_key = """{ED_PUB}"""
allowed_origins = ["{ACME_ORIGIN}"]

[[tenants]]
id = "ecco"
api_keys = ["{ec}"]
token_public_key = """{EC_PUB}"""
allowed_origins = ["{ACME_ORIGIN}"]

[[tenants]]
id = "acme"
api_keys = ["{acme}"]
token_secret = "{ACME_SECRET}"
allowed_origins = ["{ACME_ORIGIN}"]
pusher_key = "{ACME_PUSHER_KEY}"
pusher_secret = "{ACME_PUSHER_SECRET}"
{extra}
"#,
        globex = hash(GLOBEX_KEY),
        acme = hash(ACME_KEY),
        ed = hash("key-edco"),
        ec = hash("key-ecco"),
    )
}

/// A whole config text with `server.public_url = url`.
pub fn with_public_url(text: &str, url: &str) -> String {
    text.replacen(
        "[server]\n",
        &format!("[server]\npublic_url = \"{url}\"\n"),
        1,
    )
}

/// The admin key of the test gateways that serve the admin API.
pub const ADMIN_KEY: &str = "admin-key-0123456789abcdef";

/// An admin key shorter than the 16 characters the admin API asks for, listed (by its hash)
/// in [`admin_section`] like a good one: it must still be refused.
pub const SHORT_ADMIN_KEY: &str = "short-admin-key";

/// An `[admin]` section with [`ADMIN_KEY`] (and [`SHORT_ADMIN_KEY`]) and a fixed sealing key
/// (nodes sharing a broker must share it).
pub fn admin_section() -> String {
    format!(
        "[admin]\napi_keys = [\"{}\", \"{}\"]\nencryption_key = \"base64:{}\"\n",
        hash(ADMIN_KEY),
        hash(SHORT_ADMIN_KEY),
        base64::engine::general_purpose::STANDARD.encode([7u8; 32])
    )
}

/// A running gateway.
pub struct Gateway {
    /// Its admin listener, when it serves the admin API.
    pub admin: Option<SocketAddr>,
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    pub task: Option<JoinHandle<()>>,
}

impl Gateway {
    pub async fn start() -> Gateway {
        Self::start_with("").await
    }

    /// Starts with [`config_toml`]`(extra)`.
    pub async fn start_with(extra: &str) -> Gateway {
        Self::start_config(&config_toml(extra), None).await
    }

    /// Starts `n` nodes sharing one Redis under one prefix (the suite's Redis: a cluster in
    /// cluster mode).
    pub async fn start_nodes(n: usize, extra: &str) -> Vec<Gateway> {
        Self::start_nodes_with(n, |broker| config_with(broker, extra)).await
    }

    /// [`Gateway::start_nodes`] with each node's whole configuration made by `config` from the
    /// shared `[broker]` section.
    pub async fn start_nodes_with(n: usize, config: impl Fn(&str) -> String) -> Vec<Gateway> {
        let broker = redis_broker(&toolmark_testkit::redis::shared_url(), &fresh_prefix());
        let mut nodes = Vec::new();
        for i in 0..n {
            nodes.push(Self::start_config(&config(&broker), Some(format!("node-{}", i + 1))).await);
        }
        nodes
    }

    /// Starts `n` nodes serving the admin API, sharing the suite's broker (Redis for more than
    /// one node in memory mode).
    pub async fn start_admin_nodes(n: usize) -> Vec<Gateway> {
        Self::start_admin_nodes_at(n, None).await
    }

    /// [`Gateway::start_admin_nodes`] with every node's `server.public_url` set to `public`.
    pub async fn start_admin_nodes_at(n: usize, public: Option<&str>) -> Vec<Gateway> {
        Self::start_admin_nodes_env(n, public, &[]).await
    }

    /// [`Gateway::start_admin_nodes_at`] with `env` (`TOOLMARK_…` variables) over the config.
    pub async fn start_admin_nodes_env(
        n: usize,
        public: Option<&str>,
        env: &[(&str, &str)],
    ) -> Vec<Gateway> {
        let broker = match (toolmark_testkit::redis::mode(), n) {
            (toolmark_testkit::redis::Mode::Memory, 1) => String::new(),
            _ => redis_broker(&toolmark_testkit::redis::shared_url(), &fresh_prefix()),
        };
        Self::start_admin_nodes_on(n, &broker, public, env).await
    }

    /// `n` nodes with the admin API on the broker of the `[broker]` section `broker`.
    pub async fn start_admin_nodes_on(
        n: usize,
        broker: &str,
        public: Option<&str>,
        env: &[(&str, &str)],
    ) -> Vec<Gateway> {
        let text = config_with(broker, &admin_section());
        let text = match public {
            Some(url) => with_public_url(&text, url),
            None => text,
        };
        let mut nodes = Vec::new();
        for i in 0..n {
            let overrides = Overrides {
                node_id: Some(format!("node-{}", i + 1)),
                ..Overrides::default()
            };
            let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
            let config = Settings::load(&text, env, &overrides).expect("test config is valid");
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let admin_addr = admin.local_addr().unwrap();
            let (tx, rx) = oneshot::channel::<()>();
            let task = tokio::spawn(async move {
                toolmark_gateway::run_with_admin(listener, admin, config, async move {
                    let _ = rx.await;
                })
                .await
                .expect("gateway runs");
            });
            nodes.push(Gateway {
                admin: Some(admin_addr),
                addr,
                http: http_client(),
                stop: Some(tx),
                task: Some(task),
            });
        }
        nodes
    }

    /// Starts a gateway from a whole TOML text.
    pub async fn start_config(text: &str, node_id: Option<String>) -> Gateway {
        let config = node_settings(text, node_id);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_until(listener, config, rx));
        Gateway {
            admin: None,
            addr,
            http: http_client(),
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// Starts a node from `text` on a thread of its own, with a runtime of one thread: every
    /// task of the node runs there, so what that thread allocates is the node's alone
    /// ([`Allocations`]). Stopped as any other node (its drop).
    pub fn start_on_own_thread(text: &str, node_id: &str) -> (Gateway, Allocations) {
        let config = node_settings(text, Some(node_id.to_owned()));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let (asks, mut asked) = tokio::sync::mpsc::unbounded_channel::<Count>();
        std::thread::Builder::new()
            .name(node_id.to_owned())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let node = rt.spawn(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                    Box::pin(serve_until(listener, config, rx)).await;
                });
                // The node's tasks run while this thread is inside the runtime: waiting for
                // the next count, or counting.
                while let Some(Count {
                    started,
                    until,
                    reply,
                }) = rt.block_on(asked.recv())
                {
                    let counted = allocation_counter::measure(|| {
                        rt.block_on(async move {
                            let _ = started.send(());
                            let _ = until.await;
                        });
                    });
                    let _ = reply.send(counted);
                }
                let _ = rt.block_on(node);
            })
            .unwrap();
        let gateway = Gateway {
            admin: None,
            addr,
            http: http_client(),
            stop: Some(tx),
            task: None,
        };
        (gateway, Allocations(asks))
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Sends the stop signal (like SIGTERM).
    pub fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    pub fn agent(&self, tenant: &str, key: &str) -> Agent {
        Agent::new(&self.url(""), tenant, key, self.http.clone())
    }

    pub fn acme(&self) -> Agent {
        self.agent("acme", ACME_KEY)
    }

    pub async fn metrics(&self) -> String {
        metrics_at(&self.http, self.addr).await
    }

    /// The value of one metric series, e.g. `toolmark_results_rejected_total{reason="late"}`.
    pub async fn metric(&self, series: &str) -> f64 {
        metric_at(&self.http, self.addr, series).await
    }

    /// Waits until `series` reaches at least `value`.
    pub async fn wait_metric(&self, series: &str, value: f64) {
        wait_metric_at(&self.http, self.addr, series, value).await
    }

    /// Waits until `series` reads `value` exactly: a gauge falling back to it, where
    /// [`Gateway::wait_metric`] waits for a count to reach it.
    pub async fn wait_metric_exactly(&self, series: &str, value: f64) {
        wait_metric_when(&self.http, self.addr, series, value, |got| {
            (got - value).abs() < f64::EPSILON
        })
        .await
    }

    /// Connects a page of `tenant` with an HS256 token of the standard secrets.
    pub async fn page(&self, tenant: &str, user: &str, conversation: &str) -> Page {
        page_at(self.addr, tenant, user, conversation).await
    }

    /// Connects a page socket; `Err` holds the close code when the gateway refused it.
    pub async fn connect(
        &self,
        tenant: &str,
        token: &str,
        origin: Option<&str>,
    ) -> Result<Page, u16> {
        connect_at(self.addr, tenant, token, origin).await
    }

    /// Connects a page socket the gateway must refuse: the close code ([`refused_at`]).
    pub async fn refused(&self, tenant: &str, token: &str, origin: Option<&str>) -> u16 {
        refused_at(self.addr, tenant, token, origin).await
    }
}

/// Connects a page of `tenant` to the gateway at `addr`.
pub async fn page_at(addr: SocketAddr, tenant: &str, user: &str, conversation: &str) -> Page {
    {
        let (secret, origin) = match tenant {
            "globex" => (GLOBEX_SECRET, GLOBEX_ORIGIN),
            _ => (ACME_SECRET, ACME_ORIGIN),
        };
        let token = hs256(secret, &claims(tenant, user, conversation));
        // Expected to succeed: no wait for a refusal (one would surface as a close on read).
        upgrade(addr, tenant, &token, Some(origin)).await
    }
}

/// The metrics text of the node at `addr`.
pub async fn metrics_at(http: &reqwest::Client, addr: SocketAddr) -> String {
    http.get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of one metric series of the node at `addr` (0 when absent).
pub async fn metric_at(http: &reqwest::Client, addr: SocketAddr, series: &str) -> f64 {
    metrics_at(http, addr)
        .await
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

/// Waits until `series` of the node at `addr` reaches at least `value`.
pub async fn wait_metric_at(http: &reqwest::Client, addr: SocketAddr, series: &str, value: f64) {
    wait_metric_when(http, addr, series, value, |got| got >= value).await
}

/// Waits until `series` of the node at `addr` reads a value `done` takes (`value` names it
/// in the failure).
async fn wait_metric_when(
    http: &reqwest::Client,
    addr: SocketAddr,
    series: &str,
    value: f64,
    done: impl Fn(f64) -> bool,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let got = metric_at(http, addr, series).await;
        if done(got) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} stayed at {got}, expected {value}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Upgrades a page socket at `addr` (the gateway decides on admission after the upgrade).
async fn upgrade(addr: SocketAddr, tenant: &str, token: &str, origin: Option<&str>) -> Page {
    let url = format!("ws://{addr}/v1/tenants/{tenant}/page?token={token}");
    let mut req = url.into_client_request().unwrap();
    if let Some(o) = origin {
        req.headers_mut().insert("origin", o.parse().unwrap());
    }
    let (ws, _) = tokio_tungstenite::connect_async(req)
        .await
        .expect("upgrade succeeds");
    Page {
        ws,
        client_id: uuid::Uuid::new_v4().to_string(),
        seen: Default::default(),
    }
}

/// Connects a page socket to `addr` that is expected to be admitted; `Err` holds the close code
/// when the gateway refused it at once (within 150 ms). A test that expects a refusal uses
/// [`refused_at`], which waits for it as long as a busy machine needs.
pub async fn connect_at(
    addr: SocketAddr,
    tenant: &str,
    token: &str,
    origin: Option<&str>,
) -> Result<Page, u16> {
    let mut page = upgrade(addr, tenant, token, origin).await;
    // A refused socket is closed right after the upgrade.
    match tokio::time::timeout(Duration::from_millis(150), page.ws.next()).await {
        Err(_) => Ok(page),
        Ok(Some(Ok(Message::Close(Some(CloseFrame { code, .. }))))) => Err(code.into()),
        Ok(other) => panic!("unexpected first frame {other:?}"),
    }
}

/// Connects a page socket to `addr` that the gateway must refuse: the close code it sent,
/// waited for up to [`WAIT`] (a socket still open then was admitted, and the test fails).
pub async fn refused_at(addr: SocketAddr, tenant: &str, token: &str, origin: Option<&str>) -> u16 {
    let mut page = upgrade(addr, tenant, token, origin).await;
    match tokio::time::timeout(WAIT, page.ws.next()).await {
        Err(_) => panic!("the socket was admitted where a refusal was expected"),
        Ok(Some(Ok(Message::Close(Some(CloseFrame { code, .. }))))) => code.into(),
        Ok(other) => panic!("unexpected first frame {other:?}"),
    }
}

/// A node's settings from a whole TOML text, under `node_id` when given.
fn node_settings(text: &str, node_id: Option<String>) -> Settings {
    let overrides = Overrides {
        node_id,
        ..Overrides::default()
    };
    Settings::load(text, [], &overrides).expect("test config is valid")
}

/// Serves a node on `listener` until `stop` fires (or its sender goes).
async fn serve_until(
    listener: tokio::net::TcpListener,
    config: Settings,
    stop: oneshot::Receiver<()>,
) {
    toolmark_gateway::run(listener, config, None, async move {
        let _ = stop.await;
    })
    .await
    .expect("gateway runs");
}

/// What a node on a thread of its own ([`Gateway::start_on_own_thread`]) allocates.
pub struct Allocations(tokio::sync::mpsc::UnboundedSender<Count>);

/// One count asked of a node's thread.
struct Count {
    started: oneshot::Sender<()>,
    until: oneshot::Receiver<()>,
    reply: oneshot::Sender<allocation_counter::AllocationInfo>,
}

/// A count under way: [`Counting::stop`] ends it.
pub struct Counting {
    until: oneshot::Sender<()>,
    reply: oneshot::Receiver<allocation_counter::AllocationInfo>,
}

impl Allocations {
    /// Starts counting what the node's thread allocates, once it counts.
    pub async fn start(&self) -> Counting {
        let (started, counting) = oneshot::channel();
        let (until, stop) = oneshot::channel();
        let (reply, counted) = oneshot::channel();
        self.0
            .send(Count {
                started,
                until: stop,
                reply,
            })
            .expect("the node's thread runs");
        counting.await.expect("the node's thread counts");
        Counting {
            until,
            reply: counted,
        }
    }
}

impl Counting {
    /// What the node's thread allocated since [`Allocations::start`].
    pub async fn stop(self) -> allocation_counter::AllocationInfo {
        let _ = self.until.send(());
        self.reply.await.expect("the node's thread counted")
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop();
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

pub fn claims(tenant: &str, user: &str, conversation: &str) -> Value {
    json!({"sub": user, "cnv": conversation, "aud": tenant, "exp": now() + 600, "iat": now()})
}

pub fn hs256(secret: &str, claims: &Value) -> String {
    toolmark_config::jwt::install();
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(secret.as_bytes()).unwrap(),
    )
    .unwrap()
}

pub fn eddsa(claims: &Value) -> String {
    toolmark_config::jwt::install();
    jsonwebtoken::encode(
        &Header::new(Algorithm::EdDSA),
        claims,
        &EncodingKey::from_ed_pem(ED_KEY.as_bytes()).unwrap(),
    )
    .unwrap()
}

pub fn es256(claims: &Value) -> String {
    toolmark_config::jwt::install();
    jsonwebtoken::encode(
        &Header::new(Algorithm::ES256),
        claims,
        &EncodingKey::from_ec_pem(EC_KEY.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// A simulated page: one WebSocket and the clientId it speaks as.
pub struct Page {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    pub client_id: String,
    /// Request ids already received: like a real page, a repeat is ignored (rule 2).
    pub seen: std::collections::HashSet<String>,
}

/// The pin digest of a manifest entry, as the gateway makes it.
pub fn digest(entry: &Value) -> String {
    toolmark_proto::ToolManifestSummary::from_value(entry.clone())
        .unwrap()
        .digest()
        .to_string()
}

pub fn tool(name: &str, hints: Value) -> Value {
    json!({"name": name, "llmName": toolmark_proto::llm::llm_name(name), "description": format!("The {name} tool"), "hints": hints})
}

impl Page {
    pub async fn send(&mut self, v: Value) {
        self.ws
            .send(Message::Text(v.to_string().into()))
            .await
            .expect("send");
    }

    pub async fn send_raw(&mut self, text: String) {
        self.ws
            .send(Message::Text(text.into()))
            .await
            .expect("send");
    }

    /// Sends without insisting: the gateway may close the socket while the frame is sent.
    pub async fn send_raw_lossy(&mut self, text: String) {
        let _ = self.ws.send(Message::Text(text.into())).await;
    }

    pub async fn send_binary(&mut self, bytes: Vec<u8>) {
        self.ws
            .send(Message::Binary(Bytes::from(bytes)))
            .await
            .expect("send");
    }

    /// Publishes a manifest as this page.
    pub async fn manifest(&mut self, rev: u64, tools: Value) {
        let m = json!({"protocol": 1, "type": "manifest", "clientId": self.client_id, "rev": rev, "tools": tools});
        self.send(m).await;
    }

    pub async fn answer(&mut self, id: &str, result: Value) {
        let m = json!({"protocol": 1, "type": "result", "clientId": self.client_id, "id": id, "result": result});
        self.send(m).await;
    }

    /// The next text frame as JSON (pings are skipped); panics after [`WAIT`].
    pub async fn recv(&mut self) -> Value {
        self.try_recv(WAIT).await.expect("a frame arrives")
    }

    /// The next frame for this page within `wait`, or `None`: as a real page does, frames for
    /// another clientId and repeated call or describe ids are ignored (rules 1 and 2).
    pub async fn try_recv(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let frame = self.try_recv_raw(left).await?;
            if frame["clientId"] != self.client_id.as_str() {
                continue;
            }
            let is_request = frame["type"] == "call" || frame["type"] == "describe";
            if is_request
                && !self
                    .seen
                    .insert(frame["id"].as_str().unwrap_or_default().to_owned())
            {
                continue;
            }
            return Some(frame);
        }
    }

    /// The next text frame within `wait`, whoever it addresses, or `None`.
    pub async fn try_recv_raw(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.ws.next()).await {
                Err(_) => return None,
                Ok(Some(Ok(Message::Text(t)))) => {
                    return Some(serde_json::from_str(t.as_str()).unwrap());
                }
                Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => {}
                Ok(other) => panic!("expected a text frame, got {other:?}"),
            }
        }
    }

    /// Waits for the gateway to close the socket and returns the close code.
    pub async fn closed(&mut self) -> u16 {
        loop {
            match tokio::time::timeout(WAIT, self.ws.next())
                .await
                .expect("close arrives")
            {
                Some(Ok(Message::Close(Some(f)))) => return f.code.into(),
                Some(Ok(Message::Close(None))) | None => return 1005,
                Some(Ok(_)) => {}
                Some(Err(e)) => panic!("socket error before close: {e}"),
            }
        }
    }
}

/// acme's page u1/c1 connected to `on` with `tools`, once `seen_from` sees it as the current
/// page.
pub async fn page_across(on: &Gateway, seen_from: &Gateway, tools: Value) -> Page {
    let mut page = on.page("acme", "u1", "c1").await;
    page.manifest(1, tools).await;
    seen_from
        .acme()
        .wait_current("u1", "c1", &page.client_id)
        .await;
    page
}

/// The page answers the next call `ok` with `data`; the agent's `pending` request gets it.
pub async fn answer_ok(page: &mut Page, pending: JoinHandle<Answer>, data: &str) {
    let frame = page.recv().await;
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "ok", "data": data}),
    )
    .await;
    let a = pending.await.unwrap();
    assert_eq!(
        (a.status, a.body["outcome"]["data"].as_str()),
        (200, Some(data)),
        "{}",
        a.body
    );
}

/// A call of `todo.add` to u1/c1 made through `caller`, cancelled through `canceller`: the page
/// gets the protocol `cancel`, answers `cancelled`, and that answer is the call's outcome.
/// Returns the call id.
pub async fn cancel_round_trip(caller: &Agent, canceller: &Agent, page: &mut Page) -> String {
    let pending = caller.call_later("u1", "c1", json!({"tool": "todo.add", "input": {}}));
    let frame = page.recv().await;
    let id = frame["id"].as_str().unwrap().to_owned();
    let cancel = canceller
        .post(&format!("/calls/{id}/cancel"), json!({}))
        .await;
    assert_eq!(cancel.status, 202);
    assert_eq!(
        page.recv().await,
        json!({"protocol": 1, "type": "cancel", "clientId": page.client_id, "id": id})
    );
    page.answer(&id, json!({"status": "cancelled", "by": "signal"}))
        .await;
    assert_eq!(
        pending.await.unwrap().body["outcome"],
        json!({"status": "cancelled", "by": "signal"})
    );
    id
}

/// A page of `tenant`/`user`/`conversation` that published `tools` and is the current page.
pub async fn ready_page(
    gw: &Gateway,
    tenant: &str,
    user: &str,
    conversation: &str,
    tools: Value,
) -> Page {
    let mut p = gw.page(tenant, user, conversation).await;
    p.manifest(1, tools).await;
    let key = if tenant == "globex" {
        GLOBEX_KEY
    } else {
        ACME_KEY
    };
    gw.agent(tenant, key)
        .wait_current(user, conversation, &p.client_id)
        .await;
    p
}

/// One request a [`webhook_receiver`] got.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// `webhook-id`.
    pub id: String,
    /// Whether `webhook-signature` carries a `v1,` signature.
    pub signed: bool,
    /// `traceparent`, or empty.
    pub traceparent: String,
    /// The event POSTed.
    pub event: Value,
}

/// Every delivery a [`webhook_receiver`] got, in order.
pub type Deliveries = std::sync::Arc<std::sync::Mutex<Vec<Delivery>>>;

/// A webhook receiver on loopback that accepts every delivery: its URL and what it got.
pub async fn webhook_receiver() -> (String, Deliveries) {
    let got: Deliveries = Deliveries::default();
    let sink = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |h: axum::http::HeaderMap, body: Bytes| {
            let sink = sink.clone();
            async move {
                let header = |k: &str| {
                    h.get(k)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned()
                };
                sink.lock().unwrap().push(Delivery {
                    id: header("webhook-id"),
                    signed: header("webhook-signature").starts_with("v1,"),
                    traceparent: header("traceparent"),
                    event: serde_json::from_slice(&body).unwrap_or_default(),
                });
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (hook, got)
}
