//! RFC 9457 problem details with the contract's stable codes. Internals never reach a client:
//! every variant carries only what the caller may know.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use toolmark_broker::{BrokerError, PlaceError, RateLimited, TakeError};

/// Every problem `code` the HTTP APIs answer, with its `title`: the one list the answers and
/// the OpenAPI document are made from.
pub const CODES: &[(&str, &str)] = &[
    ("unauthorized", "Unauthorized"),
    ("forbidden", "Forbidden"),
    ("not_found", "Not found"),
    ("method_not_allowed", "Method not allowed"),
    ("no_page", "No page"),
    ("invalid_request", "Invalid request"),
    ("payload_too_large", "Payload too large"),
    ("rate_limited", "Rate limited"),
    ("unavailable", "Unavailable"),
    ("conflict", "Conflict"),
    ("static_tenant", "Conflict"),
    ("precondition_failed", "Precondition failed"),
    ("idempotency_mismatch", "Idempotency key mismatch"),
    ("scope_denied", "Scope denied"),
    ("tool_not_allowed", "Tool not allowed"),
    ("tool_not_pinned", "Tool not pinned"),
];

/// The `code` of a problem answer, kept on the response for the middleware that counts
/// refusals per tenant (`crate::ops::CountRequests`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProblemCode(pub &'static str);

/// An API error, answered as `application/problem+json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// Human-readable explanation.
    pub detail: String,
    /// JSON pointer of the offending request field.
    pub pointer: Option<String>,
    /// Seconds before a retry can succeed (`Retry-After`).
    pub retry_after: Option<u64>,
    /// Why a forwarded page message was refused (`/inbound`): the metrics label.
    pub reason: Option<&'static str>,
}

impl Problem {
    fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        debug_assert!(
            CODES.iter().any(|(c, _)| *c == code),
            "problem code {code} is not in CODES"
        );
        Problem {
            status,
            code,
            detail: detail.into(),
            pointer: None,
            retry_after: None,
            reason: None,
        }
    }

    /// The same problem, naming why a page message was refused.
    #[must_use]
    pub fn with_reason(self, reason: &'static str) -> Self {
        Problem {
            reason: Some(reason),
            ..self
        }
    }

    /// 400 without a field pointer (a page message refused as a whole).
    pub fn refused(reason: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", detail).with_reason(reason)
    }

    /// 401 on the admin API: missing or wrong admin key.
    pub fn admin_unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "A valid admin key is required.",
        )
    }

    /// 403: the request is well formed and authenticated, but not allowed from where it came.
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", detail)
    }

    /// 405: the route exists, the method does not.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "This method is not allowed on this route.",
        )
    }

    /// 409: the change conflicts with what is stored.
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", detail)
    }

    /// 409: a tenant of the config file cannot be changed at run time.
    pub fn static_tenant() -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "static_tenant",
            "This tenant is defined in the config file and is read-only here.",
        )
    }

    /// 412: `If-Match` names a version that is no longer current.
    pub fn precondition_failed() -> Self {
        Self::new(
            StatusCode::PRECONDITION_FAILED,
            "precondition_failed",
            "The tenant changed since the version If-Match names; read it again.",
        )
    }

    /// 401: missing, wrong, or another tenant's API key.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "A valid API key of this tenant is required.",
        )
    }

    /// 404.
    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found."),
        )
    }

    /// 409: the conversation has no connected page with a manifest.
    pub fn no_page() -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "no_page",
            "No page of this conversation is connected with a manifest.",
        )
    }

    /// 422: an `Idempotency-Key` used before with another request.
    pub fn idempotency_mismatch() -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_mismatch",
            "This Idempotency-Key was used with another request (route, conversation or body) within 24 h.",
        )
    }

    /// 403: the credential's policy does not cover this group of endpoints.
    pub fn scope_denied(scope: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "scope_denied",
            format!("This credential's policy does not include the {scope} scope."),
        )
    }

    /// 403: the credential's policy does not allow this tool; the page was sent nothing.
    pub fn tool_not_allowed(tool: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "tool_not_allowed",
            format!("This credential's policy does not allow the tool {tool}."),
        )
    }

    /// 403: the tenant enforces pinned tool definitions and this tool's definition, as the
    /// page presents it, is not pinned.
    pub fn tool_not_pinned(tool: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "tool_not_pinned",
            format!("The tool {tool} is not one of the tenant's pinned definitions."),
        )
    }

    /// 400: a header that cannot be what it names (no body field to point at).
    pub fn bad_header(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", detail)
    }

    /// 400 with the pointer of the bad field.
    pub fn invalid(pointer: impl Into<String>, detail: impl Into<String>) -> Self {
        Problem {
            pointer: Some(pointer.into()),
            ..Self::new(StatusCode::BAD_REQUEST, "invalid_request", detail)
        }
    }

    /// 413.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("The request body exceeds {limit} bytes."),
        )
    }

    /// 429 with `Retry-After`.
    pub fn rate_limited(r: RateLimited) -> Self {
        Problem {
            retry_after: Some(ceil_secs(r.retry_after)),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "The tenant's call rate is exhausted.",
            )
        }
    }

    /// 429: too many open hosted MCP streams (`mcp.max_streams_per_*`); one may open again once
    /// another closes.
    pub fn too_many_streams(which: &str) -> Self {
        Problem {
            retry_after: Some(1),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("Too many open MCP streams {which}; close one first."),
            )
        }
    }

    /// 429: too many open event streams (`server.max_event_streams_per_*`) on this node.
    pub fn too_many_event_streams(which: &str) -> Self {
        Problem {
            retry_after: Some(1),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("Too many open event streams {which}; close one first."),
            )
        }
    }

    /// 429: too many live hosted MCP sessions (`mcp.max_sessions_per_*`, counted across the
    /// nodes); one may begin again once another ends or idles out.
    pub fn too_many_sessions(which: &str, retry_after: Duration) -> Self {
        Problem {
            retry_after: Some(ceil_secs(retry_after)),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("Too many live MCP sessions {which}; end one (DELETE) or reuse a session."),
            )
        }
    }

    /// 503 with `Retry-After`.
    pub fn unavailable(retry_after: Duration) -> Self {
        Problem {
            retry_after: Some(ceil_secs(retry_after)),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "The gateway cannot reach its shared state; retry later.",
            )
        }
    }
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0).max(u64::from(d.is_zero()))
}

impl From<BrokerError> for Problem {
    fn from(e: BrokerError) -> Self {
        match e {
            BrokerError::Unavailable { retry_after } => Problem::unavailable(retry_after),
        }
    }
}

impl From<TakeError> for Problem {
    fn from(e: TakeError) -> Self {
        match e {
            TakeError::Limited(r) => Problem::rate_limited(r),
            TakeError::Broker(b) => b.into(),
        }
    }
}

impl From<PlaceError> for Problem {
    fn from(e: PlaceError) -> Self {
        match e {
            PlaceError::Limited(r) => Problem::rate_limited(r),
            PlaceError::NoPage => Problem::no_page(),
            // The call engine names the tool (`CallEngine::start`); this is the code without it.
            PlaceError::NotAllowed => Problem::tool_not_allowed("asked for"),
            PlaceError::NotPinned => Problem::tool_not_pinned("asked for"),
            PlaceError::UnknownTool => {
                Problem::invalid("/tool", "the page's manifest lists no tool of this name")
            }
            PlaceError::Broker(b) => b.into(),
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let title = CODES
            .iter()
            .find(|(code, _)| *code == self.code)
            .map_or("Error", |(_, title)| title);
        let mut body = json!({
            "type": format!("urn:toolmark:problem:{}", self.code),
            "title": title,
            "status": self.status.as_u16(),
            "code": self.code,
            "detail": self.detail,
        });
        if let Some(p) = &self.pointer {
            body["pointer"] = json!(p);
        }
        if let Some(r) = self.reason {
            body["reason"] = json!(r);
        }
        let mut res = (self.status, body.to_string()).into_response();
        res.extensions_mut().insert(ProblemCode(self.code));
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(s) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            res.headers_mut().insert(header::RETRY_AFTER, v);
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        assert_eq!(ceil_secs(Duration::from_millis(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1500)), 2);
        assert_eq!(ceil_secs(Duration::from_secs(3)), 3);
        assert_eq!(ceil_secs(Duration::ZERO), 1);
    }
}
