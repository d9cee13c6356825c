//! The configuration of `toolmark-gateway` and `toolmark-worker`, apart from the plumbing that
//! runs them (`toolmark-process`): the file's typed shape ([`Config`], here), layered defaults →
//! TOML file → `TOOLMARK_SECTION__KEY` environment → flags ([`layers`]), then parsed once,
//! section by section, into the [`Settings`] the processes run on ([`settings`], [`tenant`],
//! [`admin`]): addresses, the TLS acceptor, token verifiers, signing keys and limits. Nothing
//! parses configuration again at run time. Every error names the key it is about; the binaries
//! turn it into exit code 2.
//!
//! The key material the parse checks lives here too: page-token and authorization-server keys
//! ([`keys`]), webhook signing keys ([`signing`]), the JWT library's crypto provider ([`jwt`]),
//! the server certificate ([`certificate`]) and the forms of a Redis URL ([`redis_url`]). The
//! only I/O is reading the files the configuration is and names (the file itself, the TLS
//! certificate and key).

pub mod admin;
pub mod certificate;
pub mod jwt;
pub mod keys;
mod layers;
pub mod pins;
/// The tool policy, read by the broker too: `toolmark-policy`, below both.
pub use toolmark_policy as policy;
pub mod redis_url;
pub mod settings;
pub mod signing;
pub mod tenant;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use admin::{AdminConfig, AdminSettings, Sealer, StoreSettings, StoredMcpOAuth, StoredTenant};
pub use keys::{KeyError, OAuthKeys, TokenKey};
pub use layers::Overrides;
pub use settings::{
    BrokerSettings, HoldSettings, McpSettings, ServerSettings, Settings, WorkerSettings,
};
pub use tenant::{
    ApiKey, McpOAuth, PusherApp, Revocation, TenantSettings, TenantSource, WebhookTarget,
    is_valid_tenant_id,
};

/// The JSON Schema (draft 2020-12) of the configuration file, from the types above: every key,
/// its type, its default and its doc comment, unknown keys refused. Committed as
/// `docs/config.schema.json` for editors that check TOML against a schema.
pub fn json_schema() -> serde_json::Value {
    schemars::schema_for!(Config).to_value()
}

/// A configuration error: the key and why it is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct ConfigError {
    /// Dotted path of the key, e.g. `tenants[0].limits.calls_per_second`.
    pub key: String,
    /// What is wrong with it.
    pub reason: String,
}

impl ConfigError {
    /// An error about `key`.
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Listener, TLS and drain.
    #[serde(default)]
    pub server: ServerConfig,
    /// Shared state.
    #[serde(default)]
    pub broker: BrokerConfig,
    /// The tenants this gateway serves.
    #[serde(default)]
    pub tenants: Vec<TenantConfig>,
    /// `toolmark-worker` settings (webhook delivery).
    #[serde(default)]
    pub worker: WorkerConfig,
    /// The hosted MCP endpoint (`/v1/tenants/{tenant}/mcp`).
    #[serde(default)]
    pub mcp: McpConfig,
    /// The admin API (tenants at run time); none without the section.
    pub admin: Option<AdminConfig>,
    /// `--admin-listen`: overrides `admin.listen` (and dev mode's admin listener).
    #[serde(skip)]
    pub admin_listen: Option<String>,
    /// Set by the binary when started without `--config`: loopback only, demo page.
    #[serde(skip)]
    pub dev_mode: bool,
}

/// `[server]`
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// PEM certificate chain; with `tls_key`, serve https/wss.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key.
    pub tls_key: Option<PathBuf>,
    /// How long in-flight agent requests get after SIGTERM.
    #[serde(default = "default_drain")]
    pub drain_timeout_ms: u64,
    /// This node's id (results are routed back to it); random when unset.
    pub node_id: Option<String>,
    /// With `broker.kind = "redis"`, also run the worker's jobs (deadline sweep, confirmation
    /// expiry, webhook delivery) in this process. With `memory` the gateway always runs them.
    #[serde(default)]
    pub run_jobs: bool,
    /// The base of the URLs the gateway hands out (`https://toolmark.example`).
    pub public_url: Option<String>,
    /// How often this node writes its per-tenant call figures into the broker, for the admin
    /// stats to sum over the nodes (100 to 10000 ms); an entry lapses after five intervals
    /// unwritten.
    #[serde(default = "default_stats_flush")]
    pub stats_flush_ms: u64,
    /// Open event streams (`GET …/events`) per tenant on one node; one more is 429.
    #[serde(default = "default_event_streams_per_tenant")]
    pub max_event_streams_per_tenant: usize,
    /// Open event streams per API key on one node; one more is 429.
    #[serde(default = "default_event_streams_per_key")]
    pub max_event_streams_per_key: usize,
}

const fn default_event_streams_per_tenant() -> usize {
    1_000
}

const fn default_event_streams_per_key() -> usize {
    16
}

const fn default_stats_flush() -> u64 {
    1_000
}

fn default_listen() -> String {
    "0.0.0.0:8080".into()
}

const fn default_drain() -> u64 {
    10_000
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: default_listen(),
            tls_cert: None,
            tls_key: None,
            drain_timeout_ms: default_drain(),
            node_id: None,
            run_jobs: false,
            public_url: None,
            stats_flush_ms: default_stats_flush(),
            max_event_streams_per_tenant: default_event_streams_per_tenant(),
            max_event_streams_per_key: default_event_streams_per_key(),
        }
    }
}

/// `[worker]`
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// Where the worker serves `/healthz` and `/metrics`.
    pub listen: String,
    /// Timeout of one webhook POST.
    pub webhook_timeout_ms: u64,
    /// First retry delay; doubled per attempt, jittered ±50 %.
    pub webhook_backoff_base_ms: u64,
    /// Longest retry delay.
    pub webhook_backoff_max_ms: u64,
    /// An event still failing this long after its first failure goes to the dead letters.
    pub webhook_max_age_secs: u64,
    /// Entries another worker read and left unacknowledged this long are taken over.
    pub webhook_claim_after_ms: u64,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            listen: "0.0.0.0:9090".into(),
            webhook_timeout_ms: 10_000,
            webhook_backoff_base_ms: 1_000,
            webhook_backoff_max_ms: 3_600_000,
            webhook_max_age_secs: 86_400,
            webhook_claim_after_ms: 30_000,
        }
    }
}

/// `[mcp]`: the hosted MCP endpoint.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// A session (MCP revisions before 2026-07-28) unused this long is forgotten on every node;
    /// the client then initializes again.
    pub session_idle_secs: u64,
    /// Open MCP streams (`GET` streams and `subscriptions/listen`) per tenant on one node.
    pub max_streams_per_tenant: usize,
    /// Open MCP streams per token (per user and conversation) on one node.
    pub max_streams_per_token: usize,
    /// Live MCP sessions per tenant, counted across the nodes.
    pub max_sessions_per_tenant: usize,
    /// Live MCP sessions per token (per user and conversation), counted across the nodes.
    pub max_sessions_per_token: usize,
    /// For a client that declares MCP tasks: a tool call not answered within this many
    /// milliseconds becomes a task.
    pub task_after_ms: u64,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            session_idle_secs: 3600,
            max_streams_per_tenant: 1000,
            max_streams_per_token: 4,
            max_sessions_per_tenant: 1000,
            max_sessions_per_token: 8,
            task_after_ms: 3000,
        }
    }
}

/// `[broker]`
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BrokerConfig {
    /// `memory` or `redis`.
    #[serde(default)]
    pub kind: BrokerKind,
    /// Redis URL for `redis`.
    pub url: Option<String>,
    /// Prefix of every Redis key and channel (several deployments can share one Redis).
    #[serde(default = "default_prefix")]
    pub key_prefix: String,
    /// How long a node holds a frame a page sent (a `result`, a `confirmed`, a manifest) while
    /// the broker does not answer, retrying until it does (1 to 300 seconds).
    #[serde(default = "default_stall_hold_secs")]
    pub stall_hold_secs: u64,
    /// How many such frames a node holds at once; past it, a frame is dropped (counted, logged).
    #[serde(default = "default_stall_hold_frames")]
    pub stall_hold_frames: usize,
    /// How many bytes of such frames a node holds at once; past it, a frame is dropped.
    #[serde(default = "default_stall_hold_bytes")]
    pub stall_hold_bytes: usize,
}

fn default_stall_hold_secs() -> u64 {
    30
}

fn default_stall_hold_frames() -> usize {
    10_000
}

fn default_stall_hold_bytes() -> usize {
    64 * 1024 * 1024
}

fn default_prefix() -> String {
    "tm".into()
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            kind: BrokerKind::Memory,
            url: None,
            key_prefix: default_prefix(),
            stall_hold_secs: default_stall_hold_secs(),
            stall_hold_frames: default_stall_hold_frames(),
            stall_hold_bytes: default_stall_hold_bytes(),
        }
    }
}

/// Which broker backs the gateway.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BrokerKind {
    /// One process, state in memory.
    #[default]
    Memory,
    /// Many nodes sharing Redis.
    Redis,
}

/// One entry of a tenant's `api_keys`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ApiKeyEntry {
    /// `sha256:<hex>` of the key: every scope and tool, its id the hash's first 12 hex digits.
    Hash(String),
    /// The key with its id and policy.
    Table {
        /// `sha256:<hex>` of the key.
        hash: String,
        /// The key's id in records and logs (`^[A-Za-z0-9_-]{1,64}$`); default the hash's first
        /// 12 hex digits.
        #[serde(default)]
        id: Option<String>,
        /// What the key may do (`docs/agent-api.md`, "Least privilege"); default everything.
        #[serde(default)]
        policy: Option<policy::Policy>,
    },
}

/// One `[[tenants]]` entry.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// `^[a-z0-9][a-z0-9-]{0,62}$`
    pub id: String,
    /// Each accepted API key: `sha256:<hex>` of it, or a table naming its hash, its id and its
    /// policy.
    #[serde(default)]
    pub api_keys: Vec<ApiKeyEntry>,
    /// HS256 secret for page tokens.
    pub token_secret: Option<String>,
    /// PEM public key (Ed25519 or P-256) for EdDSA or ES256 page tokens.
    pub token_public_key: Option<String>,
    /// Exact page origins.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Pusher-protocol app key (Laravel Echo).
    pub pusher_key: Option<String>,
    /// Pusher-protocol app secret.
    pub pusher_secret: Option<String>,
    /// Keys still accepted while rotating.
    #[serde(default)]
    pub pusher_old_keys: Vec<PusherKey>,
    /// Where events are POSTed.
    pub webhook_url: Option<String>,
    /// Standard Webhooks secret.
    pub webhook_secret: Option<String>,
    /// Deliver webhooks to loopback, private, link-local and other special-use addresses too
    /// (refused by default: a receiver there is inside the operator's network).
    #[serde(default)]
    pub webhook_allow_private: bool,
    /// The hosted MCP endpoint also accepts OAuth 2.1 access tokens of this issuer (the
    /// tenant's own authorization server); needs `mcp_jwks_url` or `mcp_public_key`.
    pub mcp_issuer: Option<String>,
    /// Where the issuer's signing keys are published (a JWK Set).
    pub mcp_jwks_url: Option<String>,
    /// The issuer's one signing key (PEM: Ed25519, P-256 or RSA).
    pub mcp_public_key: Option<String>,
    /// The conversation of an access token without a `cnv` claim (else such a token is refused).
    pub mcp_default_conversation: Option<String>,
    /// What the issuer's access tokens may do (the shape of an API key's `policy`); a token
    /// whose `scope` holds `toolmark:read` is held to read-only tools besides. Absent: all.
    pub mcp_policy: Option<policy::Policy>,
    /// Limits.
    #[serde(default)]
    pub limits: TenantLimits,
    /// Pinned tool definitions (`docs/security.md`, "Pinned tools"): `{mode, tools = [{name,
    /// digest}]}`; default `mode = "off"`.
    #[serde(default)]
    pub tools: pins::PinsConfig,
}

/// A Pusher key and secret pair.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PusherKey {
    /// App key.
    pub key: String,
    /// App secret.
    pub secret: String,
}

/// `[tenants.limits]`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TenantLimits {
    /// Page sockets, cluster-wide.
    pub max_connections: u64,
    /// Page sockets of one conversation.
    pub max_pages_per_conversation: u32,
    /// Per socket, burst twice that.
    pub page_messages_per_second: u32,
    /// Per tenant, cluster-wide, burst twice that.
    pub calls_per_second: u32,
    /// Serialized JSON, UTF-8 bytes.
    pub max_message_bytes: usize,
    /// Deadline of a call without `timeoutMs`.
    pub default_call_timeout_ms: u64,
    /// Largest `timeoutMs` accepted.
    pub max_call_timeout_ms: u64,
}

impl Default for TenantLimits {
    fn default() -> Self {
        TenantLimits {
            max_connections: 100_000,
            max_pages_per_conversation: 32,
            page_messages_per_second: 100,
            calls_per_second: 1000,
            max_message_bytes: 1_048_576,
            default_call_timeout_ms: 30_000,
            max_call_timeout_ms: 600_000,
        }
    }
}

/// The protocol's ceiling for a call deadline (the page's confirmation expiry).
pub const CALL_TIMEOUT_CEILING_MS: u64 = 600_000;
/// Frames larger than this close the socket with 1009.
pub const MAX_FRAME_BYTES: usize = 4 * 1_048_576;
