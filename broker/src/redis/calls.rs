//! Calls on Redis, each on its conversation's partition slot: the place script (conversation
//! read, rate, binding, pending set, deadline entry, publication to the nodes holding the
//! conversation's sockets) in one round trip; the result and timeout scripts decide
//! `model::check_result` atomically and send the outcome to the waiting node's channel of that
//! partition.

use std::time::Instant;

use super::*;
use crate::Change;
use crate::prelude::*;
use crate::rate::{Batch, Reserved};

/// The page a node last found current in a conversation, with its manifest's `seq`: the
/// expectation a [`scripts::PLACE`] checks, so that a call to a conversation whose page did not
/// change is one round trip.
#[derive(Debug, Clone)]
pub(super) struct Expected {
    target: Option<CallTarget>,
    seq: String,
}

/// At most this many conversations' expectations are kept per node (then they start over).
const EXPECTED_MAX: usize = 65_536;

impl RedisBroker {
    /// The binding's fields in the order of [`scripts::BIND`]'s ARGV, and its keys (call,
    /// pending set, deadline set, sockets).
    fn bind_args(&self, binding: &CallBinding, frame: &AgentMessage) -> (Vec<String>, Vec<String>) {
        let conv = &binding.conv;
        let k = partition::of_conv(conv);
        let ttl_ms = binding.deadline_ms.saturating_sub(now_ms())
            + model::millis(self.opts.retention.finished_calls);
        let keys = vec![
            self.keys.call(&binding.id),
            self.keys.pending(conv),
            self.keys.deadlines(k),
            self.keys.sockets(conv),
        ];
        let args = vec![
            codec::compact_id(&binding.id),
            codec::conv_ref(conv),
            codec::compact_id(&binding.client_id),
            binding.deadline_ms.to_string(),
            binding.node.clone(),
            codec::call_summary(binding),
            codec::page_message(conv, &binding.client_id, &frame.to_json()),
            codec::cancel_message(binding),
            ttl_ms.to_string(),
            codec::deadline_member(conv, &binding.id),
            self.keys.node_channel_prefix(),
            format!(":{}", keys::partition_tag(k)),
        ];
        (keys, args)
    }

    /// Reads the conversation for [`Broker::place_call`] and remembers what it found.
    async fn expect(&self, conv: &ConvKey) -> Result<Arc<Expected>, BrokerError> {
        let (state, seq) = self.conversation_with_seq(conv).await?;
        let e = Arc::new(Expected {
            // The script itself decides whether the page takes calls (`model::accepts_calls`).
            target: CallTarget::current(&state),
            seq: if state.client_id.is_some() {
                seq
            } else {
                String::new()
            },
        });
        let mut cache = lock(&self.expected);
        if cache.len() >= EXPECTED_MAX {
            cache.clear();
        }
        cache.insert(conv.clone(), Arc::clone(&e));
        Ok(e)
    }

    /// [`Broker::place_call`] on Redis: [`scripts::PLACE`], which takes the tenant's rate too.
    /// On Redis Cluster the rate lives on another shard than the conversation: the call spends
    /// a token of this node's reserve (`rate::Reserves`), and takes the tenant's bucket first
    /// only when none is held; a refill of the reserve goes out beside the place script, so
    /// that a call costs two round trips there too.
    pub(super) async fn place(&self, req: CallRequest) -> Result<Placed, PlaceError> {
        if !self.cluster {
            return self.place_here(req, true).await;
        }
        let per_second = req.calls_per_second;
        match self
            .reserves
            .spend(&req.conv.tenant, per_second, Instant::now())
        {
            Reserved::Take(want) => {
                let tenant = &req.conv.tenant;
                let taken = self
                    .take_tokens(tenant, per_second, want, 0, "gcra_before_call")
                    .await;
                if want > 1 {
                    let held = taken.as_ref().map_or(0, |n| n.saturating_sub(1));
                    self.reserves.hold(tenant, held, Instant::now());
                }
                taken?;
                self.place_here(req, false).await
            }
            Reserved::Spent { refill: None } => self.place_here(req, false).await,
            Reserved::Spent {
                refill: Some(Batch { want, back }),
            } => {
                // The place script takes the request; the batch is rare (one per batch).
                let tenant = req.conv.tenant.clone();
                let (taken, placed) = tokio::join!(
                    self.take_tokens(&tenant, per_second, want, back, "gcra"),
                    self.place_here(req, false)
                );
                self.reserves
                    .hold(&tenant, taken.unwrap_or(0), Instant::now());
                placed
            }
        }
    }

    /// [`scripts::PLACE`] against what this node last read of the conversation; read again and
    /// retried when the conversation changed since. With `rate_here`, the script takes the
    /// tenant's rate; without, the call's token was taken already.
    async fn place_here(&self, req: CallRequest, rate_here: bool) -> Result<Placed, PlaceError> {
        let cached = lock(&self.expected).get(&req.conv).cloned();
        let mut expected = match cached {
            Some(e) => e,
            None => self.expect(&req.conv).await?,
        };
        for _ in 0..4 {
            let client = expected
                .target
                .as_ref()
                .map_or(String::new(), |t| t.client_id.clone());
            // With no page to send to, the script still takes the rate (in that order, as
            // everywhere) and answers `no_page`; nothing is bound.
            let fallback = CallTarget {
                client_id: String::new(),
                rev: None,
                untrusted: Vec::new(),
            };
            let target = expected.target.as_ref().unwrap_or(&fallback);
            let (binding, frame) = req.bind_to(target, &self.node);
            let (mut keys, mut args) = self.bind_args(&binding, &frame);
            keys.push(self.keys.conv(&req.conv));
            keys.push(if rate_here {
                self.keys.rate(&req.conv.tenant)
            } else {
                self.keys.conv(&req.conv)
            });
            // An empty interval tells the script the rate was taken already.
            let (interval_us, burst) = if rate_here {
                limits::gcra_args(req.calls_per_second)
            } else {
                (String::new(), String::new())
            };
            args.extend([
                self.keys.manifest_prefix(&req.conv),
                client,
                expected.seq.clone(),
                now_ms().to_string(),
                model::millis(model::RECONNECT_GRACE).to_string(),
                interval_us,
                burst,
            ]);
            let live = self.live_nodes();
            args.push(live.len().to_string());
            args.extend(live.iter().cloned());
            args.extend(self.dead_nodes());
            let (tx, rx) = oneshot::channel();
            lock(&self.waiters).insert(binding.id.clone(), tx);
            let sent = self.client.is_connected();
            let reply = match self.script(&self.scripts.place, keys, args).await {
                Ok(r) => strings(r),
                Err(e) => {
                    // Sent, but no answer: Redis may have placed it (or may yet, from its
                    // buffer). Not answered until known: the call's record says.
                    if sent && self.placed_after_all(&binding).await {
                        return Ok(Placed {
                            binding,
                            waiter: rx,
                        });
                    }
                    lock(&self.waiters).remove(&binding.id);
                    return Err(e.into());
                }
            };
            match reply.first().map(String::as_str) {
                Some("ok") if expected.target.is_some() => {
                    return Ok(Placed {
                        binding,
                        waiter: rx,
                    });
                }
                Some("rate") => {
                    lock(&self.waiters).remove(&binding.id);
                    let wait_us = reply.get(1).and_then(|w| w.parse().ok()).unwrap_or(1);
                    return Err(PlaceError::Limited(RateLimited {
                        retry_after: Duration::from_micros(wait_us),
                    }));
                }
                Some("unreached") => {
                    // Pages are connected but no node's channel took the frame: a subscription
                    // being restored after a failover or a slot move. Nothing was bound.
                    lock(&self.waiters).remove(&binding.id);
                    tracing::debug!(call_id = %binding.id, "call frame reached no node: 503");
                    return Err(PlaceError::Broker(BrokerError::Unavailable {
                        retry_after: RETRY,
                    }));
                }
                Some("no_page" | "ok") => {
                    lock(&self.waiters).remove(&binding.id);
                    return Err(PlaceError::NoPage);
                }
                Some("unknown") => {
                    // A node this one does not count as live holds sockets (it may have just
                    // started): read the live set again; one still missing is dead.
                    lock(&self.waiters).remove(&binding.id);
                    self.refresh_live().await;
                    let live = self.live_nodes();
                    let missing: Vec<String> = reply[1..]
                        .iter()
                        .filter(|n| !live.contains(n.as_str()))
                        .cloned()
                        .collect();
                    self.known_dead(&missing);
                }
                _ => {
                    // `stale`: the conversation's current page changed since this node read it.
                    lock(&self.waiters).remove(&binding.id);
                    expected = self.expect(&req.conv).await?;
                }
            }
        }
        Err(PlaceError::Broker(BrokerError::Unavailable {
            retry_after: RETRY,
        }))
    }

    /// Whether a call whose placement went unanswered was placed after all: its record is read
    /// until Redis answers (a read answered on the connection is behind the placement on it),
    /// asking again ([`crate::retry::until_answered`]) until the call's deadline. Unknown by
    /// then: not placed as far as the agent is told (503).
    async fn placed_after_all(&self, binding: &CallBinding) -> bool {
        let left = Duration::from_millis(binding.deadline_ms.saturating_sub(now_ms()));
        let key = self.keys.call(&binding.id);
        let read = crate::retry::until_answered(
            Instant::now() + left,
            |_| true,
            |_| async {
                self.client
                    .exists::<i64, _>(&key)
                    .await
                    .map_err(|e| unavailable(&e))
            },
        )
        .await;
        match read {
            Ok(n) if n > 0 => {
                tracing::info!(tenant = %binding.conv.tenant, call_id = %binding.id, "call placed although its placement was not answered");
                true
            }
            Ok(_) => false,
            Err(_) => {
                tracing::warn!(tenant = %binding.conv.tenant, call_id = %binding.id, "whether the call was placed is unknown at its deadline");
                false
            }
        }
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
            .script(
                &self.scripts.pending,
                vec![self.keys.pending(conv)],
                vec![self.keys.call_prefix(partition::of_conv(conv))],
            )
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

    /// The outcome stored for call `id`, whichever tenant's it is (none while it is pending).
    pub(super) async fn stored_outcome(&self, id: &str) -> Result<Option<Outcome>, BrokerError> {
        let f = strings(
            self.script(&self.scripts.read_call, vec![self.keys.call(id)], vec![])
                .await?,
        );
        Ok(Self::stored_record(id, &f).and_then(|r| r.outcome))
    }

    /// A call of `tenant` by id, in the partition the id names.
    async fn stored_call(&self, tenant: &str, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        let f = strings(
            self.script(&self.scripts.read_call, vec![self.keys.call(id)], vec![])
                .await?,
        );
        Ok(Self::stored_record(id, &f).filter(|r| r.binding.conv.tenant == tenant))
    }
}

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
        let (keys, args) = self.bind_args(&binding, &frame);
        if let Err(e) = self.script(&self.scripts.bind, keys, args).await {
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
        self.put_result(from, id, result, None).await
    }

    async fn submit_result_again(
        &self,
        from: &PageIdentity,
        id: &str,
        result: ToolResult,
        received_ms: u64,
    ) -> Result<(), SubmitError> {
        self.put_result(from, id, result, Some(received_ms))
            .await
            .map(|_| ())
    }

    async fn time_out(&self, conv: &ConvKey, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        let k = partition::of_call(id);
        let reply = strings(
            self.script(
                &self.scripts.timeout,
                vec![
                    self.keys.call(id),
                    self.keys.pending(conv),
                    self.keys.deadlines(k),
                    self.keys.sockets(conv),
                    self.keys.outbox(k),
                ],
                [
                    codec::compact_id(id),
                    serde_json::to_string(&Outcome::Timeout).unwrap_or_default(),
                    self.keys.node_channel_prefix(),
                    format!(":{}", keys::partition_tag(k)),
                    codec::outcome_message(id, &Outcome::Timeout),
                    codec::deadline_member(conv, id),
                ]
                .into_iter()
                .chain(Self::outbox_args(&codec::Outboxed::Call(id.to_owned())))
                .collect(),
            )
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
        let k = partition::of_call(id);
        let reply = strings(
            self.script(
                &self.scripts.cancel,
                vec![self.keys.call(id), self.keys.sockets(&found.binding.conv)],
                vec![
                    self.keys.node_channel_prefix(),
                    format!(":{}", keys::partition_tag(k)),
                ],
            )
            .await?,
        );
        Ok(Self::stored_record(id, &reply))
    }

    async fn call(&self, tenant: &str, id: &str) -> Result<Option<CallRecord>, BrokerError> {
        self.stored_call(tenant, id).await
    }

    async fn watch(&self, tenant: &str, id: &str) -> Result<Watch, BrokerError> {
        // Listening before the script runs: an outcome published right after it is heard.
        let (tx, rx) = oneshot::channel();
        lock(&self.watchers)
            .entry(id.to_owned())
            .or_default()
            .push(tx);
        let reply = self
            .script(
                &self.scripts.watch,
                vec![self.keys.call(id)],
                vec![self.node.clone()],
            )
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
        let mut watchers = lock(&self.watchers);
        if let Some(txs) = watchers.get_mut(id) {
            txs.retain(|tx| !tx.is_closed());
            if txs.is_empty() {
                watchers.remove(id);
            }
        }
        watch
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
