//! Calls of the memory broker: bound before they are sent, checked by `model::check_result`,
//! answered or timed out once under one shard lock.

use super::*;
use crate::prelude::*;

#[async_trait]
impl Calls for MemoryBroker {
    async fn send_call(
        &self,
        binding: CallBinding,
        frame: AgentMessage,
    ) -> Result<OutcomeWaiter, BrokerError> {
        let (tx, rx) = oneshot::channel();
        let conv = binding.conv.clone();
        let client_id = binding.client_id.clone();
        let frame: Arc<str> = frame.to_json().into();
        lock(&self.state)
            .convs
            .entry(conv.clone())
            .or_default()
            .pending
            .insert(binding.id.clone());
        {
            let record = CallRecord {
                binding,
                state: CallState::Pending,
                outcome: None,
                resolution: None,
            };
            self.calls.shard(&record.binding.id).insert(
                record.binding.id.clone(),
                CallEntry {
                    record,
                    waiter: Some(tx),
                    watchers: Vec::new(),
                    kept_until: None,
                    frame: Arc::clone(&frame),
                },
            );
        }
        self.sink.deliver(&conv, &client_id, frame);
        Ok(rx)
    }

    async fn submit_result(
        &self,
        from: &PageIdentity,
        id: &str,
        result: ToolResult,
    ) -> Result<CallRecord, SubmitError> {
        self.answer(from, id, result, now_ms())
    }

    async fn submit_result_again(
        &self,
        from: &PageIdentity,
        id: &str,
        result: ToolResult,
        received_ms: u64,
    ) -> Result<(), SubmitError> {
        {
            let calls = self.calls.shard(id);
            let Some(entry) = calls.get(id) else {
                return Err(SubmitError::Rejected(Rejection::UnknownId));
            };
            let r = &entry.record;
            let same_outcome = r.outcome.as_ref() == Some(&Outcome::Result(result.clone()));
            let found = if r.binding.conv == from.conv {
                Found::Here(model::CallFacts {
                    client_id: &r.binding.client_id,
                    state: r.state,
                    deadline_ms: r.binding.deadline_ms,
                })
            } else {
                Found::Elsewhere
            };
            model::check_result_again(found, &from.client_id, received_ms, same_outcome)
                .map_err(SubmitError::Rejected)?;
            if r.state == CallState::Answered {
                return Ok(());
            }
        }
        self.answer(from, id, result, received_ms).map(|_| ())
    }

    async fn time_out(&self, conv: &ConvKey, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        let (record, waiter) = {
            let mut calls = self.calls.shard(id);
            let Some(entry) = calls.get_mut(id) else {
                return Ok(None);
            };
            if entry.record.binding.conv != *conv || entry.record.state != CallState::Pending {
                return Ok(None);
            }
            entry.record.state = CallState::TimedOut;
            entry.record.outcome = Some(Outcome::Timeout);
            entry.kept_until = Some(Instant::now() + self.retention.finished_calls);
            self.announce_now(&crate::Change::Call(entry.record.clone()));
            (entry.record.clone(), entry.listeners())
        };
        tell(waiter, &Outcome::Timeout);
        let b = &record.binding;
        self.sink.deliver(&b.conv, &b.client_id, cancel_frame(b));
        Ok(Some(record))
    }

    async fn sweep_deadlines(&self) -> Result<Vec<CallRecord>, BrokerError> {
        Ok(self.sweep())
    }

    async fn cancel(&self, tenant: &str, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        let record = self.call(tenant, id).await?;
        if let Some(r) = record.as_ref().filter(|r| r.state == CallState::Pending) {
            let b = &r.binding;
            self.sink.deliver(&b.conv, &b.client_id, cancel_frame(b));
        }
        Ok(record)
    }

    async fn call(&self, tenant: &str, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        Ok(self
            .calls
            .shard(id)
            .get(id)
            .filter(|e| e.record.binding.conv.tenant == tenant)
            .map(|e| e.record.clone()))
    }

    async fn watch(&self, tenant: &str, id: &str) -> Result<Watch, BrokerError> {
        let mut calls = self.calls.shard(id);
        let Some(entry) = calls
            .get_mut(id)
            .filter(|e| e.record.binding.conv.tenant == tenant)
        else {
            return Ok(Watch::Unknown);
        };
        if let Some(o) = &entry.record.outcome {
            return Ok(Watch::Ended(o.clone()));
        }
        let (tx, rx) = oneshot::channel();
        entry.watchers.retain(|w| !w.is_closed());
        entry.watchers.push(tx);
        Ok(Watch::Pending(rx))
    }

    async fn pending_frames(&self, conv: &ConvKey) -> Result<Vec<Arc<str>>, BrokerError> {
        let ids: Vec<String> = lock(&self.state)
            .convs
            .get(conv)
            .map(|c| c.pending.iter().cloned().collect())
            .unwrap_or_default();
        let mut frames = Vec::new();
        let mut done = Vec::new();
        for id in ids {
            match self.calls.shard(&id).get(&id) {
                Some(e) if e.record.state == CallState::Pending => {
                    frames.push(Arc::clone(&e.frame))
                }
                _ => done.push(id),
            }
        }
        if !done.is_empty()
            && let Some(c) = lock(&self.state).convs.get_mut(conv)
        {
            for id in done {
                c.pending.remove(&id);
            }
        }
        Ok(frames)
    }
}

impl MemoryBroker {
    /// A page's result judged as at `now_ms` ([`model::check_result`]), recorded and told.
    fn answer(
        &self,
        from: &PageIdentity,
        id: &str,
        result: ToolResult,
        now_ms: u64,
    ) -> Result<CallRecord, SubmitError> {
        let (record, waiter) = {
            let mut calls = self.calls.shard(id);
            let Some(entry) = calls.get_mut(id) else {
                return Err(SubmitError::Rejected(Rejection::UnknownId));
            };
            let b = &entry.record.binding;
            let found = if b.conv == from.conv {
                Found::Here(model::CallFacts {
                    client_id: &b.client_id,
                    state: entry.record.state,
                    deadline_ms: b.deadline_ms,
                })
            } else {
                Found::Elsewhere
            };
            model::check_result(found, &from.client_id, now_ms).map_err(SubmitError::Rejected)?;
            entry.record.state = CallState::Answered;
            entry.record.outcome = Some(Outcome::Result(result.clone()));
            // A call awaiting its confirmation is kept as long as the confirmation can be.
            let kept_for = if result.confirm_id().is_some() {
                self.retention.confirmations
            } else {
                self.retention.finished_calls
            };
            entry.kept_until = Some(Instant::now() + kept_for);
            let waiter = entry.listeners();
            let record = entry.record.clone();
            if record.binding.respond_async {
                self.announce_now(&crate::Change::Call(record.clone()));
            }
            (record, waiter)
        };
        // The confirmation's binding, once the call's shard is let go (confirmations, then a
        // shard: the order every path takes both in).
        if let Some(confirm_id) = result.confirm_id() {
            let expires = Instant::now() + self.retention.confirmations;
            lock(&self.confirms)
                .entry(confirm_id.to_owned())
                .or_default()
                .entry(record.binding.conv.clone())
                .or_insert_with(|| ConfirmEntry {
                    binding: ConfirmBinding {
                        confirm_id: confirm_id.to_owned(),
                        call_id: record.binding.id.clone(),
                        tool: record.binding.tool.clone(),
                        conv: record.binding.conv.clone(),
                        client_id: record.binding.client_id.clone(),
                        untrusted: record.binding.untrusted,
                        caller: record.binding.caller.clone(),
                    },
                    used: false,
                    confirmed: false,
                    expires,
                    absent_since: None,
                });
        }
        tell(waiter, &Outcome::Result(result));
        Ok(record)
    }
}
