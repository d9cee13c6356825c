//! Why the call engine did not start a call, in its own terms: each door says it its own way
//! (the agent API as a problem, [`From<CallError> for Problem`]; the hosted MCP endpoint as an
//! MCP error or a tool result, by matching the variants), and no door reads a code back. The
//! engine's steps ([`super::CallEngine`]) return nothing else.

use std::time::Duration;

use toolmark_broker::{BrokerError, PlaceError, RateLimited};

use crate::http::Problem;

/// A call the engine refused or could not start; nothing reached the page.
#[derive(Debug)]
pub(crate) enum CallError {
    /// This node is draining: another node takes the call.
    Draining,
    /// The request's `timeoutMs` is outside 1 ..= the tenant's `max`.
    Timeout {
        /// The tenant's `max_call_timeout_ms`.
        max: u64,
    },
    /// The credential's policy does not allow the tool.
    NotAllowed {
        /// The tool asked for.
        tool: String,
    },
    /// The tenant enforces its pins and the tool's definition is not pinned.
    NotPinned {
        /// The tool asked for.
        tool: String,
    },
    /// The page's manifest lists no tool of the name (an MCP tool name).
    UnknownTool {
        /// The name asked for.
        tool: String,
    },
    /// The tenant is gone.
    UnknownTenant,
    /// No page of the conversation takes calls.
    NoPage,
    /// The tenant's (or the credential's) call rate is spent.
    RateLimited(RateLimited),
    /// The request's `Idempotency-Key` was first sent with another request (another route,
    /// conversation or body).
    KeyReused,
    /// The request's `Idempotency-Key` belongs to a request still starting its call (on a
    /// node of the previous release, or for longer than a repeat waits): asked again soon.
    KeyBusy,
    /// The broker did not answer.
    Broker(BrokerError),
}

impl CallError {
    /// The refusal's stable code: a problem's `code`, a span's `error.type`.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            CallError::Draining | CallError::KeyBusy | CallError::Broker(_) => "unavailable",
            CallError::Timeout { .. } | CallError::UnknownTool { .. } => "invalid_request",
            CallError::NotAllowed { .. } => "tool_not_allowed",
            CallError::NotPinned { .. } => "tool_not_pinned",
            CallError::UnknownTenant => "not_found",
            CallError::NoPage => "no_page",
            CallError::RateLimited(_) => "rate_limited",
            CallError::KeyReused => "idempotency_mismatch",
        }
    }

    /// The broker's refusal of a call of `tool`.
    pub(crate) fn placing(e: PlaceError, tool: &str) -> CallError {
        match e {
            PlaceError::Limited(r) => CallError::RateLimited(r),
            PlaceError::NoPage => CallError::NoPage,
            PlaceError::NotAllowed => CallError::NotAllowed {
                tool: tool.to_owned(),
            },
            PlaceError::NotPinned => CallError::NotPinned {
                tool: tool.to_owned(),
            },
            PlaceError::UnknownTool => CallError::UnknownTool {
                tool: tool.to_owned(),
            },
            PlaceError::Broker(b) => CallError::Broker(b),
        }
    }
}

impl From<BrokerError> for CallError {
    fn from(e: BrokerError) -> Self {
        CallError::Broker(e)
    }
}

/// The agent API's words for it.
impl From<CallError> for Problem {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Draining | CallError::KeyBusy => {
                Problem::unavailable(Duration::from_secs(1))
            }
            CallError::Timeout { max } => {
                Problem::invalid("/timeoutMs", format!("timeoutMs is between 1 and {max}"))
            }
            CallError::NotAllowed { tool } => Problem::tool_not_allowed(&tool),
            CallError::NotPinned { tool } => Problem::tool_not_pinned(&tool),
            CallError::UnknownTool { tool } => {
                Problem::invalid("/name", format!("unknown tool {tool}"))
            }
            CallError::UnknownTenant => Problem::not_found("tenant"),
            CallError::NoPage => Problem::no_page(),
            CallError::RateLimited(r) => Problem::rate_limited(r),
            CallError::KeyReused => Problem::idempotency_mismatch(),
            CallError::Broker(b) => b.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_keeps_its_code_in_the_agent_apis_words() {
        let cases = [
            CallError::Draining,
            CallError::Timeout { max: 60_000 },
            CallError::NotAllowed { tool: "a".into() },
            CallError::NotPinned { tool: "a".into() },
            CallError::UnknownTool { tool: "a".into() },
            CallError::UnknownTenant,
            CallError::NoPage,
            CallError::KeyReused,
            CallError::KeyBusy,
        ];
        for e in cases {
            let code = e.code();
            let p: Problem = e.into();
            assert_eq!(p.code, code);
        }
    }
}
