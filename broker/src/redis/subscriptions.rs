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
//! - every [`PROBE_EVERY`] the node publishes a probe on its own channel of each partition: a
//!   probe no subscriber received (`SPUBLISH` answers 0), or one that stopped coming back, has
//!   its channel subscribed again;
//! - after a channel is back, what may have been published while it was not is read from where
//!   it is kept: the outcome of each call this node waits on or watches, and the events after
//!   the last one each tenant's readers got (an event is handed to readers once, in id order).
//!
//! `/readyz` reads the state this task keeps ([`RedisBroker::subscriptions_ready`]) and triggers
//! nothing.

use super::*;

/// How often the node probes its own partition channels.
pub(super) const PROBE_EVERY: Duration = Duration::from_millis(500);

/// A probe not back for this long has its channel subscribed again.
const PROBE_SILENT: Duration = Duration::from_secs(2);

/// How long the node may fail to restore a subscription before `/readyz` says so: well past
/// what a failover or a reshard takes, so that every node does not turn unready together over
/// a Redis-side event each recovers from by itself.
const UNREADY_AFTER: Duration = Duration::from_secs(30);

/// The last event id handed to a tenant's readers, and the sender to them.
pub(super) struct Feed {
    pub(super) tx: broadcast::Sender<Event>,
    pub(super) last: Option<String>,
}

impl RedisBroker {
    /// Subscribes to this node's channel of every partition and to the tenant catalog's
    /// channel: the node's only subscriptions besides the event feeds of tenants with live
    /// readers.
    pub(super) async fn subscribe_partitions(&self) -> Result<(), ConnectError> {
        let subs = (0..PARTITIONS).map(|k| {
            self.subscriber
                .ssubscribe(self.keys.node_channel(&self.node, k))
        });
        for r in futures_util::future::join_all(subs).await {
            r.map_err(ConnectError::Connect)?;
        }
        self.subscriber
            .ssubscribe(self.keys.catalog_channel())
            .await
            .map_err(ConnectError::Connect)?;
        Ok(())
    }

    /// Keeps every subscription at its slot's owner until `shutdown`.
    pub(super) async fn run_subscriptions(self: Arc<Self>, shutdown: CancellationToken) {
        let mut topology = self.client.cluster_change_rx();
        let mut reconnects = self.subscriber.reconnect_rx();
        let mut commands_back = self.client.reconnect_rx();
        let mut tick = tokio::time::interval(PROBE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let everything = tokio::select! {
                () = shutdown.cancelled() => return,
                r = topology.recv() => !closed(&r),
                r = reconnects.recv() => !closed(&r),
                r = commands_back.recv() => !closed(&r),
                _ = tick.tick() => false,
            };
            if shutdown.is_cancelled() {
                return;
            }
            if everything {
                // Several changes often come together: one pass answers them all.
                while topology.try_recv().is_ok() || reconnects.try_recv().is_ok() {}
                self.resubscribe_all("topology changed").await;
            } else {
                self.probe().await;
            }
        }
    }

    /// Publishes a probe on each of this node's partition channels; those no subscriber took,
    /// or whose probes stopped coming back, are subscribed again.
    async fn probe(&self) {
        let probes = (0..PARTITIONS).map(|k| {
            self.client
                .spublish::<i64, _, _>(self.keys.node_channel(&self.node, k), codec::probe(k))
        });
        let published = futures_util::future::join_all(probes).await;
        let lost: Vec<u16> = {
            let seen = lock(&self.probe_seen);
            (0..PARTITIONS)
                .filter(|k| {
                    let i = usize::from(*k);
                    matches!(published[i], Ok(0))
                        || seen.get(i).is_some_and(|t| t.elapsed() > PROBE_SILENT)
                })
                .collect()
        };
        if lost.is_empty() {
            *lock(&self.unsubscribed_since) = None;
            return;
        }
        if published.iter().all(Result::is_err) {
            // Redis does not answer at all: nothing to mend until it does.
            return;
        }
        lock(&self.unsubscribed_since).get_or_insert_with(std::time::Instant::now);
        tracing::warn!(node = %self.node, partitions = lost.len(), "partition channels lost their subscription: subscribing again");
        self.resubscribe_all("probes not received").await;
    }

    /// Reads the slot map again (Redis Cluster), subscribes again to every channel this node
    /// listens on, then reads what may have been published meanwhile.
    pub(super) async fn resubscribe_all(&self, why: &'static str) {
        if self.cluster
            && let Err(e) = self.subscriber.sync_cluster().await
        {
            tracing::debug!(error = %e, "subscriber's slot map not read");
        }
        let channels = self.subscriber.tracked_shard_channels();
        let count = channels.len();
        let subs = channels
            .into_iter()
            .map(|c| self.subscriber.ssubscribe(c.to_string()));
        let failed = futures_util::future::join_all(subs)
            .await
            .into_iter()
            .filter(Result::is_err)
            .count();
        if failed > 0 {
            tracing::warn!(node = %self.node, why, failed, of = count, "subscribing again failed; the probes try again");
            lock(&self.unsubscribed_since).get_or_insert_with(std::time::Instant::now);
            return;
        }
        tracing::debug!(node = %self.node, why, channels = count, "subscribed again");
        self.catch_up().await;
    }

    /// Hands over what was published while a channel may not have been subscribed: the stored
    /// outcome of each call this node waits on or watches, and each tenant's events after the
    /// last one its readers got.
    async fn catch_up(&self) {
        let ids: Vec<String> = {
            let mut ids: Vec<String> = lock(&self.waiters).keys().cloned().collect();
            ids.extend(lock(&self.watchers).keys().cloned());
            ids
        };
        for id in ids {
            if let Ok(Some(outcome)) = self.stored_outcome(&id).await {
                self.on_outcome(&id, outcome);
            }
        }
        let feeds: Vec<(String, Option<String>)> = lock(&self.feeds)
            .iter()
            .map(|(t, f)| (t.clone(), f.last.clone()))
            .collect();
        for (tenant, last) in feeds {
            let Some(last) = last else { continue };
            let entries: Result<Vec<(String, HashMap<String, String>)>, _> = self
                .client
                .xrange(
                    self.keys.events(&tenant),
                    format!("({last}"),
                    "+",
                    Some(self.opts.retention.events_per_tenant),
                )
                .await;
            for (id, fields) in entries.unwrap_or_default() {
                if let Some(event) = fields.get("e").and_then(|e| parse_event(&id, e)) {
                    self.to_readers(&tenant, event);
                }
            }
        }
    }

    /// Hands `event` to the tenant's live readers unless they had it: once each, in id order.
    pub(super) fn to_readers(&self, tenant: &str, event: Event) {
        let mut feeds = lock(&self.feeds);
        let Some(feed) = feeds.get_mut(tenant) else {
            return;
        };
        if feed
            .last
            .as_deref()
            .is_some_and(|last| !event_id_after(&event.id, last))
        {
            return;
        }
        feed.last = Some(event.id.clone());
        let _ = feed.tx.send(event);
    }

    /// Whether the subscriptions hold, or have not been lost for long: `/readyz` reads it.
    pub(super) fn subscriptions_ready(&self) -> bool {
        lock(&self.unsubscribed_since).is_none_or(|t| t.elapsed() < UNREADY_AFTER)
    }
}

/// Whether a broadcast receiver's sender is gone (the client was dropped).
fn closed<T>(r: &Result<T, broadcast::error::RecvError>) -> bool {
    matches!(r, Err(broadcast::error::RecvError::Closed))
}
