//! `[admin]` and the tenants it creates: the admin listener and keys, the key that seals
//! tenant secrets at rest, and a stored tenant's record as the broker's catalog keeps it (API
//! keys as SHA-256 hashes; token, Pusher and webhook secrets sealed with AES-256-GCM), opened
//! into the same [`TenantSettings`] a `[[tenants]]` entry gives, through the same checks.

use std::net::SocketAddr;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use crate::keys::TokenKey;
use crate::signing::SigningKey;
use crate::tenant::{
    ApiKey, PusherApp, Revocation, TenantSettings, TenantSource, WebhookTarget, parse_key_hash,
};
use crate::{ConfigError, TenantLimits};

/// `[admin]` as written.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Its own listener, never the public one (default `127.0.0.1:8081`).
    pub listen: Option<String>,
    /// Admin keys, hashed like tenant keys (`sha256:<hex>`).
    #[serde(default)]
    pub api_keys: Vec<String>,
    /// `base64:<32 bytes>`: seals tenant secrets in the store.
    pub encryption_key: String,
    /// Where the platform's records live: `postgres://…` (many nodes), `sqlite://PATH` (one
    /// node) or `broker` (the default: in the broker, healed from the nodes after a wipe).
    pub store: Option<String>,
    /// How long a database store keeps the audit log, in days (default 365).
    pub audit_retention_days: Option<u32>,
}

/// Where the platform's records live (`admin.store`).
#[derive(Clone, PartialEq, Eq)]
pub enum StoreSettings {
    /// In the broker (the default).
    Broker,
    /// A PostgreSQL database: its URL as written (a password inside: never printed).
    Postgres(String),
    /// A SQLite file.
    Sqlite(std::path::PathBuf),
}

impl std::fmt::Debug for StoreSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSettings::Broker => f.write_str("Broker"),
            StoreSettings::Postgres(_) => f.write_str("Postgres(…)"),
            StoreSettings::Sqlite(p) => write!(f, "Sqlite({})", p.display()),
        }
    }
}

impl StoreSettings {
    /// `broker`, `postgres://…` (or `postgresql://…`) or `sqlite://PATH`; the error says why
    /// not, for the key that holds it.
    pub fn parse(key: &str, value: &str) -> Result<StoreSettings, ConfigError> {
        if value == "broker" {
            return Ok(StoreSettings::Broker);
        }
        if let Some(rest) = value
            .strip_prefix("postgres://")
            .or_else(|| value.strip_prefix("postgresql://"))
        {
            if rest.is_empty() || rest.starts_with('/') {
                return Err(ConfigError::new(key, "a PostgreSQL URL names its host"));
            }
            return Ok(StoreSettings::Postgres(value.to_owned()));
        }
        if let Some(path) = value.strip_prefix("sqlite://") {
            let path = path.split('?').next().unwrap_or_default();
            if path.is_empty() {
                return Err(ConfigError::new(
                    key,
                    "sqlite:// names a file: sqlite:///var/lib/toolmark/catalog.db",
                ));
            }
            return Ok(StoreSettings::Sqlite(path.into()));
        }
        Err(ConfigError::new(
            key,
            "must be \"broker\", a postgres:// URL or a sqlite://PATH",
        ))
    }

    /// What a log line may say of it (no password).
    pub fn kind(&self) -> &'static str {
        match self {
            StoreSettings::Broker => "broker",
            StoreSettings::Postgres(_) => "postgres",
            StoreSettings::Sqlite(_) => "sqlite",
        }
    }
}

/// How long a database store keeps the audit log when `admin.audit_retention_days` is unset.
pub const DEFAULT_AUDIT_RETENTION_DAYS: u32 = 365;

/// `[admin]`, parsed.
#[derive(Debug, Clone)]
pub struct AdminSettings {
    /// Where the admin API listens.
    pub listen: SocketAddr,
    /// SHA-256 of each admin key.
    pub api_keys: Vec<[u8; 32]>,
    /// Seals and opens stored secrets.
    pub sealer: Sealer,
    /// Dev mode's admin key in plain text (printed at start).
    pub dev_key: Option<String>,
    /// Where the platform's records live.
    pub store: StoreSettings,
    /// How long a database store keeps the audit log.
    pub audit_retention: std::time::Duration,
}

/// The admin listener when `[admin]` names none.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:8081";

impl AdminConfig {
    /// Checks every key (`listen` overridden by `--admin-listen`); errors name `admin.<key>`.
    pub fn parse(&self, listen: Option<&str>) -> Result<AdminSettings, ConfigError> {
        let listen = listen
            .or(self.listen.as_deref())
            .unwrap_or(DEFAULT_ADMIN_LISTEN);
        let listen = admin_addr(listen)?;
        if self.api_keys.is_empty() {
            return Err(ConfigError::new(
                "admin.api_keys",
                "at least one admin key hash (sha256:<hex>) is required",
            ));
        }
        let mut api_keys = Vec::with_capacity(self.api_keys.len());
        for (j, k) in self.api_keys.iter().enumerate() {
            api_keys.push(parse_key_hash(k).ok_or_else(|| {
                ConfigError::new(
                    format!("admin.api_keys[{j}]"),
                    "must be \"sha256:\" followed by 64 hex digits",
                )
            })?);
        }
        let sealer = Sealer::parse(&self.encryption_key)
            .ok_or_else(|| ConfigError::new("admin.encryption_key", "must be base64:<32 bytes>"))?;
        let store = match &self.store {
            Some(s) => StoreSettings::parse("admin.store", s)?,
            None => StoreSettings::Broker,
        };
        let days = self
            .audit_retention_days
            .unwrap_or(DEFAULT_AUDIT_RETENTION_DAYS);
        if !(1..=36_500).contains(&days) {
            return Err(ConfigError::new(
                "admin.audit_retention_days",
                "must be between 1 and 36500",
            ));
        }
        Ok(AdminSettings {
            listen,
            api_keys,
            sealer,
            dev_key: None,
            store,
            audit_retention: std::time::Duration::from_secs(u64::from(days) * 86_400),
        })
    }
}

fn admin_addr(listen: &str) -> Result<SocketAddr, ConfigError> {
    listen.parse().map_err(|_| {
        ConfigError::new(
            "admin.listen",
            format!("{listen:?} is not an IP:port address"),
        )
    })
}

impl AdminSettings {
    /// Dev mode's admin API: a fresh key (printed at start) and sealing key, on
    /// `127.0.0.1:8081`, or on port 0 when the main listener's port is 0.
    pub fn dev(listen: Option<&str>, main: SocketAddr) -> Result<AdminSettings, ConfigError> {
        let listen = match listen {
            Some(l) => admin_addr(l)?,
            None if main.port() == 0 => SocketAddr::from(([127, 0, 0, 1], 0)),
            None => admin_addr(DEFAULT_ADMIN_LISTEN)?,
        };
        let key = format!("tma_{}", hex::encode(random_bytes::<24>()));
        Ok(AdminSettings {
            listen,
            api_keys: vec![crate::signing::sha256(&key)],
            sealer: Sealer::generate().0,
            dev_key: Some(key),
            store: StoreSettings::Broker,
            audit_retention: std::time::Duration::from_secs(
                u64::from(DEFAULT_AUDIT_RETENTION_DAYS) * 86_400,
            ),
        })
    }
}

/// AES-256-GCM under `admin.encryption_key`. Each sealed value has a random 96-bit nonce and
/// is bound to where it belongs (the tenant and the secret's id, as associated data), so a
/// value copied into another tenant's record does not open.
#[derive(Clone)]
pub struct Sealer(Aes256Gcm);

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(…)")
    }
}

const NONCE: usize = 12;

impl Sealer {
    /// From `base64:<32 bytes>`.
    pub fn parse(s: &str) -> Option<Sealer> {
        let bytes = STANDARD.decode(s.strip_prefix("base64:")?).ok()?;
        Aes256Gcm::new_from_slice(&bytes).ok().map(Sealer)
    }

    /// A fresh random key in its config form (dev mode).
    pub fn generate() -> (Sealer, String) {
        let key = random_bytes::<32>();
        let text = format!("base64:{}", STANDARD.encode(key));
        (Sealer(Aes256Gcm::new(&key.into())), text)
    }

    /// Seals `plain` for `place`.
    pub fn seal(&self, place: &str, plain: &str) -> String {
        let nonce = random_bytes::<NONCE>();
        let sealed = self
            .0
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plain.as_bytes(),
                    aad: place.as_bytes(),
                },
            )
            .unwrap_or_default();
        let mut out = nonce.to_vec();
        out.extend(sealed);
        STANDARD.encode(out)
    }

    /// Opens a value sealed for `place`; `None` under another key or place, or tampered.
    pub fn open(&self, place: &str, sealed: &str) -> Option<String> {
        let bytes = STANDARD.decode(sealed).ok()?;
        if bytes.len() < NONCE {
            return None;
        }
        let (nonce, ct) = bytes.split_at(NONCE);
        let plain = self
            .0
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ct,
                    aad: place.as_bytes(),
                },
            )
            .ok()?;
        String::from_utf8(plain).ok()
    }
}

/// `N` bytes from the OS-seeded generator.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    use rand::RngExt;
    let mut b = [0u8; N];
    rand::rng().fill(&mut b[..]);
    b
}

/// A tenant as the catalog stores it. Secrets appear only sealed ([`Sealer`]) or hashed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredTenant {
    /// Tenant id.
    pub id: String,
    /// When it was created (ms since the epoch).
    pub created_ms: u64,
    /// Exact page origins.
    pub allowed_origins: Vec<String>,
    /// Limits.
    pub limits: TenantLimits,
    /// Where events are delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<String>,
    /// Special-use receiver addresses allowed (`webhookAllowPrivate`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub webhook_allow_private: bool,
    /// API keys (hashed).
    #[serde(default)]
    pub api_keys: Vec<StoredApiKey>,
    /// Page-token keys, oldest first.
    #[serde(default)]
    pub token_keys: Vec<StoredTokenKey>,
    /// The Pusher app key and its sealed secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pusher: Option<StoredPusher>,
    /// Webhook signing secrets (sealed), oldest first.
    #[serde(default)]
    pub webhook_secrets: Vec<StoredSecret>,
    /// Disconnected users, pruned once no token they cover can still be valid.
    #[serde(default)]
    pub revoked: Vec<Revocation>,
    /// The tenant's own authorization server for the hosted MCP endpoint (public settings only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_oauth: Option<StoredMcpOAuth>,
    /// Pinned tool definitions; omitted while off and empty (so that a node of the previous
    /// release, which refuses unknown fields, reads every tenant that pins nothing).
    #[serde(default, skip_serializing_if = "crate::pins::PinsConfig::is_off")]
    pub tools: crate::pins::PinsConfig,
}

/// A stored tenant's authorization server (`mcpOAuth` of the admin API).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredMcpOAuth {
    /// The `iss` its access tokens carry.
    pub issuer: String,
    /// Where its JWK Set is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_url: Option<String>,
    /// Its one signing key (PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// The conversation of a token without `cnv`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_conversation: Option<String>,
    /// What its access tokens may do (the shape of an API key's `policy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::policy::Policy>,
}

impl StoredMcpOAuth {
    /// Checks and loads it by the config file's rule (`allow_private`: the tenant's
    /// `webhookAllowPrivate`); errors name `mcpOAuth/<field>`.
    pub fn parse(&self, allow_private: bool) -> Result<Option<crate::McpOAuth>, ConfigError> {
        let pointer = |k: &str| {
            let field = match k {
                "mcp_issuer" => "issuer",
                "mcp_jwks_url" => "jwksUrl",
                "mcp_public_key" => "publicKey",
                _ => "defaultConversation",
            };
            format!("/mcpOAuth/{field}")
        };
        crate::McpOAuth::parse(
            Some(self.issuer.as_str()),
            self.jwks_url.as_deref(),
            self.public_key.as_deref(),
            self.default_conversation.as_deref(),
            allow_private,
            &pointer,
        )
        .map(|o| {
            o.map(|o| crate::McpOAuth {
                policy: self.policy.clone().unwrap_or_default(),
                ..o
            })
        })
    }
}

/// An API key of a stored tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredApiKey {
    /// Its id.
    pub id: String,
    /// `sha256:<hex>`.
    pub hash: String,
    /// When it expires (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<u64>,
    /// What it may do (everything when absent).
    #[serde(default, skip_serializing_if = "crate::admin::is_default")]
    pub policy: super::policy::Policy,
}

/// Whether `v` is its type's default (left out of a stored record).
pub fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// A page-token key of a stored tenant: a sealed HS256 secret or a PEM public key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredTokenKey {
    /// Its `kid`.
    pub kid: String,
    /// The sealed HS256 secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// An Ed25519 or P-256 public key (PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
}

/// The Pusher app of a stored tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredPusher {
    /// The app key (public).
    pub key: String,
    /// The sealed secret.
    pub secret: String,
}

/// A sealed secret with its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredSecret {
    /// Its id.
    pub id: String,
    /// Sealed.
    pub secret: String,
}

/// Where a sealed secret of a tenant belongs (its associated data).
pub fn place(tenant: &str, what: &str) -> String {
    format!("toolmark/{tenant}/{what}")
}

impl StoredTenant {
    /// The settings the processes run on, secrets opened with `sealer`. A record that does not
    /// open (another key, tampered) is an error naming the field.
    pub fn open(&self, sealer: &Sealer) -> Result<TenantSettings, ConfigError> {
        let at = |k: &str| format!("tenant {:?}: {k}", self.id);
        let mut api_keys = Vec::new();
        for k in &self.api_keys {
            let hash = parse_key_hash(&k.hash)
                .ok_or_else(|| ConfigError::new(at("apiKeys"), "bad hash"))?;
            api_keys.push(ApiKey {
                id: k.id.clone(),
                hash,
                expires_ms: k.expires_ms,
                policy: k.policy.clone(),
            });
        }
        let mut token_keys = Vec::new();
        for k in &self.token_keys {
            let key = match (&k.secret, &k.public_key) {
                (Some(sealed), None) => {
                    let secret = sealer
                        .open(&place(&self.id, &k.kid), sealed)
                        .ok_or_else(|| ConfigError::new(at("tokenKeys"), "does not open"))?;
                    TokenKey::hs256(&secret)
                }
                (None, Some(pem)) => TokenKey::public_pem(pem),
                _ => return Err(ConfigError::new(at("tokenKeys"), "secret or publicKey")),
            }
            .map_err(|e| ConfigError::new(at("tokenKeys"), e.to_string()))?;
            token_keys.push((k.kid.clone(), key));
        }
        let pusher = match &self.pusher {
            Some(p) => vec![PusherApp {
                key: p.key.clone(),
                secret: sealer
                    .open(&place(&self.id, "pusher"), &p.secret)
                    .ok_or_else(|| ConfigError::new(at("pusher"), "does not open"))?,
            }],
            None => Vec::new(),
        };
        let mut keys = Vec::new();
        for s in &self.webhook_secrets {
            let secret = sealer
                .open(&place(&self.id, &s.id), &s.secret)
                .ok_or_else(|| ConfigError::new(at("webhookSecrets"), "does not open"))?;
            keys.push(
                SigningKey::parse(&secret)
                    .map_err(|e| ConfigError::new(at("webhookSecrets"), e.to_string()))?,
            );
        }
        let webhook = self
            .webhook_url
            .as_ref()
            .filter(|_| !keys.is_empty())
            .map(|url| WebhookTarget {
                url: url.clone(),
                keys,
                allow_private: self.webhook_allow_private,
            });
        Ok(TenantSettings {
            id: self.id.clone(),
            source: TenantSource::Admin,
            incarnation: self.created_ms,
            api_keys,
            token_keys,
            origins: self.allowed_origins.clone(),
            pusher,
            webhook,
            limits: self.limits,
            revoked: self.revoked.clone(),
            mcp_oauth: match &self.mcp_oauth {
                Some(o) => o.parse(self.webhook_allow_private)?,
                None => None,
            },
            allow_private: self.webhook_allow_private,
            pins: self.tools.parse("tools")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_only_with_its_key_and_in_its_place() {
        let (sealer, text) = Sealer::generate();
        let sealed = sealer.seal(&place("acme", "k1"), "s3cret");
        assert!(!sealed.contains("s3cret"));
        assert_eq!(
            sealer.open(&place("acme", "k1"), &sealed).as_deref(),
            Some("s3cret")
        );
        assert_eq!(sealer.open(&place("other", "k1"), &sealed), None);
        let (other, _) = Sealer::generate();
        assert_eq!(other.open(&place("acme", "k1"), &sealed), None);
        assert!(Sealer::parse(&text).is_some());
        assert!(Sealer::parse("base64:AAAA").is_none());
        assert_ne!(
            sealed,
            sealer.seal(&place("acme", "k1"), "s3cret"),
            "fresh nonce"
        );
    }
}
