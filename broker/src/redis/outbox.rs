//! The partitions' outboxes: a script that changes what an agent must hear of records the change
//! in its partition's outbox (`{p<k>}:outbox`, on the conversation's slot: the tenant's event
//! stream is on another slot of a Redis Cluster, so no script can write both). The node that made
//! the change then emits its events under names of their own and takes it out; a change still
//! there after [`RELAY_AFTER`] (its node stalled or died in between) is relayed by the deadline
//! sweep. A relay that runs twice emits once (`Events::emit_once`).

use std::collections::HashMap;

use fred::interfaces::HashesInterface;

use super::RedisBroker;
use super::codec::{self, Outboxed};
use super::reply::{strings, unavailable};
use super::scripts::ReadCall;
use crate::partition::{self, PARTITIONS};
use crate::{BrokerError, CallState, Change, RELAY_AFTER, model, now_ms};

impl RedisBroker {
    /// Emits the events of a change this node recorded and takes it out of its outbox. Not
    /// answered, it stays there for the deadline sweep.
    pub(super) async fn relay(&self, change: &Change) {
        let relayed = async {
            crate::announce(self, change).await?;
            let k = partition::of_conv(change.conv());
            let _: i64 = self
                .conn
                .client
                .hdel(self.conn.keys.outbox(k), change.name())
                .await
                .map_err(|e| unavailable(&e))?;
            Ok::<_, BrokerError>(())
        }
        .await;
        if let Err(e) = relayed {
            let c = change.conv();
            tracing::warn!(tenant = %c.tenant, user = %c.user, conversation = %c.conversation, error = %e, "events of a change not emitted yet: the deadline sweep emits them from the outbox");
        }
    }

    /// Relays the changes that waited in any partition's outbox for [`RELAY_AFTER`] (part of
    /// the leased deadline sweep). Returns how many it relayed.
    pub(super) async fn relay_outboxes(&self) -> Result<usize, BrokerError> {
        let reads = (0..PARTITIONS).map(|k| {
            self.conn
                .client
                .hgetall::<HashMap<String, String>, _>(self.conn.keys.outbox(k))
        });
        let after = model::millis(RELAY_AFTER);
        let now = now_ms();
        let mut relayed = 0;
        for (k, read) in (0..PARTITIONS).zip(futures_util::future::join_all(reads).await) {
            for (name, entry) in read.map_err(|e| unavailable(&e))? {
                let change = match codec::parse_outbox_entry(&entry) {
                    Some((at, _)) if now < at + after => continue,
                    Some((_, o)) => self.resolve(k, o).await?,
                    None => None,
                };
                match change {
                    Some(change) => {
                        tracing::info!(tenant = %change.conv().tenant, change = %name, "events of a change emitted by the sweep (its node did not)");
                        self.relay(&change).await;
                        relayed += 1;
                    }
                    None => {
                        tracing::error!(change = %name, "a change in the outbox cannot be announced: its state is gone (past its retention) or unreadable; dropped");
                        let _: Result<i64, _> = self
                            .conn
                            .client
                            .hdel(self.conn.keys.outbox(k), name.as_str())
                            .await;
                    }
                }
            }
        }
        Ok(relayed)
    }

    /// The whole change an entry of partition `k`'s outbox names, read from what it changed.
    async fn resolve(&self, k: u16, o: Outboxed) -> Result<Option<Change>, BrokerError> {
        Ok(match o {
            Outboxed::Ready(c) => Some(c),
            Outboxed::Call(id) => {
                let f = strings(
                    self.run(ReadCall {
                        call: self.conn.keys.call(k, &id),
                    })
                    .await?,
                );
                Self::stored_record(&id, &f)
                    .filter(|r| r.state != CallState::Pending)
                    .map(Change::Call)
            }
            Outboxed::Confirmation {
                conv,
                client_id,
                confirm_id,
                outcome,
            } => {
                let f: Vec<Option<String>> = self
                    .conn
                    .client
                    .hmget(self.conn.keys.confirm(&conv, &confirm_id), vec!["k", "t"])
                    .await
                    .map_err(|e| unavailable(&e))?;
                match &f[..] {
                    [Some(call_id), summary] => Self::confirm_binding(
                        &confirm_id,
                        &conv,
                        &client_id,
                        call_id,
                        summary.as_deref().unwrap_or_default(),
                    )
                    .map(|binding| Change::Confirmation { binding, outcome }),
                    _ => None,
                }
            }
        })
    }
}
