//! Calls on Redis, each on its conversation's partition slot: the place script (conversation
//! read, rate, binding, pending set, deadline entry, publication to the nodes holding the
//! conversation's sockets) in one round trip; the result and timeout scripts decide
//! `model::check_result` atomically and send the outcome to the waiting node's channel of that
//! partition.

use std::sync::Arc;

use async_trait::async_trait;
use fred::interfaces::KeysInterface;
use toolmark_proto::{AgentMessage, ToolResult};

use super::reply::{state_of, strings, unavailable};
use super::scripts::{Bind, Cancel, Outbox, PendingFrames, ReadCall, Timeout, WatchCall};
use super::state::Expected;
use super::{RedisBroker, codec, keys};
use crate::prelude::*;
use crate::{
    BrokerError, CallBinding, CallRecord, CallRequest, CallState, CallTarget, Change, ConvKey,
    Outcome, OutcomeWaiter, PageIdentity, PlaceError, SubmitError, Watch, model, now_ms, partition,
};

impl RedisBroker {
    /// The arguments of `bind.lua` for `binding` and its page message (`frame`: its protocol
    /// frame's JSON text).
    pub(super) fn bind_args(
        &self,
        binding: &CallBinding,
        frame: &str,
        trace: Option<&str>,
    ) -> Bind {
        let conv = &binding.conv;
        let k = partition::of_conv(conv);
        let one_string = !self.node.live.legacy_ids();
        Bind {
            call: self.conn.keys.call(k, &binding.id),
            // The sets 0.4.0 reads, only for a call stored as a hash (`bind` in `prelude.lua`).
            pending: (!one_string).then(|| self.conn.keys.pending(conv)),
            deadlines: (!one_string).then(|| self.conn.keys.deadlines(k)),
            sockets: self.conn.keys.sockets(conv),
            conv: self.conn.keys.conv(conv),
            due: self.conn.keys.due(conv),
            due_convs: self.conn.keys.due_convs(k),
            id: codec::compact_id(&binding.id),
            conv_ref: codec::conv_ref(conv),
            client: codec::compact_id(&binding.client_id),
            deadline: binding.deadline_ms,
            node: binding.node.clone(),
            summary: codec::call_summary(binding),
            frame: match trace {
                // A node of 0.4.0 or older cannot read the traced form: while one is live,
                // the page's node starts a trace of its own.
                Some(t) if !self.node.live.legacy_ids() => {
                    codec::traced_page_message(conv, &binding.client_id, frame, t)
                }
                _ => codec::page_message(conv, &binding.client_id, frame),
            },
            cancel: codec::cancel_message(binding),
            ttl: binding.deadline_ms.saturating_sub(now_ms())
                + model::millis(self.conn.opts.retention.finished_calls),
            deadline_member: if one_string {
                String::new()
            } else {
                codec::deadline_member(conv, &binding.id)
            },
            channel_prefix: self.conn.keys.node_channel_prefix(),
            channel_suffix: keys::channel_suffix(k),
            one_string,
        }
    }

    /// Reads the conversation for [`Broker::place_call`] and remembers what it found.
    pub(super) async fn expect(&self, conv: &ConvKey) -> Result<Arc<Expected>, BrokerError> {
        let (state, seq) = self.conversation_with_seq(conv).await?;
        Ok(self.calls.expected.remember(
            conv,
            Expected {
                // The script itself decides whether the page takes calls
                // (`model::accepts_calls`).
                target: CallTarget::current(state.call_view()),
                seq: if state.client_id.is_some() {
                    seq
                } else {
                    String::new()
                },
                llm_names: state
                    .call_view()
                    .llm_names()
                    .map(|(llm, name)| (llm.to_owned(), name.to_owned()))
                    .collect(),
            },
        ))
    }

    /// What this node last read of the request's conversation, with the request's LLM name
    /// resolved against it ([`CallRequest::resolve`]); read now when it read nothing yet, or
    /// when what it read does not list the name (the page may have sent a manifest since): a
    /// name is refused only against a manifest read for this request.
    pub(super) async fn resolved(
        &self,
        req: &mut CallRequest,
    ) -> Result<Arc<Expected>, PlaceError> {
        if let Some(cached) = self.calls.expected.get(&req.conv)
            && req.resolve(cached.tools()).is_ok()
        {
            return Ok(cached);
        }
        let expected = self.expect(&req.conv).await?;
        req.resolve(expected.tools())?;
        Ok(expected)
    }

    /// A call's record from its stored fields: conversation ref, clientId (compact), deadline,
    /// node, summary, state, outcome.
    /// A resolution follows where the script read it (`READ_CALL`).
    pub(super) fn stored_record(id: &str, f: &[String]) -> Option<CallRecord> {
        let (fields, resolution) = match f.len() {
            8 => (&f[..7], f.get(7)),
            _ => (f, None),
        };
        let [conv, client, deadline, node, summary, state, outcome] = fields else {
            return None;
        };
        let client = codec::expand_id(client);
        let binding = codec::binding(id, conv, &client, deadline, node, summary)?;
        let outcome = if outcome.is_empty() {
            None
        } else {
            serde_json::from_str(outcome).ok()
        };
        Some(CallRecord {
            binding,
            state: state_of(state),
            outcome,
            resolution: resolution.and_then(|r| codec::parse_resolution(r)),
        })
    }

    /// The frames of the conversation's calls still pending, each with the clientId it is for.
    pub(super) async fn pending_messages(
        &self,
        conv: &ConvKey,
    ) -> Result<Vec<(String, Arc<str>)>, BrokerError> {
        let reply = self
            .run(PendingFrames {
                pending: self.conn.keys.pending(conv),
                due: self.conn.keys.due(conv),
                call_prefix: self.conn.keys.call_prefix(partition::of_conv(conv)),
            })
            .await?;
        Ok(strings(reply)
            .into_iter()
            .filter_map(|m| match codec::parse_node_message(&m) {
                Some(codec::NodeMessage::Page {
                    client_id, frame, ..
                }) => Some((client_id, Arc::from(frame))),
                _ => None,
            })
            .collect())
    }

    /// The outcome stored for call `id` of partition `k`, whichever tenant's it is (none while
    /// it is pending).
    pub(super) async fn stored_outcome(
        &self,
        k: u16,
        id: &str,
    ) -> Result<Option<Outcome>, BrokerError> {
        let f = strings(
            self.run(ReadCall {
                call: self.conn.keys.call(k, id),
            })
            .await?,
        );
        Ok(Self::stored_record(id, &f).and_then(|r| r.outcome))
    }

    /// The partition holding call `id`, known by its id alone: an id names no partition, so
    /// every partition's key is asked about at once (64 `EXISTS` in one round trip, spread over
    /// the shards), once per id on this node (then remembered, [`super::state::Located`]).
    /// Only requests that know nothing but the id pay it (`GET /calls/{id}`, a cancel, a
    /// watch, a page's result for a call not of its conversation); a call's own path knows its
    /// conversation.
    pub(super) async fn locate(&self, id: &str) -> Result<Option<u16>, BrokerError> {
        if uuid::Uuid::try_parse(id).is_err() {
            // Never an id the gateway minted.
            return Ok(None);
        }
        if let Some(k) = self.calls.located.get(id) {
            return Ok(Some(k));
        }
        let reads = (0..partition::PARTITIONS).map(|k| {
            let key = self.conn.keys.call(k, id);
            async move { (k, self.conn.client.exists::<i64, _>(key).await) }
        });
        let mut failed = None;
        for (k, read) in futures_util::future::join_all(reads).await {
            match read {
                Ok(n) if n > 0 => {
                    self.calls.located.remember(id, k);
                    return Ok(Some(k));
                }
                Ok(_) => {}
                Err(e) => failed = Some(e),
            }
        }
        match failed {
            // A partition that did not answer may hold it.
            Some(e) => Err(unavailable(&e)),
            None => Ok(None),
        }
    }

    /// A call of `tenant` by id, wherever it is.
    async fn stored_call(&self, tenant: &str, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        let Some(k) = self.locate(id).await? else {
            return Ok(None);
        };
        let f = strings(
            self.run(ReadCall {
                call: self.conn.keys.call(k, id),
            })
            .await?,
        );
        Ok(Self::stored_record(id, &f).filter(|r| r.binding.conv.tenant == tenant))
    }
}

#[async_trait]
impl Calls for RedisBroker {
    fn mint_call_id(&self, conv: &ConvKey) -> String {
        if self.node.live.legacy_ids() {
            partition::new_legacy_call_id(conv)
        } else {
            partition::new_call_id()
        }
    }

    async fn send_call(
        &self,
        binding: CallBinding,
        frame: AgentMessage,
    ) -> Result<OutcomeWaiter, BrokerError> {
        let rx = self
            .calls
            .waiters
            .wait(&binding.id, partition::of_conv(&binding.conv));
        if let Err(e) = self
            .run(self.bind_args(&binding, &frame.to_json(), None))
            .await
        {
            self.calls.waiters.forget(&binding.id);
            return Err(e);
        }
        Ok(rx)
    }

    async fn submit_result(
        &self,
        from: &PageIdentity,
        id: &str,
        result: &ToolResult,
    ) -> Result<(), SubmitError> {
        self.put_result(from, id, result, None).await
    }

    async fn submit_result_again(
        &self,
        from: &PageIdentity,
        id: &str,
        result: &ToolResult,
        received_ms: u64,
    ) -> Result<(), SubmitError> {
        self.put_result(from, id, result, Some(received_ms)).await
    }

    async fn time_out(&self, conv: &ConvKey, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        let k = partition::of_conv(conv);
        let reply = strings(
            self.run(Timeout {
                call: self.conn.keys.call(k, id),
                pending: self.conn.keys.pending(conv),
                deadlines: self.conn.keys.deadlines(k),
                sockets: self.conn.keys.sockets(conv),
                outbox: Outbox::new(
                    self.conn.keys.outbox(k),
                    &codec::Outboxed::Call(id.to_owned()),
                ),
                due: self.conn.keys.due(conv),
                id: codec::compact_id(id),
                outcome: serde_json::to_string(&Outcome::Timeout).unwrap_or_default(),
                channel_prefix: self.conn.keys.node_channel_prefix(),
                channel_suffix: keys::channel_suffix(k),
                message: codec::outcome_message(id, &Outcome::Timeout),
                deadline_member: codec::deadline_member(conv, id),
            })
            .await?,
        );
        let record = match &reply[..] {
            [ok, conv, client, deadline, node, summary] if ok == "ok" => {
                codec::binding(id, conv, &codec::expand_id(client), deadline, node, summary).map(
                    |binding| CallRecord {
                        binding,
                        state: CallState::TimedOut,
                        outcome: Some(Outcome::Timeout),
                        resolution: None,
                    },
                )
            }
            _ => None,
        };
        if let Some(r) = &record {
            self.relay(&Change::Call(r.clone())).await;
        }
        Ok(record)
    }

    async fn sweep_deadlines(&self) -> Result<Vec<CallRecord>, BrokerError> {
        self.sweep().await
    }

    async fn cancel(&self, tenant: &str, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        let Some(found) = self.stored_call(tenant, id).await? else {
            return Ok(None);
        };
        let k = partition::of_conv(&found.binding.conv);
        let reply = strings(
            self.run(Cancel {
                call: self.conn.keys.call(k, id),
                sockets: self.conn.keys.sockets(&found.binding.conv),
                channel_prefix: self.conn.keys.node_channel_prefix(),
                channel_suffix: keys::channel_suffix(k),
            })
            .await?,
        );
        Ok(Self::stored_record(id, &reply))
    }

    async fn call(&self, tenant: &str, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        self.stored_call(tenant, id).await
    }

    async fn watch(&self, tenant: &str, id: &str) -> Result<Watch, BrokerError> {
        let Some(k) = self.locate(id).await? else {
            return Ok(Watch::Unknown);
        };
        // Listening before the script runs: an outcome published right after it is heard.
        let rx = self.calls.waiters.watch(id, k);
        let reply = self
            .run(WatchCall {
                call: self.conn.keys.call(k, id),
                node: self.node.id.clone(),
            })
            .await
            .map(strings);
        let of_tenant =
            |conv_ref: &str| codec::parse_conv_ref(conv_ref).is_some_and(|c| c.tenant == tenant);
        let watch = match reply.as_deref() {
            Ok([state, conv_ref]) if state == "pending" && of_tenant(conv_ref) => {
                return Ok(Watch::Pending(rx));
            }
            Ok([state]) if state == "ended" => match self.stored_call(tenant, id).await {
                Ok(Some(CallRecord {
                    outcome: Some(o), ..
                })) => Ok(Watch::Ended(o)),
                Ok(_) => Ok(Watch::Unknown),
                Err(e) => Err(e),
            },
            Ok(_) => Ok(Watch::Unknown),
            Err(e) => Err(e.clone()),
        };
        drop(rx);
        self.calls.waiters.unwatch_gone(id);
        watch
    }

    async fn call_trace(&self, conv: &ConvKey, id: &str) -> Result<Option<String>, BrokerError> {
        let key = format!("{}:tp", self.conn.keys.call(partition::of_conv(conv), id));
        self.conn
            .client
            .get::<Option<String>, _>(key)
            .await
            .map_err(|e| unavailable(&e))
    }

    async fn pending_frames(&self, conv: &ConvKey) -> Result<Vec<Arc<str>>, BrokerError> {
        Ok(self
            .pending_messages(conv)
            .await?
            .into_iter()
            .map(|(_, frame)| frame)
            .collect())
    }
}
