//! Standard Webhooks signatures: `webhook-signature: v1,<base64 HMAC-SHA256>` over
//! `<webhook-id>.<webhook-timestamp>.<body>`, keyed with the base64 part of `whsec_…`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// SHA-256 of a key as stored (`sha256:<hex>` in the config is this, in hex).
pub fn sha256(key: &str) -> [u8; 32] {
    use sha2::Digest;
    Sha256::digest(key.as_bytes()).into()
}

/// A tenant's signing key.
#[derive(Clone)]
pub struct SigningKey(Vec<u8>);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(…)")
    }
}

impl SigningKey {
    /// The fewest bytes of key a webhook secret may have (after `whsec_` and base64).
    pub const MIN_BYTES: usize = 16;

    /// From `whsec_<base64>` (the prefix is optional), at least [`Self::MIN_BYTES`] of key.
    pub fn parse(secret: &str) -> Result<Self, crate::keys::KeyError> {
        let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
        let key = STANDARD.decode(b64)?;
        if key.len() < Self::MIN_BYTES {
            return Err(crate::keys::KeyError::TooShort {
                min: Self::MIN_BYTES,
            });
        }
        Ok(SigningKey(key))
    }

    /// The `webhook-signature` header value.
    pub fn sign(&self, id: &str, timestamp: u64, body: &str) -> String {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.0) else {
            return String::new();
        };
        mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_follow_the_standard_webhooks_scheme() {
        let key = SigningKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = key.sign(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            r#"{"test": 2432232314}"#,
        );
        // The reference vector of the Standard Webhooks specification.
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert!(SigningKey::parse("whsec_***").is_err());
        // No key, or less than 16 bytes of it (15 here), is refused.
        for short in ["whsec_", "", "whsec_MDEyMzQ1Njc4OWFiY2Rl"] {
            let e = SigningKey::parse(short).expect_err(short);
            assert_eq!(e.to_string(), "must be at least 16 bytes", "{short}");
        }
        assert!(SigningKey::parse("whsec_MDEyMzQ1Njc4OWFiY2RlZg==").is_ok());
    }
}
