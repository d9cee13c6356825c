//! One `[[tenants]]` entry, parsed: API key hashes as bytes, the page-token key loaded, origins
//! checked, Pusher app keys checked, the webhook's signing key decoded, limits in range.

use crate::keys::{OAuthKeys, TokenKey};
use crate::signing::SigningKey;
use crate::{CALL_TIMEOUT_CEILING_MS, ConfigError, MAX_FRAME_BYTES, TenantConfig, TenantLimits};

/// The `kid` of a config tenant's one token key.
pub const CONFIG_KID: &str = "config";

/// A tenant as the processes use it.
#[derive(Debug, Clone)]
pub struct TenantSettings {
    /// `^[a-z0-9][a-z0-9-]{0,62}$`
    pub id: String,
    /// Where it is defined: the config file (read-only) or the admin API.
    pub source: TenantSource,
    /// Which tenant of that id this is: 0 for the config file's, the creation time (ms) for
    /// the admin API's. A tenant deleted and created again under its id is another one.
    pub incarnation: u64,
    /// Each accepted API key, as its SHA-256.
    pub api_keys: Vec<ApiKey>,
    /// How page tokens are verified (and, for HS256, minted), by `kid`, oldest first: a token
    /// without `kid` is checked against the first.
    pub token_keys: Vec<(String, TokenKey)>,
    /// Exact page origins.
    pub origins: Vec<String>,
    /// Pusher app keys: the current pair first, then those still accepted while rotating.
    pub pusher: Vec<PusherApp>,
    /// Where and how events are delivered, when the tenant has a webhook.
    pub webhook: Option<WebhookTarget>,
    /// Limits.
    pub limits: TenantLimits,
    /// Users (or one conversation of a user) disconnected through the admin API: their tokens
    /// issued before then are refused.
    pub revoked: Vec<Revocation>,
    /// OAuth 2.1 access tokens accepted at the hosted MCP endpoint (`mcp_issuer`).
    pub mcp_oauth: Option<McpOAuth>,
    /// `webhook_allow_private`: the tenant's outbound requests (webhooks, its JWK Set) may
    /// reach private addresses, over plain HTTP too.
    pub allow_private: bool,
    /// Its pinned tool definitions and what happens to others.
    pub pins: crate::pins::Pins,
}

/// The tenant's own authorization server, whose access tokens open the hosted MCP endpoint.
#[derive(Debug, Clone)]
pub struct McpOAuth {
    /// The `iss` every token must carry (`mcp_issuer`).
    pub issuer: String,
    /// Where its keys come from.
    pub keys: OAuthKeys,
    /// The conversation of a token without `cnv` (`mcp_default_conversation`).
    pub default_conversation: Option<String>,
    /// What its access tokens may do (`mcp_policy`, `mcpOAuth.policy`); a token whose `scope`
    /// holds `toolmark:read` is held to read-only tools besides.
    pub policy: super::policy::Policy,
}

/// `mcp_issuer`, `mcp_jwks_url`, `mcp_public_key`, `mcp_default_conversation` of a config
/// tenant; errors name the key.
fn parse_mcp_oauth(
    t: &TenantConfig,
    at: &impl Fn(&str) -> String,
) -> Result<Option<McpOAuth>, ConfigError> {
    McpOAuth::parse(
        t.mcp_issuer.as_deref(),
        t.mcp_jwks_url.as_deref(),
        t.mcp_public_key.as_deref(),
        t.mcp_default_conversation.as_deref(),
        t.webhook_allow_private,
        &|k| at(k),
    )
    .and_then(|o| match (o, &t.mcp_policy) {
        (None, Some(_)) => Err(ConfigError::new(at("mcp_policy"), "needs mcp_issuer")),
        (o, policy) => Ok(o.map(|o| McpOAuth {
            policy: policy.clone().unwrap_or_default(),
            ..o
        })),
    })
}

impl McpOAuth {
    /// The rule for a tenant's authorization server, wherever it is set (the config file, the
    /// admin API): `key` names each field in an error (`mcp_issuer`, `mcp_jwks_url`,
    /// `mcp_public_key`, `mcp_default_conversation`). A JWK Set is fetched over https, as a
    /// webhook is delivered, unless the tenant allows private addresses (`allow_private`).
    pub fn parse(
        issuer: Option<&str>,
        jwks_url: Option<&str>,
        public_key: Option<&str>,
        default_conversation: Option<&str>,
        allow_private: bool,
        key: &dyn Fn(&str) -> String,
    ) -> Result<Option<McpOAuth>, ConfigError> {
        let keys = match (issuer, jwks_url, public_key) {
            (None, None, None) => {
                if default_conversation.is_some() {
                    return Err(ConfigError::new(
                        key("mcp_default_conversation"),
                        "needs mcp_issuer",
                    ));
                }
                return Ok(None);
            }
            (None, _, _) => {
                return Err(ConfigError::new(
                    key("mcp_issuer"),
                    "required with mcp_jwks_url or mcp_public_key",
                ));
            }
            (Some(_), None, None) => {
                return Err(ConfigError::new(
                    key("mcp_jwks_url"),
                    "set mcp_jwks_url or mcp_public_key with mcp_issuer",
                ));
            }
            (Some(_), Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    key("mcp_public_key"),
                    "set mcp_jwks_url or mcp_public_key, not both",
                ));
            }
            (Some(_), Some(url), None) => {
                check_webhook_url(url, &key("mcp_jwks_url"))?;
                if !allow_private && !url.to_ascii_lowercase().starts_with("https://") {
                    return Err(ConfigError::new(
                        key("mcp_jwks_url"),
                        "must be an https URL (plain http only with webhook_allow_private)",
                    ));
                }
                OAuthKeys::Jwks(url.to_owned())
            }
            (Some(_), None, Some(pem)) => OAuthKeys::pem(pem).map_err(|_| {
                ConfigError::new(
                    key("mcp_public_key"),
                    "not a PEM Ed25519, P-256 or RSA public key",
                )
            })?,
        };
        let issuer = issuer.unwrap_or_default().to_owned();
        if issuer.is_empty() || url::Url::parse(&issuer).is_err() {
            return Err(ConfigError::new(key("mcp_issuer"), "must be a URL"));
        }
        if let Some(c) = default_conversation
            && !is_valid_conversation(c)
        {
            return Err(ConfigError::new(
                key("mcp_default_conversation"),
                "must match ^[A-Za-z0-9_-]{1,128}$",
            ));
        }
        Ok(Some(McpOAuth {
            issuer,
            keys,
            default_conversation: default_conversation.map(str::to_owned),
            policy: super::policy::Policy::default(),
        }))
    }
}

/// A user or conversation id: `^[A-Za-z0-9_-]{1,128}$`.
pub fn is_valid_conversation(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Where a tenant is defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantSource {
    /// `[[tenants]]` of the config file: read-only at run time.
    Config,
    /// Created through the admin API, stored in the broker.
    Admin,
}

/// One accepted API key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// Its id (shown by the admin API; `config-<n>` for the file's keys).
    pub id: String,
    /// SHA-256 of the key.
    pub hash: [u8; 32],
    /// When it stops being accepted (ms since the epoch).
    pub expires_ms: Option<u64>,
    /// What it may do (everything by default), and the MCP tokens it mints.
    pub policy: super::policy::Policy,
}

/// Whether `id` may name an API key: 1 to 64 of `A-Za-z0-9_-`.
pub fn is_valid_key_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A `disconnect` of the admin API: the user's tokens (of one conversation, when given)
/// issued before `at_ms` are refused.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Revocation {
    /// The user.
    pub user: String,
    /// The conversation, or every conversation of the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
    /// When (ms since the epoch).
    pub at_ms: u64,
}

impl Revocation {
    /// Whether a token of `user` and `conversation` issued at `iat_ms` is refused.
    pub fn refuses(&self, user: &str, conversation: &str, iat_ms: Option<u64>) -> bool {
        self.user == user
            && self
                .conversation
                .as_deref()
                .is_none_or(|c| c == conversation)
            && iat_ms.is_none_or(|t| t < self.at_ms)
    }
}

/// A Pusher app key and its secret.
#[derive(Debug, Clone)]
pub struct PusherApp {
    /// `^[A-Za-z0-9_-]{1,128}$`
    pub key: String,
    /// At least 16 bytes.
    pub secret: String,
}

/// A tenant's webhook.
#[derive(Debug, Clone)]
pub struct WebhookTarget {
    /// An http or https URL.
    pub url: String,
    /// Standard Webhooks signing keys: each delivery carries one signature per key, so a
    /// receiver may rotate its secret without a failed delivery.
    pub keys: Vec<SigningKey>,
    /// Special-use addresses (loopback, private, link-local, …) allowed as the receiver's.
    pub allow_private: bool,
}

impl WebhookTarget {
    /// The `webhook-signature` header value: one `v1,` signature per key, space-separated.
    pub fn sign(&self, id: &str, timestamp: u64, body: &str) -> String {
        self.keys
            .iter()
            .map(|k| k.sign(id, timestamp, body))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl TenantSettings {
    /// Parses entry `index` of `[[tenants]]`; errors name `tenants[index].key`.
    pub fn parse(t: &TenantConfig, index: usize) -> Result<TenantSettings, ConfigError> {
        let at = |k: &str| format!("tenants[{index}].{k}");
        if !is_valid_tenant_id(&t.id) {
            return Err(ConfigError::new(
                at("id"),
                "must match ^[a-z0-9][a-z0-9-]{0,62}$",
            ));
        }
        let mut api_keys: Vec<ApiKey> = Vec::with_capacity(t.api_keys.len());
        for (j, k) in t.api_keys.iter().enumerate() {
            let (text, id, policy) = match k {
                super::ApiKeyEntry::Hash(h) => (h, None, None),
                super::ApiKeyEntry::Table { hash, id, policy } => {
                    (hash, id.as_ref(), policy.as_ref())
                }
            };
            let key = if matches!(k, super::ApiKeyEntry::Hash(_)) {
                format!("api_keys[{j}]")
            } else {
                format!("api_keys[{j}].hash")
            };
            let hash = parse_key_hash(text).ok_or_else(|| {
                ConfigError::new(at(&key), "must be \"sha256:\" followed by 64 hex digits")
            })?;
            // Its id names it in records and logs: given, else the first 12 hex digits of its hash.
            let id = match id {
                Some(id) if crate::tenant::is_valid_key_id(id) => id.clone(),
                Some(_) => {
                    return Err(ConfigError::new(
                        at(&format!("api_keys[{j}].id")),
                        "must match ^[A-Za-z0-9_-]{1,64}$",
                    ));
                }
                None => hex::encode(&hash[..6]),
            };
            if api_keys.iter().any(|k| k.id == id) {
                return Err(ConfigError::new(
                    at(&format!("api_keys[{j}].id")),
                    "two keys of the tenant have this id",
                ));
            }
            api_keys.push(ApiKey {
                id,
                hash,
                expires_ms: None,
                policy: policy.cloned().unwrap_or_default(),
            });
        }
        let token_key = match (&t.token_secret, &t.token_public_key) {
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
            (Some(s), None) => TokenKey::hs256(s)
                .map_err(|e| ConfigError::new(at("token_secret"), e.to_string()))?,
            (None, Some(pem)) => TokenKey::public_pem(pem)
                .map_err(|e| ConfigError::new(at("token_public_key"), e.to_string()))?,
        };
        for (j, o) in t.allowed_origins.iter().enumerate() {
            check_origin(o, &at(&format!("allowed_origins[{j}]")))?;
        }
        Ok(TenantSettings {
            id: t.id.clone(),
            source: TenantSource::Config,
            incarnation: 0,
            api_keys,
            token_keys: vec![(CONFIG_KID.to_owned(), token_key)],
            origins: t.allowed_origins.clone(),
            pusher: parse_pusher(t, &at)?,
            webhook: parse_webhook(t, &at)?,
            limits: check_limits(t.limits, &at)?,
            revoked: Vec::new(),
            mcp_oauth: parse_mcp_oauth(t, &at)?,
            allow_private: t.webhook_allow_private,
            pins: t.tools.parse(&at("tools"))?,
        })
    }

    /// Each Pusher app key with the config key it came from (`pusher_key`,
    /// `pusher_old_keys[0]`, …).
    pub fn pusher_key_names(&self) -> impl Iterator<Item = (String, &PusherApp)> {
        self.pusher.iter().enumerate().map(|(j, app)| {
            let name = match j {
                0 => "pusher_key".to_owned(),
                n => format!("pusher_old_keys[{}]", n - 1),
            };
            (name, app)
        })
    }
}

fn parse_pusher(
    t: &TenantConfig,
    at: &impl Fn(&str) -> String,
) -> Result<Vec<PusherApp>, ConfigError> {
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
    let current = t.pusher_key.iter().zip(&t.pusher_secret).map(|(k, s)| {
        (
            ("pusher_key".to_owned(), k),
            ("pusher_secret".to_owned(), s),
        )
    });
    let old = t.pusher_old_keys.iter().enumerate().map(|(j, p)| {
        let name = format!("pusher_old_keys[{j}]");
        ((name.clone(), &p.key), (name, &p.secret))
    });
    let mut apps = Vec::new();
    for ((key_name, key), (secret_name, secret)) in current.chain(old) {
        if !is_valid_app_key(key) {
            return Err(ConfigError::new(
                at(&key_name),
                "must match ^[A-Za-z0-9._-]{1,128}$",
            ));
        }
        if secret.len() < 16 {
            return Err(ConfigError::new(
                at(&secret_name),
                "secret must be at least 16 bytes",
            ));
        }
        apps.push(PusherApp {
            key: key.clone(),
            secret: secret.clone(),
        });
    }
    Ok(apps)
}

fn parse_webhook(
    t: &TenantConfig,
    at: &impl Fn(&str) -> String,
) -> Result<Option<WebhookTarget>, ConfigError> {
    let Some(u) = &t.webhook_url else {
        return Ok(None);
    };
    check_webhook_url(u, &at("webhook_url"))?;
    let secret = t
        .webhook_secret
        .as_deref()
        .ok_or_else(|| ConfigError::new(at("webhook_secret"), "required with webhook_url"))?;
    let key = SigningKey::parse(secret)
        .map_err(|e| ConfigError::new(at("webhook_secret"), e.to_string()))?;
    Ok(Some(WebhookTarget {
        url: u.clone(),
        keys: vec![key],
        allow_private: t.webhook_allow_private,
    }))
}

/// A webhook URL must be http or https; errors name `key`.
pub fn check_webhook_url(u: &str, key: &str) -> Result<(), ConfigError> {
    let ok = url::Url::parse(u).is_ok_and(|u| matches!(u.scheme(), "http" | "https"));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(key, "must be an http or https URL"))
    }
}

/// Limits must be in range; errors name `at("limits.<key>")`.
pub fn check_limits(
    l: TenantLimits,
    at: &impl Fn(&str) -> String,
) -> Result<TenantLimits, ConfigError> {
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
    Ok(l)
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

/// Whether `key` is a Pusher app key: `^[A-Za-z0-9._-]{1,128}$`.
pub fn is_valid_app_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 128
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Parses `sha256:<64 hex>` into the hash bytes.
pub fn parse_key_hash(s: &str) -> Option<[u8; 32]> {
    let hex_part = s.strip_prefix("sha256:")?;
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_part, &mut out).ok()?;
    Some(out)
}

/// An origin must be exactly `scheme://host[:port]` as a browser serializes it; errors name
/// `key`.
pub fn check_origin(o: &str, key: &str) -> Result<(), ConfigError> {
    if o == "*" || o == "null" {
        return Err(ConfigError::new(
            key,
            format!("{o:?} is not allowed; list exact origins"),
        ));
    }
    let url = url::Url::parse(o)
        .map_err(|e| ConfigError::new(key, format!("{o:?} is not an origin: {e}")))?;
    let serialized = url.origin().ascii_serialization();
    if serialized != o {
        return Err(ConfigError::new(
            key,
            format!("{o:?} is not an exact origin (did you mean {serialized:?}?)"),
        ));
    }
    Ok(())
}
