//! A page's result on Redis: checked against its binding and marked answered by the result
//! script (`model::check_result`), on its conversation's partition slot, with an async call's
//! change in the outbox.

use super::*;
use crate::Change;

impl RedisBroker {
    /// One run of the result script; `again` (with when the node received the result) after a
    /// run whose outcome is unknown.
    pub(super) async fn put_result(
        &self,
        from: &PageIdentity,
        id: &str,
        result: ToolResult,
        again: Option<u64>,
    ) -> Result<CallRecord, SubmitError> {
        let k = partition::of_conv(&from.conv);
        if partition::of_call(id) != k {
            // Not a call of this conversation (its id names another partition, on another
            // slot): another conversation's call, or none.
            let exists: i64 = self
                .client
                .exists(self.keys.call(id))
                .await
                .map_err(|e| unavailable(&e))?;
            let found = if exists > 0 {
                model::Found::Elsewhere
            } else {
                model::Found::Nowhere
            };
            let rejected = model::check_result(found, &from.client_id, now_ms());
            return Err(SubmitError::Rejected(
                rejected.err().unwrap_or(Rejection::UnknownId),
            ));
        }
        let outcome = Outcome::Result(result.clone());
        let message = codec::outcome_message(id, &outcome);
        let outcome = serde_json::to_string(&outcome).unwrap_or_default();
        let confirm_key = result
            .confirm_id()
            .map_or_else(|| self.keys.call(id), |c| self.keys.confirm(&from.conv, c));
        let confirm = result.confirm_id().unwrap_or_default().to_owned();
        let reply = self
            .script_once(
                &self.scripts.result,
                vec![
                    self.keys.call(id),
                    confirm_key,
                    self.keys.pending(&from.conv),
                    self.keys.deadlines(k),
                    self.keys.outbox(k),
                ],
                vec![
                    codec::conv_ref(&from.conv),
                    from.client_id.clone(),
                    outcome,
                    confirm,
                    millis(self.opts.retention.confirmations).to_string(),
                    id.to_owned(),
                    self.keys.node_channel_prefix(),
                    format!(":{}", keys::partition_tag(k)),
                    message,
                    codec::deadline_member(&from.conv, id),
                    codec::compact_id(id),
                    codec::compact_id(&from.client_id),
                    again.map(|ms| ms.to_string()).unwrap_or_default(),
                ]
                .into_iter()
                .chain(Self::outbox_args(&codec::Outboxed::Call(id.to_owned())))
                .collect(),
            )
            .await?;
        let reply = strings(reply);
        match reply.first().map(String::as_str) {
            Some("ok" | "before") => {
                if let Some(c) = result.confirm_id() {
                    // Which conversation first used this page-minted id: only to tell a
                    // `confirmed` from another conversation (mismatch) from an unknown one.
                    let _: Result<Option<String>, _> = self
                        .client
                        .set(
                            self.keys.confirm_index(c),
                            "1",
                            Some(Expiration::PX(millis(self.opts.retention.confirmations))),
                            Some(fred::types::SetOptions::NX),
                            false,
                        )
                        .await;
                    let member = codec::confirm_member(&from.conv, c, &from.client_id);
                    self.watch_confirm(&member, now_ms()).await;
                }
                let conv = codec::conv_ref(&from.conv);
                let binding = match &reply[..] {
                    [_, summary, deadline, node] => {
                        codec::binding(id, &conv, &from.client_id, deadline, node, summary)
                    }
                    _ => None,
                }
                .ok_or(SubmitError::Rejected(Rejection::UnknownId))?;
                let record = CallRecord {
                    binding,
                    state: CallState::Answered,
                    outcome: Some(Outcome::Result(result)),
                    resolution: None,
                };
                if record.binding.respond_async {
                    self.relay(&Change::Call(record.clone())).await;
                }
                Ok(record)
            }
            Some(code) => Err(SubmitError::Rejected(
                rejection(code).unwrap_or(Rejection::UnknownId),
            )),
            None => Err(SubmitError::Broker(BrokerError::Unavailable {
                retry_after: RETRY,
            })),
        }
    }
}
