//! A Redis Cluster master stalls (`SIGSTOP`, shorter than the cluster's node timeout: no
//! failover, its connections stay open) while the page of a conversation on its slots approves
//! a confirmation, then while the page leaves: the page's node holds each, applies it once when
//! the master answers, and its event is emitted once.

use std::time::Duration;

use serde_json::{Value, json};
use toolmark_broker::{ConvKey, partition};
use toolmark_testkit::redis::RedisCluster;

use crate::agent::{confirmed, count, log_until_manifest, needs_confirmation};
use crate::harness::{Gateway, config_with, fresh_prefix, redis_broker, tool};

/// The page's tools: the one the call names.
fn tools() -> Value {
    json!([tool("signup.submit", json!({}))])
}

/// How long the master stalls: three times a node's command timeout.
const STALL: Duration = Duration::from_secs(6);

#[tokio::test]
async fn a_confirmation_and_a_page_leaving_while_the_master_stalls_are_applied_and_announced_once()
{
    toolmark_testkit::logs();
    let cluster = RedisCluster::start_with_node_timeout(30_000);
    let broker = redis_broker(&cluster.url(), &fresh_prefix());
    let n1 = Gateway::start_config(&config_with(&broker, ""), Some("node-1".into())).await;
    let n2 = Gateway::start_config(&config_with(&broker, ""), Some("node-2".into())).await;
    let mut page = n1.page("acme", "u1", "c1").await;
    page.manifest(1, tools()).await;
    n2.acme().wait_current("u1", "c1", &page.client_id).await;
    let mut events = n2.acme().events("", None).await;
    let k = partition::of_conv(&ConvKey::new("acme", "u1", "c1"));
    let master = cluster.owner_of(cluster.slot_of(&format!("{{p{k}}}")));

    // The page answers needs_confirmation, then the user approves while the master stalls.
    let confirm_id = needs_confirmation(&n2, &mut page).await;
    cluster.nodes[master].pause();
    page.send(confirmed(&page, &confirm_id)).await;
    n1.wait_metric("toolmark_frames_held_total", 1.0).await;
    tokio::time::sleep(STALL).await;
    cluster.nodes[master].resume();
    let ev = events.next_of("confirmation.resolved").await;
    assert_eq!(ev.data["data"]["confirmId"], confirm_id.as_str());
    assert_eq!(ev.data["data"]["outcome"]["data"], "signed up");

    // The page leaves while the master stalls.
    let client_id = page.client_id.clone();
    cluster.nodes[master].pause();
    drop(page);
    n1.wait_metric("toolmark_frames_held_total", 2.0).await;
    tokio::time::sleep(STALL).await;
    cluster.nodes[master].resume();
    let ev = events.next_of("page.disconnected").await;
    assert_eq!(ev.data["data"]["clientId"], client_id.as_str());

    // Once each in the log.
    let mut next = n1.page("acme", "u1", "c1").await;
    let log = log_until_manifest(&n2, &mut next, 2, tools()).await;
    assert_eq!(count(&log, "confirmation.resolved"), 1, "{log:?}");
    assert_eq!(count(&log, "page.disconnected"), 1, "{log:?}");
    n1.wait_metric("toolmark_frames_holding", 0.0).await;
    assert_eq!(
        n1.metric("toolmark_frames_dropped_total{reason=\"hold_time\"}")
            .await,
        0.0
    );
}
