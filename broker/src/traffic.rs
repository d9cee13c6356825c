//! Each node's traffic figures of a tenant, shared so that any node can sum the cluster's: a
//! node writes its counts of a tenant (calls finished by outcome status, agent requests refused
//! by problem code, finished calls in each of the last whole seconds) every flush interval, each
//! entry under its node id with its time to live; the readers sum the entries still alive. A
//! node that stops writing (stopped, crashed, cut off) drops out once its entry lapses.
//!
//! Entries are written and lapse by the broker's clock (Redis's `TIME`, the memory broker's
//! own), so nodes whose clocks disagree still agree on which entries are alive.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::BrokerError;

/// One node's counts of one tenant, as it last wrote them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeTraffic {
    /// Finished calls in each whole second of the rate window before the write, oldest first
    /// (the running second is left out: it is not over).
    pub seconds: Vec<u64>,
    /// Calls and describes finished since the node started, by outcome status.
    pub outcomes: BTreeMap<String, u64>,
    /// Agent requests answered with a problem since the node started, by its code (requests
    /// that failed authentication apart, in `unauthenticated`).
    pub refusals: BTreeMap<String, u64>,
    /// Requests naming the tenant that failed authentication (anyone can send them: never the
    /// tenant's own refusals).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unauthenticated: u64,
    /// The incarnation of the tenant the counts are of: a reader sums only the entries of the
    /// tenant as it is now, never a deleted predecessor's under the same id. `None` in an entry
    /// of the previous release (summed, as it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<u64>,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl NodeTraffic {
    /// Whether the entry counts for the tenant's incarnation `incarnation`.
    pub fn of_incarnation(&self, incarnation: u64) -> bool {
        self.incarnation.is_none_or(|i| i == incarnation)
    }

    /// Finished calls a second over [`NodeTraffic::seconds`] (0 for an empty window).
    pub fn calls_per_second(&self) -> f64 {
        if self.seconds.is_empty() {
            return 0.0;
        }
        // Counts of calls stay far below 2^52.
        #[allow(clippy::cast_precision_loss)]
        let rate = self.seconds.iter().sum::<u64>() as f64 / self.seconds.len() as f64;
        rate
    }
}

/// One live entry, as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct TrafficEntry {
    /// The node that wrote it.
    pub node: String,
    /// When it was written (ms since the epoch, the broker's clock).
    pub written_ms: u64,
    /// What it holds.
    pub traffic: NodeTraffic,
}

/// Whether an entry that lapses at `lapse_ms` is still alive at `now_ms`.
pub fn alive(lapse_ms: u64, now_ms: u64) -> bool {
    now_ms < lapse_ms
}

/// The nodes' traffic figures of each tenant.
#[async_trait]
pub trait SharedTraffic: Send + Sync + std::fmt::Debug {
    /// Writes this node's counts of `tenant`, replacing its previous entry; the entry lapses
    /// `ttl` after this write unless written again.
    async fn put_traffic(
        &self,
        tenant: &str,
        traffic: &NodeTraffic,
        ttl: Duration,
    ) -> Result<(), BrokerError>;

    /// Every node's entry of `tenant` that has not lapsed, by node id.
    async fn traffic(&self, tenant: &str) -> Result<Vec<TrafficEntry>, BrokerError>;
}

/// The stored form of an entry: `<lapse ms>|<written ms>|<json>` (the script reads the first
/// field to drop lapsed entries).
pub(crate) fn encode(lapse_ms: u64, written_ms: u64, traffic: &NodeTraffic) -> String {
    format!(
        "{lapse_ms}|{written_ms}|{}",
        serde_json::to_string(traffic).unwrap_or_default()
    )
}

/// An entry's stored form back, when it is alive at `now_ms`.
pub(crate) fn decode(node: String, stored: &str, now_ms: u64) -> Option<TrafficEntry> {
    let mut parts = stored.splitn(3, '|');
    let lapse: u64 = parts.next()?.parse().ok()?;
    let written_ms: u64 = parts.next()?.parse().ok()?;
    if !alive(lapse, now_ms) {
        return None;
    }
    let traffic = serde_json::from_str(parts.next()?).ok()?;
    Some(TrafficEntry {
        node,
        written_ms,
        traffic,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_until_it_lapses() {
        let t = NodeTraffic {
            seconds: vec![0, 2, 4, 0],
            outcomes: BTreeMap::from([("ok".to_owned(), 6)]),
            refusals: BTreeMap::new(),
            unauthenticated: 3,
            incarnation: Some(2),
        };
        let s = encode(2_000, 1_000, &t);
        let e = decode("n1".to_owned(), &s, 1_999).unwrap();
        assert_eq!(e.traffic, t);
        assert_eq!(e.written_ms, 1_000);
        assert!((e.traffic.calls_per_second() - 1.5).abs() < 1e-9);
        assert_eq!(decode("n1".to_owned(), &s, 2_000), None);
        assert_eq!(decode("n1".to_owned(), "garbage", 0), None);
        // An entry of the previous release (no incarnation) counts for any.
        let old: NodeTraffic =
            serde_json::from_str(r#"{"seconds":[],"outcomes":{},"refusals":{}}"#).unwrap();
        assert!(old.of_incarnation(5));
        assert!(t.of_incarnation(2) && !t.of_incarnation(3));
    }
}
