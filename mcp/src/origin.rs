//! Page origins: an `--allow-origin` value must be exactly its own serialized origin (what
//! `new URL(value).origin` gives in a browser), so it can be compared byte for byte with the
//! `Origin` header of an upgrade. `*`, `null` and opaque origins are refused.

use url::Url;

/// Why an `--allow-origin` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    /// `*` or `null`: never an allow-list entry.
    #[error("wildcards and null are not origins")]
    Wildcard,
    /// Not an absolute URL.
    #[error("not a URL")]
    NotAUrl,
    /// A URL whose origin is opaque (e.g. `file:`, `data:`).
    #[error("the URL has no tuple origin")]
    Opaque,
    /// A URL that differs from its origin (a path, a default port, upper case…).
    #[error("must be exactly {0} (scheme, host and port, no path)")]
    NotCanonical(String),
}

/// Accepts `value` only when it equals its own serialized origin.
pub fn check_allowed_origin(value: &str) -> Result<(), OriginError> {
    if value == "*" || value == "null" {
        return Err(OriginError::Wildcard);
    }
    let url = Url::parse(value).map_err(|_| OriginError::NotAUrl)?;
    let origin = url.origin();
    if !origin.is_tuple() {
        return Err(OriginError::Opaque);
    }
    let serialized = origin.ascii_serialization();
    if serialized == value {
        Ok(())
    } else {
        Err(OriginError::NotCanonical(serialized))
    }
}

/// Whether the `Origin` header of an upgrade is one of `allowed`. Missing, empty and `null`
/// never match (the allow-list cannot hold them).
pub fn is_allowed(header: Option<&str>, allowed: &[String]) -> bool {
    match header {
        None | Some("") | Some("null") => false,
        Some(origin) => allowed.iter().any(|a| a == origin),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_origins_pass() {
        for ok in [
            "http://localhost:5173",
            "https://app.example.com",
            "http://127.0.0.1:8080",
        ] {
            assert_eq!(check_allowed_origin(ok), Ok(()), "{ok}");
        }
        for bad in [
            "*",
            "null",
            "",
            "localhost:5173",
            "http://localhost:5173/",
            "http://localhost:5173/app",
            "HTTP://localhost:5173",
            "http://localhost:80",
            "file:///tmp/x",
            "data:text/plain,x",
        ] {
            assert!(check_allowed_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn header_matching_is_exact() {
        let allowed = vec!["http://localhost:5173".to_owned()];
        assert!(is_allowed(Some("http://localhost:5173"), &allowed));
        assert!(!is_allowed(Some("http://localhost:5174"), &allowed));
        assert!(!is_allowed(Some("null"), &allowed));
        assert!(!is_allowed(Some(""), &allowed));
        assert!(!is_allowed(None, &allowed));
    }
}
