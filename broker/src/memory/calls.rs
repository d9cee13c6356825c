//! Calls of the memory broker: bound before they are sent, checked by `model::check_result`,
//! answered or timed out once under one shard lock.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use tokio::sync::oneshot;
use toolmark_proto::{AgentMessage, Cancel, ToolResult};

use super::call_table::{CallEntry, CallKey, PendingCall};
use super::confirmations::ConfirmEntry;
use super::{MemoryBroker, lock};
use crate::model::{self, Found};
use crate::prelude::*;
use crate::{
    BrokerError, CallBinding, CallRecord, CallState, ConfirmBinding, ConvKey, Outcome,
    OutcomeWaiter, PageIdentity, Rejection, SubmitError, Watch, now_ms,
};

#[async_trait]
impl Calls for MemoryBroker {
    async fn send_call(
        &self,
        binding: CallBinding,
        frame: AgentMessage,
    ) -> Result<OutcomeWaiter, BrokerError> {
        self.send_traced_call(binding, frame, None).await
    }

    async fn send_traced_call(
        &self,
        binding: CallBinding,
        frame: AgentMessage,
        trace: Option<&str>,
    ) -> Result<OutcomeWaiter, BrokerError> {
        let (tx, rx) = oneshot::channel();
        let conv = binding.conv.clone();
        let client_id = binding.client_id.clone();
        let id = binding.id.clone();
        let frame: Arc<str> = frame.to_json().into();
        {
            let mut st = lock(&self.pages);
            if let Some(c) = st.convs.get_mut(&conv) {
                c.pending.insert(id.clone());
            } else {
                st.convs
                    .entry(conv.clone())
                    .or_default()
                    .pending
                    .insert(id.clone());
            }
        }
        {
            let record = CallRecord {
                binding,
                state: CallState::Pending,
                outcome: None,
                resolution: None,
            };
            self.calls.shard(&record.binding.id).insert(
                CallKey::of(&record.binding.id),
                CallEntry::Pending(Box::new(PendingCall {
                    record,
                    waiter: Some(tx),
                    watchers: Vec::new(),
                    frame: Arc::clone(&frame),
                })),
            );
        }
        match trace {
            Some(t) => {
                lock(&self.calls.traces).insert(id.clone(), t.to_owned(), Instant::now());
                self.sink.deliver_traced(&conv, &client_id, frame, t);
            }
            None => self.sink.deliver(&conv, &client_id, frame),
        }
        Ok(rx)
    }

    async fn submit_result(
        &self,
        from: &PageIdentity,
        id: &str,
        result: &ToolResult,
    ) -> Result<(), SubmitError> {
        self.answer(from, id, result.clone(), now_ms())
    }

    async fn submit_result_again(
        &self,
        from: &PageIdentity,
        id: &str,
        result: &ToolResult,
        received_ms: u64,
    ) -> Result<(), SubmitError> {
        {
            let record = self
                .calls
                .shard(id)
                .get(&CallKey::of(id))
                .and_then(|e| e.record(id, &self.node));
            let Some(r) = &record else {
                return Err(SubmitError::Rejected(Rejection::UnknownId));
            };
            let same_outcome = matches!(&r.outcome, Some(Outcome::Result(o)) if o == result);
            model::check_result_again(found(r, from), &from.client_id, received_ms, same_outcome)
                .map_err(SubmitError::Rejected)?;
            if r.state == CallState::Answered {
                return Ok(());
            }
        }
        self.answer(from, id, result.clone(), received_ms)
    }

    async fn time_out(&self, conv: &ConvKey, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        let (record, waiter) = {
            let mut calls = self.calls.shard(id);
            let Some(entry) = calls.get_mut(&CallKey::of(id)) else {
                return Ok(None);
            };
            let CallEntry::Pending(p) = entry else {
                return Ok(None);
            };
            if p.record.binding.conv != *conv {
                return Ok(None);
            }
            p.record.state = CallState::TimedOut;
            p.record.outcome = Some(Outcome::Timeout);
            let kept_until = Instant::now() + self.retention.finished_calls;
            let Some(mut p) = entry.finish(kept_until, &self.node) else {
                return Ok(None);
            };
            self.announce_now(&crate::Change::Call(p.record.clone()));
            let listeners = p.listeners();
            (p.record, listeners)
        };
        tell(waiter, Outcome::Timeout);
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
            .get(&CallKey::of(id))
            .and_then(|e| e.record(id, &self.node))
            .filter(|r| r.binding.conv.tenant == tenant))
    }

    async fn watch(&self, tenant: &str, id: &str) -> Result<Watch, BrokerError> {
        let mut calls = self.calls.shard(id);
        let Some(entry) = calls.get_mut(&CallKey::of(id)) else {
            return Ok(Watch::Unknown);
        };
        let p = match entry {
            CallEntry::Pending(p) if p.record.binding.conv.tenant == tenant => p,
            CallEntry::Pending(_) => return Ok(Watch::Unknown),
            CallEntry::Finished(_) => {
                return Ok(match entry.record(id, &self.node) {
                    Some(r) if r.binding.conv.tenant == tenant => {
                        r.outcome.map_or(Watch::Unknown, Watch::Ended)
                    }
                    _ => Watch::Unknown,
                });
            }
        };
        let (tx, rx) = oneshot::channel();
        p.watchers.retain(|w| !w.is_closed());
        p.watchers.push(tx);
        Ok(Watch::Pending(rx))
    }

    async fn call_trace(&self, conv: &ConvKey, id: &str) -> Result<Option<String>, BrokerError> {
        let _ = conv;
        Ok(lock(&self.calls.traces).get(id, Instant::now()))
    }

    async fn pending_frames(&self, conv: &ConvKey) -> Result<Vec<Arc<str>>, BrokerError> {
        let ids: Vec<String> = lock(&self.pages)
            .convs
            .get(conv)
            .map(|c| c.pending.iter().cloned().collect())
            .unwrap_or_default();
        let mut frames = Vec::new();
        let mut done = Vec::new();
        for id in ids {
            match self.calls.shard(&id).get(&CallKey::of(&id)) {
                Some(CallEntry::Pending(p)) => frames.push(Arc::clone(&p.frame)),
                _ => done.push(id),
            }
        }
        if !done.is_empty()
            && let Some(c) = lock(&self.pages).convs.get_mut(conv)
        {
            for id in done {
                c.pending.remove(&id);
            }
        }
        Ok(frames)
    }
}

/// What the model judges a result for call `r` by, from page `from`.
fn found<'a>(r: &'a CallRecord, from: &PageIdentity) -> Found<model::CallFacts<'a>> {
    if r.binding.conv == from.conv {
        Found::Here(model::CallFacts {
            client_id: &r.binding.client_id,
            state: r.state,
            deadline_ms: r.binding.deadline_ms,
        })
    } else {
        Found::Elsewhere
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
    ) -> Result<(), SubmitError> {
        let (record, waiter) = {
            let mut calls = self.calls.shard(id);
            let Some(entry) = calls.get_mut(&CallKey::of(id)) else {
                return Err(SubmitError::Rejected(Rejection::UnknownId));
            };
            let decoded;
            let r = match &*entry {
                CallEntry::Pending(p) => &p.record,
                CallEntry::Finished(_) => {
                    decoded = entry
                        .record(id, &self.node)
                        .ok_or(SubmitError::Rejected(Rejection::UnknownId))?;
                    &decoded
                }
            };
            model::check_result(found(r, from), &from.client_id, now_ms)
                .map_err(SubmitError::Rejected)?;
            // Only a pending call passes the check: a finished one is late or a duplicate.
            let CallEntry::Pending(p) = entry else {
                return Err(SubmitError::Rejected(Rejection::Duplicate));
            };
            // A call awaiting its confirmation is kept as long as the confirmation can be.
            let kept_for = if result.confirm_id().is_some() {
                self.retention.confirmations
            } else {
                self.retention.finished_calls
            };
            p.record.state = CallState::Answered;
            p.record.outcome = Some(Outcome::Result(result));
            let Some(mut p) = entry.finish(Instant::now() + kept_for, &self.node) else {
                return Err(SubmitError::Rejected(Rejection::Duplicate));
            };
            if p.record.binding.respond_async {
                self.announce_now(&crate::Change::Call(p.record.clone()));
            }
            let listeners = p.listeners();
            (p.record, listeners)
        };
        // The confirmation's binding, once the call's shard is let go (confirmations, then a
        // shard: the order every path takes both in).
        if let Some(Outcome::Result(result)) = &record.outcome
            && let Some(confirm_id) = result.confirm_id()
        {
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
        if let Some(outcome) = record.outcome {
            tell(waiter, outcome);
        }
        Ok(())
    }
}

/// Hands `outcome` to each of `listeners` (the last one takes it, the others a copy).
pub(super) fn tell(mut listeners: Vec<oneshot::Sender<Outcome>>, outcome: Outcome) {
    let Some(last) = listeners.pop() else {
        return;
    };
    for l in listeners {
        let _ = l.send(outcome.clone());
    }
    let _ = last.send(outcome);
}

pub(super) fn cancel_frame(binding: &CallBinding) -> Arc<str> {
    AgentMessage::Cancel(Cancel {
        client_id: binding.client_id.clone(),
        id: binding.id.clone(),
    })
    .to_json()
    .into()
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use toolmark_proto::Call;
    use toolmark_proto::codes::{CancelledBy, RefusedCode};

    use super::*;
    use crate::{CallKind, PageSink};

    struct Nowhere;
    impl PageSink for Nowhere {
        fn deliver(&self, _: &ConvKey, _: &str, _: Arc<str>) {}
    }

    fn conv() -> ConvKey {
        ConvKey::new("t", "u", "c")
    }

    async fn place(b: &MemoryBroker, id: &str, respond_async: bool) -> OutcomeWaiter {
        let binding = CallBinding {
            id: id.into(),
            conv: conv(),
            client_id: "p1".into(),
            tool: "todo.add".into(),
            kind: CallKind::Call,
            deadline_ms: now_ms() + 60_000,
            node: "n1".into(),
            untrusted: true,
            respond_async,
            caller: Some(crate::CallerRef::McpToken {
                id: "tok".into(),
                api_key_id: "key".into(),
            }),
        };
        let frame = AgentMessage::Call(Call {
            client_id: "p1".into(),
            id: id.into(),
            rev: None,
            tool: "todo.add".into(),
            input: json!({}),
        });
        b.send_call(binding, frame).await.unwrap()
    }

    /// What every read of a finished call gives, in one value to compare.
    async fn reads(b: &MemoryBroker, id: &str) -> (Option<CallRecord>, Option<Outcome>) {
        let watched = match b.watch("t", id).await.unwrap() {
            Watch::Ended(o) => Some(o),
            _ => None,
        };
        (b.call("t", id).await.unwrap(), watched)
    }

    #[tokio::test]
    async fn a_finished_call_reads_back_as_it_finished_for_every_outcome_kind() {
        let b = MemoryBroker::new("n1", Arc::new(Nowhere));
        let page = PageIdentity {
            conv: conv(),
            client_id: "p1".into(),
        };
        let results = [
            ToolResult::Ok {
                data: Some(json!({"n": 1, "s": "x\ny"})),
            },
            ToolResult::Invalid {
                issues: vec![toolmark_proto::Issue {
                    path: "n".into(),
                    message: "too big".into(),
                }],
            },
            ToolResult::Refused {
                code: RefusedCode::Stale,
                message: "changed".into(),
                rev: Some(2),
            },
            ToolResult::NeedsConfirmation {
                confirm_id: "conf-1".into(),
                summary: "Add it".into(),
                changes: None,
            },
            ToolResult::Cancelled {
                by: CancelledBy::Signal,
            },
            ToolResult::Error {
                message: "Tool failed".into(),
            },
        ];
        for (i, result) in results.into_iter().enumerate() {
            let id = format!("5a2c8b71-3d0e-4f5a-8b6c-7d8e9f0a1b{i:02}");
            let waiter = place(&b, &id, i % 2 == 0).await;
            let pending = b.call("t", &id).await.unwrap().unwrap();
            b.submit_result(&page, &id, &result).await.unwrap();
            assert_eq!(waiter.await.unwrap(), Outcome::Result(result.clone()));
            let (answered, outcome) = reads(&b, &id).await;
            let answered = answered.unwrap();
            assert_eq!(
                answered.binding, pending.binding,
                "the caller and the rest kept"
            );
            assert_eq!(answered.state, CallState::Answered);
            assert_eq!(outcome, Some(Outcome::Result(result.clone())));
            assert_eq!(answered.outcome, outcome);
            // The same result again is taken, another is a duplicate.
            b.submit_result_again(&page, &id, &result, now_ms())
                .await
                .unwrap();
            assert_eq!(
                b.submit_result(&page, &id, &ToolResult::Ok { data: None })
                    .await,
                Err(SubmitError::Rejected(Rejection::Duplicate))
            );
            if result.confirm_id().is_some() {
                let final_outcome = ToolResult::Ok {
                    data: Some(json!("done")),
                };
                let binding = b
                    .submit_confirmed(&page, "conf-1", &final_outcome)
                    .await
                    .unwrap();
                assert_eq!(binding.caller, pending.binding.caller);
                let (record, _) = reads(&b, &id).await;
                let record = record.unwrap();
                let resolution = record.resolution.clone().unwrap();
                assert_eq!(resolution.outcome, final_outcome);
                assert!(resolution.at_ms >= answered.binding.deadline_ms - 60_000);
                assert_eq!(
                    CallRecord {
                        resolution: None,
                        ..record
                    },
                    answered
                );
            }
        }
        // A timeout: read back as the time-out returned it; a late result is late.
        let id = "5a2c8b71-3d0e-4f5a-8b6c-7d8e9f0a1bff";
        let waiter = place(&b, id, true).await;
        let timed_out = b.time_out(&conv(), id).await.unwrap().unwrap();
        assert_eq!(waiter.await.unwrap(), Outcome::Timeout);
        assert_eq!(timed_out.state, CallState::TimedOut);
        assert_eq!(
            reads(&b, id).await,
            (Some(timed_out), Some(Outcome::Timeout))
        );
        assert_eq!(
            b.submit_result(&page, id, &ToolResult::Ok { data: None })
                .await,
            Err(SubmitError::Rejected(Rejection::Late))
        );
        assert!(b.pending_frames(&conv()).await.unwrap().is_empty());
    }
}
