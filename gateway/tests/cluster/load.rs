//! Pages that answer every call, on both nodes, and an agent calling each page through the
//! other node at a steady rate, tallying what it got and when.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

use crate::harness::{Gateway, tool};

/// What an answer was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Got {
    /// The page's answer.
    Ok,
    /// 503 `unavailable` with `Retry-After`: nothing happened, try again.
    Unavailable,
    /// `{"status": "timeout"}`: the call was placed and the page's answer never came.
    Timeout,
    /// Anything else (status and body).
    Other(String),
}

/// One page: where it is and who calls it.
#[derive(Debug, Clone)]
pub struct Spot {
    /// The node holding its socket (an index of the nodes).
    pub on: usize,
    pub user: String,
    pub conversation: String,
}

/// Pages answering calls until told to stop; each reports whether its socket closed.
pub struct Pages {
    pub spots: Vec<Spot>,
    stop: Arc<AtomicBool>,
    answerers: Vec<JoinHandle<bool>>,
}

/// `per_node` pages on each of `nodes`, current and seen from the other node.
pub async fn pages(nodes: &[Gateway], per_node: usize) -> Pages {
    let stop = Arc::new(AtomicBool::new(false));
    let mut spots = Vec::new();
    let mut answerers = Vec::new();
    for (on, node) in nodes.iter().enumerate() {
        for j in 0..per_node {
            let spot = Spot {
                on,
                user: format!("u{on}-{j}"),
                conversation: "c".into(),
            };
            let mut page = node.page("acme", &spot.user, &spot.conversation).await;
            page.manifest(1, json!([tool("todo.add", json!({}))])).await;
            let other = &nodes[(on + 1) % nodes.len()];
            other
                .acme()
                .wait_current(&spot.user, &spot.conversation, &page.client_id)
                .await;
            answerers.push(tokio::spawn(answer_all(page, Arc::clone(&stop))));
            spots.push(spot);
        }
    }
    Pages {
        spots,
        stop,
        answerers,
    }
}

/// Answers every call `ok` (its data the call's id); `true` when the socket closed.
async fn answer_all(mut page: crate::harness::Page, stop: Arc<AtomicBool>) -> bool {
    while !stop.load(Ordering::Relaxed) {
        let next = tokio::time::timeout(Duration::from_millis(200), page.ws.next()).await;
        let text = match next {
            Err(_) => continue,
            Ok(Some(Ok(Message::Text(t)))) => t,
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => continue,
            Ok(_) => return true,
        };
        let frame: Value = serde_json::from_str(text.as_str()).unwrap_or_default();
        if frame["type"] != "call" || frame["clientId"] != page.client_id.as_str() {
            continue;
        }
        let id = frame["id"].as_str().unwrap_or_default().to_owned();
        if !page.seen.insert(id.clone()) {
            continue;
        }
        let answer = json!({"protocol": 1, "type": "result", "clientId": page.client_id, "id": id,
            "result": {"status": "ok", "data": id}});
        if page
            .ws
            .send(Message::Text(answer.to_string().into()))
            .await
            .is_err()
        {
            return true;
        }
    }
    false
}

impl Pages {
    /// Stops the pages; the number whose socket closed on them.
    pub async fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        let mut closed = 0;
        for a in self.answerers {
            if a.await.unwrap_or(true) {
                closed += 1;
            }
        }
        closed
    }
}

/// One call of `spot` through the node that does not hold it, answered within `timeout_ms`.
pub async fn call(nodes: &[Gateway], spot: &Spot, timeout_ms: u64) -> Got {
    call_with_id(nodes, spot, timeout_ms).await.0
}

/// [`call`], with the call's id when the page answered.
pub async fn call_with_id(
    nodes: &[Gateway],
    spot: &Spot,
    timeout_ms: u64,
) -> (Got, Option<String>) {
    let via = &nodes[(spot.on + 1) % nodes.len()];
    let a = via
        .acme()
        .post(
            &format!(
                "/users/{}/conversations/{}/calls",
                spot.user, spot.conversation
            ),
            json!({"tool": "todo.add", "input": {}, "timeoutMs": timeout_ms}),
        )
        .await;
    let id = a.body["id"].as_str().map(str::to_owned);
    let got = match (a.status, a.body["outcome"]["status"].as_str()) {
        (200, Some("ok")) if a.body["outcome"]["data"].as_str() == id.as_deref() => Got::Ok,
        (200, Some("timeout")) => Got::Timeout,
        (503, _) if a.body["code"] == "unavailable" && a.headers.contains_key("retry-after") => {
            Got::Unavailable
        }
        (status, _) => Got::Other(format!("{status} {}", a.body)),
    };
    (got, id)
}

/// Calls every page in turn, `workers` at a time with `pause` between a worker's calls, until
/// stopped: every answer with when it came.
pub struct Load {
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<Vec<(Instant, Got, Answered)>>>,
}

/// Starts calling `spots` through `nodes` (shared with the test by `Arc`).
pub fn start(nodes: Arc<Vec<Gateway>>, spots: Vec<Spot>, workers: usize, pause: Duration) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let spots = Arc::new(spots);
    let workers = (0..workers)
        .map(|w| {
            let (nodes, spots, stop) = (Arc::clone(&nodes), Arc::clone(&spots), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut i = w;
                while !stop.load(Ordering::Relaxed) {
                    let spot = &spots[i % spots.len()];
                    let (g, id) = call_with_id(&nodes, spot, 3000).await;
                    let answered = id
                        .filter(|_| matches!(g, Got::Ok | Got::Timeout))
                        .map(|id| (spot.clone(), id));
                    got.push((Instant::now(), g, answered));
                    i += 1;
                    tokio::time::sleep(pause).await;
                }
                got
            })
        })
        .collect();
    Load { stop, workers }
}

/// The page and id of a call the page answered.
type Answered = Option<(Spot, String)>;

/// Every answer of a load, in the order they came.
#[derive(Debug)]
pub struct Tally {
    pub got: Vec<(Instant, Got)>,
    /// The calls the pages answered, with when.
    pub answered: Vec<(Instant, Spot, String)>,
    /// The calls answered `timeout`, with when.
    pub timed_out: Vec<(Instant, String)>,
}

impl Tally {
    pub fn count(&self, what: &Got) -> usize {
        self.got.iter().filter(|(_, g)| g == what).count()
    }

    /// What was neither an answer nor a 503.
    pub fn others(&self) -> Vec<&Got> {
        self.got
            .iter()
            .map(|(_, g)| g)
            .filter(|g| !matches!(g, Got::Ok | Got::Unavailable))
            .collect()
    }
}

impl Load {
    pub async fn stop(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        let mut got = Vec::new();
        let mut answered = Vec::new();
        let mut timed_out = Vec::new();
        for w in self.workers {
            for (t, g, a) in w.await.unwrap() {
                match (&g, a) {
                    (Got::Ok, Some((spot, id))) => answered.push((t, spot, id)),
                    (Got::Timeout, Some((_, id))) => timed_out.push((t, id)),
                    _ => {}
                }
                got.push((t, g));
            }
        }
        got.sort_by_key(|(t, _)| *t);
        Tally {
            got,
            answered,
            timed_out,
        }
    }
}

/// Calls each page until it answers (503s retried), within `bound`: how long the slowest
/// took. Panics naming a page that did not answer.
pub async fn every_page_answers(nodes: &[Gateway], spots: &[Spot], bound: Duration) -> Duration {
    let started = Instant::now();
    for spot in spots {
        loop {
            match call(nodes, spot, 2000).await {
                Got::Ok => break,
                got => assert!(
                    started.elapsed() < bound,
                    "page {}/{} on node {} still unreachable after {bound:?}: {got:?}",
                    spot.user,
                    spot.conversation,
                    spot.on + 1
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    started.elapsed()
}

/// `GET /calls/{id}` on the node of each call's page (not the one that placed it) agrees with
/// what the agent was told, for `n` of the answered calls spread over the run. A call answered
/// within `lost` may be gone (404): the last writes a killed master had not yet sent to its
/// replica are lost with it (Redis replicates asynchronously).
pub async fn records_agree(
    nodes: &[Gateway],
    tally: &Tally,
    n: usize,
    lost: Option<(Instant, Instant)>,
) {
    let step = (tally.answered.len() / n.max(1)).max(1);
    for (at, spot, id) in tally.answered.iter().step_by(step) {
        let record = nodes[spot.on].acme().get(&format!("/calls/{id}")).await;
        if record.status == 404 && lost.is_some_and(|(from, to)| (from..=to).contains(at)) {
            eprintln!("call {id}, answered as its master died, is gone with its writes");
            continue;
        }
        assert_eq!(
            (
                record.status,
                record.body["outcome"]["status"].as_str(),
                record.body["outcome"]["data"].as_str()
            ),
            (200, Some("ok"), Some(id.as_str())),
            "call {id}: {}",
            record.body
        );
    }
}
