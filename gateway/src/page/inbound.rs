//! A page message that reached the node over HTTP, not over a socket: the frames of a Laravel
//! Echo page, forwarded by the tenant's own bridge endpoint (`/inbound` of the agent API, or the
//! demo's stand-in for that endpoint). It gets exactly the checks a page WebSocket frame gets
//! ([`super::frames`]), and a refusal becomes problem+json.

use std::time::Duration;

use toolmark_broker::{ConvKey, RateLimited};
use toolmark_proto::{DecodeError, Limits};

use super::PageState;
use super::frames::{self, Refused};
use crate::http::problem::Problem;
use crate::tenants::Tenant;

/// Checks and applies one forwarded page message of `conv`.
pub async fn accept(
    pages: &PageState,
    tenant: &Tenant,
    conv: &ConvKey,
    body: &[u8],
) -> Result<(), Problem> {
    if !tenant.inbound_rate.take(conv) {
        pages.metrics.inbound_rejected("rate_limited");
        return Err(Problem {
            detail: "The conversation's page message rate is exhausted.".into(),
            ..Problem::rate_limited(RateLimited {
                retry_after: Duration::from_secs(1),
            })
        }
        .with_reason("rate_limited"));
    }
    let limits = Limits::with_max_bytes(tenant.limits.max_message_bytes);
    let message = frames::decode(pages, body, &limits).map_err(problem)?;
    // An Echo page never binds a socket, so its clientId is checked the other way round: a
    // clientId bound to a live page socket (any node) belongs to that page, not to this one.
    let state = pages.broker.conversation(conv).await?;
    if state
        .pages
        .iter()
        .any(|p| p.client_id == message.client_id())
    {
        return Err(problem(frames::client_mismatch(pages)));
    }
    frames::dispatch(pages, conv, &message, body.len())
        .await
        .map_err(problem)
}

/// The answer to a refused page message (public for the fuzz targets).
pub fn problem(refused: Refused) -> Problem {
    let reason = refused.reason();
    match refused {
        Refused::Decode(DecodeError::TooLarge { limit, .. }) => {
            Problem::too_large(limit).with_reason(reason)
        }
        Refused::Decode(e) => match e.pointer() {
            Some(p) => Problem::invalid(p, e.to_string()).with_reason(reason),
            None => Problem::refused(reason, e.to_string()),
        },
        Refused::ClientMismatch => {
            Problem::invalid("/clientId", refused.to_string()).with_reason(reason)
        }
        Refused::Rejected(r) => Problem::refused(reason, format!("The message was refused: {r}.")),
        Refused::Broker(e) => e.into(),
    }
}
