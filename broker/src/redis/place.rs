//! Placing a call on Redis: the tenant's rate (taken in the place script on one Redis, by the
//! node's reserve in batches; beside it on a Cluster), then `place.lua` against what this node
//! last read of the conversation, read again and retried when it changed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::interfaces::{ClientLike, KeysInterface};

use super::reply::{RETRY, parts, unavailable};
use super::scripts::{Place, PlaceRate};
use super::state::Expected;
use super::{RedisBroker, limits};
use crate::prelude::*;
use crate::rate::{Batch, Reserved};
use crate::{
    BrokerError, CallBinding, CallRequest, CallTarget, PlaceError, Placed, RateLimited, model,
    now_ms, partition,
};

impl RedisBroker {
    /// [`Broker::place_call`] on Redis: `place.lua`, which takes the tenant's rate too.
    /// On Redis Cluster the rate lives on another shard than the conversation: the call spends
    /// a token of this node's reserve (`rate::Reserves`), and takes the tenant's bucket first
    /// only when none is held; a refill of the reserve goes out beside the place script, so
    /// that a call costs two round trips there too.
    /// A caller's tool policy is asked first, against what this node last read of the
    /// conversation (read now when it read nothing yet), then on every attempt against what
    /// the script checks is still current: a refused call takes nothing, and a policy check
    /// costs no round trip of its own. A caller's own rate is a round trip of its own (its
    /// bucket is in the tenant's slot, not the conversation's), only for a policy that sets
    /// one. A request named by its tool's LLM name is resolved the same way, before the
    /// policy: against what this node last read, then against what the script holds current.
    pub(super) async fn place(&self, mut req: CallRequest) -> Result<Placed, PlaceError> {
        // What the tool is named and the policy asked against, when either needs it: the
        // script then places the call against the same read.
        let mut read = None;
        if req.gate.is_some() || req.llm_name.is_some() {
            let expected = self.resolved(&mut req).await?;
            req.permitted(expected.target.as_ref())?;
            read = Some(expected);
        }
        if let Some(r) = &req.caller_rate {
            self.take_caller_call(&req.conv.tenant, &r.bucket, r.per_second)
                .await?;
        }
        let per_second = req.calls_per_second;
        let spent = self
            .calls
            .reserves
            .spend(&req.conv.tenant, per_second, Instant::now());
        if !self.conn.cluster {
            // One Redis: the rate's key shares the script's server, so the place script takes
            // whatever the call and the reserve need, in the call's own round trip.
            let take = match spent {
                Reserved::Take(want) => Some(Take {
                    want,
                    back: 0,
                    need: true,
                }),
                Reserved::Spent { refill: None } => None,
                Reserved::Spent {
                    refill: Some(Batch { want, back }),
                } => Some(Take {
                    want,
                    back,
                    need: false,
                }),
            };
            let tenant = req.conv.tenant.clone();
            let mut held = 0;
            let placed = self.place_here(req, read, take, &mut held).await;
            // A batch for the reserve was asked for (not a lone call's token): what came back
            // is held, nothing when refused or unanswered.
            if take.is_some_and(|t| !t.need || t.want > 1) {
                self.calls.reserves.hold(&tenant, held, Instant::now());
            }
            return placed;
        }
        match spent {
            Reserved::Take(want) => {
                let tenant = &req.conv.tenant;
                let taken = self
                    .take_tokens(tenant, per_second, want, 0, "gcra_before_call")
                    .await;
                if want > 1 {
                    let held = taken.as_ref().map_or(0, |n| n.saturating_sub(1));
                    self.calls.reserves.hold(tenant, held, Instant::now());
                }
                taken?;
                self.place_here(req, read, None, &mut 0).await
            }
            Reserved::Spent { refill: None } => self.place_here(req, read, None, &mut 0).await,
            Reserved::Spent {
                refill: Some(Batch { want, back }),
            } => {
                // The place script takes the request; the batch is rare (one per batch). Boxed:
                // the two futures side by side would double what every call's placement holds
                // (18 KiB where one is 10), and every call's future is boxed and moved whole.
                let tenant = req.conv.tenant.clone();
                let mut none = 0;
                let (taken, placed) = Box::pin(async {
                    tokio::join!(
                        self.take_tokens(&tenant, per_second, want, back, "gcra"),
                        self.place_here(req, read, None, &mut none)
                    )
                })
                .await;
                self.calls
                    .reserves
                    .hold(&tenant, taken.unwrap_or(0), Instant::now());
                placed
            }
        }
    }

    /// `place.lua` against what this node last read of the conversation (`read`, when the
    /// request was already named and its policy asked against it); read again and retried when
    /// the conversation changed since, the tool named and the policy asked again against the
    /// new read. With `take`, the script takes tokens of the tenant's rate (on one Redis), and
    /// `held` is set to those it took for the node's reserve; without, the call's token was
    /// taken already.
    async fn place_here(
        &self,
        mut req: CallRequest,
        read: Option<Arc<Expected>>,
        take: Option<Take>,
        held: &mut u32,
    ) -> Result<Placed, PlaceError> {
        let mut expected = match read {
            Some(e) => e,
            None => self.resolved(&mut req).await?,
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
                hinted: Vec::new(),
                digests: Vec::new(),
            };
            let target = expected.target.as_ref().unwrap_or(&fallback);
            let binding = req.binding_for(target, &self.node.id);
            let place = Place {
                bind: self.bind_args(&binding, &req.frame_json(target), req.trace.as_deref()),
                rate: take.map(|t| {
                    let (interval, burst) = limits::gcra_args(req.calls_per_second);
                    PlaceRate {
                        rate: self.conn.keys.rate(&req.conv.tenant),
                        interval,
                        burst,
                        want: t.want,
                        back: t.back,
                        need: t.need,
                    }
                }),
                manifest_prefix: self.conn.keys.manifest_prefix(&req.conv),
                expected_client: client,
                expected_seq: expected.seq.clone(),
                now: now_ms(),
                grace: model::millis(model::RECONNECT_GRACE),
                live: self.node.live.nodes(),
                dead: self.node.live.dead(),
            };
            let rx = self
                .calls
                .waiters
                .wait(&binding.id, partition::of_conv(&binding.conv));
            let sent = self.conn.client.is_connected();
            let reply = match self.run(place).await {
                Ok(r) => parts(&r, usize::MAX),
                Err(e) => {
                    // Sent, but no answer: Redis may have placed it (or may yet, from its
                    // buffer). Not answered until known: the call's record says.
                    if sent && self.placed_after_all(&binding).await {
                        return Ok(Placed {
                            binding,
                            waiter: rx,
                        });
                    }
                    self.calls.waiters.forget(&binding.id);
                    return Err(e.into());
                }
            };
            if let Some(n) = reply.get(1).filter(|_| {
                matches!(
                    reply.first().map(String::as_str),
                    Some("ok" | "no_page" | "unreached")
                )
            }) {
                *held = n.parse().unwrap_or(0);
            }
            match reply.first().map(String::as_str) {
                Some("ok") if expected.target.is_some() => {
                    return Ok(Placed {
                        binding,
                        waiter: rx,
                    });
                }
                Some("rate") => {
                    self.calls.waiters.forget(&binding.id);
                    let wait_us = reply.get(1).and_then(|w| w.parse().ok()).unwrap_or(1);
                    return Err(PlaceError::Limited(RateLimited {
                        retry_after: Duration::from_micros(wait_us),
                    }));
                }
                Some("unreached") => {
                    // Pages are connected but no node's channel took the frame: a subscription
                    // being restored after a failover or a slot move. Nothing was bound.
                    self.calls.waiters.forget(&binding.id);
                    tracing::debug!(call_id = %binding.id, "call frame reached no node: 503");
                    return Err(PlaceError::Broker(BrokerError::Unavailable {
                        retry_after: RETRY,
                    }));
                }
                Some("no_page" | "ok") => {
                    self.calls.waiters.forget(&binding.id);
                    return Err(PlaceError::NoPage);
                }
                Some("unknown") => {
                    // A node this one does not count as live holds sockets (it may have just
                    // started): read the live set again; one still missing is dead.
                    self.calls.waiters.forget(&binding.id);
                    self.refresh_live().await;
                    let live = self.node.live.nodes();
                    let missing: Vec<String> = reply[1..]
                        .iter()
                        .filter(|n| !live.contains(n.as_str()))
                        .cloned()
                        .collect();
                    self.node.live.known_dead(&missing);
                }
                _ => {
                    // `stale`: the conversation's current page changed since this node read it.
                    // The manifest the script holds current: the tool is named and the policy
                    // asked against it again.
                    self.calls.waiters.forget(&binding.id);
                    expected = self.expect(&req.conv).await?;
                    req.resolve(expected.tools())?;
                    req.permitted(expected.target.as_ref())?;
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
        let key = self
            .conn
            .keys
            .call(partition::of_conv(&binding.conv), &binding.id);
        let read = crate::retry::until_answered(
            Instant::now() + left,
            |_| true,
            |_| async {
                self.conn
                    .client
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
}

/// What the place script takes of the tenant's rate on one Redis ([`crate::rate::Reserves`]'s word
/// for the call): up to `want` tokens after giving `back` back, the call's own among them when
/// `need`.
#[derive(Debug, Clone, Copy)]
struct Take {
    want: u32,
    back: u32,
    need: bool,
}
