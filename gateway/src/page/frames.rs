//! Page → agent messages, whichever transport carried them (a page WebSocket frame, or an
//! `/inbound` POST forwarded by the tenant's Echo bridge): decoding under the tenant's limits,
//! then the broker's binding, single-use and deadline checks and the manifest, result and
//! confirmed handling, with one set of metrics and events, so the transports cannot drift.

use toolmark_broker::retry::Unknown;
use toolmark_broker::{BrokerError, ConvKey, EventType, PageIdentity, Rejection, SubmitError};
use toolmark_config::pins::PinMode;
use toolmark_proto::{DecodeError, Limits, PageMessage, decode_to_agent};

use crate::page::state::PageState;

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
pub fn decode(pages: &PageState, raw: &[u8], limits: &Limits) -> Result<PageMessage, Refused> {
    decode_to_agent(raw, limits).map_err(|e| {
        pages.metrics.inbound_rejected(e.reason().as_str());
        tracing::debug!(error = %e, "page message dropped");
        Refused::Decode(e)
    })
}

/// Counts a message whose clientId is not the sender's.
pub fn client_mismatch(pages: &PageState) -> Refused {
    pages.metrics.inbound_rejected(CLIENT_MISMATCH);
    Refused::ClientMismatch
}

/// Applies a decoded message of a page of `conv` (its clientId already checked by the
/// transport), `bytes` long as received: a manifest is kept and announced, a `result` or
/// `confirmed` is checked against its binding by the broker. A message the broker does not
/// answer is held and submitted again until it does ([`crate::hold`]): it is applied once, with
/// its event, or dropped past the hold (counted, logged at ERROR). Refusals are counted and
/// logged here, each line naming the conversation (a page frame is handled in no span at the
/// default log level).
pub async fn dispatch(
    pages: &PageState,
    conv: &ConvKey,
    message: &PageMessage,
    bytes: usize,
) -> Result<(), Refused> {
    let from = PageIdentity {
        conv: conv.clone(),
        client_id: message.client_id().to_owned(),
    };
    let mut frame = pages.hold.frame(bytes);
    match message {
        // Boxed: a manifest's path (pins, tools seen) is the largest and the rarest; a call's
        // result, the frame of every call, keeps a small future of its own (one allocation of
        // it per frame, under the allocator's large-request size).
        PageMessage::Manifest(m) => Box::pin(on_manifest(pages, conv, m, &mut frame)).await,
        PageMessage::Changed(c) => {
            tracing::debug!(client_id = %c.client_id, rev = c.rev, "page changed (no manifest)");
            Ok(())
        }
        PageMessage::Result(r) => on_result(pages, conv, &from, r, &mut frame).await,
        PageMessage::Confirmed(c) => {
            Box::pin(on_confirmed(pages, conv, &from, c, &mut frame)).await
        }
    }
}

/// The broker did not answer within the hold.
fn unanswered() -> Refused {
    Refused::Broker(BrokerError::Unavailable {
        retry_after: std::time::Duration::from_secs(1),
    })
}

/// A manifest, kept and announced once (and what a tenant watching its pins is told of it).
async fn on_manifest(
    pages: &PageState,
    conv: &ConvKey,
    m: &toolmark_proto::Manifest,
    frame: &mut crate::hold::Frame<'_>,
) -> Result<(), Refused> {
    // What the conversation presented before, when the tenant's pins are watched: read under
    // the frame's hold, as it is stored (a read Redis does not answer would lose the
    // `tool.changed` it tells of).
    let watched = pages
        .tenants
        .get(&conv.tenant)
        .filter(|t| t.pins.mode != PinMode::Off);
    let before = match &watched {
        Some(_) => {
            let read = frame
                .until_known(&pages.metrics, conv, "manifest", |_| {
                    pages.broker.conversation(conv)
                })
                .await;
            match read {
                Some(Ok(s)) => s.tools,
                Some(Err(e)) => return Err(e.into()),
                None => return Err(unanswered()),
            }
        }
        None => Vec::new(),
    };
    // Stored again, a manifest is stored once: the page's latest, in the order its
    // socket sent them, announced once under the frame's name.
    let name = frame.name(EventType::PageManifest.as_str());
    let stored = frame
        .until_known(&pages.metrics, conv, "manifest", |_| {
            pages.broker.put_manifest(conv, m, &name)
        })
        .await;
    match stored {
        Some(Ok(())) => {
            record_seen(pages, conv, m).await;
            if let Some(tenant) = watched {
                announce_pins(pages, &tenant, conv, m, &before, frame).await;
            }
            Ok(())
        }
        Some(Err(e)) => Err(e.into()),
        None => Err(unanswered()),
    }
}

/// A call's result, checked against its binding by the broker.
async fn on_result(
    pages: &PageState,
    conv: &ConvKey,
    from: &PageIdentity,
    r: &toolmark_proto::ResultMessage,
    frame: &mut crate::hold::Frame<'_>,
) -> Result<(), Refused> {
    let traced = pages.registry.traces.answered(&r.id, &r.result);
    let received_ms = frame.received_ms();
    let attempt = |again: bool| async move {
        if again {
            pages
                .broker
                .submit_result_again(from, &r.id, &r.result, received_ms)
                .await
        } else {
            pages.broker.submit_result(from, &r.id, &r.result).await
        }
    };
    // The first attempt in this future; the hold's loop (boxed) only when the broker did not
    // answer it.
    let first = attempt(false).await;
    let submitted = if first.as_ref().is_err_and(Unknown::unknown) {
        Box::pin(frame.known_after(&pages.metrics, conv, "result", attempt, first)).await
    } else {
        Some(first)
    };
    if let Some(t) = traced {
        t.done(rejection_of(&submitted));
    }
    settle(pages, submitted, |why| {
        tracing::info!(tenant = %conv.tenant, user = %conv.user, conversation = %conv.conversation, call_id = %r.id, client_id = %r.client_id, reason = why.as_str(), "result rejected");
    })
}

/// A deferred confirmation's outcome, checked against its binding by the broker.
async fn on_confirmed(
    pages: &PageState,
    conv: &ConvKey,
    from: &PageIdentity,
    c: &toolmark_proto::Confirmed,
    frame: &mut crate::hold::Frame<'_>,
) -> Result<(), Refused> {
    let traced = pages.registry.traces.confirmed(&c.confirm_id, &c.result);
    let submitted = frame
        .until_known(&pages.metrics, conv, "confirmed", |again| {
            let (id, outcome) = (&c.confirm_id, &c.result);
            async move {
                if again {
                    pages.broker.submit_confirmed_again(from, id, outcome).await
                } else {
                    pages.broker.submit_confirmed(from, id, outcome).await
                }
            }
        })
        .await;
    if let Some(t) = traced {
        t.done(rejection_of(&submitted));
    }
    settle(pages, submitted, |why| {
        tracing::info!(tenant = %conv.tenant, user = %conv.user, conversation = %conv.conversation, confirm_id = %c.confirm_id, client_id = %c.client_id, reason = why.as_str(), "confirmed rejected");
    })
}

/// What a page's submission came to: accepted; refused by its binding (counted, and logged by
/// `rejected`, which names the frame); or the broker's error, or no answer within the hold.
fn settle<T>(
    pages: &PageState,
    submitted: Option<Result<T, SubmitError>>,
    rejected: impl FnOnce(Rejection),
) -> Result<(), Refused> {
    match submitted {
        Some(Ok(_)) => Ok(()),
        Some(Err(SubmitError::Rejected(why))) => {
            pages.metrics.result_rejected(why.as_str());
            rejected(why);
            Err(Refused::Rejected(why))
        }
        Some(Err(SubmitError::Broker(e))) => Err(e.into()),
        None => Err(unanswered()),
    }
}

/// The refusal a submission ended with, as a span's `error.type` names it (`unavailable` for
/// one the broker never answered).
fn rejection_of<T>(submitted: &Option<Result<T, SubmitError>>) -> Option<&'static str> {
    match submitted {
        Some(Ok(_)) => None,
        Some(Err(SubmitError::Rejected(why))) => Some(why.as_str()),
        Some(Err(SubmitError::Broker(_))) | None => Some("unavailable"),
    }
}

/// What a manifest of a tenant that watches its pins announces: in `report`, each definition
/// it did not pin (`tool.unpinned` `{tool, digest, clientId}`, once per conversation, tool and
/// digest for the conversation's whole life: the broker keeps the mark with the conversation,
/// [`toolmark_broker::Pages::announce_once`]), and each tool the conversation had under another
/// definition (`tool.changed` `{tool, before, after}`). Digests are made once per manifest
/// entry. Each write is made under the frame's hold, as the manifest's own: a write Redis does
/// not answer is made again (the marks under the frame's name, the events under names of the
/// change, so that an attempt applied without its reply is neither lost nor announced twice).
/// Past the hold (Redis away longer than `broker.stall_hold_secs`) what is left to announce is
/// dropped, counted and logged at ERROR by the hold as the frame `pins` (the manifest stays
/// stored): a `tool.changed` left is lost, and the marks of the `tool.unpinned` left are taken
/// back in one more attempt, so that a later manifest announces them (where that attempt fails
/// too, they stay unannounced in the conversation, logged).
async fn announce_pins(
    pages: &PageState,
    tenant: &crate::tenants::Tenant,
    conv: &ConvKey,
    m: &toolmark_proto::Manifest,
    before: &[toolmark_proto::ToolManifestSummary],
    frame: &mut crate::hold::Frame<'_>,
) {
    let mut unpinned = Vec::new();
    for t in &m.tools {
        let digest = t.digest();
        if let Some(old) = before.iter().find(|b| b.name == t.name)
            && old.digest() != digest
        {
            let once = format!(
                "tool.changed\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{digest}",
                conv.user,
                conv.conversation,
                t.name,
                old.digest()
            );
            let data = serde_json::json!({"tool": t.name, "before": old.digest(), "after": digest});
            if !emit_held(pages, conv, frame, EventType::ToolChanged, &once, data).await {
                return;
            }
        }
        if tenant.pins.mode == PinMode::Report && !tenant.pins.holds(&t.name, digest) {
            unpinned.push(t);
        }
    }
    if unpinned.is_empty() {
        return;
    }
    let names: Vec<String> = unpinned
        .iter()
        .map(|t| format!("unpinned\u{1f}{}\u{1f}{}", t.name, t.digest()))
        .collect();
    let by = frame.name("pins");
    let marked = frame
        .until_known(&pages.metrics, conv, "pins", |_| {
            pages.broker.announce_once(conv, &names, true, &by)
        })
        .await;
    let new = match marked {
        Some(Ok(new)) => new,
        Some(Err(e)) => {
            return tracing::warn!(tenant = %conv.tenant, error = %e, "tool.unpinned not emitted");
        }
        // The last attempt may have marked them.
        None => return take_back(pages, conv, &names, &by).await,
    };
    let mut announcing = unpinned
        .iter()
        .zip(&names)
        .zip(new)
        .filter_map(|(t, new)| new.then_some(t));
    while let Some((t, name)) = announcing.next() {
        // Also under the broker's once-window: a node of 0.4.0 announces by that alone, and a
        // conversation past its bound of marks is announced within it.
        let once = format!(
            "tool.unpinned\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}",
            conv.user,
            conv.conversation,
            t.name,
            t.digest()
        );
        let data =
            serde_json::json!({"tool": t.name, "digest": t.digest(), "clientId": m.client_id});
        if !emit_held(pages, conv, frame, EventType::ToolUnpinned, &once, data).await {
            // Not emitted: its mark and those of the ones after it are taken back.
            let left: Vec<String> = std::iter::once(name)
                .chain(announcing.map(|(_, name)| name))
                .cloned()
                .collect();
            return take_back(pages, conv, &left, &by).await;
        }
    }
}

/// Takes back the marks `by` made of `names` (their events were not emitted): one attempt,
/// the frame's hold being over; a failure is logged.
async fn take_back(pages: &PageState, conv: &ConvKey, names: &[String], by: &str) {
    if let Err(e) = pages.broker.announce_once(conv, names, false, by).await {
        tracing::error!(tenant = %conv.tenant, user = %conv.user, conversation = %conv.conversation, definitions = names.len(), error = %e, "tool.unpinned marks not taken back: those definitions stay unannounced in this conversation");
    }
}

/// Emits `data` as a `kind` event of `conv`, once under `once`, under the frame's hold.
/// Whether it was recorded (now or by an attempt before whose reply was lost); an error or the
/// hold's end is logged.
async fn emit_held(
    pages: &PageState,
    conv: &ConvKey,
    frame: &mut crate::hold::Frame<'_>,
    kind: EventType,
    once: &str,
    data: serde_json::Value,
) -> bool {
    let emitted = frame
        .until_known(&pages.metrics, conv, "pins", |_| {
            pages
                .broker
                .emit_once(&conv.tenant, kind, conv, data.clone(), once)
        })
        .await;
    match emitted {
        Some(Ok(_)) => true,
        Some(Err(e)) => {
            tracing::warn!(tenant = %conv.tenant, kind = kind.as_str(), error = %e, "pin event not emitted");
            false
        }
        None => false,
    }
}

/// Tells the broker which definitions a page of the tenant presented (throttled per node,
/// [`crate::seen::SEEN_EVERY`]); a failure is logged, the manifest stays stored.
async fn record_seen(pages: &PageState, conv: &ConvKey, m: &toolmark_proto::Manifest) {
    let due = pages.seen.due(
        &conv.tenant,
        m.tools.iter().map(|t| (t.name.as_str(), t.digest())),
    );
    if due.is_empty() {
        return;
    }
    match pages.broker.saw_tools(&conv.tenant, &due).await {
        Ok(0) => {}
        Ok(dropped) => {
            tracing::info!(tenant = %conv.tenant, dropped, "tool definitions seen: the oldest dropped past the bound")
        }
        Err(e) => {
            pages.seen.forget(&conv.tenant, &due);
            tracing::warn!(tenant = %conv.tenant, error = %e, "tool definitions seen not recorded: written when a page presents them next")
        }
    }
}
