//! This node's life on Redis: the counts a previous life of it left, its heartbeat and the
//! live-node set, the heartbeat-scoped refresh
//! of what its pages need, the re-publication after Redis lost its data, its subscriber (page
//! frames, outcomes, events, its own readiness probes) and its partition subscriptions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::{
    EventInterface, HashesInterface, KeysInterface, SetsInterface, SortedSetsInterface,
};
use fred::types::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use toolmark_proto::Manifest;

use super::keys::Keys;
use super::reply::{millis, parse_event};
use super::scripts::{Outbox, OwnSockets, PutManifest, Refresh};
use super::state::HeldSnapshot;
use super::{RedisBroker, codec};
use crate::{BrokerError, Change, ConvKey, Outcome, model, now_ms, partition};

impl RedisBroker {
    /// A restarted node with a fixed id clears the counts its previous life left behind.
    pub(super) async fn clear_own_fields(&self) {
        let set = self.conn.keys.node_keys(&self.node.id);
        let Ok(hashes) = self.conn.client.smembers::<Vec<String>, _>(&set).await else {
            return;
        };
        for h in hashes {
            // A conversation's sockets: cleared with their summary in its hash.
            if let Some(conv) = Keys::conv_of_sockets(&h) {
                let _ = self
                    .run(OwnSockets {
                        conv,
                        sockets: h,
                        node: self.node.id.clone(),
                        ttl: 0,
                        counts: Vec::new(),
                    })
                    .await;
                continue;
            }
            let fields: Vec<(String, i64)> = match self
                .conn
                .client
                .hgetall::<HashMap<String, i64>, _>(&h)
                .await
            {
                Ok(m) => m.into_iter().collect(),
                Err(_) => continue,
            };
            let own: Vec<String> = fields
                .into_iter()
                .map(|(f, _)| f)
                .filter(|f| f == &self.node.id || f.starts_with(&format!("{}|", self.node.id)))
                .collect();
            if !own.is_empty() {
                let _: Result<i64, _> = self.conn.client.hdel(&h, own).await;
            }
        }
        let _: Result<i64, _> = self.conn.client.del(&set).await;
    }

    /// Announces this node, reads the live set, forgets the waiters that went away and
    /// refreshes what the pages this node holds need, when due.
    pub(super) async fn heartbeat(&self) {
        let now = now_ms();
        // Milliseconds since the epoch are exact in an f64 for the next 280,000 years.
        #[allow(clippy::cast_precision_loss)]
        let score = now as f64;
        // First the form of ids it reads, then its life: a node read live is never taken for
        // one of an older release.
        let release = format!("{}\n{}", self.node.id, crate::release::announcement());
        for (set, member) in [
            (self.conn.keys.nodes_release(), release.as_str()),
            (self.conn.keys.nodes_any_id(), self.node.id.as_str()),
            (self.conn.keys.nodes(), self.node.id.as_str()),
        ] {
            let _: Result<i64, _> = self
                .conn
                .client
                .zadd(&set, None, None, false, false, (score, member))
                .await;
        }
        self.refresh_live().await;
        #[allow(clippy::cast_precision_loss)]
        let forget = now.saturating_sub(3_600_000) as f64;
        for set in [
            self.conn.keys.nodes(),
            self.conn.keys.nodes_any_id(),
            self.conn.keys.nodes_release(),
        ] {
            let _: Result<i64, _> = self
                .conn
                .client
                .zremrangebyscore(&set, "-inf", forget)
                .await;
        }
        // Waiters whose request went away (their outcome message never came) are forgotten.
        self.calls.waiters.forget_gone();
        if self
            .held
            .refresh_due(self.conn.opts.retention.conversations / 3)
        {
            self.refresh_held().await;
        }
    }

    /// Whether this release may start beside the live nodes ([`crate::release::refusal`]):
    /// read once, before the node announces itself. A read that fails lets it start (the
    /// heartbeat's own reads then decide what it writes, as for any node).
    pub(super) async fn release_refusal(&self) -> Option<String> {
        let hb = u64::try_from(self.conn.opts.heartbeat.as_millis()).unwrap_or(2000);
        #[allow(clippy::cast_precision_loss)]
        let min = now_ms().saturating_sub(u64::from(model::DEAD_AFTER_HEARTBEATS) * hb) as f64;
        // Boxed: two reads' futures inline would grow the connect future of every node.
        let (nodes, releases) = Box::pin(async {
            tokio::join!(
                self.conn.client.zrangebyscore::<Vec<String>, _, _, _>(
                    self.conn.keys.nodes(),
                    min,
                    "+inf",
                    false,
                    None
                ),
                self.conn.client.zrangebyscore::<Vec<String>, _, _, _>(
                    self.conn.keys.nodes_release(),
                    min,
                    "+inf",
                    false,
                    None
                ),
            )
        })
        .await;
        let (Ok(nodes), Ok(releases)) = (nodes, releases) else {
            return None;
        };
        let announced: std::collections::HashMap<&str, &str> =
            releases.iter().filter_map(|m| m.split_once('\n')).collect();
        let peers: Vec<crate::release::Peer> = nodes
            .iter()
            .filter(|n| **n != self.node.id)
            .map(|n| crate::release::Peer {
                node: n.clone(),
                announced: announced.get(n.as_str()).map(|a| (*a).to_owned()),
            })
            .collect();
        crate::release::refusal(&peers)
    }

    /// Reads the set of live nodes (heartbeat within [`model::DEAD_AFTER_HEARTBEATS`]
    /// intervals).
    pub(super) async fn refresh_live(&self) {
        let hb = u64::try_from(self.conn.opts.heartbeat.as_millis()).unwrap_or(2000);
        let dead_before = now_ms().saturating_sub(u64::from(model::DEAD_AFTER_HEARTBEATS) * hb);
        #[allow(clippy::cast_precision_loss)]
        let min = dead_before as f64;
        let (nodes_key, any_id_key) = (self.conn.keys.nodes(), self.conn.keys.nodes_any_id());
        // Boxed: two reads' futures inline would grow every future that awaits a heartbeat.
        let (nodes, any_id) = Box::pin(async {
            tokio::join!(
                self.conn
                    .client
                    .zrangebyscore::<Vec<String>, _, _, _>(&nodes_key, min, "+inf", false, None),
                self.conn.client.zrangebyscore::<Vec<String>, _, _, _>(
                    &any_id_key,
                    min,
                    "+inf",
                    false,
                    None
                ),
            )
        })
        .await;
        if let (Ok(nodes), Ok(any_id)) = (nodes, any_id) {
            self.node.live.read(nodes, &any_id);
        }
    }

    /// Heartbeat-scoped expiry: what the pages this node holds need (conversation, presence,
    /// manifests) gets its TTL again, however quiet the pages are. A node that dies stops
    /// refreshing, and its pages' state ends one TTL later.
    pub(super) async fn refresh_held(&self) {
        let ttl = model::millis(self.conn.opts.retention.conversations).to_string();
        let held: Vec<(ConvKey, Vec<String>)> = self.held.page_loads();
        let tenants: Vec<String> = self
            .held
            .tenant_counts()
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        for chunk in held.chunks(256) {
            let calls = chunk.iter().map(|(conv, clients)| {
                self.run(Refresh {
                    conv: self.conn.keys.conv(conv),
                    sockets: self.conn.keys.sockets(conv),
                    pending: self.conn.keys.pending(conv),
                    ttl: ttl.clone(),
                    manifest_prefix: self.conn.keys.manifest_prefix(conv),
                    clients: clients.clone(),
                })
            });
            for r in futures_util::future::join_all(calls).await {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "refresh of a held conversation failed");
                }
            }
        }
        let day = millis(Duration::from_secs(86_400).max(self.conn.opts.retention.conversations));
        for t in tenants {
            let _: Result<i64, _> = self
                .conn
                .client
                .pexpire(self.conn.keys.tenant_sockets(&t), day, None)
                .await;
        }
        let _: Result<i64, _> = self
            .conn
            .client
            .pexpire(self.conn.keys.node_keys(&self.node.id), day, None)
            .await;
    }

    pub(super) async fn run_heartbeat(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.conn.opts.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => {
                    let _: Result<i64, _> = self.conn.client.zrem(&self.conn.keys.nodes(), self.node.id.as_str()).await;
                    return;
                }
                _ = tick.tick() => self.heartbeat().await,
            }
        }
    }

    /// Writes everything this node holds again whenever the connection comes back: socket
    /// counts, manifests (without taking `current` from a page that has it); subscriptions are
    /// restored by [`Self::run_subscriptions`].
    pub(super) async fn run_republish(self: Arc<Self>, shutdown: CancellationToken) {
        let mut reconnects = self.conn.client.reconnect_rx();
        while reconnected(&mut reconnects, &shutdown).await {
            tracing::info!(node = %self.node.id, "redis connection back: re-publishing pages and manifests");
            self.calls.expected.clear();
            self.load_scripts().await;
            self.heartbeat().await;
            self.republish().await;
        }
    }

    pub(super) async fn republish(&self) {
        let ttl = model::millis(self.conn.opts.retention.conversations).to_string();
        let snapshot = self.held.snapshot();
        let started = std::time::Instant::now();
        let conversations = snapshot.len();
        // Every conversation's writes go out at once, 256 conversations at a time: the
        // client pipelines them, so the re-publication costs round trips per chunk, not per
        // conversation.
        let mut snapshot = snapshot.into_iter();
        loop {
            let chunk: Vec<HeldSnapshot> = snapshot.by_ref().take(256).collect();
            if chunk.is_empty() {
                break;
            }
            futures_util::future::join_all(chunk.into_iter().map(|h| self.republish_one(h, &ttl)))
                .await;
        }
        let tenants = self.held.tenant_counts();
        for (tenant, n) in tenants {
            let key = self.conn.keys.tenant_sockets(&tenant);
            let _: Result<i64, _> = self
                .conn
                .client
                .hset(&key, (self.node.id.as_str(), n.to_string()))
                .await;
            let _: Result<i64, _> = self
                .conn
                .client
                .pexpire(&key, millis(Duration::from_secs(86_400)), None)
                .await;
            let _: Result<i64, _> = self
                .conn
                .client
                .sadd(self.conn.keys.node_keys(&self.node.id), key.as_str())
                .await;
        }
        let _: Result<i64, _> = self
            .conn
            .client
            .pexpire(
                self.conn.keys.node_keys(&self.node.id),
                millis(Duration::from_secs(86_400)),
                None,
            )
            .await;
        tracing::info!(
            node = %self.node.id,
            conversations,
            elapsed_ms = started.elapsed().as_millis(),
            "pages and manifests re-published"
        );
    }

    /// Writes one held conversation again: this node's socket counts, then its manifests
    /// (oldest first, without taking `current` from a page that has it).
    async fn republish_one(&self, held: HeldSnapshot, ttl: &str) {
        let HeldSnapshot {
            conv,
            sockets,
            clients,
            manifests,
        } = held;
        let socks = self.conn.keys.sockets(&conv);
        let mut counts = vec![self.node.id.clone(), sockets.to_string()];
        for (c, n) in clients {
            counts.push(format!("{}|{c}", self.node.id));
            counts.push(n.to_string());
        }
        let (_, _): (Result<Value, _>, Result<i64, _>) = tokio::join!(
            self.run(OwnSockets {
                sockets: socks.clone(),
                conv: self.conn.keys.conv(&conv),
                node: self.node.id.clone(),
                ttl: millis(self.conn.opts.retention.conversations),
                counts,
            }),
            self.conn
                .client
                .sadd(self.conn.keys.node_keys(&self.node.id), socks.as_str()),
        );
        for m in manifests {
            let _ = self.put_manifest_script(&conv, &m, ttl, true, None).await;
        }
    }

    pub(super) async fn run_messages(self: Arc<Self>, shutdown: CancellationToken) {
        let mut rx = self.conn.subscriber.message_rx();
        // Named once, not per message.
        let own = super::keys::cat(&[&self.conn.keys.node_channel_prefix(), &self.node.id, ":"]);
        let catalog = self.conn.keys.catalog_channel();
        let events = self.conn.keys.events_channel_prefix();
        loop {
            let msg = tokio::select! {
                () = shutdown.cancelled() => return,
                m = rx.recv() => m,
            };
            let msg = match msg {
                Ok(m) => m,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::error!(
                        skipped = n,
                        "redis messages lost: this node could not keep up"
                    );
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            let channel: &str = &msg.channel;
            let Some(payload) = msg.value.as_str() else {
                continue;
            };
            if let Some(tag) = channel.strip_prefix(own.as_str()) {
                self.on_node_message(&payload, super::keys::parse_tag(tag));
            } else if channel == catalog {
                let _ = self.events.catalog_changes.send(payload.into_owned());
            } else if let Some(tag) = channel.strip_prefix(events.as_str()) {
                let tenant = tag.trim_start_matches('{').trim_end_matches('}');
                self.on_event(tenant, &payload);
            }
        }
    }

    /// A message on this node's channel of partition `k`. A page frame or an outcome shows the
    /// channel delivers (its probe can wait, `state::probes`); a probe's own return does not
    /// count, so an idle channel is still probed every round.
    pub(super) fn on_node_message(&self, payload: &str, k: Option<u16>) {
        let message = codec::parse_node_message(payload);
        if let Some(k) = k
            && matches!(
                message,
                Some(codec::NodeMessage::Page { .. } | codec::NodeMessage::Outcome { .. })
            )
        {
            self.node.probes.heard(k);
        }
        match message {
            Some(codec::NodeMessage::Page {
                conv,
                client_id,
                frame,
                trace: None,
            }) => self.node.sink.deliver(&conv, &client_id, frame.into()),
            Some(codec::NodeMessage::Page {
                conv,
                client_id,
                frame,
                trace: Some(trace),
            }) => self
                .node
                .sink
                .deliver_traced(&conv, &client_id, frame.into(), &trace),
            Some(codec::NodeMessage::Probe(k)) => {
                self.node.probes.came_back(k);
            }
            Some(codec::NodeMessage::Outcome { id, outcome }) => self.on_outcome(&id, outcome),
            None => tracing::error!(payload, "unreadable message on this node's channel"),
        }
    }

    /// Hands a call's outcome to this node's waiter and watchers of it (once: each is taken).
    pub(super) fn on_outcome(&self, id: &str, outcome: Outcome) {
        self.calls.waiters.deliver(id, outcome);
    }

    pub(super) fn on_event(&self, tenant: &str, payload: &str) {
        let Some((id, body)) = codec::parse_event_message(payload) else {
            return;
        };
        let Some(event) = parse_event(id, body) else {
            return;
        };
        self.events.feeds.hand(tenant, event);
    }

    pub(super) async fn put_manifest_script(
        &self,
        conv: &ConvKey,
        m: &Manifest,
        ttl: &str,
        keep_current: bool,
        change: Option<&Change>,
    ) -> Result<(), BrokerError> {
        self.run(PutManifest {
            manifest_key: format!("{}{}", self.conn.keys.manifest_prefix(conv), m.client_id),
            conv: self.conn.keys.conv(conv),
            outbox: change.map(|change| {
                Outbox::new(
                    self.conn.keys.outbox(partition::of_conv(conv)),
                    &codec::Outboxed::Ready(change.clone()),
                )
            }),
            manifest: serde_json::to_string(m).unwrap_or_default(),
            rev: m.rev,
            ttl: ttl.to_owned(),
            keep_current,
            client: m.client_id.clone(),
            gone: self.conn.keys.gone(conv),
            manifest_prefix: self.conn.keys.manifest_prefix(conv),
            grace: millis(self.conn.opts.retention.gone_manifests),
        })
        .await
        .map(|_| ())
    }
}

/// Waits for the next reconnection `rx` reports (a receiver that lagged counts as one): `false`
/// once `shutdown` fired or the client is gone.
async fn reconnected<T: Clone>(
    rx: &mut broadcast::Receiver<T>,
    shutdown: &CancellationToken,
) -> bool {
    tokio::select! {
        () = shutdown.cancelled() => false,
        r = rx.recv() => !matches!(r, Err(broadcast::error::RecvError::Closed)),
    }
}
