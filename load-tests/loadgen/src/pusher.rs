//! Another realtime server measured with the same client: any server of the Pusher protocol
//! (channels over WebSocket, events published through its signed HTTP API). Two scenarios, so
//! that the gateway's figures have a reference taken on the same machine in the same run:
//!
//! - `pusher-handshakes`: many sockets connecting at once, each timed from the TCP connect to
//!   the WebSocket upgrade's answer (as `handshakes` times a page) and to the server's
//!   `pusher:connection_established`.
//! - `pusher-publish`: one public channel per subscriber socket, events published round-robin
//!   over them at a fixed rate (open loop), each timed from the instant it was due to its
//!   arrival at its subscriber: the one-way publish→deliver latency, measured as `calls`
//!   measures a call's round trip.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use hmac::{Hmac, KeyInit, Mac};
use md5::{Digest, Md5};
use serde_json::json;
use sha2::Sha256;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cli::{PusherHandshakeArgs, PusherPublishArgs, PusherServer};
use crate::driver::{self, Plan};
use crate::error::LoadError;
use crate::handshakes::{SETUP_TIMEOUT, Setups};
use crate::latency::{Recorder, histogram, micros};
use crate::page::Socket;
use crate::report;
use crate::rss::Cost;
use crate::target::Resolved;

/// How long events still in flight may take to arrive after the last was published.
const DRAIN: Duration = Duration::from_secs(5);
/// Subscriber sockets set up at once.
const SUBSCRIBE_CONCURRENCY: usize = 64;

/// Where the server is and who the benchmark is to it.
#[derive(Debug)]
struct Server {
    addr: SocketAddr,
    ws_url: String,
    origin: String,
    sources: Vec<std::net::IpAddr>,
}

impl Server {
    async fn resolve(s: &PusherServer) -> Result<Self, LoadError> {
        let resolved = Resolved::from_url(&s.url, s.source_addrs).await?;
        Ok(Self {
            addr: resolved.addr,
            ws_url: format!(
                "ws://{}/app/{}?protocol=7&client=toolmark-loadgen&version=1",
                resolved.authority, s.key
            ),
            origin: s.origin.clone(),
            sources: resolved.sources,
        })
    }

    /// The load generator's WebSocket client (as for a page), from source address `index`
    /// round-robin.
    async fn connect(&self, index: usize) -> Result<Socket, String> {
        let source = (!self.sources.is_empty()).then(|| self.sources[index % self.sources.len()]);
        crate::page::open(self.addr, source, &self.ws_url, &self.origin).await
    }
}

/// Reads until an event named `event` arrives; other events are skipped.
async fn until_event(ws: &mut Socket, event: &str) -> Result<serde_json::Value, String> {
    while let Some(frame) = ws.next().await {
        match frame.map_err(|e| format!("read: {e}"))? {
            Message::Text(text) => {
                let v: serde_json::Value =
                    serde_json::from_str(text.as_str()).map_err(|e| format!("frame: {e}"))?;
                if v["event"] == event {
                    return Ok(v);
                }
                if v["event"] == "pusher:error" {
                    return Err(format!("pusher:error {}", v["data"]));
                }
            }
            Message::Close(frame) => return Err(format!("closed: {frame:?}")),
            _ => {}
        }
    }
    Err("connection ended".into())
}

/// `pusher-handshakes`: runs the scenario and prints its JSON line and summary.
pub async fn handshakes(args: PusherHandshakeArgs) -> Result<(), LoadError> {
    let server = Arc::new(Server::resolve(&args.server).await?);
    let cost = args.server.server_pid.map(Cost::read).transpose()?;
    let rss_before = args
        .server
        .server_pid
        .map(crate::rss::read_kib)
        .transpose()?;
    let started = Instant::now();
    let results: Vec<_> = futures_util::stream::iter(0..args.connections as usize)
        .map(|index| {
            let server = Arc::clone(&server);
            async move {
                let t = Instant::now();
                let setup = async {
                    let mut ws = server.connect(index).await?;
                    let upgraded = t.elapsed();
                    until_event(&mut ws, "pusher:connection_established").await?;
                    Ok::<_, String>((ws, upgraded, t.elapsed()))
                };
                tokio::time::timeout(SETUP_TIMEOUT, setup).await
            }
        })
        .buffer_unordered(args.concurrency as usize)
        .collect()
        .await;
    let elapsed = started.elapsed();
    let (mut setups, mut established) = (Setups::new(), histogram());
    let mut open = Vec::new();
    for r in results {
        match r {
            Ok(Ok((ws, upgraded, ready))) => {
                setups.record(upgraded);
                established.saturating_record(micros(ready));
                open.push(ws);
            }
            _ => setups.failed += 1,
        }
    }
    let mut line = json!({
        "connections": args.connections,
        "concurrency": args.concurrency,
        "connected": open.len(),
        "established_p50_us": established.value_at_quantile(0.5),
        "established_p99_us": established.value_at_quantile(0.99),
        "elapsed_ms": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
    });
    setups.fields(&mut line);
    let Setups {
        hist: upgrade,
        failed,
        slow,
    } = setups;
    if let Some(cost) = cost {
        cost.report(open.len() as u64, "server", "setup", &mut line)?;
    }
    // What the server holds per open socket: every socket is still open here.
    if let (Some(pid), Some(before)) = (args.server.server_pid, rss_before) {
        let after = crate::rss::read_kib(pid)?;
        line["server_rss_before_kib"] = json!(before);
        line["server_rss_after_kib"] = json!(after);
        let per_socket = after.saturating_sub(before) as f64 / open.len().max(1) as f64;
        line["server_kib_per_socket"] = json!((per_socket * 100.0).round() / 100.0);
    }
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let human = format!(
        "pusher-handshakes: {} of {} sockets connected, {} at a time, in {:.1} s; upgrade p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms; connection_established p50 {:.2} ms, p99 {:.2} ms; {slow} past 900 ms, {failed} failed",
        open.len(),
        args.connections,
        args.concurrency,
        elapsed.as_secs_f64(),
        ms(&upgrade, 0.5),
        ms(&upgrade, 0.9),
        ms(&upgrade, 0.99),
        upgrade.max() as f64 / 1000.0,
        ms(&established, 0.5),
        ms(&established, 0.99),
    );
    report::emit(&line, &human)?;
    futures_util::future::join_all(open.iter_mut().map(|ws| ws.close(None))).await;
    Ok(())
}

/// Signs a request of the Pusher HTTP API: the query string with `auth_signature`, an
/// HMAC-SHA256 over the method, the path and the other parameters sorted by key.
fn signed_query(
    key: &str,
    secret: &str,
    path: &str,
    body: &[u8],
    timestamp: u64,
) -> Result<String, LoadError> {
    let md5 = hex::encode(Md5::digest(body));
    // Already in key order, none of the values needs escaping.
    let query =
        format!("auth_key={key}&auth_timestamp={timestamp}&auth_version=1.0&body_md5={md5}");
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .map_err(|e| LoadError::Args(format!("--secret: {e}")))?;
    mac.update(format!("POST\n{path}\n{query}").as_bytes());
    let signature = hex::encode(mac.finalize().into_bytes());
    Ok(format!("{query}&auth_signature={signature}"))
}

/// The channel subscriber `index` listens on.
fn channel(index: usize) -> String {
    format!("loadgen-{index}")
}

/// `pusher-publish`: runs the scenario and prints its JSON line and summary.
pub async fn publish(args: PusherPublishArgs) -> Result<(), LoadError> {
    let server = Arc::new(Server::resolve(&args.server).await?);
    let total = u64::from(args.rate) * args.duration_secs;
    // When each event was due and when it left, in ns since `epoch`; u64::MAX until then.
    let epoch = Instant::now();
    let due: Arc<Vec<AtomicU64>> = Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
    let sent: Arc<Vec<AtomicU64>> = Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
    let recorder = Arc::new(Recorder::default());
    let delivered = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let readers = TaskTracker::new();

    // Subscribers: one socket and one public channel each, confirmed before the first event.
    let subscribed: Vec<Result<Socket, String>> =
        futures_util::stream::iter(0..args.channels as usize)
            .map(|index| {
                let server = Arc::clone(&server);
                async move {
                    let setup = async {
                        let mut ws = server.connect(index).await?;
                        until_event(&mut ws, "pusher:connection_established").await?;
                        let subscribe = json!({
                            "event": "pusher:subscribe",
                            "data": {"channel": channel(index)},
                        });
                        ws.send(Message::text(subscribe.to_string()))
                            .await
                            .map_err(|e| format!("subscribe: {e}"))?;
                        until_event(&mut ws, "pusher_internal:subscription_succeeded").await?;
                        Ok(ws)
                    };
                    tokio::time::timeout(SETUP_TIMEOUT, setup)
                        .await
                        .unwrap_or_else(|_| Err("subscription timed out".into()))
                }
            })
            .buffer_unordered(SUBSCRIBE_CONCURRENCY)
            .collect()
            .await;
    let mut sockets = Vec::with_capacity(subscribed.len());
    for (i, s) in subscribed.into_iter().enumerate() {
        sockets.push(s.map_err(|e| LoadError::Pages(format!("subscriber {i}: {e}")))?);
    }
    for ws in sockets {
        let (due, sent, recorder, delivered, stop) = (
            due.clone(),
            sent.clone(),
            recorder.clone(),
            delivered.clone(),
            stop.clone(),
        );
        readers.spawn(async move {
            receive(ws, epoch, &due, &sent, &recorder, &delivered, &stop).await;
        });
    }
    eprintln!(
        "pusher-publish: {} subscribers ready; {} events/s for {} s",
        args.channels, args.rate, args.duration_secs
    );

    // The agent's client of `calls`, so that both sides are driven alike.
    let http = crate::agent::client_builder()
        .pool_max_idle_per_host(usize::MAX)
        .build()
        .map_err(|e| LoadError::Local(format!("http client: {e}")))?;
    let path = format!("/apps/{}/events", args.app_id);
    let events_url = format!("{}{path}", args.server.url.trim_end_matches('/'));
    let publish_errors = Arc::new(std::sync::Mutex::new(BTreeMap::<String, u64>::new()));
    let plan = Plan {
        rate: args.rate,
        total,
        max_in_flight: args.max_in_flight as usize,
    };
    let tasks = TaskTracker::new();
    let runtime = tokio::runtime::Handle::current();
    let key = args.server.key.clone();
    let secret = args.secret.clone();
    let channels = args.channels as usize;
    let (due_w, sent_w, errors_w, spawner) = (
        due.clone(),
        sent.clone(),
        publish_errors.clone(),
        tasks.clone(),
    );
    let cost = args.server.server_pid.map(Cost::read).transpose()?;
    let schedule = tokio::task::spawn_blocking(move || {
        driver::drive(plan, &runtime, &spawner, move |i, due_at| {
            let index = usize::try_from(i).unwrap_or(usize::MAX);
            let ns = move |t: Instant| u64::try_from((t - epoch).as_nanos()).unwrap_or(u64::MAX);
            due_w[index].store(ns(due_at), Ordering::Relaxed);
            let body = json!({
                "name": "loadgen",
                "channel": channel(index % channels),
                "data": i.to_string(),
            })
            .to_string();
            let timestamp = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let query = signed_query(&key, &secret, &path, body.as_bytes(), timestamp);
            let request = query.map(|q| {
                http.post(format!("{events_url}?{q}"))
                    .header("content-type", "application/json")
                    .body(body)
            });
            let (sent_w, errors_w) = (sent_w.clone(), errors_w.clone());
            async move {
                sent_w[index].store(ns(Instant::now()), Ordering::Relaxed);
                let failure = match request {
                    Err(e) => Some(e.to_string()),
                    Ok(r) => match r.send().await {
                        Ok(res) if res.status().is_success() => None,
                        Ok(res) => Some(format!("HTTP {}", res.status().as_u16())),
                        Err(e) => Some(format!("request: {e}")),
                    },
                };
                if let Some(reason) = failure {
                    *errors_w
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .entry(reason)
                        .or_default() += 1;
                }
            }
        })
    });
    let driven = schedule
        .await
        .map_err(|e| LoadError::Local(format!("publisher: {e}")))?;
    tasks.close();
    tasks.wait().await;
    let accepted = driven.sent
        - publish_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .sum::<u64>();
    let deadline = Instant::now() + DRAIN;
    while delivered.load(Ordering::Relaxed) < accepted && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    readers.close();
    readers.wait().await;

    let s = recorder.summary();
    let errors = publish_errors
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut line = json!({
        "rate": args.rate,
        "duration_secs": args.duration_secs,
        "channels": args.channels,
        "sent": driven.sent,
        "skipped": driven.skipped,
        "publish_errors": errors.values().sum::<u64>(),
        "delivered": s.ok,
        "lost": accepted.saturating_sub(s.ok),
    });
    s.latency_fields(&mut line);
    if let Some(cost) = cost {
        cost.report(driven.sent, "server", "event", &mut line)?;
    }
    let mut human = format!(
        "pusher-publish: {} published at {}/s over {} channels, {} delivered, {} skipped; {}",
        driven.sent,
        args.rate,
        args.channels,
        s.ok,
        driven.skipped,
        s.latency_text("due→delivered", "sent→delivered"),
    );
    if !errors.is_empty() {
        let reasons: Vec<String> = errors.iter().map(|(r, n)| format!("{r} ×{n}")).collect();
        human.push_str(&format!("\npublish errors: {}", reasons.join("; ")));
    }
    report::emit(&line, &human)?;
    if s.ok == 0 {
        return Err(LoadError::Failed("no event was delivered".into()));
    }
    Ok(())
}

/// Reads one subscriber's events until `stop`, recording each one's latency.
async fn receive(
    mut ws: Socket,
    epoch: Instant,
    due: &[AtomicU64],
    sent: &[AtomicU64],
    recorder: &Recorder,
    delivered: &AtomicU64,
    stop: &CancellationToken,
) {
    loop {
        let frame = tokio::select! {
            () = stop.cancelled() => break,
            f = ws.next() => f,
        };
        let Some(Ok(frame)) = frame else { break };
        let Message::Text(text) = frame else { continue };
        let arrived = Instant::now();
        let Ok(v) = serde_json::from_str::<serde_json::Value>(text.as_str()) else {
            continue;
        };
        if v["event"] != "loadgen" {
            continue;
        }
        let Some(i) = v["data"].as_str().and_then(|d| d.parse::<usize>().ok()) else {
            recorder.error("an event without its number".into());
            continue;
        };
        let (Some(due), Some(sent)) = (due.get(i), sent.get(i)) else {
            recorder.error("an event number out of range".into());
            continue;
        };
        let at = |ns: &AtomicU64| epoch + Duration::from_nanos(ns.load(Ordering::Relaxed));
        recorder.ok(
            arrived.saturating_duration_since(at(due)),
            arrived.saturating_duration_since(at(sent)),
        );
        delivered.fetch_add(1, Ordering::Relaxed);
    }
    let _ = ws.close(None).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_pusher_http_apis() {
        // The example of the Pusher HTTP API reference's authentication section: key
        // 278d425bdf160c739803, secret 7ad3773142a6692b25b8, this body, at 1353088179.
        let body = br#"{"name":"foo","channels":["project-3"],"data":"{\"some\":\"data\"}"}"#;
        let q = signed_query(
            "278d425bdf160c739803",
            "7ad3773142a6692b25b8",
            "/apps/3/events",
            body,
            1_353_088_179,
        )
        .unwrap();
        assert_eq!(
            q,
            "auth_key=278d425bdf160c739803&auth_timestamp=1353088179&auth_version=1.0&body_md5=ec365a775a4cd0599faeb73354201b6f&auth_signature=da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c"
        );
    }
}
