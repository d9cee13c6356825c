//! Rates on Redis: one GCRA bucket per tenant, exact across nodes, burst `model::burst`; an
//! unreachable Redis refuses.

use super::*;
use crate::prelude::*;

#[async_trait]
impl Limits for RedisBroker {
    async fn take_call(&self, tenant: &str, per_second: u32) -> Result<(), TakeError> {
        let (interval_us, burst) = gcra_args(per_second);
        let wait_us = self
            .script(
                &self.scripts.gcra,
                vec![self.keys.rate(tenant)],
                vec![interval_us, burst],
            )
            .await?
            .as_u64()
            .unwrap_or(0);
        if wait_us == 0 {
            Ok(())
        } else {
            Err(TakeError::Limited(RateLimited {
                retry_after: Duration::from_micros(wait_us),
            }))
        }
    }
}

/// The `gcra` function's arguments for a rate of `per_second`: the emission interval in µs and
/// the burst (`model::burst`).
pub(super) fn gcra_args(per_second: u32) -> (String, String) {
    let interval_us = (1_000_000 / u64::from(per_second.max(1))).max(1);
    (
        interval_us.to_string(),
        model::burst(per_second).to_string(),
    )
}
