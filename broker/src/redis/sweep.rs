//! The leased sweeps' shared parts and the deadline sweep: a lease is taken by one node at a
//! time and given back when its sweep ends; the deadline sweep relays the outboxes, then times
//! out the calls whose deadline passed with nobody left to do it.

use fred::interfaces::{KeysInterface, SortedSetsInterface};
use fred::prelude::Expiration;

use super::reply::unavailable;
use super::scripts::Release;
use super::{RedisBroker, codec};
use crate::partition::PARTITIONS;
use crate::prelude::*;
use crate::{BrokerError, CallRecord, now_ms};

impl RedisBroker {
    /// Takes a 2 s lease on `key` for this node: `false` when another node holds it.
    pub(super) async fn lease(&self, key: String) -> Result<bool, BrokerError> {
        let taken: Option<String> = self
            .conn
            .client
            .set(
                key,
                self.node.id.as_str(),
                Some(Expiration::PX(2_000)),
                Some(fred::types::SetOptions::NX),
                false,
            )
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(taken.is_some())
    }

    /// Gives back a lease this node took, so the next sweep (on any node) need not wait for it.
    pub(super) async fn release_lease(&self, key: String) {
        let _ = self
            .run(Release {
                lease: key,
                node: self.node.id.clone(),
            })
            .await;
    }

    /// Times out pending calls whose deadline passed with nobody left to do it (their node
    /// died, or they were async): the due entries of every partition's deadline set, read at
    /// once. Leased: one node sweeps at a time. Returns what it timed out.
    pub async fn sweep(&self) -> Result<Vec<CallRecord>, BrokerError> {
        if !self.lease(self.conn.keys.sweep_lease()).await? {
            return Ok(Vec::new());
        }
        if let Err(e) = self.relay_outboxes().await {
            self.release_lease(self.conn.keys.sweep_lease()).await;
            return Err(e);
        }
        #[allow(clippy::cast_precision_loss)]
        let max = crate::deadline::sweep_due(now_ms()) as f64;
        let reads = (0..PARTITIONS).map(|k| {
            self.conn.client.zrangebyscore::<Vec<String>, _, _, _>(
                self.conn.keys.deadlines(k),
                "-inf",
                max,
                false,
                Some((0, 100)),
            )
        });
        let mut due = Vec::new();
        for (k, r) in (0..PARTITIONS).zip(futures_util::future::join_all(reads).await) {
            due.extend(r.map_err(|e| unavailable(&e))?.into_iter().map(|m| (k, m)));
        }
        let mut swept = Vec::new();
        for (k, member) in due {
            if let Some((conv, id)) = codec::parse_deadline_member(&member)
                && let Some(r) = self.time_out(&conv, &id).await?
            {
                swept.push(r);
            }
            let _: Result<i64, _> = self
                .conn
                .client
                .zrem(&self.conn.keys.deadlines(k), member.as_str())
                .await;
        }
        self.release_lease(self.conn.keys.sweep_lease()).await;
        Ok(swept)
    }
}
