//! The `Idempotency-Key` request header, read as an extractor: none, or one value of 1 to 255
//! visible ASCII characters; anything else is a problem+json 400 before the handler runs. What
//! a key does (a request that runs once) is the call engine's (`crate::calls::idempotency`).

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;

use super::problem::Problem;

/// The header's name.
pub const HEADER: &str = "idempotency-key";

/// The request's `Idempotency-Key`, if it sent one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        key_of(&parts.headers).map(IdempotencyKey)
    }
}

/// The key in `headers`: none, or 1–255 visible ASCII characters, sent once.
fn key_of(headers: &HeaderMap) -> Result<Option<String>, Problem> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = || Problem::bad_header("Idempotency-Key is 1 to 255 visible ASCII characters, once");
    if values.next().is_some() {
        return Err(bad());
    }
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes.len() > 255 || !bytes.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return Err(bad());
    }
    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_one_to_255_visible_ascii_characters_sent_once() {
        let with = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(HEADER, v.parse().unwrap());
            }
            key_of(&h)
        };
        assert_eq!(with(&["order-42"]).unwrap().as_deref(), Some("order-42"));
        assert!(with(&[&"k".repeat(255)]).unwrap().is_some());
        assert!(with(&[&"k".repeat(256)]).is_err());
        assert!(with(&["has space"]).is_err());
        assert!(with(&["a", "b"]).is_err(), "two keys: which one?");
        assert!(with(&[]).unwrap().is_none());
    }
}
