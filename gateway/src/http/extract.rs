//! What every door reads from a request, with problem+json errors: a body under the largest
//! message size, a strict query string, strict JSON with the pointer of the bad field, and the
//! user and conversation path segments.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::problem::Problem;

/// A request body read up to the largest message any tenant may send; larger bodies get a
/// problem+json 413 (the tenant's own limit is checked by [`parse_json`] under it).
#[derive(Debug)]
pub struct Body(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = Problem;

    async fn from_request(req: Request, _: &S) -> Result<Self, Problem> {
        let limit = toolmark_config::MAX_FRAME_BYTES;
        axum::body::to_bytes(req.into_body(), limit)
            .await
            .map(Body)
            .map_err(|_| Problem::too_large(limit))
    }
}

/// A query string, parsed strictly; a bad one is a problem+json 400 (pointer `""`, the
/// parser's reason in `detail`), never the framework's plain-text rejection.
#[derive(Debug)]
pub struct QueryOf<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryOf<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| QueryOf(q.0))
            .map_err(|e| Problem::invalid("", format!("bad query string: {}", e.body_text())))
    }
}

/// Parses a JSON body strictly under the size limit `limit`; errors carry the JSON pointer of
/// the offending field.
pub fn parse_json<T: DeserializeOwned>(body: &[u8], limit: usize) -> Result<T, Problem> {
    if body.len() > limit {
        return Err(Problem::too_large(limit));
    }
    // A body that parses is read once, without tracking where the parser is (a string per
    // field it passes); one that does not is read again to say where it failed.
    serde_json::from_slice(body).or_else(|first| {
        let mut de = serde_json::Deserializer::from_slice(body);
        let _: T = serde_path_to_error::deserialize(&mut de).map_err(|e| path_problem("", e))?;
        de.end().map_err(|e| Problem::invalid("", e.to_string()))?;
        // The same bytes fail the same way both times; the first error, should they not.
        Err(Problem::invalid("", first.to_string()))
    })
}

/// Deserializes a JSON value found at `base` (a pointer) of the request body.
pub fn parse_value<T: DeserializeOwned>(
    base: &str,
    value: serde_json::Value,
) -> Result<T, Problem> {
    serde_path_to_error::deserialize(value).map_err(|e| path_problem(base, e))
}

fn path_problem<E: std::fmt::Display>(base: &str, e: serde_path_to_error::Error<E>) -> Problem {
    let mut pointer = format!("{base}{}", pointer_of(e.path()));
    let detail = e.into_inner().to_string();
    // serde reports a missing field at its parent: point at the field itself.
    if let Some(name) = detail
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next())
    {
        pointer.push('/');
        pointer.push_str(&name.replace('~', "~0").replace('/', "~1"));
    }
    Problem::invalid(pointer, detail)
}

fn pointer_of(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("/{index}")),
            Segment::Map { key } => {
                out.push('/');
                out.push_str(&key.replace('~', "~0").replace('/', "~1"));
            }
            Segment::Enum { variant } => {
                out.push('/');
                out.push_str(variant);
            }
            Segment::Unknown => {}
        }
    }
    out
}

/// Checks the user and conversation path segments.
pub fn check_ids(user: &str, conversation: &str) -> Result<(), Problem> {
    if !crate::ids::is_valid_id(user) {
        return Err(Problem::invalid(
            "/user",
            "user ids match ^[A-Za-z0-9_-]{1,128}$",
        ));
    }
    if !crate::ids::is_valid_id(conversation) {
        return Err(Problem::invalid(
            "/conversation",
            "conversation ids match ^[A-Za-z0-9_-]{1,128}$",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        name: String,
        inner: Vec<Inner>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        n: u32,
    }

    fn pointer(body: &str) -> Option<String> {
        parse_json::<Outer>(body.as_bytes(), 1024)
            .unwrap_err()
            .pointer
    }

    #[test]
    fn a_body_that_parses_is_read_and_one_that_does_not_is_pointed_at() {
        assert_eq!(
            parse_json::<Outer>(br#" {"name":"a","inner":[{"n":1}]} "#, 1024).unwrap(),
            Outer {
                name: "a".into(),
                inner: vec![Inner { n: 1 }]
            }
        );
        assert_eq!(
            pointer(r#"{"name":"a","inner":[{"n":1},{"n":"x"}]}"#).as_deref(),
            Some("/inner/1/n")
        );
        assert_eq!(
            pointer(r#"{"name":"a","inner":[{}]}"#).as_deref(),
            Some("/inner/0/n"),
            "a missing field is pointed at itself"
        );
        assert_eq!(
            pointer(r#"{"name":"a","inner":[],"extra":1}"#).as_deref(),
            Some("/extra")
        );
        assert_eq!(
            pointer(r#"{"name":"a","inner":[]} trailing"#).as_deref(),
            Some(""),
            "what follows the value is refused"
        );
        assert_eq!(
            parse_json::<Outer>(&[b' '; 1025], 1024).unwrap_err().status,
            axum::http::StatusCode::PAYLOAD_TOO_LARGE
        );
    }
}
