//! Rates of the memory broker: one bucket per tenant and one per credential whose policy sets
//! a rate, run by the model's GCRA
//! ([`model::Gcra`], burst [`model::burst`]) on this process's monotonic clock.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{MemoryBroker, lock};
use crate::model;
use crate::prelude::*;
use crate::{RateLimited, TakeError};

/// The origin of the buckets' clock (µs since then).
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// From this many buckets, the ones whose time has passed (equal to no bucket) are let go when
/// the count reaches it or a power of two past it: credentials' buckets come and go (an OAuth
/// subject's), and memory holds only the ones in use.
const PRUNE_PAST: usize = 4096;

#[async_trait]
impl Limits for MemoryBroker {
    async fn take_call(&self, tenant: &str, per_second: u32) -> Result<(), TakeError> {
        self.take_one(tenant, per_second)
    }

    async fn take_caller_call(
        &self,
        tenant: &str,
        bucket: &str,
        per_second: u32,
    ) -> Result<(), TakeError> {
        // A tenant id holds no newline: no credential's bucket is another tenant's.
        self.take_one(&caller_bucket(tenant, bucket), per_second)
    }
}

/// The name of a credential's bucket beside its tenant's in [`MemoryBroker`]'s rates.
pub(super) fn caller_bucket(tenant: &str, bucket: &str) -> String {
    format!("{tenant}\n{bucket}")
}

impl MemoryBroker {
    fn take_one(&self, key: &str, per_second: u32) -> Result<(), TakeError> {
        let now_us = u64::try_from(EPOCH.elapsed().as_micros()).unwrap_or(u64::MAX);
        let gcra = model::Gcra::per_second(per_second);
        let take = {
            let mut rates = lock(&self.rates);
            match rates.get_mut(key) {
                Some(tat) => {
                    let take = gcra.take(Some(*tat), now_us, 1, 0);
                    *tat = take.tat_us;
                    take
                }
                None => {
                    if rates.len() >= PRUNE_PAST && rates.len().is_power_of_two() {
                        // At 4,096 buckets, then at each doubling: a scan amortized over as many
                        // inserts as it looks at, never one per new bucket.
                        rates.retain(|_, tat| *tat > now_us);
                    }
                    let take = gcra.take(None, now_us, 1, 0);
                    rates.insert(key.to_owned(), take.tat_us);
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
