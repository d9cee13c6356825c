//! The nodes' shared traffic figures (`SharedTraffic`), on memory, Redis and Redis Cluster: each
//! node's entry of a tenant reads back from any node, replaced by its next write, until it
//! lapses; a node that stops writing drops out while the others stay.

use std::collections::BTreeMap;
use std::time::Duration;

use toolmark_broker::{NodeTraffic, TrafficEntry};

use crate::contract;
use crate::support::{Backend, Nodes, eventually, short};

fn figures(ok: u64, second: u64) -> NodeTraffic {
    NodeTraffic {
        seconds: vec![0, second, 0, 0],
        outcomes: BTreeMap::from([("ok".to_owned(), ok)]),
        refusals: BTreeMap::from([("rate_limited".to_owned(), 1)]),
        unauthenticated: 2,
        incarnation: Some(7),
    }
}

fn nodes_of(entries: &[TrafficEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.node.as_str()).collect()
}

async fn a_nodes_traffic_reads_back_until_it_lapses(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (a, _) = nodes.node("n1").await;
    let (b, _) = nodes.node("n2").await;
    let lapse = Duration::from_millis(800);
    let before = toolmark_broker::now_ms();
    a.put_traffic("t", &figures(3, 2), lapse).await.unwrap();
    a.put_traffic("t", &figures(5, 4), lapse).await.unwrap();
    let read = b.traffic("t").await.unwrap();
    assert_eq!(nodes_of(&read), ["n1"], "{read:?}");
    assert_eq!(read[0].traffic, figures(5, 4), "the last write replaces");
    assert!((read[0].traffic.calls_per_second() - 1.0).abs() < 1e-9);
    // Stamped by the broker's clock, which this host shares.
    assert!(read[0].written_ms + 1_000 >= before, "{read:?}");
    assert!(a.traffic("other").await.unwrap().is_empty());
    eventually(Duration::from_secs(10), "the entry lapses", || {
        let b = b.clone();
        async move { b.traffic("t").await.unwrap().is_empty().then_some(()) }
    })
    .await;
}
contract!(a_nodes_traffic_reads_back_until_it_lapses);

async fn a_node_that_stops_writing_drops_out_and_the_others_stay(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (a, _) = nodes.node("n1").await;
    let (b, _) = nodes.node("n2").await;
    b.put_traffic("t", &figures(7, 0), Duration::from_millis(800))
        .await
        .unwrap();
    a.put_traffic("t", &figures(1, 1), Duration::from_secs(60))
        .await
        .unwrap();
    let read = a.traffic("t").await.unwrap();
    if backend == Backend::Memory {
        // One process, one node: its last write is its entry.
        assert_eq!(nodes_of(&read), ["n1"]);
        assert_eq!(read[0].traffic, figures(1, 1));
        return;
    }
    assert_eq!(nodes_of(&read), ["n1", "n2"], "{read:?}");
    let total: u64 = read.iter().map(|e| e.traffic.outcomes["ok"]).sum();
    assert_eq!(total, 8);
    let left = eventually(Duration::from_secs(10), "n2's entry lapses", || {
        let b = b.clone();
        async move {
            let read = b.traffic("t").await.unwrap();
            (read.len() == 1).then_some(read)
        }
    })
    .await;
    assert_eq!(nodes_of(&left), ["n1"]);
    assert_eq!(left[0].traffic, figures(1, 1));
}
contract!(a_node_that_stops_writing_drops_out_and_the_others_stay);
