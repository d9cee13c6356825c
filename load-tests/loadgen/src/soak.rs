//! The `soak` scenario: pages on two nodes for a long time at the real TTLs and grace periods.
//! A quarter of the pages stay quiet; a quarter move to the other node every few minutes (the
//! socket breaks, the page reconnects with its clientId and stays silent, as the bridge does);
//! a quarter answer with `needs_confirmation` and confirm late (after a move, silent through
//! the grace); the rest answer and do nothing else. The agent calls every page regularly through
//! either node. The run counts what an operator must never see: a 409 for a page that is
//! connected, a call answered by the page but reported as a timeout, a confirmation expired
//! while its page is alive, a confirmation announced twice or never. With
//! `--stall-redis-pid`, Redis stalls (`SIGSTOP`) for `--stall-secs` every `--stall-every-secs`
//! while the calls run: a 503 `unavailable` for a request that overlapped a stall is counted
//! apart (expected), anything else stays a fault.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::cli::SoakArgs;
use crate::error::LoadError;
use crate::fleet::{conversation, user};
use crate::frames;
use crate::page::{PageSpec, Socket, connect};
use crate::stalls::Stalls;
use crate::target::Target;
use crate::token::Minter;

/// What the run counts.
#[derive(Debug, Default)]
struct Counts {
    calls: AtomicU64,
    answered: AtomicU64,
    needs_confirmation: AtomicU64,
    timeouts_while_connected: AtomicU64,
    timeouts_while_moving: AtomicU64,
    no_page_live: AtomicU64,
    no_page_moving: AtomicU64,
    errors: AtomicU64,
    moves: AtomicU64,
    confirmed_sent: AtomicU64,
    unavailable_in_stalls: AtomicU64,
}

/// One page's state as the agent side sees it.
struct PageState {
    /// The socket is open (a call now must reach it).
    connected: AtomicBool,
    /// Bumped on every move: a call that spans a move may time out legitimately.
    epoch: AtomicU64,
}

fn class(index: usize) -> &'static str {
    match index % 4 {
        0 => "quiet",
        1 => "mover",
        2 => "confirmer",
        _ => "answerer",
    }
}

/// Runs the soak and prints its JSON line.
pub async fn run(args: SoakArgs) -> Result<(), LoadError> {
    let nodes = resolve_nodes(&args).await?;
    let minter = Minter::new(&args.common.tenant, &args.common.token_secret)?;
    let soak = Soak {
        nodes,
        http: http_client()?,
        auth: format!("Bearer {}", args.api_key),
        counts: Arc::new(Counts::default()),
        stop: CancellationToken::new(),
        resolved: Arc::default(),
        sent_confirms: Arc::default(),
        stalls: Arc::default(),
    };
    // Events: every confirmation.resolved, from the start.
    let events = soak.watch();
    let pages = page_states(args.pages);
    let tasks = soak.launch(&minter, &pages).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let calls_done = CancellationToken::new();
    let staller = args.stall_redis_pid.map(|pid| {
        tokio::spawn(Arc::clone(&soak.stalls).run(
            pid,
            args.stall_every_secs,
            args.stall_secs,
            calls_done.clone(),
        ))
    });
    soak.drive(&args, &pages).await;
    calls_done.cancel();
    if let Some(s) = staller {
        let _ = s.await;
    }
    // Confirmations still to come arrive within their delay.
    tokio::time::sleep(Duration::from_secs(args.confirm_max_secs + 15)).await;
    soak.stop.cancel();
    for t in tasks {
        let _ = t.await;
    }
    let _ = events.await;
    soak.report(&args).await
}

/// Resolves both nodes: `--url` first, then `--other`.
async fn resolve_nodes(args: &SoakArgs) -> Result<[Arc<Target>; 2], LoadError> {
    let nodes = [
        Arc::new(Target::resolve(&args.common).await?),
        Arc::new(
            Target::resolve(&crate::cli::Common {
                url: args.other.clone(),
                ..args.common.clone()
            })
            .await?,
        ),
    ];
    Ok(nodes)
}

/// The agent's HTTP client.
fn http_client() -> Result<reqwest::Client, LoadError> {
    crate::agent::client_builder()
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| LoadError::Local(format!("HTTP client: {e}")))
}

/// A fresh state for each of `count` pages, none connected yet.
fn page_states(count: usize) -> Vec<Arc<PageState>> {
    (0..count)
        .map(|_| {
            Arc::new(PageState {
                connected: AtomicBool::new(false),
                epoch: AtomicU64::new(0),
            })
        })
        .collect()
}

/// What the soak's parts share: the nodes, the agent's client, the counts and the outcomes.
#[derive(Debug)]
struct Soak {
    nodes: [Arc<Target>; 2],
    http: reqwest::Client,
    auth: String,
    counts: Arc<Counts>,
    stop: CancellationToken,
    /// Every confirmation.resolved outcome, by confirmId.
    resolved: Arc<Mutex<HashMap<String, Vec<String>>>>,
    /// Every confirmId a page sent `confirmed` for.
    sent_confirms: Arc<Mutex<Vec<String>>>,
    /// When Redis was stalled.
    stalls: Arc<Stalls>,
}

impl Soak {
    /// Starts reading the first node's events until `stop`.
    fn watch(&self) -> JoinHandle<()> {
        tokio::spawn(watch_events(
            self.http.clone(),
            format!(
                "{}/v1/tenants/{}/events",
                self.nodes[0].http_base, self.nodes[0].tenant
            ),
            self.auth.clone(),
            Arc::clone(&self.resolved),
            self.stop.clone(),
        ))
    }

    /// Starts a task for each page (a pause after every 50) and returns the tasks.
    async fn launch(
        &self,
        minter: &Minter,
        pages: &[Arc<PageState>],
    ) -> Result<Vec<JoinHandle<()>>, LoadError> {
        let mut tasks = Vec::new();
        for (i, state) in pages.iter().enumerate() {
            let spec = PageSpec {
                index: i,
                client_id: uuid::Uuid::new_v4().to_string(),
                token: minter.mint(&user(i), &conversation(i))?,
            };
            tasks.push(tokio::spawn(page(
                self.nodes.clone(),
                spec,
                Arc::clone(state),
                Arc::clone(&self.counts),
                Arc::clone(&self.sent_confirms),
                self.stop.clone(),
            )));
            if i % 50 == 49 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(tasks)
    }

    /// Calls every page in turn, through either node, for `--minutes`; waits for the last calls.
    async fn drive(&self, args: &SoakArgs, pages: &[Arc<PageState>]) {
        let started = Instant::now();
        let run_for = Duration::from_secs(args.minutes * 60);
        let spacing = Duration::from_secs_f64(args.call_every_secs / args.pages.max(1) as f64);
        let mut n = 0usize;
        let mut inflight = Vec::new();
        while started.elapsed() < run_for {
            let i = n % args.pages;
            let node = &self.nodes[(n / args.pages + i) % 2];
            n += 1;
            let url = format!(
                "{}/calls",
                node.conversation_url(&user(i), &conversation(i))
            );
            inflight.push(tokio::spawn(agent_call(
                self.http.clone(),
                url,
                self.auth.clone(),
                Arc::clone(&pages[i]),
                Arc::clone(&self.counts),
                Arc::clone(&self.stalls),
                n as u64,
            )));
            inflight.retain(|t: &JoinHandle<()>| !t.is_finished());
            tokio::time::sleep(spacing).await;
        }
        for t in inflight {
            let _ = t.await;
        }
    }

    /// Reads how the confirmations ended.
    async fn resolutions(&self) -> Resolutions {
        let resolved = self.resolved.lock().await;
        let sent = self.sent_confirms.lock().await;
        let mut r = Resolutions::default();
        for outcomes in resolved.values() {
            if outcomes.len() > 1 {
                r.doubled += 1;
            }
            for o in outcomes {
                if o == "ok" {
                    r.confirmed_ok += 1;
                } else {
                    r.wrong_expirations += 1;
                }
            }
        }
        r.never_resolved = sent.iter().filter(|k| !resolved.contains_key(*k)).count();
        r
    }

    /// Prints the JSON line and the summary; fails the run when it counted a fault.
    async fn report(&self, args: &SoakArgs) -> Result<(), LoadError> {
        let r = self.resolutions().await;
        let c = &self.counts;
        let line = json!({
            "scenario": "soak",
            "minutes": args.minutes,
            "pages": args.pages,
            "calls": c.calls.load(Ordering::Relaxed),
            "answered": c.answered.load(Ordering::Relaxed),
            "needsConfirmation": c.needs_confirmation.load(Ordering::Relaxed),
            "moves": c.moves.load(Ordering::Relaxed),
            "noPageForLivePages": c.no_page_live.load(Ordering::Relaxed),
            "noPageWhileMoving": c.no_page_moving.load(Ordering::Relaxed),
            "timeoutsWhileConnected": c.timeouts_while_connected.load(Ordering::Relaxed),
            "timeoutsAcrossMoves": c.timeouts_while_moving.load(Ordering::Relaxed),
            "errors": c.errors.load(Ordering::Relaxed),
            "confirmedSent": c.confirmed_sent.load(Ordering::Relaxed),
            "confirmedResolvedOk": r.confirmed_ok,
            "wrongExpirations": r.wrong_expirations,
            "doubledResolutions": r.doubled,
            "neverResolved": r.never_resolved,
            "stalls": self.stalls.count(),
            "unavailableInStalls": c.unavailable_in_stalls.load(Ordering::Relaxed),
        });
        let bad = c.no_page_live.load(Ordering::Relaxed)
            + c.timeouts_while_connected.load(Ordering::Relaxed)
            + c.errors.load(Ordering::Relaxed)
            + r.wrong_expirations
            + r.doubled
            + r.never_resolved as u64;
        let human = format!(
            "soak: {} calls, {bad} faults (409s for live pages, timeouts of connected pages, errors, wrong expirations, doubled or missing resolutions)",
            c.calls.load(Ordering::Relaxed)
        );
        crate::report::emit(&line, &human)?;
        if bad > 0 {
            return Err(LoadError::Failed(format!("{bad} in the soak")));
        }
        Ok(())
    }
}

/// How the confirmations ended, from the events and the pages' own record.
#[derive(Debug, Default)]
struct Resolutions {
    confirmed_ok: u64,
    wrong_expirations: u64,
    doubled: u64,
    never_resolved: usize,
}

async fn agent_call(
    http: reqwest::Client,
    url: String,
    auth: String,
    page: Arc<PageState>,
    counts: Arc<Counts>,
    stalls: Arc<Stalls>,
    n: u64,
) {
    let sent_at = Instant::now();
    let was_connected = page.connected.load(Ordering::SeqCst);
    let epoch = page.epoch.load(Ordering::SeqCst);
    counts.calls.fetch_add(1, Ordering::Relaxed);
    let body = json!({"tool": frames::TOOL, "input": {"n": n}, "timeoutMs": 10_000});
    let sent = http
        .post(&url)
        .header(AUTHORIZATION, &auth)
        .header(CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .send()
        .await;
    let moved =
        || page.epoch.load(Ordering::SeqCst) != epoch || !page.connected.load(Ordering::SeqCst);
    let Ok(response) = sent else {
        counts.errors.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let status = response.status().as_u16();
    let v: Value = response.json().await.unwrap_or(Value::Null);
    match (status, v["outcome"]["status"].as_str()) {
        (200, Some("ok")) => {
            counts.answered.fetch_add(1, Ordering::Relaxed);
        }
        (200, Some("needs_confirmation")) => {
            counts.needs_confirmation.fetch_add(1, Ordering::Relaxed);
        }
        (200, Some("timeout")) if moved() || !was_connected => {
            counts.timeouts_while_moving.fetch_add(1, Ordering::Relaxed);
        }
        (200, Some("timeout")) => {
            counts
                .timeouts_while_connected
                .fetch_add(1, Ordering::Relaxed);
        }
        (409, _) if moved() || !was_connected => {
            counts.no_page_moving.fetch_add(1, Ordering::Relaxed);
        }
        (409, _) => {
            counts.no_page_live.fetch_add(1, Ordering::Relaxed);
        }
        (503, _) if v["code"] == "unavailable" && stalls.overlapped(sent_at, Instant::now()) => {
            counts.unavailable_in_stalls.fetch_add(1, Ordering::Relaxed);
        }
        _ => {
            log_unexpected(status, &v);
            counts.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A page's whole life until `stop`.
async fn page(
    nodes: [Arc<Target>; 2],
    spec: PageSpec,
    state: Arc<PageState>,
    counts: Arc<Counts>,
    sent_confirms: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
) {
    let kind = class(spec.index);
    let mut node = spec.index % 2;
    let mut first = true;
    let mut owed: Vec<Owed> = Vec::new();
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    let seed = spec.index as u64;
    let mut round = 0u64;
    while !stop.is_cancelled() {
        let Ok(mut ws) = connect(&nodes[node], &spec).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        if first {
            if ws
                .send(Message::text(frames::manifest(&spec.client_id)))
                .await
                .is_err()
            {
                continue;
            }
            first = false;
        }
        state.connected.store(true, Ordering::SeqCst);
        // Movers move every 150–250 s; confirmers move once 30 s after each needs_confirmation.
        round += 1;
        let stay = match kind {
            "mover" => Duration::from_secs(150 + (seed * 37 + round * 11) % 100),
            _ => Duration::from_secs(u64::MAX / 4),
        };
        let until = Instant::now() + stay;
        let end = serve(
            &mut ws,
            &spec,
            kind,
            &mut owed,
            &mut seen,
            until,
            &counts,
            &sent_confirms,
            &stop,
        )
        .await;
        state.connected.store(false, Ordering::SeqCst);
        state.epoch.fetch_add(1, Ordering::SeqCst);
        drop(ws);
        if matches!(end, Served::Stopped) {
            return;
        }
        counts.moves.fetch_add(1, Ordering::Relaxed);
        node = 1 - node;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A confirmation a confirmer page owes.
struct Owed {
    confirm_id: String,
    /// When the page moves to the other node (once), to be silent there through the grace.
    move_at: Option<Instant>,
    /// When the user approves.
    send_at: Instant,
}

enum Served {
    Stopped,
    Move,
}

#[allow(clippy::too_many_arguments)]
async fn serve(
    ws: &mut Socket,
    spec: &PageSpec,
    kind: &str,
    owed: &mut Vec<Owed>,
    seen: &mut std::collections::HashSet<String>,
    until: Instant,
    counts: &Counts,
    sent_confirms: &Mutex<Vec<String>>,
    stop: &CancellationToken,
) -> Served {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        let incoming = tokio::select! {
            () = stop.cancelled() => return Served::Stopped,
            _ = tick.tick() => {
                let now = Instant::now();
                if now >= until {
                    return Served::Move;
                }
                // A confirmer moves 30 s after it was asked to confirm, and is silent on the
                // new socket until it confirms (past the 60 s grace).
                if let Some(o) = owed.iter_mut().find(|o| o.move_at.is_some_and(|m| m <= now)) {
                    o.move_at = None;
                    return Served::Move;
                }
                let due: Vec<String> = owed.iter().filter(|o| o.send_at <= now).map(|o| o.confirm_id.clone()).collect();
                owed.retain(|o| o.send_at > now);
                for k in due {
                    let frame = json!({"protocol": 1, "type": "confirmed", "clientId": spec.client_id, "confirmId": k, "result": {"status": "ok", "data": {"done": true}}});
                    if ws.send(Message::text(frame.to_string())).await.is_err() {
                        return Served::Move;
                    }
                    counts.confirmed_sent.fetch_add(1, Ordering::Relaxed);
                    sent_confirms.lock().await.push(k);
                }
                continue;
            }
            incoming = ws.next() => incoming,
        };
        let text = match incoming {
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(Message::Close(_)) | Err(_)) | None => return Served::Move,
            Some(Ok(_)) => continue,
        };
        let v: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
        if v["type"] != "call" || v["clientId"] != spec.client_id.as_str() {
            continue;
        }
        let id = v["id"].as_str().unwrap_or_default().to_owned();
        // Seed rule 2: a page ignores an id it already has (a reconnect may repeat it).
        if !seen.insert(id.clone()) {
            continue;
        }
        let result = if kind == "confirmer" && owed.is_empty() {
            let k = uuid::Uuid::new_v4().to_string();
            let delay = 90 + (spec.index as u64 * 13 + seen.len() as u64 * 7) % 150;
            owed.push(Owed {
                confirm_id: k.clone(),
                move_at: Some(Instant::now() + Duration::from_secs(30)),
                send_at: Instant::now() + Duration::from_secs(delay),
            });
            json!({"status": "needs_confirmation", "confirmId": k, "summary": "Submit the order"})
        } else {
            json!({"status": "ok", "data": v["input"]})
        };
        let reply = json!({"protocol": 1, "type": "result", "clientId": spec.client_id, "id": id, "result": result});
        if ws.send(Message::text(reply.to_string())).await.is_err() {
            return Served::Move;
        }
    }
}

/// Reads the tenant's events and records each confirmation.resolved outcome by confirmId.
async fn watch_events(
    http: reqwest::Client,
    url: String,
    auth: String,
    resolved: Arc<Mutex<HashMap<String, Vec<String>>>>,
    stop: CancellationToken,
) {
    let mut last_id: Option<String> = None;
    while !stop.is_cancelled() {
        let mut req = http
            .get(&url)
            .header(AUTHORIZATION, &auth)
            .timeout(Duration::from_secs(24 * 3600));
        if let Some(id) = &last_id {
            req = req.header("last-event-id", id.as_str());
        }
        let Ok(response) = req.send().await else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let mut stream = response.bytes_stream();
        let mut buf = String::new();
        loop {
            let chunk = tokio::select! {
                () = stop.cancelled() => return,
                c = stream.next() => c,
            };
            let Some(Ok(chunk)) = chunk else { break };
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buf.find("\n\n") {
                let event: String = buf.drain(..end + 2).collect();
                for line in event.lines() {
                    if let Some(id) = line.strip_prefix("id:") {
                        last_id = Some(id.trim().to_owned());
                    }
                    let Some(data) = line.strip_prefix("data:") else {
                        continue;
                    };
                    let v: Value = serde_json::from_str(data.trim()).unwrap_or(Value::Null);
                    if v["type"] == "confirmation.resolved" {
                        let k = v["data"]["confirmId"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned();
                        let o = v["data"]["outcome"]["status"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned();
                        resolved.lock().await.entry(k).or_default().push(o);
                    }
                }
            }
        }
    }
}

/// Unexpected answers go to standard error (the JSON line stays alone on standard output).
fn log_unexpected(status: u16, v: &Value) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "soak: call answered {status} {v}");
}
