//! Rates on Redis: one GCRA bucket per tenant, and one per credential whose policy sets a rate
//! (in the tenant's slot), exact across nodes, burst `model::burst`; an unreachable Redis
//! refuses. On Redis Cluster a node takes its calls' tokens in batches
//! (`rate::Reserves`, in [`RedisBroker::place`]).

use std::time::Duration;

use async_trait::async_trait;

use super::RedisBroker;
use super::reply::{RETRY, strings};
use super::scripts::Gcra;
use crate::prelude::*;
use crate::{BrokerError, RateLimited, TakeError, model};

#[async_trait]
impl Limits for RedisBroker {
    async fn take_call(&self, tenant: &str, per_second: u32) -> Result<(), TakeError> {
        self.take_tokens(tenant, per_second, 1, 0, "gcra")
            .await
            .map(|_| ())
    }

    async fn take_caller_call(
        &self,
        tenant: &str,
        bucket: &str,
        per_second: u32,
    ) -> Result<(), TakeError> {
        let key = self.conn.keys.caller_rate(tenant, bucket);
        self.take_at(key, per_second, 1, 0, "gcra_caller")
            .await
            .map(|_| ())
    }
}

impl RedisBroker {
    /// Up to `want` calls of `tenant`'s rate of `per_second` at once, as many as its bucket
    /// holds now (at least one, or refused with the wait for one), after giving `back` unspent
    /// ones back to it. Observed as the script `label`: `gcra_before_call` when a call waits
    /// for it (on a Cluster, a node holding none of the tenant's tokens), so that the metrics
    /// tell the round trips a call waited for from the batches sent beside a call.
    pub(super) async fn take_tokens(
        &self,
        tenant: &str,
        per_second: u32,
        want: u32,
        back: u32,
        label: &'static str,
    ) -> Result<u32, TakeError> {
        self.take_at(self.conn.keys.rate(tenant), per_second, want, back, label)
            .await
    }

    /// [`Self::take_tokens`] from the bucket at `rate`.
    async fn take_at(
        &self,
        rate: String,
        per_second: u32,
        want: u32,
        back: u32,
        label: &'static str,
    ) -> Result<u32, TakeError> {
        let (interval, burst) = gcra_args(per_second);
        let reply = self
            .run_as(
                Gcra {
                    rate,
                    interval,
                    burst,
                    want,
                    back,
                },
                label,
            )
            .await?;
        let reply: Vec<u64> = strings(reply)
            .iter()
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        let (taken, wait_us) = match reply[..] {
            [taken, wait_us] => (taken, wait_us),
            _ => return Err(BrokerError::Unavailable { retry_after: RETRY }.into()),
        };
        if taken > 0 {
            Ok(u32::try_from(taken).unwrap_or(want))
        } else {
            Err(TakeError::Limited(RateLimited {
                retry_after: Duration::from_micros(wait_us.max(1)),
            }))
        }
    }
}

/// The `gcra` function's arguments for a rate of `per_second`: the emission interval in µs
/// (`model::Gcra`) and the burst (`model::burst`).
pub(super) fn gcra_args(per_second: u32) -> (u64, u32) {
    (
        model::Gcra::per_second(per_second).interval_us,
        model::burst(per_second),
    )
}
