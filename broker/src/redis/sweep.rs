//! The leased sweeps' shared parts and the deadline sweep: a lease is taken by one node at a
//! time and given back when its sweep ends; the deadline sweep relays the outboxes, then times
//! out the calls whose deadline passed with nobody left to do it.

use fred::interfaces::{KeysInterface, SortedSetsInterface};
use fred::prelude::Expiration;

use super::reply::strings;
use super::reply::unavailable;
use super::scripts::{DueCalls, Release};
use super::{RedisBroker, codec};
use crate::partition::{self, PARTITIONS};
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
    /// died, or they were async): the calls due of the conversations due in every partition's
    /// conversations by deadline, then the due entries of every partition's deadline set (calls
    /// a node stored as hashes beside a node of 0.4.0), each read at once. Leased: one node
    /// sweeps at a time. Returns what it timed out.
    pub async fn sweep(&self) -> Result<Vec<CallRecord>, BrokerError> {
        if !self.lease(self.conn.keys.sweep_lease()).await? {
            return Ok(Vec::new());
        }
        if let Err(e) = self.relay_outboxes().await {
            self.release_lease(self.conn.keys.sweep_lease()).await;
            return Err(e);
        }
        let max_ms = crate::deadline::sweep_due(now_ms());
        let due = self
            .due_members(|k| self.conn.keys.deadlines(k), max_ms)
            .await?;
        let mut swept = self.sweep_due_convs(max_ms).await?;
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

    /// The calls stored as one string whose deadline (`max_ms`, the sweep's grace past it)
    /// passed, timed out: the conversations due of every partition (`Keys::due_convs`), read
    /// at once, then each conversation's calls due (`due.lua`, which also sets the
    /// conversation's entry to its earliest deadline, or takes it out when it has no call).
    async fn sweep_due_convs(&self, max_ms: u64) -> Result<Vec<CallRecord>, BrokerError> {
        let convs = self
            .due_members(|k| self.conn.keys.due_convs(k), max_ms)
            .await?;
        let mut swept = Vec::new();
        for (_, conv_ref) in convs {
            let Some(conv) = codec::parse_conv_ref(&conv_ref) else {
                continue;
            };
            let k = partition::of_conv(&conv);
            let ids = strings(
                self.run(DueCalls {
                    due: self.conn.keys.due(&conv),
                    due_convs: self.conn.keys.due_convs(k),
                    conv: self.conn.keys.conv(&conv),
                    conv_ref,
                    max: max_ms,
                })
                .await?,
            );
            for id in ids {
                if let Some(r) = self.time_out(&conv, &codec::expand_id(&id)).await? {
                    swept.push(r);
                }
            }
        }
        Ok(swept)
    }

    /// The members scored up to `max_ms` (at most 100 a partition) of one sorted set per
    /// partition (`key` of each), read at once, each with its partition.
    async fn due_members(
        &self,
        key: impl Fn(u16) -> String,
        max_ms: u64,
    ) -> Result<Vec<(u16, String)>, BrokerError> {
        #[allow(clippy::cast_precision_loss)]
        let max = max_ms as f64;
        let reads = (0..PARTITIONS).map(|k| {
            self.conn.client.zrangebyscore::<Vec<String>, _, _, _>(
                key(k),
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
        Ok(due)
    }
}
