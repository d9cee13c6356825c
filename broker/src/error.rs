//! Broker errors, each saying whose fault it is and whether a retry can help.

use std::time::Duration;

/// The shared state could not be reached; the caller answers 503 with `Retry-After`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    /// The backing store is unreachable or timed out. Retry after the given delay.
    #[error("broker unavailable")]
    Unavailable {
        /// Suggested delay before a retry.
        retry_after: Duration,
    },
}

/// Why a page's `result` or `confirmed` was dropped
/// (`toolmark_results_rejected_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Rejection {
    /// No call with that id was ever issued (to this tenant).
    #[error("unknown call id")]
    UnknownId,
    /// Tenant, user, conversation or clientId differs from the binding.
    #[error("binding mismatch")]
    Mismatch,
    /// The call already has a result.
    #[error("duplicate result")]
    Duplicate,
    /// The deadline passed: the agent already saw a timeout.
    #[error("late result")]
    Late,
    /// The confirmId was never seen in a `needs_confirmation` from this page, or was used.
    #[error("unknown or used confirmId")]
    UnknownConfirm,
}

impl Rejection {
    /// Every reason, for pre-registering metric series.
    pub const ALL: &'static [Rejection] = &[
        Rejection::UnknownId,
        Rejection::Mismatch,
        Rejection::Duplicate,
        Rejection::Late,
        Rejection::UnknownConfirm,
    ];

    /// The metrics label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Rejection::UnknownId => "unknown_id",
            Rejection::Mismatch => "mismatch",
            Rejection::Duplicate => "duplicate",
            Rejection::Late => "late",
            Rejection::UnknownConfirm => "unknown_confirm",
        }
    }
}

/// A `result` or `confirmed` that was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// Refused by a security rule: drop and count it.
    #[error("rejected: {0}")]
    Rejected(Rejection),
    /// The broker could not decide.
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// A page socket refused by a connection limit (close 4429) or an unreachable broker.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    /// The tenant has `max_connections` page sockets.
    #[error("tenant connection limit reached")]
    TenantConnections,
    /// The conversation has `max_pages_per_conversation` page sockets.
    #[error("conversation page limit reached")]
    ConversationPages,
    /// The broker could not decide.
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// The tenant's call rate is exhausted; retry after the given delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("rate limited")]
pub struct RateLimited {
    /// When the next call would be allowed.
    pub retry_after: Duration,
}

/// A call not taken from the tenant's rate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TakeError {
    /// The rate is exhausted (429).
    #[error(transparent)]
    Limited(#[from] RateLimited),
    /// The broker could not decide (503): the limit does not fail open.
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// Why an agent's call was not placed.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// The tenant's call rate is exhausted.
    #[error(transparent)]
    Limited(#[from] RateLimited),
    /// No page accepts calls in the conversation ([`crate::model::accepts_calls`]).
    #[error("no page in the conversation")]
    NoPage,
    /// The caller's policy does not allow the tool ([`crate::CallRequest::gate`]): nothing
    /// was taken, bound or sent.
    #[error("the caller's policy does not allow the tool")]
    NotAllowed,
    /// The tenant enforces pins and the tool's definition is not pinned
    /// ([`crate::ToolGate::with_pins`]): nothing was taken, bound or sent.
    #[error("the tool's definition is not pinned")]
    NotPinned,
    /// The page's manifest lists no tool of the request's LLM name
    /// ([`crate::CallRequest::llm_name`]): nothing was taken, bound or sent.
    #[error("the page lists no tool of this name")]
    UnknownTool,
    /// The shared state is unreachable.
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

impl From<TakeError> for PlaceError {
    fn from(e: TakeError) -> Self {
        match e {
            TakeError::Limited(r) => PlaceError::Limited(r),
            TakeError::Broker(b) => PlaceError::Broker(b),
        }
    }
}
