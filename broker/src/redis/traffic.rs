//! Traffic entries on Redis: one hash per tenant (`{tenant}:traffic`, in the tenant's slot),
//! field the node id; written and read by a script each, so that Redis's clock stamps and
//! lapses every entry, and a node's write drops the entries of nodes that stopped writing.

use std::time::Duration;

use async_trait::async_trait;

use super::RedisBroker;
use super::reply::{millis, strings};
use super::scripts::{TrafficPut, TrafficRead};
use crate::BrokerError;
use crate::traffic::{NodeTraffic, SharedTraffic, TrafficEntry, decode};

#[async_trait]
impl SharedTraffic for RedisBroker {
    async fn put_traffic(
        &self,
        tenant: &str,
        traffic: &NodeTraffic,
        ttl: Duration,
    ) -> Result<(), BrokerError> {
        self.run(TrafficPut {
            traffic: self.conn.keys.traffic(tenant),
            node: self.node.id.clone(),
            body: serde_json::to_string(traffic).unwrap_or_default(),
            ttl: millis(ttl).max(1),
        })
        .await
        .map(|_| ())
    }

    async fn traffic(&self, tenant: &str) -> Result<Vec<TrafficEntry>, BrokerError> {
        let reply = strings(
            self.run(TrafficRead {
                traffic: self.conn.keys.traffic(tenant),
            })
            .await?,
        );
        let Some((now, pairs)) = reply.split_first() else {
            return Ok(Vec::new());
        };
        let now: u64 = now.parse().unwrap_or(0);
        let mut live: Vec<TrafficEntry> = pairs
            .chunks_exact(2)
            .filter_map(|p| decode(p[0].clone(), &p[1], now))
            .collect();
        live.sort_by(|a, b| a.node.cmp(&b.node));
        Ok(live)
    }
}
