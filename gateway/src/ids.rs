//! Ids: user and conversation ids (`^[A-Za-z0-9_-]{1,128}$`), and random ones the gateway
//! makes (a node's, the dev tenant's secrets).

/// Whether `id` is a valid user or conversation id.
pub fn is_valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `bytes` random bytes, hex-encoded.
pub fn random_hex(bytes: usize) -> String {
    use rand::RngExt;
    let mut buf = vec![0u8; bytes];
    rand::rng().fill(&mut buf[..]);
    hex::encode(buf)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_follow_the_contract_pattern() {
        assert!(super::is_valid_id("user_1-A"));
        assert!(!super::is_valid_id(""));
        assert!(!super::is_valid_id("a.b"));
        assert!(!super::is_valid_id(&"a".repeat(129)));
    }
}
