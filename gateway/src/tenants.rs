//! Tenants as a node serves them: API key hashes, the page-token verifiers by `kid` (and the
//! signer for HS256), revocations, the exact origin allow-list and limits. The set is a
//! snapshot swapped whole when the catalog changes (`crate::tenant_sync`): a lookup on the hot
//! path is one atomic load, with no lock and no broker round trip.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arc_swap::ArcSwap;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use toolmark_config::pins::{PinMode, Pins};
use toolmark_config::{ApiKey, Revocation, TenantLimits, TenantSettings, TenantSource, TokenKey};
use toolmark_proto::ToolManifestSummary;

/// Clock leeway for `exp` and `nbf`.
pub const TOKEN_LEEWAY_SECS: u64 = 30;

/// Claims of a page token.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PageClaims {
    /// User id.
    pub sub: String,
    /// Conversation id.
    pub cnv: String,
    /// The tenant id.
    pub aud: String,
    /// Expiry (seconds since the epoch), required.
    pub exp: u64,
    /// Issued at (seconds since the epoch; the gateway mints it to the millisecond, so that a
    /// token minted just after a `disconnect` is told from one minted before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<f64>,
    /// Not before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    /// Token id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
    /// What the token is for: absent for a page socket, [`MCP_SCOPE`] for the hosted MCP
    /// endpoint. Neither grants the other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// For an MCP token: the id of the API key that minted it, whose policy it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub akid: Option<String>,
    /// For an MCP token: the policy it was narrowed to at minting (within its key's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pol: Option<toolmark_config::policy::Policy>,
}

/// The `scope` claim of an MCP token.
pub const MCP_SCOPE: &str = "mcp";

/// Why a page token was refused (all close the socket with 4401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Signature, algorithm, audience, expiry or shape.
    #[error("invalid token: {0}")]
    Invalid(#[from] jsonwebtoken::errors::Error),
    /// `sub` or `cnv` is not a valid id.
    #[error("invalid user or conversation id in token")]
    BadIds,
    /// The header names no key of the tenant.
    #[error("unknown kid")]
    UnknownKid,
    /// The user was disconnected after this token was issued.
    #[error("revoked")]
    Revoked,
    /// A token of another scope (an MCP token on a page socket, or a page token at the MCP
    /// endpoint).
    #[error("token of another scope")]
    WrongScope,
}

impl PageClaims {
    /// `iat` in ms since the epoch.
    pub fn iat_ms(&self) -> Option<u64> {
        // A timestamp in seconds, far from the range where the conversion loses anything.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        self.iat
            .filter(|t| t.is_finite() && *t >= 0.0)
            .map(|t| (t * 1000.0) as u64)
    }
}

/// What a page socket was admitted with, for revocation: the token key that signed its token
/// and when the token was issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The `kid` of the verifying key (none for an Echo subscription, authorized by the
    /// tenant's Pusher secret instead).
    pub kid: Option<Arc<str>>,
    /// `iat` in ms.
    pub iat_ms: Option<u64>,
}

/// Verifies (and for HS256, mints) a tenant's page tokens.
pub struct TokenKeys {
    decoding: DecodingKey,
    validation: Validation,
    encoding: Option<EncodingKey>,
}

impl std::fmt::Debug for TokenKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenKeys")
            .field("algorithms", &self.validation.algorithms)
            .finish_non_exhaustive()
    }
}

fn validation(alg: Algorithm, tenant: &str) -> Validation {
    let mut v = Validation::new(alg);
    v.set_audience(&[tenant]);
    v.leeway = TOKEN_LEEWAY_SECS;
    v.validate_exp = true;
    v.validate_nbf = true;
    v.set_required_spec_claims(&["exp", "aud", "sub"]);
    v
}

impl TokenKeys {
    /// The verifier (and for HS256 the minter) of a loaded key. Only the key's own algorithm
    /// is accepted, so a token signed with HS256 using a public key as its secret is refused.
    pub fn new(key: &TokenKey, tenant: &str) -> Self {
        let (decoding, alg, encoding) = match key {
            TokenKey::Hs256 { decoding, encoding } => {
                (decoding.clone(), Algorithm::HS256, Some(encoding.clone()))
            }
            TokenKey::EdDsa(d) => (d.clone(), Algorithm::EdDSA, None),
            TokenKey::Es256(d) => (d.clone(), Algorithm::ES256, None),
        };
        TokenKeys {
            decoding,
            validation: validation(alg, tenant),
            encoding,
        }
    }

    /// Verifies a page token and returns its claims.
    pub fn verify(&self, token: &str) -> Result<PageClaims, TokenError> {
        let data = jsonwebtoken::decode::<PageClaims>(token, &self.decoding, &self.validation)?;
        let c = data.claims;
        if !crate::ids::is_valid_id(&c.sub) || !crate::ids::is_valid_id(&c.cnv) {
            return Err(TokenError::BadIds);
        }
        Ok(c)
    }

    /// Whether this key can mint (HS256).
    pub fn can_mint(&self) -> bool {
        self.encoding.is_some()
    }

    /// Mints a token (HS256 keys only), naming `kid` in its header when given.
    pub fn mint(&self, claims: &PageClaims, kid: Option<String>) -> Option<String> {
        let key = self.encoding.as_ref()?;
        let mut header = Header::new(Algorithm::HS256);
        header.kid = kid;
        jsonwebtoken::encode(&header, claims, key).ok()
    }
}

/// One tenant, ready to serve.
#[derive(Debug)]
pub struct Tenant {
    /// Tenant id.
    pub id: String,
    /// The config file's, or the admin API's.
    pub source: TenantSource,
    /// Which tenant of this id (`TenantSettings::incarnation`).
    pub incarnation: u64,
    /// Accepted API keys.
    pub api_keys: Vec<ApiKey>,
    /// Page token keys by `kid`, oldest first.
    pub tokens: Vec<(Arc<str>, TokenKeys)>,
    /// Exact allowed origins.
    pub origins: HashSet<String>,
    /// Limits.
    pub limits: TenantLimits,
    /// Pusher app keys and secrets (Laravel Echo), the current pair first, then those still
    /// accepted while rotating.
    pub pusher: Vec<crate::echo_channels::AppKey>,
    /// The rate of page messages forwarded to `/inbound`, per conversation on this node: the
    /// HTTP counterpart of a page socket's message rate.
    pub inbound_rate: crate::rate::ConversationRate,
    /// Disconnected users.
    pub revoked: Vec<Revocation>,
    /// The tenant's own authorization server, whose access tokens open the hosted MCP endpoint.
    pub mcp_oauth: Option<toolmark_config::McpOAuth>,
    /// `webhook_allow_private`: its outbound requests (webhooks, its JWK Set) may reach
    /// private addresses and plain HTTP.
    pub webhook_allow_private: bool,
    /// Its pinned tool definitions.
    pub pins: Arc<Pins>,
}

impl Tenant {
    /// A tenant from its parsed settings.
    pub fn new(c: &TenantSettings) -> Self {
        Tenant {
            id: c.id.clone(),
            source: c.source,
            incarnation: c.incarnation,
            api_keys: c.api_keys.clone(),
            tokens: c
                .token_keys
                .iter()
                .map(|(kid, k)| (Arc::from(kid.as_str()), TokenKeys::new(k, &c.id)))
                .collect(),
            origins: c.origins.iter().cloned().collect(),
            limits: c.limits,
            pusher: c
                .pusher
                .iter()
                .map(|p| crate::echo_channels::AppKey::new(&p.key, &p.secret))
                .collect(),
            inbound_rate: crate::rate::ConversationRate::new(c.limits.page_messages_per_second),
            revoked: c.revoked.clone(),
            mcp_oauth: c.mcp_oauth.clone(),
            webhook_allow_private: c.allow_private,
            pins: Arc::new(c.pins.clone()),
        }
    }

    /// The tools of a manifest agents see under the tenant's pins: in `enforce`, only the
    /// pinned definitions; in `report`, every one, each not pinned marked `"pinned": false`
    /// (digests made once per manifest entry).
    pub fn pinned_view(&self, tools: Vec<ToolManifestSummary>) -> Vec<ToolManifestSummary> {
        match self.pins.mode {
            PinMode::Off => tools,
            PinMode::Enforce => tools
                .into_iter()
                .filter(|t| self.pins.holds(&t.name, t.digest()))
                .collect(),
            PinMode::Report => tools
                .into_iter()
                .map(|mut t| {
                    if !self.pins.holds(&t.name, t.digest()) {
                        t.extra
                            .insert("pinned".into(), serde_json::Value::Bool(false));
                    }
                    t
                })
                .collect(),
        }
    }

    /// Whether `origin` is exactly one of the allowed origins.
    pub fn origin_allowed(&self, origin: Option<&str>) -> bool {
        origin.is_some_and(|o| o != "null" && self.origins.contains(o))
    }

    /// The tenant's unexpired API key `presented` is, compared in constant time with every key.
    pub fn key(&self, presented: &str) -> Option<&ApiKey> {
        let now = toolmark_broker::now_ms();
        let h = crate::auth::hash_key(presented);
        let mut found = None;
        for k in &self.api_keys {
            let same = bool::from(subtle::ConstantTimeEq::ct_eq(&k.hash[..], &h[..]));
            if same && k.expires_ms.is_none_or(|e| now < e) {
                found = Some(k);
            }
        }
        found
    }

    /// The API key of id `id`, unexpired (the key an MCP token names).
    pub fn key_by_id(&self, id: &str) -> Option<&ApiKey> {
        let now = toolmark_broker::now_ms();
        self.api_keys
            .iter()
            .find(|k| k.id == id && k.expires_ms.is_none_or(|e| now < e))
    }

    /// Verifies a page token: with the key its header's `kid` names (the oldest key when it
    /// names none), then against the tenant's revocations.
    pub fn verify(&self, token: &str) -> Result<(PageClaims, Grant), TokenError> {
        self.verify_scoped(token, None)
    }

    /// Checks an MCP token: a token of this tenant whose `scope` is [`MCP_SCOPE`].
    pub fn verify_mcp(&self, token: &str) -> Result<(PageClaims, Grant), TokenError> {
        self.verify_scoped(token, Some(MCP_SCOPE))
    }

    /// Checks a token whose `scope` claim must be `scope` (absent for a page token).
    fn verify_scoped(
        &self,
        token: &str,
        scope: Option<&str>,
    ) -> Result<(PageClaims, Grant), TokenError> {
        let header = jsonwebtoken::decode_header(token)?;
        let (kid, keys) = match &header.kid {
            Some(kid) => self
                .tokens
                .iter()
                .find(|(k, _)| k.as_ref() == kid)
                .ok_or(TokenError::UnknownKid)?,
            None => self.tokens.first().ok_or(TokenError::UnknownKid)?,
        };
        let claims = keys.verify(token)?;
        if claims.scope.as_deref() != scope {
            return Err(TokenError::WrongScope);
        }
        let grant = Grant {
            kid: Some(Arc::clone(kid)),
            iat_ms: claims.iat_ms(),
        };
        if !self.admits(&claims.sub, &claims.cnv, &grant) {
            return Err(TokenError::Revoked);
        }
        Ok((claims, grant))
    }

    /// Whether a page of `user` and `conversation` admitted with `grant` may stay: its key is
    /// still the tenant's and no revocation covers it.
    pub fn admits(&self, user: &str, conversation: &str, grant: &Grant) -> bool {
        grant
            .kid
            .as_ref()
            .is_none_or(|kid| self.tokens.iter().any(|(k, _)| k == kid))
            && !self
                .revoked
                .iter()
                .any(|r| r.refuses(user, conversation, grant.iat_ms))
    }

    /// Mints a page token with the newest key that can sign (its `kid` in the header, except
    /// for a config tenant's one key, whose tokens name none).
    pub fn mint(&self, claims: &PageClaims) -> Option<String> {
        let (kid, keys) = self.tokens.iter().rev().find(|(_, k)| k.can_mint())?;
        let kid = (self.source == TenantSource::Admin).then(|| kid.to_string());
        keys.mint(claims, kid)
    }
}

/// All tenants by id, and by Pusher app key.
#[derive(Debug, Default)]
pub struct Snapshot {
    by_id: HashMap<String, Arc<Tenant>>,
    by_pusher_key: HashMap<String, Arc<Tenant>>,
}

impl Snapshot {
    /// From a list (Pusher keys are unique across tenants: validated config, or the admin API).
    pub fn new(list: impl IntoIterator<Item = Arc<Tenant>>) -> Self {
        let by_id: HashMap<_, _> = list.into_iter().map(|t| (t.id.clone(), t)).collect();
        let by_pusher_key = by_id
            .values()
            .flat_map(|t| t.pusher.iter().map(|k| (k.key.clone(), Arc::clone(t))))
            .collect();
        Snapshot {
            by_id,
            by_pusher_key,
        }
    }

    /// Every tenant.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Tenant>> {
        self.by_id.values()
    }

    /// A tenant by id.
    pub fn get(&self, id: &str) -> Option<&Arc<Tenant>> {
        self.by_id.get(id)
    }
}

/// The tenants a node serves: a snapshot replaced whole on every change, and, when the admin
/// API's records are followed, the follower that keeps them (how fresh the snapshot is).
#[derive(Debug, Clone, Default)]
pub struct Tenants(
    Arc<ArcSwap<Snapshot>>,
    Arc<std::sync::OnceLock<Arc<toolmark_store::follower::Follower>>>,
);

impl Tenants {
    /// From a list.
    pub fn new(list: Vec<Tenant>) -> Self {
        Tenants(
            Arc::new(ArcSwap::from_pointee(Snapshot::new(
                list.into_iter().map(Arc::new),
            ))),
            Arc::default(),
        )
    }

    /// The snapshot holds the records `follower` reads from the admin store too.
    pub fn follow(&self, follower: Arc<toolmark_store::follower::Follower>) {
        let _ = self.1.set(follower);
    }

    /// How long ago the admin store's records were last read: `None` when the node follows
    /// no store; `Some(None)` while it never could read it (the node is not ready).
    pub fn records_age(&self) -> Option<Option<std::time::Duration>> {
        self.1.get().map(|f| f.last_read().map(|at| at.elapsed()))
    }

    /// A tenant by id.
    pub fn get(&self, id: &str) -> Option<Arc<Tenant>> {
        self.0.load().by_id.get(id).cloned()
    }

    /// The tools of a manifest of tenant `id` agents see under its pins
    /// ([`Tenant::pinned_view`]); none when the tenant is gone.
    pub fn pinned_view(
        &self,
        id: &str,
        tools: Vec<ToolManifestSummary>,
    ) -> Vec<ToolManifestSummary> {
        match self.get(id) {
            Some(t) => t.pinned_view(tools),
            None => Vec::new(),
        }
    }

    /// The tenant owning a Pusher app key (current or still accepted while rotating).
    pub fn by_pusher_key(&self, key: &str) -> Option<Arc<Tenant>> {
        self.0.load().by_pusher_key.get(key).cloned()
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.0.load_full()
    }

    /// Replaces the snapshot.
    pub fn replace(&self, next: Snapshot) {
        self.0.store(Arc::new(next));
    }
}
