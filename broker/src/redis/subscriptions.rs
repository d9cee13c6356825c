//! Subscriptions that follow the slots. A node hears page frames, outcomes, its own probes and
//! the events of tenants with live readers on sharded channels, each held at the master serving
//! the channel's slot; when that master changes (a failover, a killed master, a slot moved by a
//! reshard), Redis drops the subscription, and the client library neither says so nor
//! subscribes again. This task keeps them where they belong, on its own clock, never waiting
//! for a request:
//!
//! - on every topology change the command client learns of (a `MOVED` it followed, a
//!   reconnection), the subscriber's slot map is read again and every channel subscribed again
//!   at its slot's owner (subscribing again where a subscription holds is harmless);
//! - every [`PROBE_EVERY`] the node publishes a probe on its own channel of each partition
//!   nothing came through since the last round (under load, a partition's calls prove its
//!   channel and it is not probed): a probe no subscriber received (`SPUBLISH` answers 0), or
//!   one a subscriber took that has not come back for `state::probes::PROBE_SILENT`, has its
//!   channel subscribed again;
//! - a round that failed to subscribe some channel again (its slot still moving, its master
//!   not answering) is tried again at the next probe, every channel of it: an event channel
//!   has no probe of its own;
//! - after a channel is back, what may have been published while it was not is read from where
//!   it is kept: the outcome of each call this node waits on or watches, the frames of calls
//!   still pending for its pages, and the events after the last one each tenant's readers got
//!   (an event is handed to readers once, in id order).
//!
//! `/readyz` reads the state this task keeps ([`super::state::Probes`]) and triggers nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::interfaces::{ClusterInterface, EventInterface, PubsubInterface, StreamsInterface};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::reply::parse_event;
use super::state::Probed;
use super::{ConnectError, RedisBroker, codec, run};
use crate::ConvKey;
use crate::partition::PARTITIONS;

/// How often the node probes its own partition channels.
const PROBE_EVERY: Duration = Duration::from_secs(1);

impl RedisBroker {
    /// Subscribes to this node's channel of every partition and to the tenant catalog's
    /// channel: the node's only subscriptions besides the event feeds of tenants with live
    /// readers.
    pub(super) async fn subscribe_partitions(&self) -> Result<(), ConnectError> {
        let subs = (0..PARTITIONS).map(|k| {
            self.conn
                .subscriber
                .ssubscribe(self.conn.keys.node_channel(&self.node.id, k))
        });
        for r in futures_util::future::join_all(subs).await {
            r.map_err(ConnectError::Connect)?;
        }
        self.conn
            .subscriber
            .ssubscribe(self.conn.keys.catalog_channel())
            .await
            .map_err(ConnectError::Connect)?;
        Ok(())
    }

    /// Keeps every subscription at its slot's owner until `shutdown`.
    pub(super) async fn run_subscriptions(self: Arc<Self>, shutdown: CancellationToken) {
        let mut topology = self.conn.client.cluster_change_rx();
        let mut reconnects = self.conn.subscriber.reconnect_rx();
        // Each partition's channel and probe, named once: a round clones them (a count each).
        let targets: Vec<(Str, Str)> = (0..PARTITIONS)
            .map(|k| {
                (
                    Str::from(self.conn.keys.node_channel(&self.node.id, k)),
                    Str::from(codec::probe(k)),
                )
            })
            .collect();
        let mut tick = tokio::time::interval(PROBE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let why = tokio::select! {
                () = shutdown.cancelled() => return,
                r = topology.recv() => (!closed(&r)).then_some(Why::Topology),
                r = reconnects.recv() => (!closed(&r)).then_some(Why::Reconnected),
                _ = tick.tick() => Some(Why::Probe),
            };
            let Some(mut why) = why else { return };
            // Several changes often come together: one pass answers them all.
            while let Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) = reconnects.try_recv()
            {
                why = Why::Reconnected;
            }
            while let Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) = topology.try_recv() {
            }
            self.mend(why, &targets).await;
        }
    }

    /// Probes this node's partition channels and subscribes again where needed: everything
    /// after a topology change or a reconnection (event channels move with their tenant's slot,
    /// which no probe covers), else the channels whose probe no subscriber took or that stopped
    /// coming back. Then hands over what the lost channels may have carried meanwhile.
    async fn mend(&self, why: Why, targets: &[(Str, Str)]) {
        // On the clock, a channel a message came through since the last round has shown it is
        // subscribed where its publishers send: no probe there (`None`). A topology change or a
        // reconnection probes every channel.
        let probes = (0..PARTITIONS).zip(targets).map(|(k, (channel, message))| {
            let send = why != Why::Probe || self.node.probes.needs_probe(k);
            async move {
                if send {
                    Some(
                        self.conn
                            .client
                            .spublish::<i64, _, _>(channel.clone(), message.clone())
                            .await,
                    )
                } else {
                    None
                }
            }
        });
        let published = futures_util::future::join_all(probes).await;
        let mut sent = published.iter().flatten().peekable();
        if why == Why::Probe
            && sent.peek().is_some()
            && sent.all(|p| p.as_ref().is_err_and(|e| !run::moving(e)))
        {
            // Redis does not answer at all: nothing to mend until it does.
            return;
        }
        let probed: Vec<Probed> = published
            .iter()
            .map(|p| match p {
                None => Probed {
                    lost: false,
                    taken: false,
                    heard: true,
                },
                Some(p) => Probed {
                    lost: why == Why::Reconnected
                        || match p {
                            Ok(n) => *n == 0,
                            Err(e) => run::moving(e),
                        },
                    taken: matches!(p, Ok(n) if *n > 0),
                    heard: false,
                },
            })
            .collect();
        let lost = self.node.probes.settle(&probed);
        // After a round that failed to subscribe some channel again, the probes' round
        // subscribes everything again: an event channel has no probe to say it is lost.
        if lost.is_empty() && why == Why::Probe && !self.node.probes.again_failed() {
            self.node.probes.subscribed();
            return;
        }
        if !lost.is_empty() {
            self.node.probes.unsubscribed();
            tracing::warn!(node = %self.node.id, partitions = lost.len(), why = why.as_str(), "partition channels without their subscription: subscribing again");
        }
        if self.resubscribe_all(why.as_str()).await {
            self.catch_up(&lost).await;
        }
    }

    /// Reads the slot map again (Redis Cluster) and subscribes again to every channel this
    /// node listens on; whether all of them are.
    async fn resubscribe_all(&self, why: &'static str) -> bool {
        if self.conn.cluster
            && let Err(e) = self.conn.subscriber.sync_cluster().await
        {
            tracing::debug!(error = %e, "subscriber's slot map not read");
        }
        let channels = self.conn.subscriber.tracked_shard_channels();
        let count = channels.len();
        let subs = channels
            .into_iter()
            .map(|c| self.conn.subscriber.ssubscribe(c.to_string()));
        let failed = futures_util::future::join_all(subs)
            .await
            .into_iter()
            .filter(Result::is_err)
            .count();
        self.node.probes.subscribed_again(failed == 0);
        if failed > 0 {
            tracing::warn!(node = %self.node.id, why, failed, of = count, "subscribing again failed; the next round of probes tries again");
            self.node.probes.unsubscribed();
            return false;
        }
        tracing::debug!(node = %self.node.id, why, channels = count, "subscribed again");
        true
    }

    /// Hands over what was published while channels may not have been subscribed: for the
    /// `lost` partitions, the stored outcome of each call this node waits on or watches and the
    /// frames of calls still pending for its pages (a page ignores a call id it already has);
    /// for every tenant with live readers, the events after the last one they got.
    async fn catch_up(&self, lost: &[u16]) {
        let mut ids = self.calls.waiters.ids();
        ids.retain(|(_, k)| lost.contains(k));
        for chunk in ids.chunks(256) {
            let reads = chunk
                .iter()
                .map(|(id, k)| async move { (id, self.stored_outcome(*k, id).await) });
            for (id, read) in futures_util::future::join_all(reads).await {
                if let Ok(Some(outcome)) = read {
                    self.on_outcome(id, outcome);
                }
            }
        }
        let convs: Vec<ConvKey> = self.held.in_partitions(lost);
        for chunk in convs.chunks(256) {
            let reads = chunk
                .iter()
                .map(|c| async move { (c, self.pending_messages(c).await) });
            for (conv, frames) in futures_util::future::join_all(reads).await {
                for (client, frame) in frames.unwrap_or_default() {
                    self.node.sink.deliver(conv, &client, frame);
                }
            }
        }
        for (tenant, last) in self.events.feeds.lasts() {
            let Some(last) = last else { continue };
            let entries: Result<Vec<(String, HashMap<String, String>)>, _> = self
                .again("xrange", || {
                    self.conn.client.xrange(
                        self.conn.keys.events(&tenant),
                        format!("({last}"),
                        "+",
                        Some(self.conn.opts.retention.events_per_tenant),
                    )
                })
                .await;
            for (id, fields) in entries.unwrap_or_default() {
                if let Some(event) = fields.get("e").and_then(|e| parse_event(&id, e)) {
                    self.events.feeds.hand(&tenant, event);
                }
            }
        }
    }
}

/// What set a round of [`RedisBroker::mend`] off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// The node's own clock.
    Probe,
    /// The command client followed a topology change (a `MOVED`, a reconnection).
    Topology,
    /// The subscriber's connection came back: what it carried meanwhile is lost.
    Reconnected,
}

impl Why {
    fn as_str(self) -> &'static str {
        match self {
            Why::Probe => "probes not received",
            Why::Topology => "topology changed",
            Why::Reconnected => "subscriber reconnected",
        }
    }
}

/// Whether a broadcast receiver's sender is gone (the client was dropped).
fn closed<T>(r: &Result<T, broadcast::error::RecvError>) -> bool {
    matches!(r, Err(broadcast::error::RecvError::Closed))
}
