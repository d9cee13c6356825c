//! Calls on Redis: the bind script (binding, pending set, publication) with the call index and
//! deadline entry pipelined beside it; the result and timeout scripts decide `model::check_result`
//! atomically on the conversation's slot.

use super::*;
use crate::prelude::*;

#[async_trait]
impl Calls for RedisBroker {
    async fn send_call(
        &self,
        binding: CallBinding,
        frame: AgentMessage,
    ) -> Result<OutcomeWaiter, BrokerError> {
        let (tx, rx) = oneshot::channel();
        let id = binding.id.clone();
        lock(&self.waiters).insert(id.clone(), tx);
        let conv = binding.conv.clone();
        let ttl_ms = binding.deadline_ms.saturating_sub(now_ms())
            + model::millis(self.opts.retention.finished_calls);
        let message = codec::page_message(&binding.client_id, &frame.to_json());
        let bind = self.script(
            &self.scripts.bind,
            vec![self.keys.call(&conv, &id), self.keys.pending(&conv)],
            vec![
                serde_json::to_string(&binding).unwrap_or_default(),
                binding.client_id.clone(),
                binding.deadline_ms.to_string(),
                binding.node.clone(),
                ttl_ms.to_string(),
                self.keys.conv_channel(&conv),
                message,
                id.clone(),
                codec::cancel_message(&binding),
            ],
        );
        let index = self.client.set::<(), _, _>(
            self.keys.call_index(&id),
            codec::conv_ref(&conv),
            Some(Expiration::PX(i64::try_from(ttl_ms).unwrap_or(i64::MAX))),
            None,
            false,
        );
        #[allow(clippy::cast_precision_loss)]
        let score = binding.deadline_ms as f64;
        let member = codec::deadline_member(&conv, &id);
        let deadline = self.client.zadd::<(), _, _>(
            self.keys.deadlines(),
            None,
            None,
            false,
            false,
            (score, member.as_str()),
        );
        let (bind, index, deadline) = tokio::join!(bind, index, deadline);
        if let Err(e) = bind
            .and(index.map_err(|e| unavailable(&e)))
            .and(deadline.map_err(|e| unavailable(&e)))
        {
            lock(&self.waiters).remove(&id);
            return Err(e);
        }
        Ok(rx)
    }

    async fn submit_result(
        &self,
        from: &PageIdentity,
        id: &str,
        result: ToolResult,
    ) -> Result<CallRecord, SubmitError> {
        let outcome = Outcome::Result(result.clone());
        let message = codec::outcome_message(id, &outcome);
        let outcome = serde_json::to_string(&outcome).unwrap_or_default();
        let confirm_key = result.confirm_id().map_or_else(
            || self.keys.call(&from.conv, id),
            |c| self.keys.confirm(&from.conv, c),
        );
        let confirm = result.confirm_id().unwrap_or_default().to_owned();
        let reply = self
            .script(
                &self.scripts.result,
                vec![
                    self.keys.call(&from.conv, id),
                    confirm_key,
                    self.keys.pending(&from.conv),
                ],
                vec![
                    from.client_id.clone(),
                    outcome,
                    confirm,
                    millis(self.opts.retention.confirmations).to_string(),
                    id.to_owned(),
                    self.keys.node_channel_prefix(),
                    message,
                ],
            )
            .await?;
        let reply = strings(reply);
        match reply.first().map(String::as_str) {
            Some("ok") => {
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
                let binding: CallBinding = reply
                    .get(1)
                    .and_then(|b| serde_json::from_str(b).ok())
                    .ok_or(SubmitError::Rejected(Rejection::UnknownId))?;
                Ok(CallRecord {
                    binding,
                    state: CallState::Answered,
                    outcome: Some(Outcome::Result(result)),
                })
            }
            Some("unknown_id") => {
                // Not under this conversation: another conversation's call, or none.
                let found = if self.indexed(id).await?.is_some() {
                    model::Found::Elsewhere
                } else {
                    model::Found::Nowhere
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

    async fn time_out(&self, conv: &ConvKey, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        let reply = strings(
            self.script(
                &self.scripts.timeout,
                vec![self.keys.call(conv, id), self.keys.pending(conv)],
                vec![
                    id.to_owned(),
                    serde_json::to_string(&Outcome::Timeout).unwrap_or_default(),
                    self.keys.conv_channel(conv),
                    self.keys.node_channel_prefix(),
                    codec::outcome_message(id, &Outcome::Timeout),
                ],
            )
            .await?,
        );
        match (reply.first().map(String::as_str), reply.get(1)) {
            (Some("ok"), Some(b)) => Ok(Self::record(b, "t", "{\"status\":\"timeout\"}")),
            _ => Ok(None),
        }
    }

    async fn sweep_deadlines(&self) -> Result<Vec<CallRecord>, BrokerError> {
        self.sweep().await
    }

    async fn cancel(&self, tenant: &str, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        let Some(conv) = self.conv_of(tenant, id).await? else {
            return Ok(None);
        };
        let reply = strings(
            self.script(
                &self.scripts.cancel,
                vec![self.keys.call(&conv, id)],
                vec![self.keys.conv_channel(&conv)],
            )
            .await?,
        );
        match &reply[..] {
            [b, s, o] => Ok(Self::record(b, s, o)),
            _ => Ok(None),
        }
    }

    async fn call(&self, tenant: &str, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        let Some(conv) = self.conv_of(tenant, id).await? else {
            return Ok(None);
        };
        let f: Vec<Option<String>> = self
            .client
            .hmget(self.keys.call(&conv, id), vec!["b", "s", "o"])
            .await
            .map_err(|e| unavailable(&e))?;
        match &f[..] {
            [Some(b), s, o] => Ok(Self::record(
                b,
                s.as_deref().unwrap_or("p"),
                o.as_deref().unwrap_or(""),
            )),
            _ => Ok(None),
        }
    }

    async fn pending_frames(&self, conv: &ConvKey) -> Result<Vec<Arc<str>>, BrokerError> {
        let reply = self
            .script(
                &self.scripts.pending,
                vec![self.keys.pending(conv)],
                vec![self.keys.call_prefix(conv)],
            )
            .await?;
        Ok(strings(reply)
            .into_iter()
            .filter_map(|m| codec::parse_page_message(&m).map(|(_, frame)| Arc::from(frame)))
            .collect())
    }
}
