//! The Redis broker: any number of gateway nodes sharing one Redis, Redis Cluster or a
//! Sentinel-managed Redis, with the same contract as the memory broker.
//!
//! State lives in Redis (keys in [`keys`]); every check-and-mark is one Lua script on one hash
//! tag ([`scripts`]). Every node listens on one sharded channel per partition
//! ([`crate::partition`]), whatever the number of pages it holds: a script on a conversation's
//! slot publishes the conversation's agent → page frames to the channels of the nodes that hold
//! its sockets, and outcomes to the waiting node's channel, all of that partition. Each node
//! keeps what it holds (sockets, manifests) in memory and writes it again whenever the
//! connection to Redis comes back, so pages never have to reconnect after a Redis restart.

mod calls;
mod catalog;
mod codec;
mod confirmations;
mod events;
pub mod keys;
mod limits;
mod node;
mod outbox;
mod pages;
mod results;
mod run;
pub mod scripts;
mod sessions;
mod subscriptions;
pub mod webhooks;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use fred::clients::SubscriberClient;
use fred::interfaces::{
    ClientLike, ClusterInterface, EventInterface, HashesInterface, KeysInterface, PubsubInterface,
    SetsInterface, SortedSetsInterface, StreamsInterface,
};
use fred::prelude::{Builder, Client, Expiration, ReconnectPolicy};
use fred::types::Value;
use fred::types::scripts::Script;
use serde_json::Value as Json;
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;
use toolmark_config::redis_url::{self, UrlError};
use toolmark_proto::{AgentMessage, Manifest, ToolManifestSummary, ToolResult};

use crate::model::{self, Retention};
use crate::partition::{self, PARTITIONS};
use crate::prelude::*;
use crate::{
    AdmitError, AdmitLimits, Broker, BrokerError, CallBinding, CallRecord, CallRequest, CallState,
    CallTarget, ConfirmBinding, ConvKey, ConversationState, Event, EventFeed, EventType, Outcome,
    OutcomeWaiter, PageIdentity, PageInfo, PageLeft, PageSink, PlaceError, Placed, RateLimited,
    Rejection, SubmitError, TakeError, Watch, event_id_after, now_ms,
};
use run::Scripts;

/// Tunables of the Redis broker.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Longest wait for one Redis command; past it the agent API answers 503.
    pub command_timeout: Duration,
    /// How long everything lives (the same values as the memory broker's).
    pub retention: Retention,
    /// How often a node announces itself and probes its own pub/sub path; a node silent for
    /// [`model::DEAD_AFTER_HEARTBEATS`] intervals counts as dead.
    pub heartbeat: Duration,
    /// Prefix of every key and channel.
    pub prefix: String,
    /// Told how long each script's round trip took (the processes' latency metric).
    pub observe: CommandObserver,
}

/// Receives the name of each script the broker ran and the time its round trip took.
#[derive(Clone, Default)]
pub struct CommandObserver(Option<Arc<dyn Fn(&'static str, Duration) + Send + Sync>>);

impl CommandObserver {
    /// An observer calling `f`.
    pub fn new(f: impl Fn(&'static str, Duration) + Send + Sync + 'static) -> Self {
        CommandObserver(Some(Arc::new(f)))
    }

    fn observe(&self, script: &'static str, took: Duration) {
        if let Some(f) = &self.0 {
            f(script, took);
        }
    }
}

impl std::fmt::Debug for CommandObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "CommandObserver(set)"
        } else {
            "CommandObserver(none)"
        })
    }
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            command_timeout: Duration::from_secs(2),
            retention: Retention::default(),
            heartbeat: Duration::from_secs(2),
            prefix: "tm".into(),
            observe: CommandObserver::default(),
        }
    }
}

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL is not one of the supported forms.
    #[error("invalid Redis URL: {0}")]
    Url(#[from] UrlError),
    /// The client refused the configuration the URL gave.
    #[error("invalid Redis client configuration: {0}")]
    Client(#[source] fred::error::Error),
    /// Redis did not answer.
    #[error("cannot connect to Redis: {0}")]
    Connect(#[source] fred::error::Error),
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
    /// Watchers of calls placed anywhere (`Calls::watch`), by call id.
    watchers: Mutex<HashMap<String, Vec<oneshot::Sender<Outcome>>>>,
    held: Mutex<HashMap<ConvKey, Held>>,
    tenant_sockets: Mutex<HashMap<String, u64>>,
    live: RwLock<Arc<HashSet<String>>>,
    feeds: Mutex<HashMap<String, subscriptions::Feed>>,
    /// Events this process emitted.
    emitted: crate::Emitted,
    manifest_seq: std::sync::atomic::AtomicU64,
    /// Nodes with sockets in some conversation that were still not live after the live set was
    /// read again, and when: not asked about again for a heartbeat.
    dead_seen: Mutex<HashMap<String, std::time::Instant>>,
    /// Whether Redis is a Cluster (the tenant's rate then lives on another shard than the
    /// conversation, so calls take it in batches, `reserves`).
    cluster: bool,
    /// The tokens of tenants' rates this node took ahead of its calls (Redis Cluster only).
    reserves: crate::rate::Reserves,
    /// Per conversation, what this node last read of its current page ([`Broker::place_call`]).
    expected: Mutex<HashMap<ConvKey, Arc<calls::Expected>>>,
    /// Per partition, since when a probe a subscriber took has been awaited back through this
    /// node's channel (`None` once one came back): delivery-verified subscriptions.
    probe_awaited: Mutex<Vec<Option<std::time::Instant>>>,
    /// Since when some subscription has been lost and not restored ([`subscriptions`]).
    unsubscribed_since: Mutex<Option<std::time::Instant>>,
    /// When the held conversations' keys were last refreshed.
    refreshed_at: Mutex<std::time::Instant>,
    /// A connection of its own for blocking reads (the webhook consumer's `XREADGROUP BLOCK`),
    /// so that they never hold up the commands multiplexed on `client`.
    blocking: tokio::sync::OnceCell<Client>,
    /// Stops this node's background tasks ([`Broker::close`]).
    stop: CancellationToken,
    /// This node's background tasks: the message loop, the heartbeat, the re-publisher, the
    /// re-subscriber.
    tasks: tokio_util::task::TaskTracker,
    /// Tenant ids changed in the catalog, as announced on its channel.
    catalog_changes: broadcast::Sender<String>,
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

/// The builder of a node's two Redis clients (commands, and the subscriber).
fn builder(config: fred::prelude::Config, command_timeout: Duration) -> Builder {
    let mut builder = Builder::from_config(config);
    builder
        .with_performance_config(|c| {
            c.default_command_timeout = command_timeout;
            c.broadcast_channel_capacity = 16_384;
        })
        .with_connection_config(|c| {
            c.connection_timeout = command_timeout;
            c.internal_command_timeout = command_timeout;
            // Bounded memory while Redis is away: commands past this are refused at once.
            c.max_command_buffer_len = 100_000;
            // A redirection is never followed by the client: its `ASK` path writes `ASKING` on
            // a connection other commands are in flight on and takes the next reply there as
            // its own, after which every reply on that connection goes to the wrong caller
            // (found by the reshard test under load). On a `MOVED` the client still reads the
            // slot map again before it fails the command; the scripts are sent again
            // (`run::moving`), other commands are asked again by their callers.
            c.max_redirections = 0;
            // A command goes out when written, not once Redis has acknowledged the one before
            // it (Nagle's algorithm, which the client leaves on unless told).
            c.tcp.nodelay = Some(true);
        })
        .set_policy(ReconnectPolicy::new_exponential(0, 100, 2_000, 2));
    builder
}

impl RedisBroker {
    /// Connects to `url` (`redis://`, `rediss://`, `redis-cluster://h1:p1,h2:p2`,
    /// `redis-sentinel://…`) and starts this node's background tasks.
    pub async fn connect(
        url: &str,
        node: impl Into<String>,
        sink: Arc<dyn PageSink>,
        opts: RedisOptions,
    ) -> Result<Arc<Self>, ConnectError> {
        let config = redis_url::parse(url)?;
        let cluster = config.server.is_clustered();
        let builder = builder(config, opts.command_timeout);
        let client = builder.build().map_err(ConnectError::Client)?;
        let subscriber = builder
            .build_subscriber_client()
            .map_err(ConnectError::Client)?;
        client.init().await.map_err(ConnectError::Connect)?;
        subscriber.init().await.map_err(ConnectError::Connect)?;
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
            watchers: Mutex::default(),
            held: Mutex::default(),
            tenant_sockets: Mutex::default(),
            feeds: Mutex::default(),
            emitted: crate::Emitted::default(),
            manifest_seq: std::sync::atomic::AtomicU64::new(1),
            dead_seen: Mutex::default(),
            cluster,
            reserves: crate::rate::Reserves::default(),
            expected: Mutex::default(),
            probe_awaited: Mutex::new(vec![None; usize::from(PARTITIONS)]),
            unsubscribed_since: Mutex::default(),
            refreshed_at: Mutex::new(std::time::Instant::now()),
            blocking: tokio::sync::OnceCell::new(),
            stop: CancellationToken::new(),
            tasks: tokio_util::task::TaskTracker::new(),
            catalog_changes: broadcast::channel(1024).0,
        });
        broker.clear_own_fields().await;
        broker.load_scripts().await;
        broker.subscribe_partitions().await?;
        broker.heartbeat().await;
        let stop = &broker.stop;
        broker
            .tasks
            .spawn(Arc::clone(&broker).run_messages(stop.clone()));
        broker
            .tasks
            .spawn(Arc::clone(&broker).run_heartbeat(stop.clone()));
        broker
            .tasks
            .spawn(Arc::clone(&broker).run_republish(stop.clone()));
        broker
            .tasks
            .spawn(Arc::clone(&broker).run_subscriptions(stop.clone()));
        broker.tasks.close();
        Ok(broker)
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

    /// The conversation read of [`scripts::CONV_READ`], against this node's live set.
    async fn conv_read(&self, conv: &ConvKey) -> Result<Vec<String>, BrokerError> {
        let mut args = vec![self.keys.manifest_prefix(conv)];
        args.extend(self.live_nodes().iter().cloned());
        Ok(strings(
            self.script(
                &self.scripts.conv_read,
                vec![self.keys.conv(conv), self.keys.sockets(conv)],
                args,
            )
            .await?,
        ))
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

    /// Gives back a lease this node took, so the next sweep (on any node) need not wait for it.
    async fn release_lease(&self, key: String) {
        let _ = self
            .script(&self.scripts.release, vec![key], vec![self.node.clone()])
            .await;
    }

    /// Times out pending calls whose deadline passed with nobody left to do it (their node
    /// died, or they were async): the due entries of every partition's deadline set, read at
    /// once. Leased: one node sweeps at a time. Returns what it timed out.
    pub async fn sweep(&self) -> Result<Vec<CallRecord>, BrokerError> {
        if !self.lease(self.keys.sweep_lease()).await? {
            return Ok(Vec::new());
        }
        if let Err(e) = self.relay_outboxes().await {
            self.release_lease(self.keys.sweep_lease()).await;
            return Err(e);
        }
        #[allow(clippy::cast_precision_loss)]
        let max = now_ms().saturating_sub(model::millis(model::SWEEP_GRACE)) as f64;
        let reads = (0..PARTITIONS).map(|k| {
            self.client.zrangebyscore::<Vec<String>, _, _, _>(
                self.keys.deadlines(k),
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
                .client
                .zrem(&self.keys.deadlines(k), member.as_str())
                .await;
        }
        self.release_lease(self.keys.sweep_lease()).await;
        Ok(swept)
    }
}

/// A manifest as stored (what `put_manifest` wrote).
fn parse_manifest(stored: &str) -> Option<Manifest> {
    let v: Json = serde_json::from_str(stored).ok()?;
    let tools: Vec<ToolManifestSummary> = serde_json::from_value(v.get("tools")?.clone()).ok()?;
    Some(Manifest {
        client_id: v.get("clientId")?.as_str()?.to_owned(),
        rev: v.get("rev")?.as_u64()?,
        tools,
    })
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
        held_for_webhooks: false,
    })
}

#[async_trait]
impl Broker for RedisBroker {
    fn node_id(&self) -> &str {
        &self.node
    }

    async fn place_call(&self, req: CallRequest) -> Result<Placed, PlaceError> {
        // Boxed: the placement's loop over scripts sent again while a slot moves makes its
        // future large (clippy `large_futures`).
        Box::pin(self.place(req)).await
    }

    async fn close(&self) {
        self.stop.cancel();
        if tokio::time::timeout(self.opts.command_timeout * 2, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(node = %self.node, "redis background tasks still running at close");
        }
        if let Some(blocking) = self.blocking.get() {
            let _ = blocking.quit().await;
        }
        let _ = self.subscriber.quit().await;
        let _ = self.client.quit().await;
    }

    async fn ready(&self) -> Result<(), BrokerError> {
        if !self.client.is_connected() {
            return Err(BrokerError::Unavailable { retry_after: RETRY });
        }
        self.client
            .ping::<()>(None)
            .await
            .map_err(|e| unavailable(&e))?;
        // Delivery-verified: the probes this node publishes on its own clock come back through
        // its subscriber on every partition's channel, or the subscriptions are being restored
        // (`subscriptions`); unready only when that has failed for long.
        if !self.subscriptions_ready() {
            return Err(BrokerError::Unavailable { retry_after: RETRY });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_nodes_redis_connections_send_each_command_when_written() {
        for url in [
            "redis://127.0.0.1:6379",
            "redis-cluster://127.0.0.1:7000,127.0.0.1:7001",
        ] {
            let b = super::builder(
                super::redis_url::parse(url).unwrap(),
                Duration::from_secs(2),
            );
            let c = b.get_connection_config();
            assert_eq!(c.tcp.nodelay, Some(true), "{url}");
            assert_eq!(c.connection_timeout, Duration::from_secs(2), "{url}");
            assert_eq!(c.max_command_buffer_len, 100_000, "{url}");
            assert_eq!(c.max_redirections, 0, "{url}");
        }
    }
}
