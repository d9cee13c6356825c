//! Page tokens minted locally, as a tenant's backend would: HS256 over `sub`, `cnv`, `aud`, `exp`.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;

use crate::error::LoadError;

/// Lifetime of a minted token: longer than any run.
const TTL_SECS: u64 = 3600;

#[derive(Debug, Serialize)]
struct Claims<'a> {
    sub: &'a str,
    cnv: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
}

/// Mints the page tokens of one tenant.
#[derive(Clone)]
pub struct Minter {
    key: EncodingKey,
    header: Header,
    tenant: String,
}

impl std::fmt::Debug for Minter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Minter")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl Minter {
    /// A minter for `tenant` with its HS256 `secret`.
    pub fn new(tenant: &str, secret: &str) -> Result<Self, LoadError> {
        toolmark_config::jwt::install();
        let key = EncodingKey::from_secret(secret.as_bytes())
            .map_err(|e| LoadError::Args(format!("--token-secret: {e}")))?;
        Ok(Minter {
            key,
            header: Header::new(Algorithm::HS256),
            tenant: tenant.to_owned(),
        })
    }

    /// A token binding a socket to (tenant, `user`, `conversation`), valid for an hour.
    pub fn mint(&self, user: &str, conversation: &str) -> Result<String, LoadError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let claims = Claims {
            sub: user,
            cnv: conversation,
            aud: &self.tenant,
            iat: now,
            exp: now + TTL_SECS,
        };
        jsonwebtoken::encode(&self.header, &claims, &self.key)
            .map_err(|e| LoadError::Local(format!("minting a page token: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{DecodingKey, Validation};

    use super::*;

    #[test]
    fn tokens_carry_the_binding_claims() {
        let secret = "0123456789abcdef0123456789abcdef";
        let token = Minter::new("bench", secret)
            .unwrap()
            .mint("u7", "c7")
            .unwrap();
        let mut v = Validation::new(Algorithm::HS256);
        v.set_audience(&["bench"]);
        let data = jsonwebtoken::decode::<serde_json::Value>(
            &token,
            &DecodingKey::from_secret(secret.as_bytes()).unwrap(),
            &v,
        )
        .unwrap();
        assert_eq!(data.claims["sub"], "u7");
        assert_eq!(data.claims["cnv"], "c7");
        assert_eq!(data.claims["aud"], "bench");
        let exp = data.claims["exp"].as_u64().unwrap();
        assert_eq!(exp - data.claims["iat"].as_u64().unwrap(), TTL_SECS);
    }
}
