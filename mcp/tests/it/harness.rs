//! The test harness: the real `toolmark-mcp` binary driven over stdio as a line-delimited
//! JSON-RPC MCP client, its stderr read line by line, and simulated pages on real WebSockets.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio_tungstenite::MaybeTlsStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

/// Every wait in the tests is bounded by this.
pub const WAIT: Duration = Duration::from_secs(10);
/// The origin the CLI is started with.
pub const ORIGIN: &str = "http://localhost:5173";

/// Lines a child wrote, with a wakeup on each new one.
#[derive(Clone, Default)]
pub struct Lines {
    lines: Arc<Mutex<Vec<String>>>,
    notify: Arc<Notify>,
}

impl Lines {
    pub fn all(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits for the `n`-th (0-based) line matching `pred` and returns it.
    pub async fn nth(&self, n: usize, pred: impl Fn(&str) -> bool) -> String {
        tokio::time::timeout(WAIT, async {
            loop {
                let notified = self.notify.notified();
                if let Some(l) = self.all().into_iter().filter(|l| pred(l)).nth(n) {
                    return l;
                }
                notified.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no line #{n} as expected; stderr: {:?}", self.all()))
    }

    /// Whether a line matching `pred` was written yet.
    pub fn any(&self, pred: impl Fn(&str) -> bool) -> bool {
        self.lines.lock().unwrap().iter().any(|l| pred(l))
    }

    /// Every pairing code printed so far, in order.
    pub fn codes(&self) -> Vec<String> {
        self.all()
            .iter()
            .filter_map(|l| l.strip_prefix("Toolmark pairing code: "))
            .map(|rest| rest[..9].to_owned())
            .collect()
    }

    /// Waits for the `n`-th printed code.
    pub async fn code(&self, n: usize) -> String {
        let line = self
            .nth(n, |l| l.starts_with("Toolmark pairing code: "))
            .await;
        assert!(line.ends_with("(expires in 5 minutes)"), "{line}");
        line["Toolmark pairing code: ".len()..][..9].to_owned()
    }
}

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// The running binary with an MCP session on its stdio.
pub struct Cli {
    pub child: Child,
    stdin: Option<ChildStdin>,
    pub stderr: Lines,
    pub stdout_raw: Lines,
    waiters: Waiters,
    notifications: mpsc::UnboundedReceiver<Value>,
    next_id: u64,
    pub port: u16,
}

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_toolmark-mcp")
}

impl Cli {
    /// Starts the binary on a free port (extra flags appended) and initializes MCP.
    pub async fn start(extra: &[&str]) -> Cli {
        let mut cli = Cli::spawn(extra).await;
        cli.initialize().await;
        cli
    }

    /// As [`Cli::start`], with `RUST_LOG` set to `filter` (log lines on stderr).
    pub async fn start_logging(extra: &[&str], filter: &str) -> Cli {
        let mut cli = Cli::spawn_with(extra, Some(filter)).await;
        cli.initialize().await;
        cli
    }

    /// Starts the binary on a free port without any MCP traffic.
    pub async fn spawn(extra: &[&str]) -> Cli {
        Cli::spawn_with(extra, None).await
    }

    async fn spawn_with(extra: &[&str], rust_log: Option<&str>) -> Cli {
        let mut command = Command::new(binary());
        if let Some(filter) = rust_log {
            command.env("RUST_LOG", filter);
        }
        let mut child = command
            .args(["--allow-origin", ORIGIN, "--port", "0"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn toolmark-mcp");
        let stderr = Lines::default();
        let stdout_raw = Lines::default();
        spawn_line_reader(child.stderr.take().unwrap(), stderr.clone());
        let waiters: Waiters = Arc::default();
        let (note_tx, notifications) = mpsc::unbounded_channel();
        {
            let stdout = child.stdout.take().unwrap();
            let waiters = waiters.clone();
            let raw = stdout_raw.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    raw.lines.lock().unwrap().push(line.clone());
                    raw.notify.notify_waiters();
                    let value: Value = serde_json::from_str(&line)
                        .unwrap_or_else(|e| panic!("stdout is not JSON-RPC: {line:?}: {e}"));
                    let is_response = value.get("method").is_none();
                    if let (true, Some(id)) = (is_response, value.get("id").and_then(Value::as_u64))
                    {
                        if let Some(w) = waiters.lock().unwrap().remove(&id) {
                            let _ = w.send(value);
                        }
                    } else {
                        let _ = note_tx.send(value);
                    }
                }
            });
        }
        let stdin = child.stdin.take();
        let line = stderr
            .nth(0, |l| {
                l.starts_with("Toolmark MCP: pairing server on ws://127.0.0.1:")
            })
            .await;
        let port = line.rsplit(':').next().unwrap().parse().unwrap();
        Cli {
            child,
            stdin,
            stderr,
            stdout_raw,
            waiters,
            notifications,
            next_id: 1,
            port,
        }
    }

    async fn write(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        let mut line = message.to_string();
        line.push('\n');
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// Sends a request; returns its id and a receiver of the whole response.
    pub async fn send_request(
        &mut self,
        method: &str,
        params: Value,
    ) -> (u64, oneshot::Receiver<Value>) {
        let id = self.next_id;
        self.next_id += 1;
        let (tx, rx) = oneshot::channel();
        self.waiters.lock().unwrap().insert(id, tx);
        self.write(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        (id, rx)
    }

    /// A request and its response's `result` (panics on an error response).
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let (_, rx) = self.send_request(method, params).await;
        let response = tokio::time::timeout(WAIT, rx)
            .await
            .expect("response in time")
            .unwrap();
        response
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{method} failed: {response}"))
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        self.write(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    pub async fn initialize(&mut self) {
        let result = self
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "it", "version": "0"}}),
            )
            .await;
        assert_eq!(result["protocolVersion"], "2025-06-18");
        assert_eq!(result["capabilities"]["tools"]["listChanged"], true);
        self.notify("notifications/initialized", json!({})).await;
    }

    pub async fn tools(&mut self) -> Vec<Value> {
        let result = self.request("tools/list", json!({})).await;
        result["tools"].as_array().unwrap().clone()
    }

    pub async fn tool_names(&mut self) -> Vec<String> {
        self.tools()
            .await
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Waits for a notification with this method.
    pub async fn notification(&mut self, method: &str, within: Duration) -> Option<Value> {
        tokio::time::timeout(within, async {
            loop {
                let n = self.notifications.recv().await?;
                if n["method"] == method {
                    return Some(n);
                }
            }
        })
        .await
        .ok()
        .flatten()
    }

    /// Drops any notifications received so far.
    pub fn drain_notifications(&mut self) {
        while self.notifications.try_recv().is_ok() {}
    }

    /// Closes stdin and waits for the exit status code.
    pub async fn close_stdin_and_wait(&mut self) -> i32 {
        drop(self.stdin.take());
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("exit in time")
            .unwrap();
        status.code().unwrap_or(-1)
    }

    /// Pairs a simulated page with the current code and serves `tools`; waits for the listing.
    pub async fn paired_page(&mut self, tools: Vec<Value>) -> SimPage {
        let code = self.stderr.codes().last().cloned().unwrap();
        let mut page = WsPage::connect(self.port).await;
        page.pair(&code).await;
        SimPage::serve(page, tools).await
    }
}

fn spawn_line_reader<R: tokio::io::AsyncRead + Unpin + Send + 'static>(read: R, sink: Lines) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(read).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            sink.lines.lock().unwrap().push(line);
            sink.notify.notify_waiters();
        }
    });
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How a socket ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Closed(u16),
    Dropped,
}

/// The upgrade request of a page on `port`, with this Host and Origin.
fn upgrade_request(
    port: u16,
    host: &str,
    origin: Option<&str>,
) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    let mut request = format!("ws://127.0.0.1:{port}/")
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("Host", HeaderValue::from_str(host).unwrap());
    if let Some(origin) = origin {
        request
            .headers_mut()
            .insert("Origin", HeaderValue::from_str(origin).unwrap());
    }
    request
}

/// A raw page socket.
pub struct WsPage {
    pub ws: Socket,
}

impl WsPage {
    pub async fn connect(port: u16) -> WsPage {
        WsPage::connect_with(port, &format!("127.0.0.1:{port}"), Some(ORIGIN))
            .await
            .expect("upgrade")
    }

    /// Connects over a socket whose receive buffer is `bytes` (the kernel may round it up): a
    /// page that stops reading then backs the CLI up after a few frames.
    pub async fn connect_with_receive_buffer(port: u16, bytes: u32) -> WsPage {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(bytes).unwrap();
        let stream = socket.connect(([127, 0, 0, 1], port).into()).await.unwrap();
        let request = upgrade_request(port, &format!("127.0.0.1:{port}"), Some(ORIGIN));
        let (ws, _) = tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(stream))
            .await
            .expect("upgrade");
        WsPage { ws }
    }

    /// Connects with this Host and Origin; `Err(status)` when the upgrade is refused.
    pub async fn connect_with(port: u16, host: &str, origin: Option<&str>) -> Result<WsPage, u16> {
        match tokio_tungstenite::connect_async(upgrade_request(port, host, origin)).await {
            Ok((ws, _)) => Ok(WsPage { ws }),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                Err(response.status().as_u16())
            }
            Err(e) => panic!("connect: {e}"),
        }
    }

    pub async fn send(&mut self, value: Value) {
        self.ws
            .send(Message::text(value.to_string()))
            .await
            .unwrap();
    }

    pub async fn send_text(&mut self, text: String) -> bool {
        self.ws.send(Message::text(text)).await.is_ok()
    }

    /// The next text frame as JSON, or how the socket ended.
    pub async fn recv(&mut self) -> Result<Value, Ending> {
        loop {
            match tokio::time::timeout(WAIT, self.ws.next()).await {
                Err(_) => panic!("no frame in time"),
                Ok(Some(Ok(Message::Text(t)))) => return Ok(serde_json::from_str(&t).unwrap()),
                Ok(Some(Ok(Message::Close(frame)))) => {
                    return Err(frame.map_or(Ending::Dropped, |f| Ending::Closed(f.code.into())));
                }
                Ok(Some(Ok(_))) => continue,
                Ok(Some(Err(_))) | Ok(None) => return Err(Ending::Dropped),
            }
        }
    }

    /// Waits for the close and returns its code.
    pub async fn closed(&mut self) -> Ending {
        loop {
            match self.recv().await {
                Ok(_) => continue,
                Err(ending) => return ending,
            }
        }
    }

    /// Sends a pair frame and returns the token.
    pub async fn pair(&mut self, code: &str) -> String {
        self.send(json!({"type": "pair", "code": code})).await;
        let answer = self.recv().await.expect("paired");
        assert_eq!(answer["type"], "paired", "{answer}");
        answer["token"].as_str().unwrap().to_owned()
    }

    pub async fn resume(&mut self, token: &str) -> Result<(), Ending> {
        self.send(json!({"type": "resume", "token": token})).await;
        let answer = self.recv().await?;
        assert_eq!(answer, json!({"type": "paired", "token": token}));
        Ok(())
    }
}

/// A tool definition for a simulated page: `{name, description, hints, inputSchema}`.
pub fn tool(name: &str, hints: Value) -> Value {
    json!({
        "name": name,
        "llmName": name.replace('.', "__"),
        "title": format!("Title of {name}"),
        "description": format!("Description of {name}."),
        "hints": hints,
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
    })
}

/// A simulated page load on a paired socket: it answers `describe` itself and hands calls and
/// cancels to the test.
pub struct SimPage {
    pub client_id: String,
    pub calls: mpsc::UnboundedReceiver<Value>,
    pub cancels: mpsc::UnboundedReceiver<Value>,
    out: mpsc::UnboundedSender<Message>,
    /// While true the page reads nothing (a stalled tab): the CLI's frames back up.
    paused: watch::Sender<bool>,
    pub ending: Arc<Mutex<Option<Ending>>>,
    ended: Arc<Notify>,
}

impl SimPage {
    /// Sends the manifest of `tools` with a fresh clientId and starts serving.
    pub async fn serve(page: WsPage, tools: Vec<Value>) -> SimPage {
        Self::serve_as(page, tools, uuid_v4()).await
    }

    /// As [`SimPage::serve`], under a given clientId (a page reconnecting).
    pub async fn serve_as(page: WsPage, tools: Vec<Value>, client_id: String) -> SimPage {
        let sim = Self::attach(page, tools.clone(), client_id.clone());
        let summaries: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut s = t.clone();
                s.as_object_mut().unwrap().remove("inputSchema");
                s
            })
            .collect();
        sim.send(json!({"protocol": 1, "type": "manifest", "clientId": client_id, "rev": 1, "tools": summaries}));
        sim
    }

    /// Starts serving a socket without sending a manifest.
    pub fn attach(page: WsPage, tools: Vec<Value>, client_id: String) -> SimPage {
        let (calls_tx, calls) = mpsc::unbounded_channel();
        let (cancels_tx, cancels) = mpsc::unbounded_channel();
        let (out, mut out_rx) = mpsc::unbounded_channel::<Message>();
        let (paused, mut paused_rx) = watch::channel(false);
        let ending = Arc::new(Mutex::new(None));
        let ended = Arc::new(Notify::new());
        let (mut sink, mut stream) = page.ws.split();
        let me = client_id.clone();
        let answer = out.clone();
        let end_slot = ending.clone();
        let end_notify = ended.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    m = out_rx.recv() => match m {
                        Some(m) => { let _ = sink.send(m).await; }
                        None => return,
                    },
                    changed = paused_rx.changed() => if changed.is_err() { return },
                    frame = stream.next(), if !*paused_rx.borrow() => {
                        let text = match frame {
                            Some(Ok(Message::Text(t))) => t,
                            Some(Ok(Message::Close(f))) => {
                                *end_slot.lock().unwrap() = Some(f.map_or(Ending::Dropped, |f| Ending::Closed(f.code.into())));
                                end_notify.notify_waiters();
                                return;
                            }
                            Some(Ok(_)) => continue,
                            _ => {
                                *end_slot.lock().unwrap() = Some(Ending::Dropped);
                                end_notify.notify_waiters();
                                return;
                            }
                        };
                        let m: Value = serde_json::from_str(&text).unwrap();
                        assert_eq!(m["protocol"], 1);
                        if m["clientId"] != me.as_str() {
                            continue; // rule 1: addressed to another page load
                        }
                        match m["type"].as_str().unwrap() {
                            "describe" => {
                                let def = tools.iter().find(|t| t["name"] == m["tool"]).cloned();
                                let result = match def {
                                    Some(d) => json!({"status": "ok", "data": d}),
                                    None => json!({"status": "refused", "code": "unknown_tool", "message": "no", "rev": 1}),
                                };
                                let _ = answer.send(Message::text(json!({"protocol": 1, "type": "result", "clientId": me, "id": m["id"], "result": result}).to_string()));
                            }
                            "call" => { let _ = calls_tx.send(m); }
                            "cancel" => { let _ = cancels_tx.send(m); }
                            other => panic!("unexpected {other}"),
                        }
                    }
                }
            }
        });
        SimPage {
            client_id,
            calls,
            cancels,
            out,
            paused,
            ending,
            ended,
        }
    }

    pub fn send(&self, value: Value) {
        let _ = self.out.send(Message::text(value.to_string()));
    }

    /// Answers call `id` with `result`.
    pub fn answer(&self, id: &Value, result: Value) {
        self.send(json!({"protocol": 1, "type": "result", "clientId": self.client_id, "id": id, "result": result}));
    }

    pub async fn next_call(&mut self) -> Value {
        tokio::time::timeout(WAIT, self.calls.recv())
            .await
            .expect("a call in time")
            .unwrap()
    }

    pub async fn next_cancel(&mut self) -> Value {
        tokio::time::timeout(WAIT, self.cancels.recv())
            .await
            .expect("a cancel in time")
            .unwrap()
    }

    /// Waits for the socket to end.
    pub async fn ended(&self) -> Ending {
        tokio::time::timeout(WAIT, async {
            loop {
                let notified = self.ended.notified();
                if let Some(e) = self.ending.lock().unwrap().clone() {
                    return e;
                }
                notified.await;
            }
        })
        .await
        .expect("socket ended in time")
    }

    /// Stops reading the socket until [`SimPage::resume_reading`].
    pub fn stop_reading(&self) {
        self.paused.send_replace(true);
    }

    /// Reads the socket again, from where it stopped.
    pub fn resume_reading(&self) {
        self.paused.send_replace(false);
    }

    /// Closes the socket (a reload or a tab closing).
    pub fn close(&self) {
        let _ = self.out.send(Message::Close(None));
    }
}

pub fn uuid_v4() -> String {
    toolmark_proto::ids::new_call_id()
}

/// Polls until `tools/list` returns `names` (sorted).
pub async fn wait_for_tools(cli: &mut Cli, names: &[&str]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut got = cli.tool_names().await;
        got.sort();
        if got == names {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "tools stayed {got:?}, wanted {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
