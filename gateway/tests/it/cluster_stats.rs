//! The stats' call figures cluster-wide: each node writes its counts of a tenant into the
//! broker every `server.stats_flush_ms`, and any node's stats sum the entries of the nodes
//! still writing; a stopped node's entry lapses after five intervals and drops out.

use serde_json::json;

use crate::admin::{admin, create, live_page, minted, until};
use crate::console::stats;
use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_through_one_node_are_counted_on_the_other_until_it_stops() {
    // Flushed every 200 ms: an entry lapses 1 s after its node's last write.
    let mut nodes =
        Gateway::start_admin_nodes_env(2, None, &[("TOOLMARK_SERVER__STATS_FLUSH_MS", "200")])
            .await;
    let secrets = create(&nodes[0], "stat-wide").await;
    let key = secrets["apiKey"].as_str().unwrap();
    let token = minted(&nodes[0], "stat-wide", key, "u1", "c1").await;
    let mut page = live_page(&nodes[0], "stat-wide", key, &token, "u1").await;

    // Three calls supervised by node 1, one refusal on node 1.
    let agent = nodes[0].agent("stat-wide", key);
    for _ in 0..3 {
        let pending = agent.call_later("u1", "c1", json!({"tool": "todo.add", "input": {}}));
        answer_ok(&mut page, pending, "done").await;
    }
    let wrong = nodes[0].agent("stat-wide", "tmk_not-a-key-of-this-tenant");
    let r = wrong
        .post(
            "/users/u1/conversations/c1/calls",
            json!({"tool": "todo.add", "input": {}}),
        )
        .await;
    assert_eq!(r.status, 401, "{}", r.body);
    until("node 2 counts node 1's calls", || async {
        let s = stats(&nodes[1], "stat-wide").await;
        s["cluster"]["calls"] == json!({"ok": 3})
            && s["cluster"]["refusals"] == json!({})
            && s["cluster"]["unauthenticated"] == 1
            && s["cluster"]["nodes"] == 1
    })
    .await;
    let s = stats(&nodes[1], "stat-wide").await;
    assert_eq!(s["node"]["calls"], json!({}), "node 2 supervised none: {s}");
    until("the cluster's rate holds the calls", || async {
        let s = stats(&nodes[1], "stat-wide").await;
        s["cluster"]["callsPerSecond"].as_f64() == Some(0.3)
    })
    .await;

    // One call supervised by node 2 (its page is on node 1): both nodes' entries are summed.
    let agent2 = nodes[1].agent("stat-wide", key);
    let pending = agent2.call_later("u1", "c1", json!({"tool": "todo.add", "input": {}}));
    answer_ok(&mut page, pending, "done").await;
    until("both nodes are summed", || async {
        let s = stats(&nodes[0], "stat-wide").await;
        s["cluster"]["calls"] == json!({"ok": 4}) && s["cluster"]["nodes"] == 2
    })
    .await;
    let all = admin(&nodes[1], "GET", "/admin/v1/stats", None).await;
    assert_eq!(all.status, 200, "{}", all.body);
    assert_eq!(all.body["cluster"]["calls"]["ok"], 4, "{}", all.body);
    let line = all.body["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "stat-wide")
        .cloned()
        .unwrap_or_else(|| panic!("{}", all.body));
    assert!(line["callsPerSecond"].as_f64().unwrap() > 0.0, "{line}");

    // Node 1 stops: its entry lapses, node 2's stays.
    drop(page);
    nodes[0].stop();
    until("node 1's entry lapses", || async {
        let s = stats(&nodes[1], "stat-wide").await;
        s["cluster"]["calls"] == json!({"ok": 1}) && s["cluster"]["nodes"] == 1
    })
    .await;
}
