//! The Redis broker: any number of gateway nodes sharing one Redis, Redis Cluster or a
//! Sentinel-managed Redis, with the same contract as the memory broker.
//!
//! State lives in Redis (keys in [`keys`]); every check-and-mark is one Lua script on one hash
//! tag ([`scripts`]: a `.lua` file each, with a struct of its arguments). Every node listens on
//! one sharded channel per partition ([`crate::partition`]), whatever the number of pages it
//! holds: a script on a conversation's slot publishes the conversation's agent → page frames to
//! the channels of the nodes that hold its sockets, and outcomes to the waiting node's channel,
//! all of that partition. Each node keeps what it holds (sockets, manifests) in memory, in parts
//! that own their state ([`state`]), and writes it again whenever the connection to Redis comes
//! back, so pages never have to reconnect after a Redis restart.

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
mod place;
mod reply;
mod results;
mod run;
mod scripts;
mod seen;
mod sessions;
mod state;
mod subscriptions;
mod sweep;
mod traffic;
pub mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fred::clients::SubscriberClient;
use fred::interfaces::ClientLike;
use fred::prelude::{Builder, Client, ReconnectPolicy};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::model::Retention;
use crate::partition::PARTITIONS;
use crate::rate::Reserves;
use crate::{Broker, BrokerError, CallRequest, Emitted, PageSink, PlaceError, Placed};
use reply::{RETRY, unavailable};
use state::{Expectations, Feeds, HeldPages, Liveness, Located, Probes, Waiters};

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

/// The Redis client's configuration of the server(s) a broker connects to.
pub use fred::prelude::Config as Server;

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The client refused the configuration the URL gave.
    #[error("invalid Redis client configuration: {0}")]
    Client(#[source] fred::error::Error),
    /// Redis did not answer.
    #[error("cannot connect to Redis: {0}")]
    Connect(#[source] fred::error::Error),
    /// A live node runs a release this one cannot serve beside, or one that cannot serve
    /// beside this ([`crate::release::refusal`]).
    #[error("{0}")]
    Release(String),
}

/// Shared state of many nodes, in Redis: composed of this node's parts by domain, each owning
/// its fields (what it keeps in memory is in parts with their own lock, [`state`]); its methods
/// are spread over one file per domain, each using the connection ([`Conn`]) and its domain's
/// part.
pub struct RedisBroker {
    /// This node: its id, its life and its subscriptions' probes.
    node: NodeParts,
    /// The connections to Redis and the key layout, which every domain uses.
    conn: Conn,
    /// What the calls' domain keeps on this node.
    calls: CallParts,
    /// The pages and sockets this node holds (written again after Redis lost its data).
    held: HeldPages,
    /// What the events' domain keeps on this node.
    events: EventParts,
}

/// This node as the broker knows it.
struct NodeParts {
    /// Its id (results are routed back to it by it).
    id: String,
    /// Where the frames for this node's pages go.
    sink: Arc<dyn PageSink>,
    /// The live nodes and the nodes known dead.
    live: Liveness,
    /// The probes of this node's subscriptions ([`subscriptions`]).
    probes: Probes,
    /// Stops this node's background tasks ([`Broker::close`]).
    stop: CancellationToken,
    /// This node's background tasks: the message loop, the heartbeat, the re-publisher, the
    /// re-subscriber.
    tasks: TaskTracker,
}

/// The connections to Redis and what every command is named and bounded by.
struct Conn {
    /// Commands and scripts.
    client: Client,
    /// This node's sharded subscriptions.
    subscriber: SubscriberClient,
    /// A connection of its own for blocking reads (the webhook consumer's `XREADGROUP BLOCK`),
    /// so that they never hold up the commands multiplexed on `client`.
    blocking: tokio::sync::OnceCell<Client>,
    /// The key layout.
    keys: keys::Keys,
    /// The tunables.
    opts: RedisOptions,
    /// Whether Redis is a Cluster (the tenant's rate then lives on another shard than the
    /// conversation, so calls take it in batches, `reserves`).
    cluster: bool,
}

/// What this node keeps for its calls.
struct CallParts {
    /// The requests waiting for or watching a call's outcome.
    waiters: Waiters,
    /// The partitions of calls lately found by their id alone ([`RedisBroker::locate`]).
    located: Located,
    /// Per conversation, what this node last read of its current page ([`Broker::place_call`]).
    expected: Expectations,
    /// The tokens of tenants' rates this node took ahead of its calls.
    reserves: Reserves,
}

/// What this node keeps for the tenants' events.
struct EventParts {
    /// The event feeds of tenants with live readers here.
    feeds: Feeds,
    /// Events this process emitted.
    emitted: Emitted,
    /// Tenant ids changed in the catalog, as announced on its channel.
    catalog_changes: broadcast::Sender<String>,
}

impl std::fmt::Debug for RedisBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBroker")
            .field("node", &self.node.id)
            .finish_non_exhaustive()
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
    /// Connects to the server(s) of `config` (one Redis, a Cluster or a Sentinel's master:
    /// what `broker.url` gives, `toolmark_config::redis_url`) and starts this node's background
    /// tasks.
    pub async fn connect(
        config: Server,
        node: impl Into<String>,
        sink: Arc<dyn PageSink>,
        opts: RedisOptions,
    ) -> Result<Arc<Self>, ConnectError> {
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
            node: NodeParts {
                live: Liveness::new(&node, opts.heartbeat),
                id: node,
                sink,
                probes: Probes::new(PARTITIONS),
                stop: CancellationToken::new(),
                tasks: TaskTracker::new(),
            },
            conn: Conn {
                client,
                subscriber,
                blocking: tokio::sync::OnceCell::new(),
                keys: keys::Keys::new(&opts.prefix),
                opts,
                cluster,
            },
            calls: CallParts {
                waiters: Waiters::default(),
                located: Located::default(),
                expected: Expectations::default(),
                reserves: Reserves::default(),
            },
            held: HeldPages::default(),
            events: EventParts {
                feeds: Feeds::default(),
                emitted: Emitted::default(),
                catalog_changes: broadcast::channel(1024).0,
            },
        });
        if let Some(why) = broker.release_refusal().await {
            return Err(ConnectError::Release(why));
        }
        broker.clear_own_fields().await;
        broker.load_scripts().await;
        broker.subscribe_partitions().await?;
        broker.heartbeat().await;
        let stop = &broker.node.stop;
        broker
            .node
            .tasks
            .spawn(Arc::clone(&broker).run_messages(stop.clone()));
        broker
            .node
            .tasks
            .spawn(Arc::clone(&broker).run_heartbeat(stop.clone()));
        broker
            .node
            .tasks
            .spawn(Arc::clone(&broker).run_republish(stop.clone()));
        broker
            .node
            .tasks
            .spawn(Arc::clone(&broker).run_subscriptions(stop.clone()));
        broker.node.tasks.close();
        Ok(broker)
    }
}

#[async_trait]
impl Broker for RedisBroker {
    fn node_id(&self) -> &str {
        &self.node.id
    }

    async fn place_call(&self, req: CallRequest) -> Result<Placed, PlaceError> {
        // Boxed: the placement's loop over scripts sent again while a slot moves makes its
        // future large (clippy `large_futures`).
        Box::pin(self.place(req)).await
    }

    async fn close(&self) {
        self.node.stop.cancel();
        if tokio::time::timeout(self.conn.opts.command_timeout * 2, self.node.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(node = %self.node.id, "redis background tasks still running at close");
        }
        if let Some(blocking) = self.conn.blocking.get() {
            let _ = blocking.quit().await;
        }
        let _ = self.conn.subscriber.quit().await;
        let _ = self.conn.client.quit().await;
    }

    async fn ready(&self) -> Result<(), BrokerError> {
        if !self.conn.client.is_connected() {
            return Err(BrokerError::Unavailable { retry_after: RETRY });
        }
        self.conn
            .client
            .ping::<()>(None)
            .await
            .map_err(|e| unavailable(&e))?;
        // Delivery-verified: the probes this node publishes on its own clock come back through
        // its subscriber on every partition's channel, or the subscriptions are being restored
        // (`subscriptions`); unready only when that has failed for long.
        if !self.node.probes.ready() {
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
                toolmark_config::redis_url::parse(url).unwrap(),
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
