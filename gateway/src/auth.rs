//! Agent API keys: stored only as SHA-256 hashes, compared in constant time.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// SHA-256 of a presented key.
pub fn hash_key(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// The config form of a key: `sha256:<hex>`.
pub fn key_hash_string(key: &str) -> String {
    format!("sha256:{}", hex::encode(hash_key(key)))
}

/// Whether `presented` hashes to one of `hashes`. Every stored hash is compared, each in
/// constant time, so timing reveals neither which key matched nor how much of it.
pub fn key_matches(presented: &str, hashes: &[[u8; 32]]) -> bool {
    let h = hash_key(presented);
    hashes
        .iter()
        .fold(subtle::Choice::from(0), |acc, stored| {
            acc | stored.ct_eq(&h)
        })
        .into()
}

/// The bearer token of an `Authorization` header value.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let v = header?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolmark_config::tenant::parse_key_hash;

    #[test]
    fn keys_match_only_their_hash() {
        let stored = parse_key_hash(&key_hash_string("secret-key")).unwrap();
        assert!(key_matches("secret-key", &[stored]));
        assert!(!key_matches("secret-keY", &[stored]));
        assert!(!key_matches("", &[stored]));
        assert!(!key_matches("secret-key", &[]));
        assert_eq!(parse_key_hash("sha256:zz"), None);
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
    }
}
