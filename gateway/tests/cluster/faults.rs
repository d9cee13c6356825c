//! The faults of a Redis Cluster's ordinary life, each under call load through two nodes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use toolmark_broker::{ConvKey, partition};
use toolmark_testkit::redis::RedisCluster;

use crate::harness::{Gateway, config_with, fresh_prefix, redis_broker, tool};
use crate::load::{self, Got, Tally};

/// The cluster's `cluster-node-timeout`, as in production tuning guides: a master that does not
/// answer for 2 s is failed and its replica promoted.
const NODE_TIMEOUT_MS: u32 = 2000;

/// Agents calling at once.
const WORKERS: usize = 4;

/// How long a worker waits between two calls.
const PAUSE: Duration = Duration::from_millis(50);

/// Pages on each node.
const PAGES_PER_NODE: usize = 5;

/// How long every page may stay unreachable after a topology change ends (the goal is 2 s;
/// the test allows for a busy machine).
const RECOVERY: Duration = Duration::from_secs(8);

/// How long pages may stay unreachable after the pub/sub connections were killed: the goal.
const PUBSUB_RECOVERY: Duration = Duration::from_secs(2);

/// How many times each fault is done in one test: 1, or `TOOLMARK_FAULT_ROUNDS` (`make
/// cluster-faults` runs more, for the figures in `docs/benchmarks.md`).
fn rounds() -> usize {
    std::env::var("TOOLMARK_FAULT_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// The slowest recovery of `recoveries`.
fn slowest(recoveries: &[Duration]) -> Duration {
    recoveries.iter().max().copied().unwrap_or_default()
}

/// Two gateway nodes on `cluster` under one fresh prefix, with `extra` at the end of the config
/// (in the last tenant's table: acme's).
async fn two_nodes_with(cluster: &RedisCluster, extra: &str) -> Arc<Vec<Gateway>> {
    toolmark_testkit::logs();
    let broker = redis_broker(&cluster.url(), &fresh_prefix());
    let mut nodes = Vec::new();
    for i in 1..=2 {
        let text = config_with(&broker, extra);
        nodes.push(Gateway::start_config(&text, Some(format!("node-{i}"))).await);
    }
    Arc::new(nodes)
}

/// A cluster of the test's own, two nodes on it (with `extra` config), their pages, and the
/// agents' load started: `workers` calling, `pause` between a worker's calls.
async fn under_load(
    extra: &str,
    workers: usize,
    pause: Duration,
) -> (RedisCluster, Arc<Vec<Gateway>>, load::Pages, load::Load) {
    let cluster = RedisCluster::start_with_node_timeout(NODE_TIMEOUT_MS);
    let nodes = two_nodes_with(&cluster, extra).await;
    let pages = load::pages(&nodes, PAGES_PER_NODE).await;
    let running = load::start(Arc::clone(&nodes), pages.spots.clone(), workers, pause);
    (cluster, nodes, pages, running)
}

/// A webhook receiver on loopback answering 200: the `webhook-id` and body of every request,
/// and the tenant settings that send acme's events there.
async fn webhook_receiver() -> (Arc<Mutex<Vec<(String, String)>>>, String) {
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |h: axum::http::HeaderMap, body: axum::body::Bytes| {
            let sink = Arc::clone(&sink);
            async move {
                let id = h
                    .get("webhook-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let body = String::from_utf8_lossy(&body).into_owned();
                sink.lock().unwrap().push((id, body));
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let tenant = format!(
        "webhook_url = \"{hook}\"\nwebhook_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nwebhook_allow_private = true"
    );
    (seen, tenant)
}

/// What every fault test asserts of the load it ran: answers and 503s only, never a call that
/// timed out because its frame reached no page.
/// The line `make cluster-faults` collects: counts and the slowest recovery.
fn only_answers_and_503s(
    tally: &Tally,
    what: &str,
    faults: usize,
    recovery: Duration,
    timeouts_allowed: bool,
) {
    let ok = tally.count(&Got::Ok);
    let unavailable = tally.count(&Got::Unavailable);
    eprintln!(
        "FIGURES | {what} | {faults} | {} | {ok} | {unavailable} | {} | {} ms |",
        tally.got.len(),
        tally.count(&Got::Timeout),
        recovery.as_millis()
    );
    assert!(ok > 0, "{what}: no call was answered");
    let others: Vec<&Got> = tally
        .others()
        .into_iter()
        .filter(|g| !(timeouts_allowed && **g == Got::Timeout))
        .collect();
    assert!(
        others.is_empty(),
        "{what}: calls got neither the page's answer nor a 503: {others:?} (timed out: {:?})",
        tally.timed_out
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_planned_failover_of_each_master_leaves_every_page_reachable_and_no_call_timed_out() {
    let (cluster, nodes, pages, running) = under_load("", WORKERS, PAUSE).await;
    let mut recoveries = Vec::new();
    for _ in 0..rounds() {
        for master in cluster.masters() {
            tokio::task::block_in_place(|| cluster.failover(master));
            recoveries.push(load::every_page_answers(&nodes, &pages.spots, RECOVERY).await);
        }
    }
    let tally = running.stop().await;
    let what = "`CLUSTER FAILOVER` of each master in turn";
    only_answers_and_503s(&tally, what, recoveries.len(), slowest(&recoveries), false);
    load::records_agree(&nodes, &tally, 30, None).await;
    assert_eq!(pages.stop().await, 0, "pages were closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_master_is_replaced_and_every_page_answers_again() {
    let (mut cluster, nodes, pages, running) = under_load("", WORKERS, PAUSE).await;
    // The master of the first page's partition: its calls cannot be placed until the replica
    // takes over.
    let first = &pages.spots[0];
    let slot = cluster.slot_of(&format!(
        "p{}",
        partition::of_conv(&ConvKey::new("acme", &first.user, &first.conversation))
    ));
    let master = cluster.owner_of(slot);
    let killed = Instant::now();
    tokio::task::block_in_place(|| cluster.kill_master(master));
    let promoted = killed.elapsed();
    let recovery = load::every_page_answers(&nodes, &pages.spots, RECOVERY).await;
    let tally = running.stop().await;
    // While the master is down, the Redis client pauses every command as it reconnects to it
    // (2 s command timeouts on live masters' commands too): a call placed on a live master in
    // that window may have its page's answer reach Redis after the deadline. Such calls are
    // told `timeout` honestly, and only then: at most one per worker, within the outage.
    let outage = (killed, killed + promoted + RECOVERY);
    let timeouts = tally.timed_out.len();
    assert!(
        timeouts <= WORKERS
            && tally
                .timed_out
                .iter()
                .all(|(t, _)| (outage.0..=outage.1).contains(t)),
        "timeouts outside the outage, or more than one per worker: {:?}",
        tally.timed_out
    );
    let what = format!(
        "a master killed (`SIGKILL`; its replica promoted {} ms later)",
        promoted.as_millis()
    );
    only_answers_and_503s(&tally, &what, 1, recovery, true);
    let lost = (killed - Duration::from_secs(1), killed + promoted);
    load::records_agree(&nodes, &tally, 30, Some(lost)).await;
    assert_eq!(pages.stop().await, 0, "pages were closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_pubsub_connections_are_restored_without_any_request() {
    let (cluster, nodes, pages, running) = under_load("", 2, Duration::from_millis(20)).await;
    let mut recoveries = Vec::new();
    for _ in 0..rounds() {
        let killed = tokio::task::block_in_place(|| cluster.kill_pubsub_clients());
        assert!(
            killed >= 2,
            "each node subscribes: {killed} connections killed"
        );
        // No /readyz, no other request than the calls themselves.
        recoveries.push(load::every_page_answers(&nodes, &pages.spots, PUBSUB_RECOVERY).await);
    }
    let tally = running.stop().await;
    let what = "pub/sub connections killed (`CLIENT KILL TYPE pubsub`)";
    only_answers_and_503s(&tally, what, recoveries.len(), slowest(&recoveries), false);
    assert_eq!(pages.stop().await, 0, "pages were closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reshard_of_live_conversations_and_of_the_event_stream_loses_no_page_and_no_event() {
    let (hooks, tenant) = webhook_receiver().await;
    let (cluster, nodes, pages, running) = under_load(&tenant, WORKERS, PAUSE).await;
    // An event reader opened before anything moves, on node 2.
    let mut events = nodes[1].acme().events("", None).await;
    // Every slot holding a live conversation's partition moves to the next master, then the
    // slot of the tenant's event stream.
    let mut slots: Vec<u16> = pages
        .spots
        .iter()
        .map(|s| {
            let k = partition::of_conv(&ConvKey::new("acme", &s.user, &s.conversation));
            cluster.slot_of(&format!("p{k}"))
        })
        .collect();
    slots.sort_unstable();
    slots.dedup();
    slots.push(cluster.slot_of("acme"));
    let mut recoveries = Vec::new();
    for _ in 0..rounds() {
        for slot in &slots {
            let masters = cluster.masters();
            let from = cluster.owner_of(*slot);
            let at = masters.iter().position(|m| *m == from).unwrap();
            let to = masters[(at + 1) % masters.len()];
            tokio::task::block_in_place(|| cluster.move_slot(*slot, to));
        }
        recoveries.push(load::every_page_answers(&nodes, &pages.spots, RECOVERY).await);
    }
    // An event after the move reaches the reader opened before it, once.
    let mut page = nodes[0].page("acme", "reshard", "c").await;
    page.manifest(1, json!([tool("todo.add", json!({}))])).await;
    let first = events.next_of("page.manifest").await;
    assert_eq!(first.data["data"]["user"], "reshard", "{:?}", first.data);
    // Not twice: nothing more of that page within a second.
    while let Some(e) = events.next_within(Duration::from_secs(1)).await {
        assert!(
            !(e.event == "page.manifest" && e.data["data"]["user"] == "reshard"),
            "the event came twice: {:?}",
            e.data
        );
    }
    // The webhook consumer follows the stream to its new owner: the event is delivered once.
    let deadline = Instant::now() + RECOVERY;
    let delivered = |hooks: &Mutex<Vec<(String, String)>>| {
        hooks
            .lock()
            .unwrap()
            .iter()
            .filter(|(id, body)| *id == first.id && body.contains("reshard"))
            .count()
    };
    while delivered(&hooks) == 0 {
        assert!(Instant::now() < deadline, "the event's webhook never came");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A reader opened now reads the stream at its new owner: it replays what followed an id.
    let mut later = nodes[1].acme().events("", Some("0-0")).await;
    let replayed = later.next_of("page.manifest").await;
    assert!(!replayed.id.is_empty());
    let tally = running.stop().await;
    let what = "reshard: every live conversation's slot and the event stream's";
    only_answers_and_503s(&tally, what, recoveries.len(), slowest(&recoveries), false);
    load::records_agree(&nodes, &tally, 30, None).await;
    assert_eq!(pages.stop().await, 0, "pages were closed");
    // Seconds after it was first delivered, still once.
    assert_eq!(delivered(&hooks), 1, "the event's webhook came twice");
}
