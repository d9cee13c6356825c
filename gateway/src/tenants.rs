//! Tenants at run time: API key hashes, the page-token verifier (and signer for HS256),
//! the exact origin allow-list and limits.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use toolmark_process::config::{TenantLimits, TenantSettings, TokenKey};

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
    /// Issued at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<u64>,
    /// Not before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    /// Token id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
}

/// Why a page token was refused (all close the socket with 4401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Signature, algorithm, audience, expiry or shape.
    #[error("invalid token: {0}")]
    Invalid(#[from] jsonwebtoken::errors::Error),
    /// `sub` or `cnv` is not a valid id.
    #[error("invalid user or conversation id in token")]
    BadIds,
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

    /// Mints a token (HS256 tenants only).
    pub fn mint(&self, claims: &PageClaims) -> Option<String> {
        let key = self.encoding.as_ref()?;
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, key).ok()
    }
}

/// One tenant, ready to serve.
#[derive(Debug)]
pub struct Tenant {
    /// Tenant id.
    pub id: String,
    /// SHA-256 of each API key.
    pub api_keys: Vec<[u8; 32]>,
    /// Page token keys.
    pub tokens: TokenKeys,
    /// Exact allowed origins.
    pub origins: HashSet<String>,
    /// Limits.
    pub limits: TenantLimits,
    /// Pusher app keys and secrets (Laravel Echo), the current pair first, then those still
    /// accepted while rotating.
    pub pusher: Vec<crate::pusher::signature::AppKey>,
    /// The rate of page messages forwarded to `/inbound`, per conversation on this node: the
    /// HTTP counterpart of a page socket's message rate.
    pub inbound_rate: crate::rate::ConversationRate,
}

impl Tenant {
    /// A tenant from its parsed settings.
    pub fn new(c: &TenantSettings) -> Self {
        Tenant {
            id: c.id.clone(),
            api_keys: c.api_keys.clone(),
            tokens: TokenKeys::new(&c.token_key, &c.id),
            origins: c.origins.iter().cloned().collect(),
            limits: c.limits,
            pusher: c
                .pusher
                .iter()
                .map(|p| crate::pusher::signature::AppKey::new(&p.key, &p.secret))
                .collect(),
            inbound_rate: crate::rate::ConversationRate::new(c.limits.page_messages_per_second),
        }
    }

    /// Whether `origin` is exactly one of the allowed origins.
    pub fn origin_allowed(&self, origin: Option<&str>) -> bool {
        origin.is_some_and(|o| o != "null" && self.origins.contains(o))
    }
}

/// All tenants by id, and by Pusher app key.
#[derive(Debug, Clone, Default)]
pub struct Tenants(
    Arc<HashMap<String, Arc<Tenant>>>,
    Arc<HashMap<String, Arc<Tenant>>>,
);

impl Tenants {
    /// From a list (validated config: Pusher keys are unique across tenants).
    pub fn new(list: Vec<Tenant>) -> Self {
        let by_id: HashMap<_, _> = list
            .into_iter()
            .map(|t| (t.id.clone(), Arc::new(t)))
            .collect();
        let by_pusher_key = by_id
            .values()
            .flat_map(|t| t.pusher.iter().map(|k| (k.key.clone(), Arc::clone(t))))
            .collect();
        Tenants(Arc::new(by_id), Arc::new(by_pusher_key))
    }

    /// A tenant by id.
    pub fn get(&self, id: &str) -> Option<Arc<Tenant>> {
        self.0.get(id).cloned()
    }

    /// The tenant owning a Pusher app key (current or still accepted while rotating).
    pub fn by_pusher_key(&self, key: &str) -> Option<Arc<Tenant>> {
        self.1.get(key).cloned()
    }
}
