//! OAuth 2.1 resource-server mode of the hosted MCP endpoint: a tenant with `mcp_issuer`
//! accepts access tokens of its own authorization server, checked against the issuer, a key
//! from `mcp_public_key` or from the JWK Set at `mcp_jwks_url`, and an audience equal to the
//! endpoint's URL (RFC 8707). The JWK Sets are cached per URL and fetched again for a `kid`
//! they do not hold, at most every [`REFETCH_AFTER`], so a stream of tokens with made-up kids
//! costs the authorization server one request per interval, not one per token.
//!
//! A JWK Set is fetched as a webhook is delivered (the same egress clients): https only, no
//! redirect, no proxy from the environment, public addresses only (checked on the addresses
//! connected to), unless the tenant has `webhook_allow_private`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use toolmark_config::{McpOAuth, OAuthKeys};

/// A cached set is used this long before it is fetched again.
const FRESH_FOR: Duration = Duration::from_secs(300);
/// An unknown `kid` fetches the set again only if the last fetch is older than this.
pub const REFETCH_AFTER: Duration = Duration::from_secs(10);
/// How long a fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest JWK Set accepted.
const MAX_SET_BYTES: usize = 64 * 1024;
/// At most this many sets are cached (one per tenant's URL).
const SETS_KEPT: usize = 1024;

/// The algorithms an access token may be signed with: asymmetric only (a shared secret would
/// let anyone who can read the JWK Set mint tokens).
const ALGORITHMS: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::EdDSA,
];

struct Fetched {
    /// When it was last fetched (or tried).
    at: Instant,
    set: Option<Arc<JwkSet>>,
}

/// The JWK Sets of the tenants' authorization servers, by URL.
pub struct KeySets {
    http: Option<toolmark_process::egress::Clients>,
    sets: Mutex<HashMap<String, Fetched>>,
}

impl std::fmt::Debug for KeySets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySets").finish_non_exhaustive()
    }
}

impl Default for KeySets {
    fn default() -> Self {
        let http = toolmark_process::egress::Clients::new()
            .inspect_err(|e| tracing::error!(error = %e, "no HTTP client for JWK Sets: access tokens of a JWK Set are refused"))
            .ok();
        KeySets {
            http,
            sets: Mutex::default(),
        }
    }
}

/// Where a JWK Set may be fetched from: https (plain HTTP only for a tenant that allows private
/// addresses); the address is checked by the client.
pub fn check_jwks_url(url: &str, allow_private: bool) -> Result<(), String> {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("https") => Ok(()),
        Some("http") if allow_private => Ok(()),
        _ => Err(format!(
            "{url}: a JWK Set is fetched over https (plain http only with webhook_allow_private)"
        )),
    }
}

impl KeySets {
    /// The key `kid` of the set at `url`: from the cache while fresh and holding it, else
    /// fetched (unless fetched within [`REFETCH_AFTER`]).
    async fn key(&self, url: &str, kid: Option<&str>, allow_private: bool) -> Option<DecodingKey> {
        let cached = {
            let sets = self.sets.lock().unwrap_or_else(PoisonError::into_inner);
            sets.get(url).map(|f| (f.at, f.set.clone()))
        };
        if let Some((at, set)) = &cached {
            if at.elapsed() < FRESH_FOR
                && let Some(key) = set.as_deref().and_then(|s| find(s, kid))
            {
                return Some(key);
            }
            if at.elapsed() < REFETCH_AFTER {
                return None;
            }
        }
        let set = self.fetch(url, allow_private).await;
        set.as_deref().and_then(|s| find(s, kid))
    }

    async fn fetch(&self, url: &str, allow_private: bool) -> Option<Arc<JwkSet>> {
        {
            // Taken before the request: concurrent tokens wait for this fetch's interval.
            let mut sets = self.sets.lock().unwrap_or_else(PoisonError::into_inner);
            if sets.len() >= SETS_KEPT && !sets.contains_key(url) {
                sets.clear();
            }
            let entry = sets.entry(url.to_owned()).or_insert(Fetched {
                at: Instant::now(),
                set: None,
            });
            entry.at = Instant::now();
        }
        let set = match self.read(url, allow_private).await {
            Ok(set) => Some(Arc::new(set)),
            Err(e) => {
                tracing::warn!(url, error = %e, "JWK Set not fetched; access tokens it signs are refused");
                None
            }
        };
        let mut sets = self.sets.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = sets.get_mut(url)
            && set.is_some()
        {
            entry.set.clone_from(&set);
        }
        set
    }

    async fn read(&self, url: &str, allow_private: bool) -> Result<JwkSet, String> {
        check_jwks_url(url, allow_private)?;
        let clients = self.http.as_ref().ok_or("no HTTP client")?;
        let client = clients
            .for_url(url, allow_private)
            .map_err(|e| e.to_string())?;
        let mut response = client
            .get(url)
            .timeout(FETCH_TIMEOUT)
            .send()
            .await
            .map_err(|e| error_chain(&e))?;
        if !response.status().is_success() {
            return Err(format!("answered {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_SET_BYTES {
                return Err(format!("larger than {MAX_SET_BYTES} bytes"));
            }
        }
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    }
}

/// The key named `kid`, or the set's only key when the token names none.
fn find(set: &JwkSet, kid: Option<&str>) -> Option<DecodingKey> {
    let jwk = match kid {
        Some(kid) => set.find(kid)?,
        None if set.keys.len() == 1 => set.keys.first()?,
        None => return None,
    };
    toolmark_config::jwt::install();
    DecodingKey::from_jwk(jwk).ok()
}

/// An error with its sources (a refused address is the source of reqwest's connect error).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut at = e.source();
    while let Some(s) = at {
        out.push_str(": ");
        out.push_str(&s.to_string());
        at = s.source();
    }
    out
}

/// The scope that limits an access token to read-only tools.
pub const READ_SCOPE: &str = "toolmark:read";

#[derive(Debug, Deserialize)]
struct AccessClaims {
    sub: String,
    #[serde(default)]
    cnv: Option<String>,
    #[serde(default)]
    iat: Option<f64>,
    /// RFC 8693 / RFC 9068: space-separated scopes.
    #[serde(default)]
    scope: Option<String>,
    /// RFC 9068's client, else OpenID Connect's authorized party.
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    azp: Option<String>,
}

/// What an access token grants.
#[derive(Debug)]
pub struct Access {
    /// `sub`.
    pub user: String,
    /// `cnv`, else the tenant's default conversation.
    pub conversation: String,
    /// `iat` in ms, when it has one (a revocation refuses a token without one).
    pub iat_ms: Option<u64>,
    /// `client_id`, else `azp`.
    pub client_id: Option<String>,
    /// Its `scope` holds `toolmark:read`: read-only tools only.
    pub read_only: bool,
}

/// Checks an access token for the endpoint `resource` (fetching the issuer's JWK Set within
/// the egress rules, `allow_private` being the tenant's `webhook_allow_private`); what it
/// grants, or why it is refused.
pub async fn verify(
    oauth: &McpOAuth,
    sets: &KeySets,
    token: &str,
    resource: &str,
    allow_private: bool,
) -> Result<Access, String> {
    let header = jsonwebtoken::decode_header(token).map_err(|e| e.to_string())?;
    if !ALGORITHMS.contains(&header.alg) {
        return Err(format!("algorithm {:?} is not accepted", header.alg));
    }
    let key = match &oauth.keys {
        OAuthKeys::Pem(key, alg) => {
            if header.alg != *alg {
                return Err(format!("the key is {alg:?}, the token {:?}", header.alg));
            }
            key.clone()
        }
        OAuthKeys::Jwks(url) => sets
            .key(url, header.kid.as_deref(), allow_private)
            .await
            .ok_or("no key of the issuer's JWK Set signs it")?,
    };
    let mut validation = Validation::new(header.alg);
    validation.set_issuer(&[oauth.issuer.as_str()]);
    validation.set_audience(&[resource]);
    validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    let claims = jsonwebtoken::decode::<AccessClaims>(token, &key, &validation)
        .map_err(|e| e.to_string())?
        .claims;
    let conversation = claims
        .cnv
        .or_else(|| oauth.default_conversation.clone())
        .ok_or("no cnv claim and no mcp_default_conversation")?;
    if !crate::ids::is_valid_id(&claims.sub) || !crate::ids::is_valid_id(&conversation) {
        return Err("sub or cnv is not a valid id".into());
    }
    // A timestamp in seconds, far from the range where the conversion loses anything.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let iat_ms = claims
        .iat
        .filter(|t| t.is_finite() && *t >= 0.0)
        .map(|t| (t * 1000.0) as u64);
    let read_only = claims
        .scope
        .as_deref()
        .is_some_and(|s| s.split_ascii_whitespace().any(|s| s == READ_SCOPE));
    Ok(Access {
        user: claims.sub,
        conversation,
        iat_ms,
        client_id: claims.client_id.or(claims.azp),
        read_only,
    })
}
