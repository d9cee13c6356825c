//! Page → agent messages, whichever transport carried them (a page WebSocket frame, or an
//! `/inbound` POST forwarded by the tenant's Echo bridge): decoding under the tenant's limits,
//! then the broker's binding, single-use and deadline checks and the manifest, result and
//! confirmed handling, with one set of metrics and events, so the transports cannot drift.

use serde_json::json;
use toolmark_broker::{BrokerError, ConvKey, EventType, PageIdentity, Rejection, SubmitError};
use toolmark_proto::{DecodeError, Limits, PageMessage, decode_to_agent};

use crate::state::AppState;

/// Why a page message was dropped. Every variant but [`Refused::Broker`] is counted in the
/// metrics by [`decode`] or [`dispatch`] before it is returned.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// Over the limits, not JSON, or not a valid page → agent message
    /// (`toolmark_inbound_rejected_total`).
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The message claims the clientId of another page (`toolmark_inbound_rejected_total`).
    #[error("the clientId belongs to another page")]
    ClientMismatch,
    /// A `result` or `confirmed` refused by a security rule
    /// (`toolmark_results_rejected_total`).
    #[error("{0}")]
    Rejected(Rejection),
    /// The broker could not decide (not counted; the page may retry).
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

impl Refused {
    /// The stable reason: the metrics label of the counter that counted it.
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::Decode(e) => e.reason().as_str(),
            Refused::ClientMismatch => CLIENT_MISMATCH,
            Refused::Rejected(r) => r.as_str(),
            Refused::Broker(_) => "unavailable",
        }
    }
}

/// The metrics label of a message carrying another page's clientId.
pub const CLIENT_MISMATCH: &str = "client_mismatch";

/// Decodes one page message under `limits`; a refusal is counted and logged.
pub fn decode(app: &AppState, raw: &[u8], limits: &Limits) -> Result<PageMessage, Refused> {
    decode_to_agent(raw, limits).map_err(|e| {
        app.metrics.inbound_rejected(e.reason().as_str());
        tracing::debug!(error = %e, "page message dropped");
        Refused::Decode(e)
    })
}

/// Counts a message whose clientId is not the sender's.
pub fn client_mismatch(app: &AppState) -> Refused {
    app.metrics.inbound_rejected(CLIENT_MISMATCH);
    Refused::ClientMismatch
}

/// Applies a decoded message of a page of `conv` (its clientId already checked by the
/// transport): a manifest is kept and announced, a `result` or `confirmed` is checked against
/// its binding by the broker. Refusals are counted and logged here, each line naming the
/// conversation (a page frame is handled in no span at the default log level).
pub async fn dispatch(app: &AppState, conv: &ConvKey, message: PageMessage) -> Result<(), Refused> {
    let from = PageIdentity {
        conv: conv.clone(),
        client_id: message.client_id().to_owned(),
    };
    match message {
        PageMessage::Manifest(m) => {
            if let Err(e) = app.broker.put_manifest(conv, &m).await {
                tracing::warn!(tenant = %conv.tenant, user = %conv.user, conversation = %conv.conversation, error = %e, "manifest not stored");
                return Err(e.into());
            }
            let data = json!({"user": conv.user, "conversation": conv.conversation,
                "clientId": m.client_id, "rev": m.rev, "tools": m.tools});
            app.emit(EventType::PageManifest, conv, data).await;
            Ok(())
        }
        PageMessage::Changed(c) => {
            tracing::debug!(client_id = %c.client_id, rev = c.rev, "page changed (no manifest)");
            Ok(())
        }
        PageMessage::Result(r) => match app.broker.submit_result(&from, &r.id, r.result).await {
            Ok(_) => Ok(()),
            Err(SubmitError::Rejected(why)) => {
                app.metrics.result_rejected(why.as_str());
                tracing::info!(tenant = %conv.tenant, user = %conv.user, conversation = %conv.conversation, call_id = %r.id, client_id = %r.client_id, reason = why.as_str(), "result rejected");
                Err(Refused::Rejected(why))
            }
            Err(SubmitError::Broker(e)) => {
                tracing::warn!(tenant = %conv.tenant, user = %conv.user, conversation = %conv.conversation, call_id = %r.id, error = %e, "result not recorded");
                Err(e.into())
            }
        },
        PageMessage::Confirmed(c) => {
            match app.broker.submit_confirmed(&from, &c.confirm_id).await {
                Ok(bound) => {
                    // bound.conv is the page's own conversation: submit_confirmed checked it.
                    let data = toolmark_broker::confirmation_event(&bound, &c.result);
                    app.emit(EventType::ConfirmationResolved, conv, data).await;
                    Ok(())
                }
                Err(SubmitError::Rejected(why)) => {
                    app.metrics.result_rejected(why.as_str());
                    tracing::info!(tenant = %conv.tenant, user = %conv.user, conversation = %conv.conversation, confirm_id = %c.confirm_id, client_id = %c.client_id, reason = why.as_str(), "confirmed rejected");
                    Err(Refused::Rejected(why))
                }
                Err(SubmitError::Broker(e)) => {
                    tracing::warn!(tenant = %conv.tenant, user = %conv.user, conversation = %conv.conversation, confirm_id = %c.confirm_id, error = %e, "confirmed not recorded");
                    Err(e.into())
                }
            }
        }
    }
}
