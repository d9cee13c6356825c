//! Confirmations on Redis: per conversation (confirm hash beside its call), single use in one
//! script, expired by the leased sweep implementing `model::sweep_confirm`.

use std::time::Duration;

use async_trait::async_trait;
use fred::interfaces::{KeysInterface, SortedSetsInterface};
use toolmark_proto::ToolResult;

use super::reply::{RETRY, rejection, strings, unavailable};
use super::scripts::{Confirm, ExpireConfirm, Outbox};
use super::{RedisBroker, codec};
use crate::prelude::*;
use crate::{
    BrokerError, ConfirmBinding, ConvKey, PageIdentity, Rejection, SubmitError, model, now_ms,
    partition,
};

#[async_trait]
impl Confirmations for RedisBroker {
    async fn submit_confirmed(
        &self,
        from: &PageIdentity,
        confirm_id: &str,
        outcome: &ToolResult,
    ) -> Result<ConfirmBinding, SubmitError> {
        self.confirm(from, confirm_id, outcome, false).await
    }

    async fn submit_confirmed_again(
        &self,
        from: &PageIdentity,
        confirm_id: &str,
        outcome: &ToolResult,
    ) -> Result<ConfirmBinding, SubmitError> {
        self.confirm(from, confirm_id, outcome, true).await
    }

    async fn expire_abandoned_confirmations(
        &self,
        grace: Duration,
    ) -> Result<Vec<ConfirmBinding>, BrokerError> {
        self.sweep_confirms(grace).await
    }
}

impl RedisBroker {
    /// One run of the confirm script, with the page's final `outcome`; `again` after a run
    /// whose outcome is unknown.
    async fn confirm(
        &self,
        from: &PageIdentity,
        confirm_id: &str,
        outcome: &ToolResult,
        again: bool,
    ) -> Result<ConfirmBinding, SubmitError> {
        let change = codec::Outboxed::Confirmation {
            conv: from.conv.clone(),
            client_id: from.client_id.clone(),
            confirm_id: confirm_id.to_owned(),
            outcome: outcome.clone(),
        };
        let reply = strings(
            self.run_once(Confirm {
                confirm: self.conn.keys.confirm(&from.conv, confirm_id),
                outbox: Outbox::new(
                    self.conn.keys.outbox(partition::of_conv(&from.conv)),
                    &change,
                ),
                client: from.client_id.clone(),
                again,
                outcome: serde_json::to_string(outcome).unwrap_or_default(),
                kept: model::millis(self.conn.opts.retention.finished_calls),
            })
            .await?,
        );
        match reply.first().map(String::as_str) {
            Some("ok") => {
                let binding = match &reply[..] {
                    [_, call_id, summary] => Self::confirm_binding(
                        confirm_id,
                        &from.conv,
                        &from.client_id,
                        call_id,
                        summary,
                    ),
                    _ => None,
                }
                .ok_or(SubmitError::Rejected(Rejection::UnknownConfirm))?;
                self.relay(&crate::Change::Confirmation {
                    binding: binding.clone(),
                    outcome: outcome.clone(),
                })
                .await;
                Ok(binding)
            }
            Some("unknown_confirm") => {
                let elsewhere: bool = self
                    .conn
                    .client
                    .exists::<i64, _>(self.conn.keys.confirm_index(confirm_id))
                    .await
                    .map_err(|e| unavailable(&e))?
                    > 0;
                let found = if elsewhere {
                    model::Found::Elsewhere
                } else {
                    model::Found::Nowhere
                };
                let rejected = model::check_confirm(found, &from.client_id);
                Err(SubmitError::Rejected(
                    rejected.err().unwrap_or(Rejection::UnknownConfirm),
                ))
            }
            Some(code) => Err(SubmitError::Rejected(
                rejection(code).unwrap_or(Rejection::UnknownConfirm),
            )),
            None => Err(SubmitError::Broker(BrokerError::Unavailable {
                retry_after: RETRY,
            })),
        }
    }

    /// Schedules the check of a pending confirmation (`tenant\nuser\nconversation\n
    /// confirmId\nclientId`) at `at_ms`: its first watch when `first` (kept if it is there
    /// already, so a result submitted again does not move it), else a move of it (the sweep's,
    /// best effort: a move lost leaves the watch where it was, and the sweep finds it again).
    pub(super) async fn watch_confirm(
        &self,
        member: &str,
        at_ms: u64,
        first: bool,
    ) -> Result<(), BrokerError> {
        // Milliseconds since the epoch are exact in an f64.
        #[allow(clippy::cast_precision_loss)]
        let score = at_ms as f64;
        self.conn
            .client
            .zadd::<i64, _, _>(
                self.conn.keys.pending_confirms(),
                first.then_some(fred::types::SetOptions::NX),
                None,
                false,
                false,
                (score, member),
            )
            .await
            .map(drop)
            .map_err(|e| unavailable(&e))
    }

    /// A confirmId binding from the id and summary of the call that carried it (kept with the
    /// confirmation, so the tool is known however late the confirmation comes).
    pub(super) fn confirm_binding(
        confirm_id: &str,
        conv: &ConvKey,
        client_id: &str,
        call_id: &str,
        summary: &str,
    ) -> Option<ConfirmBinding> {
        let call = codec::binding(call_id, &codec::conv_ref(conv), client_id, "0", "", summary)?;
        Some(ConfirmBinding {
            confirm_id: confirm_id.to_owned(),
            call_id: call.id,
            tool: call.tool,
            conv: call.conv,
            client_id: call.client_id,
            untrusted: call.untrusted,
            caller: call.caller,
        })
    }

    /// Expires the confirmations of pages gone for `grace` (leased: one node at a time).
    pub(super) async fn sweep_confirms(
        &self,
        grace: Duration,
    ) -> Result<Vec<ConfirmBinding>, BrokerError> {
        if !self.lease(self.conn.keys.confirm_lease()).await? {
            return Ok(Vec::new());
        }
        let now = now_ms();
        #[allow(clippy::cast_precision_loss)]
        let max = now as f64;
        let due: Vec<String> = self
            .conn
            .client
            .zrangebyscore(
                self.conn.keys.pending_confirms(),
                "-inf",
                max,
                false,
                Some((0, 200)),
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let live = self.node.live.ids();
        let mut expired = Vec::new();
        for member in due {
            let Some((conv, confirm_id, client)) = codec::parse_confirm_member(&member) else {
                let _: Result<i64, _> = self
                    .conn
                    .client
                    .zrem(self.conn.keys.pending_confirms(), member.as_str())
                    .await;
                continue;
            };
            let change = codec::Outboxed::Confirmation {
                conv: conv.clone(),
                client_id: client.clone(),
                confirm_id: confirm_id.clone(),
                outcome: crate::expired_confirmation(),
            };
            let reply = strings(
                self.run(ExpireConfirm {
                    confirm: self.conn.keys.confirm(&conv, &confirm_id),
                    sockets: self.conn.keys.sockets(&conv),
                    outbox: Outbox::new(self.conn.keys.outbox(partition::of_conv(&conv)), &change),
                    client: client.clone(),
                    now,
                    grace: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
                    outcome: serde_json::to_string(&crate::expired_confirmation())
                        .unwrap_or_default(),
                    kept: model::millis(self.conn.opts.retention.finished_calls),
                    live: live.clone(),
                })
                .await?,
            );
            match reply.first().map(String::as_str) {
                Some("keep") => {
                    // Look again when it could expire at the earliest (a page counted absent),
                    // or in 2 s (a page that may be present).
                    let grace_ms = model::millis(grace);
                    let next = match reply.get(1).and_then(|a| a.parse::<u64>().ok()) {
                        Some(since) => (since + grace_ms).clamp(now + 250, now + 2_000),
                        None => now + 2_000,
                    };
                    let _ = self.watch_confirm(&member, next, false).await;
                }
                Some("expired") => {
                    let _: Result<i64, _> = self
                        .conn
                        .client
                        .zrem(self.conn.keys.pending_confirms(), member.as_str())
                        .await;
                    if let [_, call_id, summary] = &reply[..]
                        && let Some(b) =
                            Self::confirm_binding(&confirm_id, &conv, &client, call_id, summary)
                    {
                        self.relay(&crate::Change::Confirmation {
                            binding: b.clone(),
                            outcome: crate::expired_confirmation(),
                        })
                        .await;
                        expired.push(b);
                    }
                }
                _ => {
                    let _: Result<i64, _> = self
                        .conn
                        .client
                        .zrem(self.conn.keys.pending_confirms(), member.as_str())
                        .await;
                }
            }
        }
        self.release_lease(self.conn.keys.confirm_lease()).await;
        Ok(expired)
    }
}
