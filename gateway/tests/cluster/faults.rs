//! The faults of a Redis Cluster's ordinary life, each under call load through two nodes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolmark_broker::{ConvKey, partition};
use toolmark_testkit::redis::RedisCluster;

use crate::harness::{Gateway, config_with, fresh_prefix, redis_broker, tool};
use crate::load::{self, Got, Tally};

/// The cluster's `cluster-node-timeout`, as in production tuning guides: a master that does not
/// answer for 2 s is failed and its replica promoted.
const NODE_TIMEOUT_MS: u32 = 2000;

/// Pages on each node.
const PAGES_PER_NODE: usize = 5;

/// How long every page may stay unreachable after a topology change ends (the goal is 2 s;
/// the test allows for a busy machine).
const RECOVERY: Duration = Duration::from_secs(8);

/// Two gateway nodes on `cluster` under one fresh prefix.
async fn two_nodes(cluster: &RedisCluster) -> Arc<Vec<Gateway>> {
    let broker = redis_broker(&cluster.url(), &fresh_prefix());
    let mut nodes = Vec::new();
    for i in 1..=2 {
        nodes.push(
            Gateway::start_config(&config_with(&broker, ""), Some(format!("node-{i}"))).await,
        );
    }
    Arc::new(nodes)
}

/// What every fault test asserts of the load it ran: answers and 503s only, never a call that
/// timed out because its frame reached no page.
fn only_answers_and_503s(tally: &Tally, what: &str) {
    let ok = tally.count(&Got::Ok);
    let unavailable = tally.count(&Got::Unavailable);
    eprintln!(
        "{what}: {ok} answered, {unavailable} × 503 of {} calls",
        tally.got.len()
    );
    assert!(ok > 0, "{what}: no call was answered");
    assert!(
        tally.others().is_empty(),
        "{what}: calls got neither the page's answer nor a 503: {:?}",
        tally.others()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_planned_failover_of_each_master_leaves_every_page_reachable_and_no_call_timed_out() {
    let cluster = RedisCluster::start_with_node_timeout(NODE_TIMEOUT_MS);
    let nodes = two_nodes(&cluster).await;
    let pages = load::pages(&nodes, PAGES_PER_NODE).await;
    let running = load::start(
        Arc::clone(&nodes),
        pages.spots.clone(),
        4,
        Duration::from_millis(50),
    );
    for master in cluster.masters() {
        tokio::task::block_in_place(|| cluster.failover(master));
        let slowest = load::every_page_answers(&nodes, &pages.spots, RECOVERY).await;
        eprintln!("after the failover of server {master}: every page answered within {slowest:?}");
    }
    let tally = running.stop().await;
    only_answers_and_503s(&tally, "three planned failovers");
    assert_eq!(pages.stop().await, 0, "pages were closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_master_is_replaced_and_every_page_answers_again() {
    let mut cluster = RedisCluster::start_with_node_timeout(NODE_TIMEOUT_MS);
    let nodes = two_nodes(&cluster).await;
    let pages = load::pages(&nodes, PAGES_PER_NODE).await;
    let running = load::start(
        Arc::clone(&nodes),
        pages.spots.clone(),
        4,
        Duration::from_millis(50),
    );
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
    let slowest = load::every_page_answers(&nodes, &pages.spots, RECOVERY).await;
    eprintln!("replica promoted after {promoted:?}; every page answered {slowest:?} later");
    let tally = running.stop().await;
    only_answers_and_503s(&tally, "a killed master");
    assert_eq!(pages.stop().await, 0, "pages were closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_pubsub_connections_are_restored_without_any_request() {
    let cluster = RedisCluster::start_with_node_timeout(NODE_TIMEOUT_MS);
    let nodes = two_nodes(&cluster).await;
    let pages = load::pages(&nodes, PAGES_PER_NODE).await;
    let killed = tokio::task::block_in_place(|| cluster.kill_pubsub_clients());
    assert!(
        killed >= 2,
        "each node subscribes: {killed} connections killed"
    );
    // No /readyz, no other request than the calls themselves.
    let slowest = load::every_page_answers(&nodes, &pages.spots, RECOVERY).await;
    eprintln!("every page answered within {slowest:?} of the kill");
    let running = load::start(
        Arc::clone(&nodes),
        pages.spots.clone(),
        2,
        Duration::from_millis(20),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tally = running.stop().await;
    assert_eq!(
        tally.count(&Got::Ok),
        tally.got.len(),
        "after the recovery every call is answered: {:?}",
        tally.others()
    );
    assert_eq!(pages.stop().await, 0, "pages were closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reshard_of_live_conversations_and_of_the_event_stream_loses_no_page_and_no_event() {
    let cluster = RedisCluster::start_with_node_timeout(NODE_TIMEOUT_MS);
    let nodes = two_nodes(&cluster).await;
    let pages = load::pages(&nodes, PAGES_PER_NODE).await;
    // An event reader opened before anything moves, on node 2.
    let mut events = nodes[1].acme().events("", None).await;
    let running = load::start(
        Arc::clone(&nodes),
        pages.spots.clone(),
        4,
        Duration::from_millis(50),
    );
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
    for slot in slots {
        let masters = cluster.masters();
        let from = cluster.owner_of(slot);
        let to = masters[(masters.iter().position(|m| *m == from).unwrap() + 1) % masters.len()];
        tokio::task::block_in_place(|| cluster.move_slot(slot, to));
    }
    let slowest = load::every_page_answers(&nodes, &pages.spots, RECOVERY).await;
    eprintln!("after the reshard every page answered within {slowest:?}");
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
    // A reader opened now reads the stream at its new owner: it replays what followed an id.
    let mut later = nodes[1].acme().events("", Some("0-0")).await;
    let replayed = later.next_of("page.manifest").await;
    assert!(!replayed.id.is_empty());
    let tally = running.stop().await;
    only_answers_and_503s(&tally, "a reshard");
    assert_eq!(pages.stop().await, 0, "pages were closed");
}
