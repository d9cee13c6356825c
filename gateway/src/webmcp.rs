//! `GET /v1/webmcp.js`: the page-side module that puts a page's WebMCP tools on the gateway
//! (`webmcp/`, embedded at build time). Public and cacheable: an ETag of the content hash, and
//! 304 when the browser or CDN already holds that version. Apps import it from their own
//! origin, so it is shared with every origin (CORS `*`, no credentials involved).

use std::sync::LazyLock;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// The module's source, as committed in `webmcp/src`.
pub const SOURCE: &str = include_str!("../../webmcp/src/webmcp.js");

/// How long a cache may use its copy before asking again (the ETag makes asking cheap).
const CACHE_CONTROL: &str = "public, max-age=300, must-revalidate";

/// The strong ETag: the first 128 bits of the source's SHA-256, quoted.
static ETAG: LazyLock<String> = LazyLock::new(|| {
    let digest = Sha256::digest(SOURCE.as_bytes());
    format!("\"{}\"", hex::encode(&digest[..16]))
});

/// Whether an `If-None-Match` value names `etag` (a list; `*`; weak forms compare equal).
fn matches(if_none_match: &str, etag: &str) -> bool {
    if_none_match
        .split(',')
        .map(|tag| tag.trim().trim_start_matches("W/"))
        .any(|tag| tag == "*" || tag == etag)
}

/// The WebMCP page module (no key; cacheable, revalidated by its ETag).
#[utoipa::path(get, path = "/v1/webmcp.js", tag = "meta",
    params(("If-None-Match" = Option<String>, Header, description = "An ETag of a copy already held")),
    responses(
        (status = 200, description = "The WebMCP module (docs/integrate.md, \"WebMCP sites\"): an ES module exporting `connectWebMCP({url, token, modelContext?})`",
            content_type = "text/javascript; charset=utf-8",
            headers(("ETag" = String, description = "The content hash"), ("Cache-Control" = String),
                ("Access-Control-Allow-Origin" = String, description = "`*`: apps import it from their own origin"))),
        (status = 304, description = "The copy named by If-None-Match is current")))]
pub async fn webmcp_js(headers: HeaderMap) -> Response {
    let etag = HeaderValue::from_str(&ETAG).unwrap_or(HeaderValue::from_static("\"\""));
    let cache = (
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
    let cors = (
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    let held = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| matches(v, &ETAG));
    if held {
        return (
            StatusCode::NOT_MODIFIED,
            [(header::ETAG, etag), cache, cors],
        )
            .into_response();
    }
    let mime = HeaderValue::from_static("text/javascript; charset=utf-8");
    (
        [
            (header::CONTENT_TYPE, mime),
            (header::ETAG, etag),
            cache,
            cors,
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        SOURCE,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_lists_weak_forms_and_star_match() {
        let etag = ETAG.as_str();
        assert!(matches(etag, etag));
        assert!(matches(&format!("\"x\", W/{etag}"), etag));
        assert!(matches("*", etag));
        assert!(!matches("\"x\"", etag));
        assert_eq!(etag.len(), 34);
    }
}
