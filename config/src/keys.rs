//! The key material of a tenant's settings, loaded: its page-token keys ([`TokenKey`]), its
//! authorization server's keys ([`OAuthKeys`]), and why a key or secret cannot be used
//! ([`KeyError`], also the error of a webhook signing key, `crate::signing`). Every parse here
//! installs the JWT crypto provider (`crate::jwt`) first.

use jsonwebtoken::{DecodingKey, EncodingKey};

/// A page-token key, loaded.
#[derive(Clone)]
pub enum TokenKey {
    /// A shared secret: verifies and mints.
    Hs256 {
        /// Verification key.
        decoding: DecodingKey,
        /// Signing key (`POST …/tokens`).
        encoding: EncodingKey,
    },
    /// An Ed25519 public key.
    EdDsa(DecodingKey),
    /// A P-256 public key.
    Es256(DecodingKey),
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TokenKey::Hs256 { .. } => "TokenKey::Hs256(…)",
            TokenKey::EdDsa(_) => "TokenKey::EdDsa(…)",
            TokenKey::Es256(_) => "TokenKey::Es256(…)",
        })
    }
}

/// Why a key or secret of a tenant cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Shorter than the minimum.
    #[error("must be at least {min} bytes")]
    TooShort {
        /// The minimum, in bytes.
        min: usize,
    },
    /// Not a PEM public key of an accepted kind.
    #[error("not a PEM Ed25519 or P-256 public key")]
    NotPublicKey,
    /// Not `whsec_` followed by base64.
    #[error("not whsec_ followed by base64: {0}")]
    NotWebhookSecret(#[from] base64::DecodeError),
    /// The JWT library refused the key.
    #[error("{0}")]
    Jwt(#[from] jsonwebtoken::errors::Error),
}

impl TokenKey {
    /// HS256 with a shared secret of at least 32 bytes.
    pub fn hs256(secret: &str) -> Result<TokenKey, KeyError> {
        crate::jwt::install();
        if secret.len() < 32 {
            return Err(KeyError::TooShort { min: 32 });
        }
        Ok(TokenKey::Hs256 {
            decoding: DecodingKey::from_secret(secret.as_bytes())?,
            encoding: EncodingKey::from_secret(secret.as_bytes())?,
        })
    }

    /// A PEM public key: Ed25519 → EdDSA, P-256 → ES256.
    pub fn public_pem(pem: &str) -> Result<TokenKey, KeyError> {
        crate::jwt::install();
        if let Ok(key) = DecodingKey::from_ed_pem(pem.as_bytes()) {
            return Ok(TokenKey::EdDsa(key));
        }
        if let Ok(key) = DecodingKey::from_ec_pem(pem.as_bytes()) {
            return Ok(TokenKey::Es256(key));
        }
        Err(KeyError::NotPublicKey)
    }
}

/// An authorization server's signing keys.
#[derive(Clone)]
pub enum OAuthKeys {
    /// One key from the config (`mcp_public_key`) and its algorithm.
    Pem(DecodingKey, jsonwebtoken::Algorithm),
    /// A JWK Set fetched from `mcp_jwks_url` (cached; fetched again for an unknown `kid`).
    Jwks(String),
}

impl std::fmt::Debug for OAuthKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OAuthKeys::Pem(_, alg) => write!(f, "OAuthKeys::Pem({alg:?})"),
            OAuthKeys::Jwks(url) => write!(f, "OAuthKeys::Jwks({url})"),
        }
    }
}

impl OAuthKeys {
    /// A PEM public key: Ed25519 → EdDSA, P-256 → ES256, RSA → RS256.
    pub fn pem(pem: &str) -> Result<OAuthKeys, KeyError> {
        use jsonwebtoken::Algorithm;
        crate::jwt::install();
        if let Ok(key) = DecodingKey::from_ed_pem(pem.as_bytes()) {
            return Ok(OAuthKeys::Pem(key, Algorithm::EdDSA));
        }
        if let Ok(key) = DecodingKey::from_ec_pem(pem.as_bytes()) {
            return Ok(OAuthKeys::Pem(key, Algorithm::ES256));
        }
        if let Ok(key) = DecodingKey::from_rsa_pem(pem.as_bytes()) {
            return Ok(OAuthKeys::Pem(key, Algorithm::RS256));
        }
        Err(KeyError::NotPublicKey)
    }
}
