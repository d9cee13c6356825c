//! Rates of the memory broker: one bucket per tenant, run by the model's GCRA
//! ([`model::Gcra`], burst [`model::burst`]) on this process's monotonic clock.

use std::sync::LazyLock;

use super::*;
use crate::prelude::*;

/// The origin of the buckets' clock (µs since then).
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

#[async_trait]
impl Limits for MemoryBroker {
    async fn take_call(&self, tenant: &str, per_second: u32) -> Result<(), TakeError> {
        let now_us = u64::try_from(EPOCH.elapsed().as_micros()).unwrap_or(u64::MAX);
        let gcra = model::Gcra::per_second(per_second);
        let take = {
            let mut rates = lock(&self.rates);
            match rates.get_mut(tenant) {
                Some(tat) => {
                    let take = gcra.take(Some(*tat), now_us, 1, 0);
                    *tat = take.tat_us;
                    take
                }
                None => {
                    let take = gcra.take(None, now_us, 1, 0);
                    rates.insert(tenant.to_owned(), take.tat_us);
                    take
                }
            }
        };
        if take.taken > 0 {
            return Ok(());
        }
        Err(TakeError::Limited(RateLimited {
            retry_after: Duration::from_micros(take.wait_us),
        }))
    }
}
