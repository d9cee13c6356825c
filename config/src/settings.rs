//! The settings a process runs on, parsed once from a [`Config`]: each section's parse checks
//! its values and produces what the process uses (a socket address, a TLS acceptor, a broker
//! choice, durations), so no error can surface after start.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use tokio_rustls::TlsAcceptor;

use crate::admin::AdminSettings;
use crate::tenant::{TenantSettings, is_valid_tenant_id};
use crate::{BrokerKind, Config, ConfigError, McpConfig, ServerConfig, WorkerConfig};

/// A parsed configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `[server]`
    pub server: ServerSettings,
    /// `[broker]`
    pub broker: BrokerSettings,
    /// `[broker]`: what a node holds while the broker does not answer.
    pub hold: HoldSettings,
    /// `[[tenants]]`
    pub tenants: Vec<TenantSettings>,
    /// `[worker]`
    pub worker: WorkerSettings,
    /// `[mcp]`
    pub mcp: McpSettings,
    /// `[admin]`: the admin API and the key that seals stored tenant secrets.
    pub admin: Option<AdminSettings>,
    /// Started without `--config`: loopback only, memory broker, demo page.
    pub dev_mode: bool,
}

/// `[server]`, parsed.
#[derive(Clone)]
pub struct ServerSettings {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Serve https/wss with this acceptor (`tls_cert` + `tls_key`).
    pub tls: Option<TlsAcceptor>,
    /// How long pages, calls and their events get after SIGTERM.
    pub drain_timeout: Duration,
    /// This node's id; random when unset.
    pub node_id: Option<String>,
    /// Run the worker's jobs in this process with a Redis broker.
    pub run_jobs: bool,
    /// The base of every URL the gateway hands out (`server.public_url`, no trailing `/`).
    pub public_url: Option<String>,
    /// How often this node writes its call figures into the broker (`server.stats_flush_ms`).
    pub stats_flush: Duration,
    /// Open event streams per tenant on one node (`server.max_event_streams_per_tenant`).
    pub max_event_streams_per_tenant: usize,
    /// Open event streams per API key on one node (`server.max_event_streams_per_key`).
    pub max_event_streams_per_key: usize,
}

impl std::fmt::Debug for ServerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSettings")
            .field("listen", &self.listen)
            .field("tls", &self.tls.is_some())
            .field("drain_timeout", &self.drain_timeout)
            .field("node_id", &self.node_id)
            .field("run_jobs", &self.run_jobs)
            .field("public_url", &self.public_url)
            .field("stats_flush", &self.stats_flush)
            .field(
                "max_event_streams_per_tenant",
                &self.max_event_streams_per_tenant,
            )
            .field("max_event_streams_per_key", &self.max_event_streams_per_key)
            .finish()
    }
}

/// `[broker]`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerSettings {
    /// One process, state in memory.
    Memory,
    /// Many nodes over Redis.
    Redis {
        /// `broker.url`, checked, with the Redis client's configuration it gives.
        server: crate::redis_url::RedisServer,
        /// Prefix of every key and channel.
        prefix: String,
    },
}

/// The frames a node accepted from its pages and holds while the broker does not answer
/// (`broker.stall_hold_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldSettings {
    /// How long one frame is held, from when it came.
    pub time: Duration,
    /// Frames held at once.
    pub frames: usize,
    /// Bytes held at once.
    pub bytes: usize,
}

impl Default for HoldSettings {
    fn default() -> Self {
        HoldSettings {
            time: Duration::from_secs(30),
            frames: 10_000,
            bytes: 64 * 1024 * 1024,
        }
    }
}

/// `[worker]`, parsed.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// Where the worker serves `/healthz`, `/readyz` and `/metrics`.
    pub listen: SocketAddr,
    /// Webhook delivery: timeouts, backoff, maximum age, take-over (all checked positive).
    pub delivery: WorkerConfig,
}

impl Config {
    /// Checks every value and parses each section; the first problem is returned.
    pub fn parse(self) -> Result<Settings, ConfigError> {
        let server = parse_server(&self.server, self.dev_mode)?;
        let broker = self.parse_broker()?;
        let hold = self.parse_hold()?;
        let worker = parse_worker(self.worker)?;
        let mcp = parse_mcp(&self.mcp)?;
        let mut tenants = Vec::with_capacity(self.tenants.len());
        let mut ids = HashSet::new();
        let mut pusher_keys = HashSet::new();
        for (i, t) in self.tenants.iter().enumerate() {
            let parsed = TenantSettings::parse(t, i)?;
            if !ids.insert(parsed.id.clone()) {
                return Err(ConfigError::new(
                    format!("tenants[{i}].id"),
                    format!("duplicate tenant {:?}", parsed.id),
                ));
            }
            for (name, app) in parsed.pusher_key_names() {
                if !pusher_keys.insert(app.key.clone()) {
                    return Err(ConfigError::new(
                        format!("tenants[{i}].{name}"),
                        format!(
                            "Pusher key {:?} is used twice (a key selects one tenant)",
                            app.key
                        ),
                    ));
                }
            }
            if parsed.mcp_oauth.is_some() && server.public_url.is_none() && !self.dev_mode {
                return Err(ConfigError::new(
                    "server.public_url",
                    format!(
                        "required by tenants[{i}].mcp_issuer: the audience of its access tokens is the hosted MCP endpoint's public URL, never taken from a request"
                    ),
                ));
            }
            tenants.push(parsed);
        }
        let admin = match (&self.admin, self.dev_mode) {
            (Some(a), _) => Some(a.parse(self.admin_listen.as_deref())?),
            (None, true) => Some(AdminSettings::dev(
                self.admin_listen.as_deref(),
                server.listen,
            )?),
            (None, false) => None,
        };
        if tenants.is_empty() && !self.dev_mode && admin.is_none() {
            return Err(ConfigError::new(
                "tenants",
                "at least one [[tenants]] entry is required (or an [admin] section, to create tenants at run time)",
            ));
        }
        Ok(Settings {
            server,
            broker,
            hold,
            tenants,
            worker,
            mcp,
            admin,
            dev_mode: self.dev_mode,
        })
    }

    fn parse_hold(&self) -> Result<HoldSettings, ConfigError> {
        let b = &self.broker;
        if !(1..=300).contains(&b.stall_hold_secs) {
            return Err(ConfigError::new(
                "broker.stall_hold_secs",
                "1 to 300 seconds",
            ));
        }
        if b.stall_hold_frames == 0 {
            return Err(ConfigError::new(
                "broker.stall_hold_frames",
                "must be greater than 0",
            ));
        }
        if b.stall_hold_bytes < 64 * 1024 {
            return Err(ConfigError::new(
                "broker.stall_hold_bytes",
                "at least 65536 bytes",
            ));
        }
        Ok(HoldSettings {
            time: Duration::from_secs(b.stall_hold_secs),
            frames: b.stall_hold_frames,
            bytes: b.stall_hold_bytes,
        })
    }

    fn parse_broker(&self) -> Result<BrokerSettings, ConfigError> {
        let prefix = &self.broker.key_prefix;
        let prefix_ok = !prefix.is_empty()
            && prefix.len() <= 64
            && prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !prefix_ok {
            return Err(ConfigError::new(
                "broker.key_prefix",
                "1 to 64 characters of [A-Za-z0-9_-]",
            ));
        }
        match (self.broker.kind, &self.broker.url) {
            (BrokerKind::Memory, _) => Ok(BrokerSettings::Memory),
            (BrokerKind::Redis, None) => Err(ConfigError::new(
                "broker.url",
                "required with kind = \"redis\"",
            )),
            (BrokerKind::Redis, Some(url)) => {
                let server = crate::redis_url::RedisServer::parse(url).map_err(|e| {
                    ConfigError::new("broker.url", format!("invalid Redis URL: {e}"))
                })?;
                if self.dev_mode {
                    return Err(ConfigError::new(
                        "broker.kind",
                        "dev mode (no --config) uses the memory broker",
                    ));
                }
                Ok(BrokerSettings::Redis {
                    server,
                    prefix: prefix.clone(),
                })
            }
        }
    }
}

/// An `IP:port` address, or an error naming `key`.
fn socket_addr(key: &str, value: &str) -> Result<SocketAddr, ConfigError> {
    value
        .parse()
        .map_err(|_| ConfigError::new(key, format!("{value:?} is not an IP:port address")))
}

fn parse_server(s: &ServerConfig, dev_mode: bool) -> Result<ServerSettings, ConfigError> {
    let listen = socket_addr("server.listen", &s.listen)?;
    if dev_mode && !listen.ip().is_loopback() {
        return Err(ConfigError::new(
            "server.listen",
            "dev mode (no --config) listens on loopback only",
        ));
    }
    if s.drain_timeout_ms == 0 || s.drain_timeout_ms > 3_600_000 {
        return Err(ConfigError::new(
            "server.drain_timeout_ms",
            "must be between 1 and 3600000",
        ));
    }
    let tls = match (&s.tls_cert, &s.tls_key) {
        (None, None) => None,
        (Some(_), None) => {
            return Err(ConfigError::new(
                "server.tls_key",
                "required with server.tls_cert",
            ));
        }
        (None, Some(_)) => {
            return Err(ConfigError::new(
                "server.tls_cert",
                "required with server.tls_key",
            ));
        }
        (Some(cert), Some(key)) => Some(crate::certificate::acceptor(cert, key)?),
    };
    if let Some(id) = &s.node_id
        && !is_valid_tenant_id(id)
    {
        return Err(ConfigError::new(
            "server.node_id",
            "must match ^[a-z0-9][a-z0-9-]{0,62}$",
        ));
    }
    let public_url = match &s.public_url {
        None => None,
        Some(u) => Some(parse_public_url(u)?),
    };
    if !(100..=10_000).contains(&s.stats_flush_ms) {
        return Err(ConfigError::new(
            "server.stats_flush_ms",
            "must be between 100 and 10000",
        ));
    }
    for (key, n) in [
        (
            "server.max_event_streams_per_tenant",
            s.max_event_streams_per_tenant,
        ),
        (
            "server.max_event_streams_per_key",
            s.max_event_streams_per_key,
        ),
    ] {
        if n == 0 {
            return Err(ConfigError::new(key, "must be at least 1"));
        }
    }
    Ok(ServerSettings {
        max_event_streams_per_tenant: s.max_event_streams_per_tenant,
        max_event_streams_per_key: s.max_event_streams_per_key,
        listen,
        tls,
        drain_timeout: Duration::from_millis(s.drain_timeout_ms),
        node_id: s.node_id.clone(),
        run_jobs: s.run_jobs,
        public_url,
        stats_flush: Duration::from_millis(s.stats_flush_ms),
    })
}

/// `server.public_url`: an http(s) URL with no query or fragment; kept without its trailing
/// `/`, so that paths append to it.
fn parse_public_url(u: &str) -> Result<String, ConfigError> {
    let bad = |why: &str| ConfigError::new("server.public_url", format!("{u:?}: {why}"));
    let url = url::Url::parse(u).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("must be an http or https URL"));
    }
    if url.query().is_some() || url.fragment().is_some() || url.host_str().is_none() {
        return Err(bad(
            "a scheme, a host, an optional port and path, nothing else",
        ));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// `[mcp]`, parsed.
#[derive(Debug, Clone)]
pub struct McpSettings {
    /// How long an unused session is kept.
    pub session_idle: Duration,
    /// Open streams per tenant on one node.
    pub max_streams_per_tenant: usize,
    /// Open streams per token on one node.
    pub max_streams_per_token: usize,
    /// Live sessions per tenant, across the nodes.
    pub max_sessions_per_tenant: usize,
    /// Live sessions per token (user and conversation), across the nodes.
    pub max_sessions_per_token: usize,
    /// How long a tool call of a client that declares tasks may go unanswered before it
    /// becomes a task.
    pub task_after: Duration,
}

impl McpConfig {
    /// Checks and parses `[mcp]`.
    pub fn parse(&self) -> Result<McpSettings, ConfigError> {
        parse_mcp(self)
    }
}

fn parse_mcp(m: &McpConfig) -> Result<McpSettings, ConfigError> {
    for (k, v) in [
        ("mcp.session_idle_secs", m.session_idle_secs),
        (
            "mcp.max_streams_per_tenant",
            m.max_streams_per_tenant as u64,
        ),
        ("mcp.max_streams_per_token", m.max_streams_per_token as u64),
        (
            "mcp.max_sessions_per_tenant",
            m.max_sessions_per_tenant as u64,
        ),
        (
            "mcp.max_sessions_per_token",
            m.max_sessions_per_token as u64,
        ),
        ("mcp.task_after_ms", m.task_after_ms),
    ] {
        if v == 0 {
            return Err(ConfigError::new(k, "must be greater than 0"));
        }
    }
    Ok(McpSettings {
        session_idle: Duration::from_secs(m.session_idle_secs),
        max_streams_per_tenant: m.max_streams_per_tenant,
        max_streams_per_token: m.max_streams_per_token,
        max_sessions_per_tenant: m.max_sessions_per_tenant,
        max_sessions_per_token: m.max_sessions_per_token,
        task_after: Duration::from_millis(m.task_after_ms),
    })
}

fn parse_worker(w: WorkerConfig) -> Result<WorkerSettings, ConfigError> {
    let listen = socket_addr("worker.listen", &w.listen)?;
    for (k, v) in [
        ("worker.webhook_timeout_ms", w.webhook_timeout_ms),
        ("worker.webhook_backoff_base_ms", w.webhook_backoff_base_ms),
        ("worker.webhook_backoff_max_ms", w.webhook_backoff_max_ms),
        ("worker.webhook_max_age_secs", w.webhook_max_age_secs),
        ("worker.webhook_claim_after_ms", w.webhook_claim_after_ms),
    ] {
        if v == 0 {
            return Err(ConfigError::new(k, "must be greater than 0"));
        }
    }
    if w.webhook_claim_after_ms <= w.webhook_timeout_ms {
        return Err(ConfigError::new(
            "worker.webhook_claim_after_ms",
            "must exceed worker.webhook_timeout_ms",
        ));
    }
    Ok(WorkerSettings {
        listen,
        delivery: w,
    })
}
