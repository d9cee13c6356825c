//! Traffic entries of the memory broker: one process, so one node's entry per tenant, kept in
//! the stored form the Redis broker uses and lapsing by the same rule
//! ([`crate::traffic::alive`]) on this process's wall clock.

use std::time::Duration;

use async_trait::async_trait;

use super::{MemoryBroker, lock};
use crate::traffic::{NodeTraffic, SharedTraffic, TrafficEntry, decode, encode};
use crate::{BrokerError, now_ms};

#[async_trait]
impl SharedTraffic for MemoryBroker {
    async fn put_traffic(
        &self,
        tenant: &str,
        traffic: &NodeTraffic,
        ttl: Duration,
    ) -> Result<(), BrokerError> {
        let now = now_ms();
        let lapse = now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let mut all = lock(&self.traffic);
        let nodes = all.entry(tenant.to_owned()).or_default();
        nodes.insert(self.node.clone(), encode(lapse, now, traffic));
        nodes.retain(|node, stored| decode(node.clone(), stored, now).is_some());
        Ok(())
    }

    async fn traffic(&self, tenant: &str) -> Result<Vec<TrafficEntry>, BrokerError> {
        let now = now_ms();
        let mut all = lock(&self.traffic);
        let Some(nodes) = all.get(tenant) else {
            return Ok(Vec::new());
        };
        let mut live: Vec<TrafficEntry> = nodes
            .iter()
            .filter_map(|(node, stored)| decode(node.clone(), stored, now))
            .collect();
        if live.is_empty() {
            all.remove(tenant);
        }
        live.sort_by(|a, b| a.node.cmp(&b.node));
        Ok(live)
    }
}
