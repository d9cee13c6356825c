//! A page's result on Redis: checked against its binding and marked answered by the result
//! script (`model::check_result`), on its conversation's partition slot, with an async call's
//! change in the outbox.

use fred::interfaces::KeysInterface;
use fred::prelude::Expiration;
use fred::types::SetOptions;
use toolmark_proto::ToolResult;

use super::reply::{RETRY, millis, parts, rejection, unavailable};
use super::scripts::{Outbox, PageResult};
use super::{RedisBroker, codec, keys};
use crate::{
    BrokerError, CallRecord, CallState, Change, Outcome, PageIdentity, Rejection, SubmitError,
    model, now_ms, partition,
};

impl RedisBroker {
    /// One run of the result script; `again` (with when the node received the result) after a
    /// run whose outcome is unknown.
    pub(super) async fn put_result(
        &self,
        from: &PageIdentity,
        id: &str,
        result: &ToolResult,
        again: Option<u64>,
    ) -> Result<(), SubmitError> {
        let k = partition::of_conv(&from.conv);
        // The outcome is its result, serialized once: stored as it is, and sent to the waiting
        // node in its message.
        let outcome = serde_json::to_string(result).unwrap_or_default();
        let message = codec::outcome_message_of(id, &outcome);
        let confirm_key = result.confirm_id().map_or_else(
            || self.conn.keys.call(k, id),
            |c| self.conn.keys.confirm(&from.conv, c),
        );
        let confirm = result.confirm_id().unwrap_or_default().to_owned();
        let reply = self
            .run_once(PageResult {
                call: self.conn.keys.call(k, id),
                confirm: confirm_key,
                pending: self.conn.keys.pending(&from.conv),
                deadlines: self.conn.keys.deadlines(k),
                outbox: Outbox::new(
                    self.conn.keys.outbox(k),
                    &codec::Outboxed::Call(id.to_owned()),
                ),
                due: self.conn.keys.due(&from.conv),
                conv_ref: codec::conv_ref(&from.conv),
                client: from.client_id.clone(),
                outcome,
                confirm_id: confirm,
                confirm_ttl: millis(self.conn.opts.retention.confirmations),
                id: id.to_owned(),
                channel_prefix: self.conn.keys.node_channel_prefix(),
                channel_suffix: keys::channel_suffix(k),
                message,
                deadline_member: codec::deadline_member(&from.conv, id),
                compact_id: codec::compact_id(id),
                compact_client: codec::compact_id(&from.client_id),
                received: again,
                now: now_ms(),
            })
            .await?;
        let reply = parts(&reply, 4);
        match reply.first().map(String::as_str) {
            Some("ok" | "before") => {
                if let Some(c) = result.confirm_id() {
                    self.note_confirmation(from, c)
                        .await
                        .map_err(SubmitError::Broker)?;
                }
                let [_, deadline, node, summary] = &reply[..] else {
                    return Err(SubmitError::Rejected(Rejection::UnknownId));
                };
                // Only an async call's change is announced (`call.result`): a sync call's
                // record is not made here, its outcome went to the waiting node.
                if codec::summary_is_async(summary) {
                    let conv = codec::conv_ref(&from.conv);
                    let binding =
                        codec::binding(id, &conv, &from.client_id, deadline, node, summary)
                            .ok_or(SubmitError::Rejected(Rejection::UnknownId))?;
                    let record = CallRecord {
                        binding,
                        state: CallState::Answered,
                        outcome: Some(Outcome::Result(result.clone())),
                        resolution: None,
                    };
                    self.relay(&Change::Call(record)).await;
                }
                Ok(())
            }
            Some("unknown_id") => {
                // Not in this conversation's partition: another conversation's call (in
                // another partition), or none.
                let found = match self.locate(id).await.map_err(SubmitError::Broker)? {
                    Some(_) => model::Found::Elsewhere,
                    None => model::Found::Nowhere,
                };
                let rejected = model::check_result(found, &from.client_id, now_ms());
                Err(SubmitError::Rejected(
                    rejected.err().unwrap_or(Rejection::UnknownId),
                ))
            }
            Some(code) => Err(SubmitError::Rejected(
                rejection(code).unwrap_or(Rejection::UnknownId),
            )),
            None => Err(SubmitError::Broker(BrokerError::Unavailable {
                retry_after: RETRY,
            })),
        }
    }

    /// What a needs_confirmation's id needs beside the result script's keys (other slots of a
    /// Cluster): the index of the conversation that first used it (only to tell a `confirmed`
    /// from another conversation, `mismatch`, from an unknown id) and its watch in the
    /// confirmation sweep's set (an abandoned confirmation expires with its event). Both at
    /// once, one round trip; both only when absent, so a result submitted again writes neither
    /// twice and the watch keeps its first time. An error is the broker's: the page's frame is
    /// held and submitted again (the script answers `before`, and these are written again), where
    /// a watch lost here would leave a confirmation no sweep ever finds.
    async fn note_confirmation(
        &self,
        from: &PageIdentity,
        confirm_id: &str,
    ) -> Result<(), BrokerError> {
        let member = codec::confirm_member(&from.conv, confirm_id, &from.client_id);
        let (indexed, watched) = tokio::join!(
            self.conn.client.set::<Option<String>, _, _>(
                self.conn.keys.confirm_index(confirm_id),
                "1",
                Some(Expiration::PX(millis(
                    self.conn.opts.retention.confirmations
                ))),
                Some(SetOptions::NX),
                false,
            ),
            self.watch_confirm(&member, now_ms(), true),
        );
        indexed.map_err(|e| unavailable(&e))?;
        watched
    }
}
