//! Token buckets kept in this process: the memory broker's tenant call rates and a node's page
//! message rates. Every bucket is a GCRA whose burst is [`model::burst`] of its rate, and all
//! of them read one clock.
//!
//! One clock, made once: making a clock (governor's default, quanta's) probes the CPU with
//! `CPUID`, which a virtual machine's hypervisor traps. A bucket per socket that made its own
//! clock cost a fifth of the gateway's CPU per WebSocket set-up (`docs/benchmarks.md`,
//! "Set-up cost").

use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::LazyLock;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, NotUntil, Quota, RateLimiter};

use crate::model;

static CLOCK: LazyLock<DefaultClock> = LazyLock::new(DefaultClock::default);

/// The quota of `per_second` (at least 1), burst [`model::burst`].
fn quota(per_second: u32) -> Quota {
    let rate = NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(model::burst(per_second)).unwrap_or(NonZeroU32::MIN);
    Quota::per_second(rate).allow_burst(burst)
}

/// One bucket of `per_second`.
pub fn bucket(per_second: u32) -> DefaultDirectRateLimiter {
    RateLimiter::direct_with_clock(quota(per_second), CLOCK.clone())
}

/// One bucket of `per_second` per key.
pub fn keyed_buckets<K: Hash + Eq + Clone>(per_second: u32) -> DefaultKeyedRateLimiter<K> {
    RateLimiter::dashmap_with_clock(quota(per_second), CLOCK.clone())
}

/// How long until a refused take would have been allowed.
pub fn wait_time(refused: &NotUntil<<DefaultClock as Clock>::Instant>) -> Duration {
    refused.wait_time_from(CLOCK.now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_holds_its_burst_then_refuses_with_the_wait_for_one_token() {
        let b = bucket(10);
        for _ in 0..model::burst(10) {
            assert!(b.check().is_ok());
        }
        let refused = b.check().expect_err("the burst is spent");
        let wait = wait_time(&refused);
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(100),
            "one token of 10/s: {wait:?}"
        );
    }

    #[test]
    fn keyed_buckets_are_separate_per_key() {
        let b = keyed_buckets::<&str>(1);
        assert!(b.check_key(&"a").is_ok() && b.check_key(&"a").is_ok());
        assert!(b.check_key(&"a").is_err());
        assert!(b.check_key(&"b").is_ok());
    }

    #[test]
    fn a_rate_of_zero_is_one_per_second() {
        let b = bucket(0);
        assert!(b.check().is_ok() && b.check().is_ok());
        assert!(b.check().is_err());
    }
}
