//! Rates of the memory broker: one token bucket per tenant, burst `model::burst`.

use super::*;
use crate::prelude::*;

#[async_trait]
impl Limits for MemoryBroker {
    async fn take_call(&self, tenant: &str, per_second: u32) -> Result<(), TakeError> {
        let limiter = {
            let mut limiters = lock(&self.limiters);
            Arc::clone(limiters.entry(tenant.to_owned()).or_insert_with(|| {
                let rate = NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN);
                let burst = NonZeroU32::new(model::burst(per_second)).unwrap_or(NonZeroU32::MIN);
                Arc::new(RateLimiter::direct(
                    Quota::per_second(rate).allow_burst(burst),
                ))
            }))
        };
        limiter.check().map_err(|not_until| {
            TakeError::Limited(RateLimited {
                retry_after: not_until.wait_time_from(DefaultClock::default().now()),
            })
        })
    }
}
