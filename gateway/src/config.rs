//! The gateway's configuration: one typed struct, layered defaults → TOML file →
//! `TOOLMARK_SECTION__KEY` environment → flags, validated once before binding. Every error
//! names the key it is about; the binary turns it into exit code 2.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

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
    pub(crate) fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize)]
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
    /// Set by the binary when started without `--config`: loopback only, demo page.
    #[serde(skip)]
    pub dev_mode: bool,
}

/// `[server]`
#[derive(Debug, Clone, Deserialize)]
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
        }
    }
}

/// `[worker]`
#[derive(Debug, Clone, Deserialize)]
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

/// `[broker]`
#[derive(Debug, Clone, Deserialize)]
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
        }
    }
}

/// Which broker backs the gateway.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BrokerKind {
    /// One process, state in memory.
    #[default]
    Memory,
    /// Many nodes sharing Redis.
    Redis,
}

/// One `[[tenants]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// `^[a-z0-9][a-z0-9-]{0,62}$`
    pub id: String,
    /// `sha256:<hex>` of each accepted API key.
    #[serde(default)]
    pub api_keys: Vec<String>,
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
    /// Limits.
    #[serde(default)]
    pub limits: TenantLimits,
}

/// A Pusher key and secret pair.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PusherKey {
    /// App key.
    pub key: String,
    /// App secret.
    pub secret: String,
}

/// `[tenants.limits]`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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

/// Flags that override the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--listen`
    pub listen: Option<String>,
    /// `--redis`
    pub redis: Option<String>,
    /// `--node-id`
    pub node_id: Option<String>,
}

impl Config {
    /// Parses a TOML document, applies `env` (`TOOLMARK_SECTION__KEY=value` pairs) and flags,
    /// and validates the result.
    pub fn load(
        toml_text: &str,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let table: toml::Table = toml::from_str(toml_text)
            .map_err(|e| ConfigError::new("config", e.message().to_owned()))?;
        Self::layered(table, env, overrides, false)
    }

    /// Dev mode (no `--config`): loopback `127.0.0.1:8080`, memory broker; the `dev` tenant is
    /// added once the listener is bound. Environment and flags still apply.
    pub fn dev(
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let mut server = toml::Table::new();
        server.insert(
            "listen".into(),
            toml::Value::String("127.0.0.1:8080".into()),
        );
        let mut table = toml::Table::new();
        table.insert("server".into(), toml::Value::Table(server));
        Self::layered(table, env, overrides, true)
    }

    fn layered(
        mut table: toml::Table,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &Overrides,
        dev_mode: bool,
    ) -> Result<Config, ConfigError> {
        apply_env(&mut table, env)?;
        let mut config: Config = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| {
                let key = e.path().to_string();
                ConfigError::new(
                    if key == "." { "config".into() } else { key },
                    e.into_inner().message().to_owned(),
                )
            })?;
        config.dev_mode = dev_mode;
        if let Some(listen) = &overrides.listen {
            config.server.listen.clone_from(listen);
        }
        if let Some(url) = &overrides.redis {
            config.broker.kind = BrokerKind::Redis;
            config.broker.url = Some(url.clone());
        }
        if let Some(id) = &overrides.node_id {
            config.server.node_id = Some(id.clone());
        }
        config.validate()?;
        Ok(config)
    }

    /// The listen address, parsed.
    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.server.listen.parse().map_err(|_| {
            ConfigError::new(
                "server.listen",
                format!("{:?} is not an IP:port address", self.server.listen),
            )
        })
    }

    /// Checks every value; the first problem is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let addr = self.listen_addr()?;
        if self.dev_mode && !addr.ip().is_loopback() {
            return Err(ConfigError::new(
                "server.listen",
                "dev mode (no --config) listens on loopback only",
            ));
        }
        if self.server.drain_timeout_ms == 0 || self.server.drain_timeout_ms > 3_600_000 {
            return Err(ConfigError::new(
                "server.drain_timeout_ms",
                "must be between 1 and 3600000",
            ));
        }
        match (&self.server.tls_cert, &self.server.tls_key) {
            (None, None) => {}
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
            (Some(cert), Some(key)) => {
                crate::tls::acceptor(cert, key).map_err(|e| {
                    let (k, why) = e
                        .split_once(": ")
                        .unwrap_or(("server.tls_cert", e.as_str()));
                    ConfigError::new(k, why)
                })?;
            }
        }
        if let Some(id) = &self.server.node_id
            && !is_valid_tenant_id(id)
        {
            return Err(ConfigError::new(
                "server.node_id",
                "must match ^[a-z0-9][a-z0-9-]{0,62}$",
            ));
        }
        let prefix_ok = !self.broker.key_prefix.is_empty()
            && self.broker.key_prefix.len() <= 64
            && self
                .broker
                .key_prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !prefix_ok {
            return Err(ConfigError::new(
                "broker.key_prefix",
                "1 to 64 characters of [A-Za-z0-9_-]",
            ));
        }
        match (self.broker.kind, &self.broker.url) {
            (BrokerKind::Memory, _) => {}
            (BrokerKind::Redis, None) => {
                return Err(ConfigError::new(
                    "broker.url",
                    "required with kind = \"redis\"",
                ));
            }
            (BrokerKind::Redis, Some(url)) => {
                toolmark_broker::redis::check_url(url)
                    .map_err(|e| ConfigError::new("broker.url", e))?;
                if self.dev_mode {
                    return Err(ConfigError::new(
                        "broker.kind",
                        "dev mode (no --config) uses the memory broker",
                    ));
                }
            }
        }
        let w = &self.worker;
        if w.listen.parse::<SocketAddr>().is_err() {
            return Err(ConfigError::new(
                "worker.listen",
                format!("{:?} is not an IP:port address", w.listen),
            ));
        }
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
        let mut seen = HashSet::new();
        let mut pusher_keys = HashSet::new();
        for (i, t) in self.tenants.iter().enumerate() {
            let at = |k: &str| format!("tenants[{i}].{k}");
            if !is_valid_tenant_id(&t.id) {
                return Err(ConfigError::new(
                    at("id"),
                    "must match ^[a-z0-9][a-z0-9-]{0,62}$",
                ));
            }
            if !seen.insert(t.id.as_str()) {
                return Err(ConfigError::new(
                    at("id"),
                    format!("duplicate tenant {:?}", t.id),
                ));
            }
            for (j, k) in t.api_keys.iter().enumerate() {
                if crate::auth::parse_key_hash(k).is_none() {
                    return Err(ConfigError::new(
                        at(&format!("api_keys[{j}]")),
                        "must be \"sha256:\" followed by 64 hex digits",
                    ));
                }
            }
            match (&t.token_secret, &t.token_public_key) {
                (Some(_), Some(_)) => {
                    return Err(ConfigError::new(
                        at("token_public_key"),
                        "set token_secret or token_public_key, not both",
                    ));
                }
                (None, None) => {
                    return Err(ConfigError::new(
                        at("token_secret"),
                        "set token_secret (HS256) or token_public_key (EdDSA, ES256)",
                    ));
                }
                (Some(s), None) if s.len() < 32 => {
                    return Err(ConfigError::new(
                        at("token_secret"),
                        "must be at least 32 bytes",
                    ));
                }
                (None, Some(pem)) => {
                    crate::tenants::public_key_verifier(pem, &t.id)
                        .map_err(|e| ConfigError::new(at("token_public_key"), e))?;
                }
                _ => {}
            }
            for (j, o) in t.allowed_origins.iter().enumerate() {
                if let Err(e) = check_origin(o) {
                    return Err(ConfigError::new(at(&format!("allowed_origins[{j}]")), e));
                }
            }
            if t.pusher_key.is_some() != t.pusher_secret.is_some() {
                return Err(ConfigError::new(
                    at("pusher_secret"),
                    "pusher_key and pusher_secret go together",
                ));
            }
            if t.pusher_key.is_none() && !t.pusher_old_keys.is_empty() {
                return Err(ConfigError::new(
                    at("pusher_old_keys"),
                    "needs pusher_key and pusher_secret",
                ));
            }
            let old_keys = t.pusher_old_keys.iter().enumerate();
            let pairs = t
                .pusher_key
                .iter()
                .zip(&t.pusher_secret)
                .map(|(k, s)| ("pusher_key".to_owned(), k, s))
                .chain(old_keys.map(|(j, p)| (format!("pusher_old_keys[{j}]"), &p.key, &p.secret)));
            for (name, key, secret) in pairs {
                if !crate::pusher::is_valid_app_key(key) {
                    return Err(ConfigError::new(
                        at(&name),
                        "must match ^[A-Za-z0-9_-]{1,128}$",
                    ));
                }
                if secret.len() < 16 {
                    return Err(ConfigError::new(
                        at(&name),
                        "secret must be at least 16 bytes",
                    ));
                }
                if !pusher_keys.insert(key.as_str()) {
                    return Err(ConfigError::new(
                        at(&name),
                        format!("Pusher key {key:?} is used twice (a key selects one tenant)"),
                    ));
                }
            }
            if let Some(u) = &t.webhook_url {
                let ok = url::Url::parse(u).is_ok_and(|u| matches!(u.scheme(), "http" | "https"));
                if !ok {
                    return Err(ConfigError::new(
                        at("webhook_url"),
                        "must be an http or https URL",
                    ));
                }
                if let Some(secret) = &t.webhook_secret
                    && let Err(e) = crate::jobs::sign::SigningKey::parse(secret)
                {
                    return Err(ConfigError::new(at("webhook_secret"), e));
                }
                if t.webhook_secret.is_none() {
                    return Err(ConfigError::new(
                        at("webhook_secret"),
                        "required with webhook_url",
                    ));
                }
            }
            let l = &t.limits;
            let positive = [
                ("limits.max_connections", l.max_connections),
                (
                    "limits.max_pages_per_conversation",
                    u64::from(l.max_pages_per_conversation),
                ),
                (
                    "limits.page_messages_per_second",
                    u64::from(l.page_messages_per_second),
                ),
                ("limits.calls_per_second", u64::from(l.calls_per_second)),
                ("limits.default_call_timeout_ms", l.default_call_timeout_ms),
                ("limits.max_call_timeout_ms", l.max_call_timeout_ms),
            ];
            for (k, v) in positive {
                if v == 0 {
                    return Err(ConfigError::new(at(k), "must be greater than 0"));
                }
            }
            if l.max_message_bytes < 1024 || l.max_message_bytes > MAX_FRAME_BYTES {
                return Err(ConfigError::new(
                    at("limits.max_message_bytes"),
                    "must be between 1024 and 4194304",
                ));
            }
            if l.max_call_timeout_ms > CALL_TIMEOUT_CEILING_MS {
                return Err(ConfigError::new(
                    at("limits.max_call_timeout_ms"),
                    "must be at most 600000",
                ));
            }
            if l.default_call_timeout_ms > l.max_call_timeout_ms {
                return Err(ConfigError::new(
                    at("limits.default_call_timeout_ms"),
                    "must not exceed limits.max_call_timeout_ms",
                ));
            }
        }
        if self.tenants.is_empty() && !self.dev_mode {
            return Err(ConfigError::new(
                "tenants",
                "at least one [[tenants]] entry is required",
            ));
        }
        Ok(())
    }
}

/// Whether `id` is a tenant id: `^[a-z0-9][a-z0-9-]{0,62}$`.
pub fn is_valid_tenant_id(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// An origin must be exactly `scheme://host[:port]` as a browser serializes it.
fn check_origin(o: &str) -> Result<(), String> {
    if o == "*" || o == "null" {
        return Err(format!("{o:?} is not allowed; list exact origins"));
    }
    let url = url::Url::parse(o).map_err(|e| format!("{o:?} is not an origin: {e}"))?;
    let serialized = url.origin().ascii_serialization();
    if serialized != o {
        return Err(format!(
            "{o:?} is not an exact origin (did you mean {serialized:?}?)"
        ));
    }
    Ok(())
}

/// Applies `TOOLMARK_A__B__C=value` pairs: path segments are lowercased; a numeric segment
/// indexes an array (`TOOLMARK_TENANTS__0__TOKEN_SECRET`). Values parse as TOML when they can
/// (`5000`, `true`, `["a"]`), else they are strings.
fn apply_env(
    table: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<(), ConfigError> {
    for (name, raw) in env {
        // Only TOOLMARK_SECTION__KEY names are configuration; others (e.g. TOOLMARK_LOG_FORMAT)
        // belong to the process.
        let Some(rest) = name.strip_prefix("TOOLMARK_").filter(|r| r.contains("__")) else {
            continue;
        };
        let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        let key = path.join(".");
        if path.iter().any(String::is_empty) {
            return Err(ConfigError::new(
                name,
                "malformed variable name (use TOOLMARK_SECTION__KEY)",
            ));
        }
        let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or(toml::Value::String(raw));
        set_path(table, &path, value).map_err(|reason| ConfigError::new(key, reason))?;
    }
    Ok(())
}

fn set_path(table: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), String> {
    let (first, rest) = path.split_first().ok_or("empty key")?;
    if rest.is_empty() {
        table.insert(first.clone(), value);
        return Ok(());
    }
    let child = table.entry(first.clone()).or_insert_with(|| {
        if rest[0].parse::<usize>().is_ok() {
            toml::Value::Array(Vec::new())
        } else {
            toml::Value::Table(toml::Table::new())
        }
    });
    set_in_value(child, rest, value)
}

fn set_in_value(node: &mut toml::Value, path: &[String], value: toml::Value) -> Result<(), String> {
    match node {
        toml::Value::Table(t) => set_path(t, path, value),
        toml::Value::Array(items) => {
            let (first, rest) = path.split_first().ok_or("empty key")?;
            let index: usize = first
                .parse()
                .map_err(|_| format!("{first:?} is not an array index"))?;
            if index > items.len() {
                return Err(format!(
                    "index {index} skips entries (the array has {})",
                    items.len()
                ));
            }
            if index == items.len() {
                items.push(toml::Value::Table(toml::Table::new()));
            }
            if rest.is_empty() {
                items[index] = value;
                Ok(())
            } else {
                set_in_value(&mut items[index], rest, value)
            }
        }
        _ => Err("is not a table".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
        [[tenants]]
        id = "acme"
        api_keys = ["sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"]
        token_secret = "0123456789abcdef0123456789abcdef"
        allowed_origins = ["https://app.acme.example"]
    "#;

    fn load(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
        Config::load(text, env, &Overrides::default())
    }

    #[test]
    fn defaults_apply_and_a_good_file_loads() {
        let c = load(BASE, &[]).unwrap();
        assert_eq!(c.server.listen, "0.0.0.0:8080");
        assert_eq!(c.tenants[0].limits, TenantLimits::default());
    }

    #[test]
    fn errors_name_the_key() {
        let e = load(
            &format!("{BASE}\n[tenants.limits]\ncalls_per_second = \"fast\""),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.key, "tenants[0].limits.calls_per_second");
        let e = load(
            &format!("{BASE}\n[tenants.limits]\ncalls_per_second = 0"),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.key, "tenants[0].limits.calls_per_second");
        let e = load(&format!("[server]\nlisten = \"nowhere\"\n{BASE}"), &[]).unwrap_err();
        assert_eq!(e.key, "server.listen");
        let e = load(&format!("[server]\nlisten_on = 1\n{BASE}"), &[]).unwrap_err();
        assert_eq!(e.key, "server.listen_on");
        let e = load(
            &BASE.replace("https://app.acme.example", "https://app.acme.example/"),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.key, "tenants[0].allowed_origins[0]");
        let e = load(&BASE.replace("sha256:2bb8", "md5:2bb8"), &[]).unwrap_err();
        assert_eq!(e.key, "tenants[0].api_keys[0]");
        let e = load(&BASE.replace("\"acme\"", "\"Acme\""), &[]).unwrap_err();
        assert_eq!(e.key, "tenants[0].id");
        let e = load(&format!("[broker]\nkind = \"redis\"\n{BASE}"), &[]).unwrap_err();
        assert_eq!(e.key, "broker.url");
        let e = load(
            &format!("[broker]\nkind = \"redis\"\nurl = \"http://x\"\n{BASE}"),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.key, "broker.url");
        assert!(load(&format!("[broker]\nkind = \"redis\"\nurl = \"redis-cluster://127.0.0.1:7000,127.0.0.1:7001\"\n{BASE}"), &[]).is_ok());
        let e = load("not toml [", &[]).unwrap_err();
        assert_eq!(e.key, "config");
    }

    #[test]
    fn pusher_keys_select_one_tenant_each() {
        let pusher = |extra: &str| {
            let second = BASE.replace("\"acme\"", "\"globex\"");
            format!(
                "{BASE}\npusher_key = \"k1\"\npusher_secret = \"0123456789abcdef\"\n{second}\n{extra}"
            )
        };
        assert!(load(&pusher(""), &[]).is_ok());
        let old = "pusher_key = \"k2\"\npusher_secret = \"0123456789abcdef\"\npusher_old_keys = [{ key = \"k1\", secret = \"0123456789abcdef\" }]";
        let e = load(&pusher(old), &[]).unwrap_err();
        assert_eq!(e.key, "tenants[1].pusher_old_keys[0]", "{e}");
        let e = load(
            &pusher("pusher_old_keys = [{ key = \"k3\", secret = \"0123456789abcdef\" }]"),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.key, "tenants[1].pusher_old_keys");
        let e = load(
            &pusher("pusher_key = \"a:b\"\npusher_secret = \"0123456789abcdef\""),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.key, "tenants[1].pusher_key");
        let e = load(
            &pusher("pusher_key = \"k4\"\npusher_secret = \"short\""),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.key, "tenants[1].pusher_key");
        let e = load(&pusher("pusher_key = \"k4\""), &[]).unwrap_err();
        assert_eq!(e.key, "tenants[1].pusher_secret");
    }

    #[test]
    fn environment_overrides_the_file() {
        let c = load(
            BASE,
            &[
                ("TOOLMARK_SERVER__DRAIN_TIMEOUT_MS", "2500"),
                ("TOOLMARK_TENANTS__0__LIMITS__CALLS_PER_SECOND", "7"),
                ("OTHER", "x"),
            ],
        )
        .unwrap();
        assert_eq!(c.server.drain_timeout_ms, 2500);
        assert_eq!(c.tenants[0].limits.calls_per_second, 7);
        let e = load(BASE, &[("TOOLMARK_SERVER__DRAIN_TIMEOUT_MS", "soon")]).unwrap_err();
        assert_eq!(e.key, "server.drain_timeout_ms");
        let e = load(BASE, &[("TOOLMARK_TENANTS__3__ID", "x")]).unwrap_err();
        assert_eq!(e.key, "tenants.3.id");
    }

    #[test]
    fn flags_override_environment_and_file() {
        let o = Overrides {
            listen: Some("127.0.0.1:9999".into()),
            ..Overrides::default()
        };
        let c = Config::load(
            BASE,
            [(
                "TOOLMARK_SERVER__LISTEN".to_owned(),
                "127.0.0.1:1".to_owned(),
            )],
            &o,
        )
        .unwrap();
        assert_eq!(c.server.listen, "127.0.0.1:9999");
    }

    #[test]
    fn dev_mode_is_loopback_only() {
        let c = Config::dev([], &Overrides::default()).unwrap();
        assert_eq!(c.server.listen, "127.0.0.1:8080");
        assert!(c.dev_mode && c.tenants.is_empty());
        let public = Overrides {
            listen: Some("0.0.0.0:8080".into()),
            ..Overrides::default()
        };
        assert_eq!(Config::dev([], &public).unwrap_err().key, "server.listen");
        let env = [("TOOLMARK_SERVER__LISTEN".to_owned(), "0.0.0.0:1".to_owned())];
        assert_eq!(
            Config::dev(env, &Overrides::default()).unwrap_err().key,
            "server.listen"
        );
    }
}
