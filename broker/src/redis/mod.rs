//! The Redis broker: any number of gateway nodes sharing one Redis, Redis Cluster or a
//! Sentinel-managed Redis, with the same contract as the memory broker.
//!
//! State lives in Redis (keys in [`keys`]); every check-and-mark is one Lua script on one hash
//! tag ([`scripts`]). Agent → page frames travel on a sharded channel per conversation, to which
//! a node subscribes while it holds a socket of that conversation; outcomes travel to the
//! waiting node's own channel. Each node keeps what it holds (sockets, manifests) in memory and
//! writes it again whenever the connection to Redis comes back, so pages never have to
//! reconnect after a Redis restart.

pub mod keys;
pub mod scripts;
mod url;
pub mod webhooks;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use fred::clients::SubscriberClient;
use fred::interfaces::{
    ClientLike, EventInterface, HashesInterface, KeysInterface, PubsubInterface, SetsInterface,
    SortedSetsInterface, StreamsInterface,
};
use fred::prelude::{Builder, Client, Expiration, ReconnectPolicy};
use fred::types::Value;
use fred::types::scripts::Script;
use serde_json::Value as Json;
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;
use toolmark_proto::{AgentMessage, Manifest, ToolManifestSummary, ToolResult};

use crate::{
    AdmitError, AdmitLimits, Broker, BrokerError, CallBinding, CallRecord, CallState,
    ConfirmBinding, ConvKey, ConversationState, Event, EventFeed, EventType, Outcome,
    OutcomeWaiter, PageIdentity, PageInfo, PageLeft, PageSink, RateLimited, Rejection, SubmitError,
    event_id_after, now_ms,
};
use scripts::Scripts;

/// Tunables of the Redis broker.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Longest wait for one Redis command; past it the agent API answers 503.
    pub command_timeout: Duration,
    /// A finished call stays readable this long.
    pub finished_call_ttl: Duration,
    /// A confirmId binding lives this long.
    pub confirm_ttl: Duration,
    /// Manifests and conversation state live this long after their last write.
    pub conversation_ttl: Duration,
    /// Events kept per tenant stream (approximate, `MAXLEN ~`).
    pub events_per_tenant: u64,
    /// How often a node announces itself; a node silent for 5 intervals counts as dead.
    pub heartbeat: Duration,
    /// Prefix of every key and channel.
    pub prefix: String,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            command_timeout: Duration::from_secs(2),
            finished_call_ttl: Duration::from_secs(300),
            confirm_ttl: Duration::from_secs(900),
            conversation_ttl: Duration::from_secs(600),
            events_per_tenant: 10_000,
            heartbeat: Duration::from_secs(2),
            prefix: "tm".into(),
        }
    }
}

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL is not one of the supported forms.
    #[error("invalid Redis URL: {0}")]
    Url(String),
    /// Redis did not answer.
    #[error("cannot connect to Redis: {0}")]
    Connect(String),
}

/// Checks a Redis URL without connecting (for configuration validation).
pub fn check_url(url: &str) -> Result<(), String> {
    url::config(url).map(|_| ()).map_err(|e| e.to_string())
}

/// What this node holds of one conversation (rewritten to Redis after it lost its data).
#[derive(Default)]
struct Held {
    sockets: u32,
    clients: HashMap<String, u32>,
    manifests: HashMap<String, (u64, Manifest)>,
}

/// A copy of [`Held`] taken to write it again without holding the lock.
struct HeldSnapshot {
    conv: ConvKey,
    sockets: u32,
    clients: Vec<(String, u32)>,
    /// Oldest first, so the latest manifest is written last.
    manifests: Vec<Manifest>,
}

/// Shared state of many nodes, in Redis.
pub struct RedisBroker {
    node: String,
    keys: keys::Keys,
    client: Client,
    subscriber: SubscriberClient,
    sink: Arc<dyn PageSink>,
    opts: RedisOptions,
    scripts: Scripts,
    wh: webhooks::WebhookScripts,
    waiters: Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
    held: Mutex<HashMap<ConvKey, Held>>,
    tenant_sockets: Mutex<HashMap<String, u64>>,
    live: RwLock<Arc<HashSet<String>>>,
    feeds: Mutex<HashMap<String, broadcast::Sender<Event>>>,
    manifest_seq: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for RedisBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBroker")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

const RETRY: Duration = Duration::from_secs(1);

fn unavailable(e: &fred::error::Error) -> BrokerError {
    tracing::warn!(error = %e, "redis command failed");
    BrokerError::Unavailable { retry_after: RETRY }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn strings(v: Value) -> Vec<String> {
    match v {
        Value::Array(items) => items
            .into_iter()
            .map(|i| i.as_string().unwrap_or_default())
            .collect(),
        Value::Null => Vec::new(),
        other => vec![other.as_string().unwrap_or_default()],
    }
}

/// Field/value pairs of an `HGETALL` reply.
fn pairs(v: Value) -> Vec<(String, i64)> {
    let flat = strings(v);
    flat.chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| (c[0].clone(), c[1].parse().unwrap_or(0)))
        .collect()
}

fn rejection(code: &str) -> Option<Rejection> {
    match code {
        "unknown_id" => Some(Rejection::UnknownId),
        "mismatch" => Some(Rejection::Mismatch),
        "duplicate" => Some(Rejection::Duplicate),
        "late" => Some(Rejection::Late),
        "unknown_confirm" => Some(Rejection::UnknownConfirm),
        _ => None,
    }
}

fn state_of(s: &str) -> CallState {
    match s {
        "a" => CallState::Answered,
        "t" => CallState::TimedOut,
        _ => CallState::Pending,
    }
}

impl RedisBroker {
    /// Connects to `url` (`redis://`, `rediss://`, `redis-cluster://h1:p1,h2:p2`,
    /// `redis-sentinel://…`) and starts this node's background tasks.
    pub async fn connect(
        url: &str,
        node: impl Into<String>,
        sink: Arc<dyn PageSink>,
        opts: RedisOptions,
        shutdown: CancellationToken,
    ) -> Result<Arc<Self>, ConnectError> {
        let config = url::config(url)?;
        let mut builder = Builder::from_config(config);
        builder
            .with_performance_config(|c| {
                c.default_command_timeout = opts.command_timeout;
                c.broadcast_channel_capacity = 16_384;
            })
            .with_connection_config(|c| {
                c.connection_timeout = opts.command_timeout;
                c.internal_command_timeout = opts.command_timeout;
                // Bounded memory while Redis is away: commands past this are refused at once.
                c.max_command_buffer_len = 100_000;
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 100, 2_000, 2));
        let client = builder
            .build()
            .map_err(|e| ConnectError::Url(e.to_string()))?;
        let subscriber = builder
            .build_subscriber_client()
            .map_err(|e| ConnectError::Url(e.to_string()))?;
        client
            .init()
            .await
            .map_err(|e| ConnectError::Connect(e.to_string()))?;
        subscriber
            .init()
            .await
            .map_err(|e| ConnectError::Connect(e.to_string()))?;
        let node = node.into();
        let broker = Arc::new(RedisBroker {
            live: RwLock::new(Arc::new(HashSet::from([node.clone()]))),
            node,
            keys: keys::Keys::new(&opts.prefix),
            client,
            subscriber,
            sink,
            opts,
            scripts: Scripts::default(),
            wh: webhooks::WebhookScripts::default(),
            waiters: Mutex::default(),
            held: Mutex::default(),
            tenant_sockets: Mutex::default(),
            feeds: Mutex::default(),
            manifest_seq: std::sync::atomic::AtomicU64::new(1),
        });
        broker.clear_own_fields().await;
        let _resubscriber = broker.subscriber.manage_subscriptions();
        broker
            .subscriber
            .subscribe(broker.keys.node_channel(&broker.node))
            .await
            .map_err(|e| ConnectError::Connect(e.to_string()))?;
        broker.heartbeat().await;
        tokio::spawn(Arc::clone(&broker).run_messages(shutdown.clone()));
        tokio::spawn(Arc::clone(&broker).run_heartbeat(shutdown.clone()));
        tokio::spawn(Arc::clone(&broker).run_republish(shutdown));
        Ok(broker)
    }

    async fn script(
        &self,
        script: &Script,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<Value, BrokerError> {
        if !self.client.is_connected() {
            return Err(BrokerError::Unavailable { retry_after: RETRY });
        }
        script
            .evalsha_with_reload(&self.client, keys, args)
            .await
            .map_err(|e| unavailable(&e))
    }

    fn live_nodes(&self) -> Arc<HashSet<String>> {
        Arc::clone(&self.live.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Sum of the per-node counts (fields without `|`) of live nodes.
    fn live_total(&self, fields: &[(String, i64)]) -> i64 {
        let live = self.live_nodes();
        fields
            .iter()
            .filter(|(f, _)| !f.contains('|') && live.contains(f.as_str()))
            .map(|(_, n)| *n)
            .sum()
    }

    /// A restarted node with a fixed id clears the counts its previous life left behind.
    async fn clear_own_fields(&self) {
        let set = self.keys.node_keys(&self.node);
        let Ok(hashes) = self.client.smembers::<Vec<String>, _>(&set).await else {
            return;
        };
        for h in hashes {
            let fields: Vec<(String, i64)> =
                match self.client.hgetall::<HashMap<String, i64>, _>(&h).await {
                    Ok(m) => m.into_iter().collect(),
                    Err(_) => continue,
                };
            let own: Vec<String> = fields
                .into_iter()
                .map(|(f, _)| f)
                .filter(|f| f == &self.node || f.starts_with(&format!("{}|", self.node)))
                .collect();
            if !own.is_empty() {
                let _: Result<i64, _> = self.client.hdel(&h, own).await;
            }
        }
        let _: Result<i64, _> = self.client.del(&set).await;
    }

    async fn heartbeat(&self) {
        let now = now_ms();
        // Milliseconds since the epoch are exact in an f64 for the next 280,000 years.
        #[allow(clippy::cast_precision_loss)]
        let score = now as f64;
        let _: Result<i64, _> = self
            .client
            .zadd(
                &self.keys.nodes(),
                None,
                None,
                false,
                false,
                (score, self.node.as_str()),
            )
            .await;
        let dead_before =
            now.saturating_sub(5 * u64::try_from(self.opts.heartbeat.as_millis()).unwrap_or(2000));
        #[allow(clippy::cast_precision_loss)]
        let min = dead_before as f64;
        if let Ok(nodes) = self
            .client
            .zrangebyscore::<Vec<String>, _, _, _>(&self.keys.nodes(), min, "+inf", false, None)
            .await
        {
            let mut set: HashSet<String> = nodes.into_iter().collect();
            set.insert(self.node.clone());
            *self.live.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(set);
        }
        #[allow(clippy::cast_precision_loss)]
        let forget = now.saturating_sub(3_600_000) as f64;
        let _: Result<i64, _> = self
            .client
            .zremrangebyscore(&self.keys.nodes(), "-inf", forget)
            .await;
    }

    async fn run_heartbeat(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.opts.heartbeat);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => {
                    let _: Result<i64, _> = self.client.zrem(&self.keys.nodes(), self.node.as_str()).await;
                    return;
                }
                _ = tick.tick() => self.heartbeat().await,
            }
        }
    }

    /// Writes everything this node holds again whenever the connection comes back: socket
    /// counts, manifests (without taking `current` from a page that has it), subscriptions are
    /// restored by the subscriber client itself.
    async fn run_republish(self: Arc<Self>, shutdown: CancellationToken) {
        let mut reconnects = self.client.reconnect_rx();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                r = reconnects.recv() => match r {
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        tracing::info!(node = %self.node, "redis connection back: re-publishing pages and manifests");
                        self.heartbeat().await;
                        self.republish().await;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    }

    async fn republish(&self) {
        let ttl = millis(self.opts.conversation_ttl).to_string();
        let snapshot: Vec<HeldSnapshot> = lock(&self.held)
            .iter()
            .map(|(k, h)| {
                let mut manifests: Vec<(u64, Manifest)> = h.manifests.values().cloned().collect();
                manifests.sort_by_key(|(seq, _)| *seq);
                HeldSnapshot {
                    conv: k.clone(),
                    sockets: h.sockets,
                    clients: h.clients.iter().map(|(c, n)| (c.clone(), *n)).collect(),
                    manifests: manifests.into_iter().map(|(_, m)| m).collect(),
                }
            })
            .collect();
        for HeldSnapshot {
            conv,
            sockets,
            clients,
            manifests,
        } in snapshot
        {
            let socks = self.keys.sockets(&conv);
            let mut fields: Vec<(String, String)> = vec![(self.node.clone(), sockets.to_string())];
            fields.extend(
                clients
                    .into_iter()
                    .map(|(c, n)| (format!("{}|{c}", self.node), n.to_string())),
            );
            let _: Result<i64, _> = self.client.hset(&socks, fields).await;
            let _: Result<i64, _> = self
                .client
                .pexpire(&socks, millis(self.opts.conversation_ttl), None)
                .await;
            let _: Result<i64, _> = self
                .client
                .sadd(self.keys.node_keys(&self.node), socks.as_str())
                .await;
            for m in manifests {
                let _ = self.put_manifest_script(&conv, &m, &ttl, true).await;
            }
        }
        let tenants: Vec<(String, u64)> = lock(&self.tenant_sockets)
            .iter()
            .map(|(t, n)| (t.clone(), *n))
            .collect();
        for (tenant, n) in tenants {
            let key = self.keys.tenant_sockets(&tenant);
            let _: Result<i64, _> = self
                .client
                .hset(&key, (self.node.as_str(), n.to_string()))
                .await;
            let _: Result<i64, _> = self
                .client
                .sadd(self.keys.node_keys(&self.node), key.as_str())
                .await;
        }
    }

    async fn run_messages(self: Arc<Self>, shutdown: CancellationToken) {
        let mut rx = self.subscriber.message_rx();
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
            let channel = msg.channel.to_string();
            let Some(payload) = msg.value.as_string() else {
                continue;
            };
            if let Some(tag) = channel.strip_prefix(&self.keys.conv_channel_prefix()) {
                if let (Some(conv), Some((client_id, frame))) =
                    (keys::parse_conv_tag(tag), payload.split_once('\n'))
                {
                    self.sink.deliver(&conv, client_id, frame.into());
                }
            } else if channel.starts_with(&self.keys.node_channel_prefix()) {
                self.on_outcome(&payload);
            } else if let Some(tag) = channel.strip_prefix(&self.keys.events_channel_prefix()) {
                let tenant = tag.trim_start_matches('{').trim_end_matches('}');
                self.on_event(tenant, &payload);
            }
        }
    }

    fn on_outcome(&self, payload: &str) {
        let mut parts = payload.splitn(3, '\n');
        let (Some("r"), Some(id), Some(outcome)) = (parts.next(), parts.next(), parts.next())
        else {
            return;
        };
        let Some(waiter) = lock(&self.waiters).remove(id) else {
            return;
        };
        match serde_json::from_str::<Outcome>(outcome) {
            Ok(o) => {
                let _ = waiter.send(o);
            }
            Err(e) => tracing::error!(call_id = id, error = %e, "unreadable outcome"),
        }
    }

    fn on_event(&self, tenant: &str, payload: &str) {
        let Some((id, body)) = payload.split_once('\n') else {
            return;
        };
        let Some(event) = parse_event(id, body) else {
            return;
        };
        if let Some(tx) = lock(&self.feeds).get(tenant) {
            let _ = tx.send(event);
        }
    }

    async fn put_manifest_script(
        &self,
        conv: &ConvKey,
        m: &Manifest,
        ttl: &str,
        keep_current: bool,
    ) -> Result<(), BrokerError> {
        let json = serde_json::to_string(m).unwrap_or_default();
        let manifest_key = format!("{}{}", self.keys.manifest_prefix(conv), m.client_id);
        self.script(
            &self.scripts.put_manifest,
            vec![manifest_key, self.keys.conv(conv)],
            vec![
                json,
                m.client_id.clone(),
                m.rev.to_string(),
                ttl.to_owned(),
                if keep_current { "1" } else { "0" }.into(),
            ],
        )
        .await
        .map(|_| ())
    }

    async fn subscribe_conv(&self, conv: &ConvKey) -> Result<(), BrokerError> {
        self.subscriber
            .ssubscribe(self.keys.conv_channel(conv))
            .await
            .map_err(|e| unavailable(&e))
    }

    async fn unsubscribe_conv(&self, conv: &ConvKey) {
        if let Err(e) = self
            .subscriber
            .sunsubscribe(self.keys.conv_channel(conv))
            .await
        {
            tracing::debug!(error = %e, "sunsubscribe failed");
        }
    }

    /// Looks up a call's conversation (of any tenant) through the call index.
    async fn indexed(&self, id: &str) -> Result<Option<ConvKey>, BrokerError> {
        let v: Option<String> = self
            .client
            .get(self.keys.call_index(id))
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(v.and_then(|s| {
            let mut p = s.splitn(3, '\n');
            Some(ConvKey::new(p.next()?, p.next()?, p.next()?))
        }))
    }

    /// A call's conversation, only when it belongs to `tenant`.
    async fn conv_of(&self, tenant: &str, id: &str) -> Result<Option<ConvKey>, BrokerError> {
        Ok(self.indexed(id).await?.filter(|c| c.tenant == tenant))
    }

    fn record(binding: &str, state: &str, outcome: &str) -> Option<CallRecord> {
        let binding: CallBinding = serde_json::from_str(binding).ok()?;
        let outcome = if outcome.is_empty() {
            None
        } else {
            serde_json::from_str(outcome).ok()
        };
        Some(CallRecord {
            binding,
            state: state_of(state),
            outcome,
        })
    }

    /// (Re)schedules the check of a pending confirmation (`tenant\nuser\nconversation\n
    /// confirmId\nclientId`) at `at_ms`; best effort, the sweep finds it again otherwise.
    async fn watch_confirm(&self, member: &str, at_ms: u64) {
        // Milliseconds since the epoch are exact in an f64.
        #[allow(clippy::cast_precision_loss)]
        let score = at_ms as f64;
        let _: Result<i64, _> = self
            .client
            .zadd(
                self.keys.pending_confirms(),
                None,
                None,
                false,
                false,
                (score, member),
            )
            .await;
    }

    /// Takes a 2 s lease on `key` for this node: `false` when another node holds it.
    async fn lease(&self, key: String) -> Result<bool, BrokerError> {
        let taken: Option<String> = self
            .client
            .set(
                key,
                self.node.as_str(),
                Some(Expiration::PX(2_000)),
                Some(fred::types::SetOptions::NX),
                false,
            )
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(taken.is_some())
    }

    /// Times out pending calls whose deadline passed with nobody left to do it (their node
    /// died, or they were async). Leased: one node sweeps at a time. Returns what it timed out.
    pub async fn sweep(&self) -> Result<Vec<CallRecord>, BrokerError> {
        if !self.lease(self.keys.sweep_lease()).await? {
            return Ok(Vec::new());
        }
        // One second of grace: the waiting node's own timer normally gets there first.
        #[allow(clippy::cast_precision_loss)]
        let max = now_ms().saturating_sub(1000) as f64;
        let due: Vec<String> = self
            .client
            .zrangebyscore(&self.keys.deadlines(), "-inf", max, false, Some((0, 500)))
            .await
            .map_err(|e| unavailable(&e))?;
        let mut swept = Vec::new();
        for member in due {
            let parts: Vec<&str> = member.splitn(4, '\n').collect();
            if let [tenant, user, conversation, id] = parts[..] {
                let conv = ConvKey::new(tenant, user, conversation);
                if let Some(r) = self.time_out(&conv, id).await? {
                    swept.push(r);
                }
            }
            let _: Result<i64, _> = self
                .client
                .zrem(&self.keys.deadlines(), member.as_str())
                .await;
        }
        Ok(swept)
    }

    /// A confirmId binding from its stored part (`{confirm_id, call_id}`) and its call.
    async fn confirm_binding(
        &self,
        conv: &ConvKey,
        client_id: &str,
        confirm_id: &str,
        stored: &str,
    ) -> Result<ConfirmBinding, BrokerError> {
        let partial: Json = serde_json::from_str(stored).unwrap_or_default();
        let call_id = partial["call_id"].as_str().unwrap_or_default().to_owned();
        let call = self.call(&conv.tenant, &call_id).await?;
        let (tool, untrusted) = call.map_or((String::new(), false), |c| {
            (c.binding.tool, c.binding.untrusted)
        });
        Ok(ConfirmBinding {
            confirm_id: confirm_id.to_owned(),
            call_id,
            tool,
            conv: conv.clone(),
            client_id: client_id.to_owned(),
            untrusted,
        })
    }

    /// Expires the confirmations of pages gone for `grace` (leased: one node at a time).
    async fn sweep_confirms(&self, grace: Duration) -> Result<Vec<ConfirmBinding>, BrokerError> {
        if !self.lease(self.keys.confirm_lease()).await? {
            return Ok(Vec::new());
        }
        let now = now_ms();
        #[allow(clippy::cast_precision_loss)]
        let max = now as f64;
        let due: Vec<String> = self
            .client
            .zrangebyscore(
                self.keys.pending_confirms(),
                "-inf",
                max,
                false,
                Some((0, 200)),
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let live: Vec<String> = self.live_nodes().iter().cloned().collect();
        let mut expired = Vec::new();
        for member in due {
            let parts: Vec<&str> = member.splitn(5, '\n').collect();
            let [tenant, user, conversation, confirm_id, client] = parts[..] else {
                let _: Result<i64, _> = self
                    .client
                    .zrem(self.keys.pending_confirms(), member.as_str())
                    .await;
                continue;
            };
            let conv = ConvKey::new(tenant, user, conversation);
            let mut args = vec![
                client.to_owned(),
                now.to_string(),
                u64::try_from(grace.as_millis())
                    .unwrap_or(u64::MAX)
                    .to_string(),
            ];
            args.extend(live.iter().cloned());
            let reply = strings(
                self.script(
                    &self.scripts.expire_confirm,
                    vec![
                        self.keys.confirm(&conv, confirm_id),
                        self.keys.sockets(&conv),
                        self.keys.conv(&conv),
                    ],
                    args,
                )
                .await?,
            );
            match reply.first().map(String::as_str) {
                Some("keep") => {
                    self.watch_confirm(&member, now + 5_000).await;
                }
                Some("expired") => {
                    let _: Result<i64, _> = self
                        .client
                        .zrem(self.keys.pending_confirms(), member.as_str())
                        .await;
                    expired.push(
                        self.confirm_binding(
                            &conv,
                            client,
                            confirm_id,
                            reply.get(1).map_or("", String::as_str),
                        )
                        .await?,
                    );
                }
                _ => {
                    let _: Result<i64, _> = self
                        .client
                        .zrem(self.keys.pending_confirms(), member.as_str())
                        .await;
                }
            }
        }
        Ok(expired)
    }

    fn count_fields(&self, client_id: Option<&str>) -> Vec<String> {
        let mut f = vec![self.node.clone()];
        if let Some(c) = client_id {
            f.push(format!("{}|{c}", self.node));
        }
        f
    }
}

fn parse_event(id: &str, body: &str) -> Option<Event> {
    let v: Json = serde_json::from_str(body).ok()?;
    Some(Event {
        id: id.to_owned(),
        kind: serde_json::from_value(v.get("type")?.clone()).ok()?,
        timestamp: v.get("timestamp")?.as_str()?.to_owned(),
        user: v.get("user")?.as_str()?.to_owned(),
        conversation: v.get("conversation")?.as_str()?.to_owned(),
        data: v.get("data")?.clone(),
    })
}

#[async_trait]
impl Broker for RedisBroker {
    fn node_id(&self) -> &str {
        &self.node
    }

    async fn ready(&self) -> Result<(), BrokerError> {
        if !self.client.is_connected() {
            return Err(BrokerError::Unavailable { retry_after: RETRY });
        }
        self.client
            .ping::<()>(None)
            .await
            .map_err(|e| unavailable(&e))
    }

    async fn send_call(
        &self,
        binding: CallBinding,
        frame: AgentMessage,
    ) -> Result<OutcomeWaiter, BrokerError> {
        let (tx, rx) = oneshot::channel();
        let id = binding.id.clone();
        lock(&self.waiters).insert(id.clone(), tx);
        let conv = binding.conv.clone();
        let ttl_ms = binding.deadline_ms.saturating_sub(now_ms())
            + u64::try_from(self.opts.finished_call_ttl.as_millis()).unwrap_or(300_000);
        let message = format!("{}\n{}", binding.client_id, frame.to_json());
        let bind = self.script(
            &self.scripts.bind,
            vec![self.keys.call(&conv, &id), self.keys.pending(&conv)],
            vec![
                serde_json::to_string(&binding).unwrap_or_default(),
                binding.client_id.clone(),
                binding.deadline_ms.to_string(),
                binding.node.clone(),
                ttl_ms.to_string(),
                self.keys.conv_channel(&conv),
                message,
                id.clone(),
            ],
        );
        let index = self.client.set::<(), _, _>(
            self.keys.call_index(&id),
            format!("{}\n{}\n{}", conv.tenant, conv.user, conv.conversation),
            Some(Expiration::PX(i64::try_from(ttl_ms).unwrap_or(i64::MAX))),
            None,
            false,
        );
        #[allow(clippy::cast_precision_loss)]
        let score = binding.deadline_ms as f64;
        let member = format!(
            "{}\n{}\n{}\n{}",
            conv.tenant, conv.user, conv.conversation, id
        );
        let deadline = self.client.zadd::<(), _, _>(
            self.keys.deadlines(),
            None,
            None,
            false,
            false,
            (score, member.as_str()),
        );
        let (bind, index, deadline) = tokio::join!(bind, index, deadline);
        if let Err(e) = bind
            .and(index.map_err(|e| unavailable(&e)))
            .and(deadline.map_err(|e| unavailable(&e)))
        {
            lock(&self.waiters).remove(&id);
            return Err(e);
        }
        Ok(rx)
    }

    async fn submit_result(
        &self,
        from: &PageIdentity,
        id: &str,
        result: ToolResult,
    ) -> Result<CallRecord, SubmitError> {
        let outcome = serde_json::to_string(&Outcome::Result(result.clone())).unwrap_or_default();
        let confirm_key = result.confirm_id().map_or_else(
            || self.keys.call(&from.conv, id),
            |c| self.keys.confirm(&from.conv, c),
        );
        let confirm = match result.confirm_id() {
            // The binding is completed from the call's binding by the gateway-independent fields.
            Some(c) => serde_json::json!({"confirm_id": c, "call_id": id}).to_string(),
            None => String::new(),
        };
        let reply = self
            .script(
                &self.scripts.result,
                vec![
                    self.keys.call(&from.conv, id),
                    confirm_key,
                    self.keys.pending(&from.conv),
                ],
                vec![
                    from.client_id.clone(),
                    outcome,
                    confirm,
                    millis(self.opts.confirm_ttl).to_string(),
                    id.to_owned(),
                    self.keys.node_channel_prefix(),
                ],
            )
            .await?;
        let reply = strings(reply);
        match reply.first().map(String::as_str) {
            Some("ok") => {
                if let Some(c) = result.confirm_id() {
                    let member = format!(
                        "{}\n{}\n{}\n{c}\n{}",
                        from.conv.tenant, from.conv.user, from.conv.conversation, from.client_id
                    );
                    self.watch_confirm(&member, now_ms()).await;
                }
                let binding: CallBinding = reply
                    .get(1)
                    .and_then(|b| serde_json::from_str(b).ok())
                    .ok_or(SubmitError::Rejected(Rejection::UnknownId))?;
                Ok(CallRecord {
                    binding,
                    state: CallState::Answered,
                    outcome: Some(Outcome::Result(result)),
                })
            }
            Some("unknown_id") => {
                // Not under this conversation: another conversation's call (mismatch) or none.
                let exists = self.indexed(id).await?.is_some();
                Err(SubmitError::Rejected(if exists {
                    Rejection::Mismatch
                } else {
                    Rejection::UnknownId
                }))
            }
            Some(code) => Err(SubmitError::Rejected(
                rejection(code).unwrap_or(Rejection::UnknownId),
            )),
            None => Err(SubmitError::Broker(BrokerError::Unavailable {
                retry_after: RETRY,
            })),
        }
    }

    async fn time_out(&self, conv: &ConvKey, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        let reply = strings(
            self.script(
                &self.scripts.timeout,
                vec![self.keys.call(conv, id), self.keys.pending(conv)],
                vec![
                    id.to_owned(),
                    serde_json::to_string(&Outcome::Timeout).unwrap_or_default(),
                    self.keys.conv_channel(conv),
                    self.keys.node_channel_prefix(),
                ],
            )
            .await?,
        );
        match (reply.first().map(String::as_str), reply.get(1)) {
            (Some("ok"), Some(b)) => Ok(Self::record(b, "t", "{\"status\":\"timeout\"}")),
            _ => Ok(None),
        }
    }

    async fn cancel(&self, tenant: &str, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        let Some(conv) = self.conv_of(tenant, id).await? else {
            return Ok(None);
        };
        let reply = strings(
            self.script(
                &self.scripts.cancel,
                vec![self.keys.call(&conv, id)],
                vec![id.to_owned(), self.keys.conv_channel(&conv)],
            )
            .await?,
        );
        match &reply[..] {
            [b, s, o] => Ok(Self::record(b, s, o)),
            _ => Ok(None),
        }
    }

    async fn call(&self, tenant: &str, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        let Some(conv) = self.conv_of(tenant, id).await? else {
            return Ok(None);
        };
        let f: Vec<Option<String>> = self
            .client
            .hmget(self.keys.call(&conv, id), vec!["b", "s", "o"])
            .await
            .map_err(|e| unavailable(&e))?;
        match &f[..] {
            [Some(b), s, o] => Ok(Self::record(
                b,
                s.as_deref().unwrap_or("p"),
                o.as_deref().unwrap_or(""),
            )),
            _ => Ok(None),
        }
    }

    async fn submit_confirmed(
        &self,
        from: &PageIdentity,
        confirm_id: &str,
    ) -> Result<ConfirmBinding, SubmitError> {
        let reply = strings(
            self.script(
                &self.scripts.confirm,
                vec![self.keys.confirm(&from.conv, confirm_id)],
                vec![from.client_id.clone()],
            )
            .await?,
        );
        match reply.first().map(String::as_str) {
            Some("ok") => {
                let partial: Json = reply
                    .get(1)
                    .and_then(|b| serde_json::from_str(b).ok())
                    .unwrap_or_default();
                let call_id = partial["call_id"].as_str().unwrap_or_default().to_owned();
                let call = self.call(&from.conv.tenant, &call_id).await?;
                let (tool, untrusted) = call.map_or((String::new(), false), |c| {
                    (c.binding.tool, c.binding.untrusted)
                });
                Ok(ConfirmBinding {
                    confirm_id: confirm_id.to_owned(),
                    call_id,
                    tool,
                    conv: from.conv.clone(),
                    client_id: from.client_id.clone(),
                    untrusted,
                })
            }
            Some(code) => Err(SubmitError::Rejected(
                rejection(code).unwrap_or(Rejection::UnknownConfirm),
            )),
            None => Err(SubmitError::Broker(BrokerError::Unavailable {
                retry_after: RETRY,
            })),
        }
    }

    async fn admit_page(&self, conv: &ConvKey, limits: &AdmitLimits) -> Result<(), AdmitError> {
        let ttl = millis(self.opts.conversation_ttl.max(Duration::from_secs(86_400))).to_string();
        let socks = self.keys.sockets(conv);
        let tenant_key = self.keys.tenant_sockets(&conv.tenant);
        let (c, t) = tokio::join!(
            self.script(
                &self.scripts.count_up,
                vec![socks.clone()],
                vec![self.node.clone(), ttl.clone()]
            ),
            self.script(
                &self.scripts.count_up,
                vec![tenant_key.clone()],
                vec![self.node.clone(), ttl]
            ),
        );
        let undo = || async {
            let _ = self
                .script(
                    &self.scripts.count_down,
                    vec![socks.clone()],
                    vec![self.node.clone()],
                )
                .await;
            let _ = self
                .script(
                    &self.scripts.count_down,
                    vec![tenant_key.clone()],
                    vec![self.node.clone()],
                )
                .await;
        };
        let (c, t) = match (c, t) {
            (Ok(c), Ok(t)) => (pairs(c), pairs(t)),
            (Err(e), _) | (_, Err(e)) => {
                undo().await;
                return Err(AdmitError::Broker(e));
            }
        };
        let conv_total = self.live_total(&c);
        let tenant_total = self.live_total(&t);
        if u64::try_from(tenant_total).unwrap_or(0) > limits.max_connections {
            undo().await;
            return Err(AdmitError::TenantConnections);
        }
        if conv_total > i64::from(limits.max_pages_per_conversation) {
            undo().await;
            return Err(AdmitError::ConversationPages);
        }
        let first = {
            let mut held = lock(&self.held);
            let h = held.entry(conv.clone()).or_default();
            h.sockets += 1;
            h.sockets == 1
        };
        *lock(&self.tenant_sockets)
            .entry(conv.tenant.clone())
            .or_default() += 1;
        let _: Result<i64, _> = self.client.hdel(self.keys.conv(conv), "drained").await;
        let _: Result<i64, _> = self
            .client
            .sadd(
                self.keys.node_keys(&self.node),
                vec![socks.as_str(), tenant_key.as_str()],
            )
            .await;
        if first && let Err(e) = self.subscribe_conv(conv).await {
            let _ = self.release_page(conv, None).await;
            return Err(AdmitError::Broker(e));
        }
        Ok(())
    }

    async fn page_identified(&self, conv: &ConvKey, client_id: &str) -> Result<(), BrokerError> {
        if let Some(h) = lock(&self.held).get_mut(conv) {
            *h.clients.entry(client_id.to_owned()).or_default() += 1;
        }
        let _: Result<i64, _> = self
            .client
            .hdel(self.keys.conv(conv), format!("gone|{client_id}"))
            .await;
        self.client
            .hincrby::<i64, _, _>(
                self.keys.sockets(conv),
                format!("{}|{client_id}", self.node),
                1,
            )
            .await
            .map(|_| ())
            .map_err(|e| unavailable(&e))
    }

    async fn release_page(
        &self,
        conv: &ConvKey,
        client_id: Option<&str>,
    ) -> Result<PageLeft, BrokerError> {
        let last = {
            let mut held = lock(&self.held);
            let mut last = false;
            if let Some(h) = held.get_mut(conv) {
                h.sockets = h.sockets.saturating_sub(1);
                if let Some(c) = client_id
                    && let Some(n) = h.clients.get_mut(c)
                {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        h.clients.remove(c);
                        h.manifests.remove(c);
                    }
                }
                if h.sockets == 0 {
                    held.remove(conv);
                    last = true;
                }
            }
            last
        };
        if let Some(n) = lock(&self.tenant_sockets).get_mut(&conv.tenant) {
            *n = n.saturating_sub(1);
        }
        if last {
            self.unsubscribe_conv(conv).await;
        }
        let (c, _) = tokio::join!(
            self.script(
                &self.scripts.count_down,
                vec![self.keys.sockets(conv)],
                self.count_fields(client_id)
            ),
            self.script(
                &self.scripts.count_down,
                vec![self.keys.tenant_sockets(&conv.tenant)],
                vec![self.node.clone()]
            ),
        );
        let fields = pairs(c?);
        let live = self.live_nodes();
        let page_gone = client_id.is_some_and(|client| {
            !fields.iter().any(|(f, n)| {
                *n > 0
                    && f.split_once('|')
                        .is_some_and(|(node, c)| c == client && live.contains(node))
            })
        });
        if page_gone && let Some(client) = client_id {
            let _: Result<i64, _> = self
                .client
                .hset(
                    self.keys.conv(conv),
                    (format!("gone|{client}"), now_ms().to_string()),
                )
                .await;
        }
        Ok(PageLeft { page_gone })
    }

    async fn put_manifest(&self, conv: &ConvKey, manifest: &Manifest) -> Result<(), BrokerError> {
        let seq = self
            .manifest_seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(h) = lock(&self.held).get_mut(conv) {
            h.manifests
                .insert(manifest.client_id.clone(), (seq, manifest.clone()));
        }
        let ttl = millis(self.opts.conversation_ttl).to_string();
        self.put_manifest_script(conv, manifest, &ttl, false).await
    }

    async fn conversation(&self, conv: &ConvKey) -> Result<ConversationState, BrokerError> {
        let mut args = vec![self.keys.manifest_prefix(conv)];
        args.extend(self.live_nodes().iter().cloned());
        let reply = strings(
            self.script(
                &self.scripts.conv_read,
                vec![self.keys.conv(conv), self.keys.sockets(conv)],
                args,
            )
            .await?,
        );
        let [effective, manifest, sockets, drained_at, rest @ ..] = &reply[..] else {
            return Ok(ConversationState::default());
        };
        let manifest: Option<Manifest> =
            serde_json::from_str::<Json>(manifest).ok().and_then(|v| {
                let tools: Vec<ToolManifestSummary> =
                    serde_json::from_value(v.get("tools")?.clone()).ok()?;
                Some(Manifest {
                    client_id: v.get("clientId")?.as_str()?.to_owned(),
                    rev: v.get("rev")?.as_u64()?,
                    tools,
                })
            });
        let mut pages: Vec<PageInfo> = rest
            .chunks(3)
            .filter(|c| c.len() == 3)
            .map(|c| PageInfo {
                client_id: c[0].clone(),
                sockets: c[1].parse().unwrap_or(0),
                rev: c[2].parse().ok(),
            })
            .collect();
        pages.sort_by(|a, b| a.client_id.cmp(&b.client_id));
        Ok(ConversationState {
            client_id: (!effective.is_empty()).then(|| effective.clone()),
            rev: manifest.as_ref().map(|m| m.rev),
            tools: manifest.map(|m| m.tools).unwrap_or_default(),
            pages,
            sockets: sockets.parse().unwrap_or(0),
            reconnecting_for_ms: drained_at
                .parse::<u64>()
                .ok()
                .filter(|_| sockets.parse::<u32>().unwrap_or(0) == 0)
                .map(|since| now_ms().saturating_sub(since)),
        })
    }

    async fn mark_drained(&self, conv: &ConvKey) -> Result<(), BrokerError> {
        self.client
            .hset::<i64, _, _>(self.keys.conv(conv), ("drained", now_ms().to_string()))
            .await
            .map(|_| ())
            .map_err(|e| unavailable(&e))
    }

    async fn pending_frames(&self, conv: &ConvKey) -> Result<Vec<Arc<str>>, BrokerError> {
        let reply = self
            .script(
                &self.scripts.pending,
                vec![self.keys.pending(conv)],
                vec![self.keys.call_prefix(conv)],
            )
            .await?;
        Ok(strings(reply)
            .into_iter()
            .filter_map(|m| m.split_once('\n').map(|(_, frame)| Arc::from(frame)))
            .collect())
    }

    async fn take_call(&self, tenant: &str, per_second: u32) -> Result<(), RateLimited> {
        let interval_us = 1_000_000 / u64::from(per_second.max(1));
        let burst = u64::from(per_second.max(1)) * 2;
        match self
            .script(
                &self.scripts.gcra,
                vec![self.keys.rate(tenant)],
                vec![interval_us.max(1).to_string(), burst.to_string()],
            )
            .await
        {
            Ok(v) => {
                let wait_us = v.as_u64().unwrap_or(0);
                if wait_us == 0 {
                    Ok(())
                } else {
                    Err(RateLimited {
                        retry_after: Duration::from_micros(wait_us),
                    })
                }
            }
            // An unreachable broker fails the call right after, with 503; do not also say 429.
            Err(_) => Ok(()),
        }
    }

    async fn emit(
        &self,
        tenant: &str,
        kind: EventType,
        conv: &ConvKey,
        data: Json,
    ) -> Result<Event, BrokerError> {
        let timestamp = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        let body = serde_json::json!({"type": kind, "timestamp": timestamp, "user": conv.user, "conversation": conv.conversation, "data": data});
        let id = self
            .script(
                &self.scripts.emit,
                vec![self.keys.events(tenant)],
                vec![
                    self.opts.events_per_tenant.to_string(),
                    body.to_string(),
                    self.keys.events_channel(tenant),
                ],
            )
            .await?
            .as_string()
            .unwrap_or_default();
        Ok(Event {
            id,
            kind,
            timestamp,
            user: conv.user.clone(),
            conversation: conv.conversation.clone(),
            data,
        })
    }

    async fn events(&self, tenant: &str, after: Option<&str>) -> Result<EventFeed, BrokerError> {
        let (live, first) = {
            let mut feeds = lock(&self.feeds);
            let first = !feeds.contains_key(tenant);
            let tx = feeds
                .entry(tenant.to_owned())
                .or_insert_with(|| broadcast::channel(4096).0);
            (tx.subscribe(), first)
        };
        if first
            && let Err(e) = self
                .subscriber
                .ssubscribe(self.keys.events_channel(tenant))
                .await
        {
            lock(&self.feeds).remove(tenant);
            return Err(unavailable(&e));
        }
        let backlog = match after {
            None => Vec::new(),
            Some(after) => {
                let start = format!("({after}");
                let entries: Vec<(String, HashMap<String, String>)> = self
                    .client
                    .xrange(
                        self.keys.events(tenant),
                        start,
                        "+",
                        Some(self.opts.events_per_tenant),
                    )
                    .await
                    .map_err(|e| unavailable(&e))?;
                entries
                    .into_iter()
                    .filter(|(id, _)| event_id_after(id, after))
                    .filter_map(|(id, fields)| parse_event(&id, fields.get("e")?))
                    .collect()
            }
        };
        Ok(EventFeed { backlog, live })
    }

    async fn sweep_deadlines(&self) -> Result<Vec<CallRecord>, BrokerError> {
        self.sweep().await
    }

    async fn expire_abandoned_confirmations(
        &self,
        grace: Duration,
    ) -> Result<Vec<ConfirmBinding>, BrokerError> {
        self.sweep_confirms(grace).await
    }

    async fn webhook_failed(&self, tenant: &str) -> Result<Vec<Json>, BrokerError> {
        Ok(self
            .webhook_dead_letters(tenant, 1000)
            .await?
            .iter()
            .map(|(id, p)| p.dead_letter_json(id))
            .collect())
    }

    async fn webhook_retry(&self, tenant: &str, id: &str) -> Result<bool, BrokerError> {
        self.webhook_retry_failed(tenant, id, now_ms()).await
    }
}
