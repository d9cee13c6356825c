//! Laravel Echo's private channels of Toolmark: their names
//! (`private-toolmark.{user}.{conversation}`, [`toolmark_channel`]), and what authorizes a
//! socket to join one: socket ids, and the `<key>:<hex HMAC-SHA256(secret,
//! "<socket_id>:<channel>")>` signature Laravel's `/broadcasting/auth` returns, checked in
//! constant time against the tenant's current and rotating key pairs.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

const CHANNEL_PREFIX: &str = "private-toolmark.";

/// The user and conversation of `private-toolmark.{user}.{conversation}`; `None` for every
/// other channel (nothing else is served).
pub fn toolmark_channel(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(CHANNEL_PREFIX)?;
    let (user, conversation) = rest.split_once('.')?;
    (crate::ids::is_valid_id(user) && crate::ids::is_valid_id(conversation))
        .then_some((user, conversation))
}

/// One app key of a tenant and its secret.
#[derive(Clone)]
pub struct AppKey {
    /// Public app key (in `/app/{key}` and before the `:` of a signature).
    pub key: String,
    secret: String,
}

impl std::fmt::Debug for AppKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppKey")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl AppKey {
    /// A key pair.
    pub fn new(key: &str, secret: &str) -> Self {
        AppKey {
            key: key.into(),
            secret: secret.into(),
        }
    }

    /// The hex signature of `socket_id` joining `channel` under this pair.
    pub fn sign(&self, socket_id: &str, channel: &str) -> String {
        hex::encode(self.mac(socket_id, channel).finalize().into_bytes())
    }

    fn mac(&self, socket_id: &str, channel: &str) -> Hmac<Sha256> {
        // HMAC accepts keys of any length, so this never fails.
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(self.secret.as_bytes())
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(socket_id.as_bytes());
        mac.update(b":");
        mac.update(channel.as_bytes());
        mac
    }
}

/// Whether `auth` (`<key>:<hex signature>`) authorizes `socket_id` to join `channel`: the key
/// must be one of `keys` and the signature that pair's, compared in constant time.
pub fn verify(keys: &[AppKey], auth: &str, socket_id: &str, channel: &str) -> bool {
    let Some((key, signature)) = auth.split_once(':') else {
        return false;
    };
    let Some(pair) = keys.iter().find(|k| k.key == key) else {
        return false;
    };
    let Ok(given) = hex::decode(signature) else {
        return false;
    };
    let expected = pair.mac(socket_id, channel).finalize().into_bytes();
    expected.as_slice().ct_eq(&given).into()
}

/// A fresh socket id `<digits>.<digits>` (about 60 random bits): a signature made for one
/// connection is worth nothing on another.
pub fn new_socket_id() -> String {
    use rand::RngExt;
    let mut rng = rand::rng();
    let a: u32 = rng.random_range(1..1_000_000_000);
    let b: u32 = rng.random_range(1..1_000_000_000);
    format!("{a}.{b}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_toolmark_private_channels_with_valid_ids_are_served() {
        assert_eq!(
            toolmark_channel("private-toolmark.u1.c-1"),
            Some(("u1", "c-1"))
        );
        for bad in [
            "toolmark.u1.c1",
            "presence-toolmark.u1.c1",
            "private-encrypted-toolmark.u1.c1",
            "private-toolmark.u1",
            "private-toolmark.u1.c1.x",
            "private-toolmark..c1",
            "private-App.Models.User.1",
        ] {
            assert_eq!(toolmark_channel(bad), None, "{bad}");
        }
    }

    #[test]
    fn signatures_match_the_pusher_scheme_and_only_their_pair() {
        let current = AppKey::new("new", "new-secret-0123456789");
        let old = AppKey::new("old", "old-secret-0123456789");
        let keys = [current.clone(), old.clone()];
        let ch = "private-toolmark.u1.c1";
        let sig = current.sign("1.2", ch);
        assert_eq!(sig.len(), 64);
        assert!(verify(&keys, &format!("new:{sig}"), "1.2", ch));
        assert!(verify(
            &keys,
            &format!("old:{}", old.sign("1.2", ch)),
            "1.2",
            ch
        ));
        assert!(
            !verify(&keys, &format!("old:{sig}"), "1.2", ch),
            "another pair's signature"
        );
        assert!(
            !verify(&keys, &format!("new:{sig}"), "1.3", ch),
            "another socket"
        );
        assert!(!verify(
            &keys,
            &format!("new:{sig}"),
            "1.2",
            "private-toolmark.u2.c1"
        ));
        assert!(!verify(&keys, &format!("other:{sig}"), "1.2", ch));
        assert!(!verify(&keys, &sig, "1.2", ch));
        assert!(!verify(&keys, "new:zz", "1.2", ch));
    }

    #[test]
    fn socket_ids_are_digits_dot_digits_and_distinct() {
        let a = new_socket_id();
        let (x, y) = a.split_once('.').unwrap();
        assert!(x.bytes().chain(y.bytes()).all(|b| b.is_ascii_digit()));
        assert_ne!(a, new_socket_id());
    }
}
