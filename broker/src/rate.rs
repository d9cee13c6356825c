//! Token buckets kept in this process: a node's page message rates. Every bucket is a GCRA
//! whose burst is [`model::burst`] of its rate, and all of them read one clock. (A tenant's
//! call rate, which every node shares, is [`model::Gcra`], run by the brokers.) And the
//! [`Reserves`] of tokens a node takes from a shared bucket in batches (a tenant's rate on
//! Redis Cluster, whose key lives on another shard than the call's).
//!
//! One clock, made once: making a clock (governor's default, quanta's) probes the CPU with
//! `CPUID`, which a virtual machine's hypervisor traps. A bucket per socket that made its own
//! clock cost a fifth of the gateway's CPU per WebSocket set-up (`docs/benchmarks.md` at
//! `8c6f334`, "Set-up cost").

use std::collections::HashMap;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

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

/// How long a node keeps the tokens it took ahead of its calls: those still unspent this long
/// after its last batch came back go back to the shared bucket with its next batch, and its
/// batches halve.
pub const RESERVE_LEASE: Duration = Duration::from_millis(100);

/// The largest batch of a rate of `per_second` a node takes at once: 10 ms of the rate. Below
/// 200 a second that is 1: no reserve, every call takes its own token.
pub fn reserve_cap(per_second: u32) -> u32 {
    (per_second / 100).max(1)
}

/// What a call does about its token, by [`Reserves::spend`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    /// A held token was spent. With `refill`, this call also takes a batch from the bucket
    /// alongside its own work (then [`Reserves::hold`]).
    Spent { refill: Option<Batch> },
    /// Nothing is held: the call takes up to this many from the bucket before it goes on, one
    /// for itself, and holds the rest ([`Reserves::hold`], when it asked for more than one).
    Take(u32),
}

/// A batch to take from the shared bucket: up to `want` tokens, after giving `back` unspent
/// ones back to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    pub want: u32,
    pub back: u32,
}

/// The tokens a node holds per key (a tenant), taken from a shared bucket in batches, so that
/// most calls cost no round trip to it.
///
/// - The shared bucket never grants more than its rate: a reserve only moves some of its tokens
///   ahead in time. Once [`RESERVE_LEASE`] has passed since the last batch came back, the next
///   call spends one of the tokens still held and gives the others back with its own batch:
///   every token but that one is spent within the lease.
/// - A batch follows what the node spends: the first is 2 tokens, each batch asked for because
///   the reserve ran below half of the last one is twice as large, up to [`reserve_cap`];
///   tokens outliving the lease halve it. A node holds at most one and a half batches (15 ms of
///   the rate), and about what it spends in a lease when it spends less: another node may be
///   refused while this one holds tokens, by that much.
/// - A call takes the bucket before its own work only when nothing is held: the first call of
///   a key, a call after a batch was refused, or one while another call's batch is on its way.
#[derive(Debug, Default)]
pub struct Reserves {
    held: Mutex<HashMap<String, Held>>,
}

#[derive(Debug)]
struct Held {
    tokens: u32,
    until: Instant,
    batch: u32,
    /// A batch is being taken for this key.
    refilling: bool,
}

impl Reserves {
    fn with<T>(&self, key: &str, now: Instant, f: impl FnOnce(&mut Held) -> T) -> T {
        let mut all = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        // A call's lookup makes no key: one is made only for a key seen the first time.
        if let Some(h) = all.get_mut(key) {
            return f(h);
        }
        f(all.entry(key.to_owned()).or_insert(Held {
            tokens: 0,
            until: now,
            batch: 1,
            refilling: false,
        }))
    }

    /// One call's token of `key`, whose rate is `per_second`, at `now`.
    pub fn spend(&self, key: &str, per_second: u32, now: Instant) -> Reserved {
        let cap = reserve_cap(per_second);
        if cap == 1 {
            return Reserved::Take(1);
        }
        self.with(key, now, |h| {
            if h.tokens > 0 && now >= h.until && !h.refilling {
                // Past the lease: this call spends one, the rest go back with a halved batch.
                let back = h.tokens - 1;
                h.tokens = 0;
                h.refilling = true;
                h.batch = (h.batch / 2).clamp(2, cap);
                return Reserved::Spent {
                    refill: Some(Batch {
                        want: h.batch,
                        back,
                    }),
                };
            }
            if h.tokens > 0 {
                h.tokens -= 1;
                if h.tokens < h.batch / 2 && !h.refilling {
                    h.refilling = true;
                    h.batch = (h.batch * 2).clamp(2, cap);
                    return Reserved::Spent {
                        refill: Some(Batch {
                            want: h.batch,
                            back: 0,
                        }),
                    };
                }
                return Reserved::Spent { refill: None };
            }
            if h.refilling {
                // Another call's batch is on its way: this one takes only its own token.
                return Reserved::Take(1);
            }
            h.refilling = true;
            h.batch = h.batch.clamp(2, cap);
            Reserved::Take(h.batch)
        })
    }

    /// The batch [`Reserves::spend`] asked for came back with `tokens` to hold (0 when the
    /// bucket refused or could not be reached).
    pub fn hold(&self, key: &str, tokens: u32, now: Instant) {
        self.with(key, now, |h| {
            h.refilling = false;
            if tokens > 0 {
                h.tokens += tokens;
                h.until = now + RESERVE_LEASE;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_two_hundred_a_second_every_call_takes_its_own_token() {
        let r = Reserves::default();
        let now = Instant::now();
        for _ in 0..3 {
            assert_eq!(r.spend("t", 199, now), Reserved::Take(1));
        }
        assert_eq!(reserve_cap(200), 2);
        assert_eq!(reserve_cap(10_000), 100);
    }

    /// Spends `n` tokens of `key` at 1,000/s (cap 10) at `now`, answering every batch asked for
    /// in full at once; returns the batches asked for.
    fn spend_n(r: &Reserves, key: &str, n: usize, now: Instant) -> Vec<Reserved> {
        let mut asked = Vec::new();
        for _ in 0..n {
            let s = r.spend(key, 1000, now);
            match s {
                Reserved::Take(want) if want > 1 => r.hold(key, want - 1, now),
                Reserved::Spent {
                    refill: Some(Batch { want, .. }),
                } => r.hold(key, want, now),
                _ => continue,
            }
            asked.push(s);
        }
        asked
    }

    #[test]
    fn batches_double_while_spent_within_the_lease_up_to_ten_ms_of_the_rate() {
        let r = Reserves::default();
        let now = Instant::now();
        let asked = spend_n(&r, "t", 40, now);
        let sizes: Vec<u32> = asked
            .iter()
            .map(|s| match *s {
                Reserved::Take(want)
                | Reserved::Spent {
                    refill: Some(Batch { want, .. }),
                } => want,
                Reserved::Spent { refill: None } => 0,
            })
            .collect();
        assert_eq!(
            sizes,
            [2, 4, 8, 10, 10, 10, 10],
            "54 taken, 40 spent, 14 held"
        );
        assert_eq!(
            spend_n(&r, "u", 1, now),
            [Reserved::Take(2)],
            "keys are separate"
        );
    }

    #[test]
    fn a_call_while_a_batch_is_on_its_way_takes_its_own_token_and_a_refused_batch_is_asked_again() {
        let r = Reserves::default();
        let now = Instant::now();
        assert_eq!(r.spend("t", 1000, now), Reserved::Take(2));
        assert_eq!(r.spend("t", 1000, now), Reserved::Take(1));
        r.hold("t", 0, now);
        assert_eq!(r.spend("t", 1000, now), Reserved::Take(2));
    }

    #[test]
    fn past_the_lease_a_call_spends_one_and_gives_the_rest_back_with_a_halved_batch() {
        let r = Reserves::default();
        let now = Instant::now();
        spend_n(&r, "t", 12, now);
        // Batches of 2, 4, 8 and 10 came back and 12 were spent: 12 held, 11 after one more.
        let almost = now + RESERVE_LEASE - Duration::from_millis(1);
        assert_eq!(r.spend("t", 1000, almost), Reserved::Spent { refill: None });
        let later = now + RESERVE_LEASE;
        let refill = Batch { want: 5, back: 10 };
        assert_eq!(
            r.spend("t", 1000, later),
            Reserved::Spent {
                refill: Some(refill)
            }
        );
        // Nothing held while that batch is on its way.
        assert_eq!(r.spend("t", 1000, later), Reserved::Take(1));
        r.hold("t", 5, later);
        assert_eq!(r.spend("t", 1000, later), Reserved::Spent { refill: None });
    }

    /// The shared bucket: the model's GCRA (the Redis `gcra` function's rule), in µs.
    struct Bucket {
        gcra: model::Gcra,
        tat: Option<u64>,
    }

    impl Bucket {
        /// Gives `back` tokens, then takes up to `want`.
        fn take(&mut self, now: u64, want: u32, back: u32) -> u32 {
            let t = self.gcra.take(self.tat, now, want, back);
            self.tat = Some(t.tat_us);
            t.taken
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// A call on node `node` after `dt` µs.
        Call { node: usize, dt: u64 },
        /// The oldest batch node `node` asked for comes back.
        Deliver { node: usize },
    }

    use proptest::prelude::*;

    proptest! {
        /// Random calls over three nodes, their batches coming back late or in order, against the
        /// bucket: no token is made or lost (what was granted, less what went back, is what the
        /// calls spent, what the nodes hold and what is on its way), a node never holds one and
        /// a half batches of the cap, and the calls placed never pass the bucket's burst plus
        /// its refill.
        #[test]
        fn reserves_neither_make_nor_lose_tokens_and_stay_under_the_bucket(
            per_second in 200u32..20_000,
            ops in prop::collection::vec(
                prop_oneof![
                    3 => (0..3usize, 0..3_000u64).prop_map(|(node, dt)| Op::Call { node, dt }),
                    1 => (0..3usize).prop_map(|node| Op::Deliver { node }),
                    1 => (0..3usize, 50_000..300_000u64).prop_map(|(node, dt)| Op::Call { node, dt }),
                ],
                1..400,
            ),
        ) {
            let gcra = model::Gcra::per_second(per_second);
            let interval = gcra.interval_us;
            let burst = model::burst(per_second);
            let mut bucket = Bucket { gcra, tat: None };
            let start = Instant::now();
            let nodes: Vec<Reserves> = (0..3).map(|_| Reserves::default()).collect();
            // Per node, the batches taken and not yet back: tokens to hold.
            let mut flight: Vec<std::collections::VecDeque<u32>> = vec![Default::default(); 3];
            let cap = reserve_cap(per_second);
            let (mut now, mut granted, mut returned, mut placed) = (0u64, 0u64, 0u64, 0u64);
            for op in ops {
                match op {
                    Op::Call { node, dt } => {
                        now += dt;
                        let at = start + Duration::from_micros(now);
                        match nodes[node].spend("t", per_second, at) {
                            Reserved::Spent { refill } => {
                                placed += 1;
                                if let Some(Batch { want, back }) = refill {
                                    let n = bucket.take(now, want, back);
                                    granted += u64::from(n);
                                    returned += u64::from(back);
                                    flight[node].push_back(n);
                                }
                            }
                            Reserved::Take(want) => {
                                let n = bucket.take(now, want, 0);
                                granted += u64::from(n);
                                if n > 0 {
                                    placed += 1;
                                }
                                if want > 1 {
                                    flight[node].push_back(n.saturating_sub(1));
                                }
                            }
                        }
                    }
                    Op::Deliver { node } => {
                        if let Some(n) = flight[node].pop_front() {
                            nodes[node].hold("t", n, start + Duration::from_micros(now));
                        }
                    }
                }
                let mut held = 0u64;
                for (r, f) in nodes.iter().zip(&flight) {
                    let mine = r.held.lock().unwrap().get("t").map_or(0, |h| h.tokens);
                    prop_assert!(mine <= cap * 3 / 2, "a node holds {mine}, cap {cap}");
                    held += u64::from(mine) + f.iter().map(|&n| u64::from(n)).sum::<u64>();
                }
                prop_assert_eq!(granted - returned, placed + held, "tokens made or lost");
                prop_assert!(
                    placed <= u64::from(burst) + now / interval + 1,
                    "{} placed by {} µs", placed, now
                );
            }
        }
    }

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
