//! Rates of the memory broker: one token bucket per tenant, burst `model::burst`.

use super::*;
use crate::prelude::*;

#[async_trait]
impl Limits for MemoryBroker {
    async fn take_call(&self, tenant: &str, per_second: u32) -> Result<(), TakeError> {
        let limiter = {
            let mut limiters = lock(&self.limiters);
            match limiters.get(tenant) {
                Some(l) => Arc::clone(l),
                None => Arc::clone(
                    limiters
                        .entry(tenant.to_owned())
                        .or_insert_with(|| Arc::new(rate::bucket(per_second))),
                ),
            }
        };
        limiter.check().map_err(|not_until| {
            TakeError::Limited(RateLimited {
                retry_after: rate::wait_time(&not_until),
            })
        })
    }
}
