//! The rules of the broker's state, written once, as plain functions and data: no I/O and no
//! clock (the time is passed in). [`crate::memory::MemoryBroker`] calls them; the Redis
//! scripts implement the same rules, and the broker contract suite (`broker/tests/it`) runs
//! both implementations against them. `docs/architecture.md` ("The state model") shows the same
//! rules as one table.

use std::time::Duration;

use crate::{CallState, Deadline, Rejection};

mod presence;

pub use presence::{Presence, Present, accepts_calls, current_page};

/// Where a lookup by id found its record: under the asking page's conversation, under another
/// conversation (or tenant), or nowhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found<T> {
    /// Stored under the asking page's own conversation.
    Here(T),
    /// Stored, but for another tenant, user or conversation.
    Elsewhere,
    /// Never stored (or expired).
    Nowhere,
}

/// What a call binding says about who may answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallFacts<'a> {
    /// The clientId the call was sent to.
    pub client_id: &'a str,
    /// Where the call stands.
    pub state: CallState,
    /// Its absolute deadline, ms since the epoch.
    pub deadline_ms: u64,
}

/// Security MUST 3 for a `result`: the checks, in the order their reasons are reported.
/// `Ok` means the result wins and the call becomes answered.
pub fn check_result(
    found: Found<CallFacts<'_>>,
    from_client: &str,
    now_ms: u64,
) -> Result<(), Rejection> {
    let call = match found {
        Found::Nowhere => return Err(Rejection::UnknownId),
        Found::Elsewhere => return Err(Rejection::Mismatch),
        Found::Here(c) => c,
    };
    if call.client_id != from_client {
        return Err(Rejection::Mismatch);
    }
    match call.state {
        CallState::Answered => Err(Rejection::Duplicate),
        CallState::TimedOut => Err(Rejection::Late),
        CallState::Pending if Deadline::at(call.deadline_ms).passed_at(now_ms) => {
            Err(Rejection::Late)
        }
        CallState::Pending => Ok(()),
    }
}

/// [`check_result`] of a result submitted again by the node that received it at `received_ms`,
/// after a submission whose outcome it did not hear: the deadline is judged at `received_ms`,
/// and a call already answered by this page with this very outcome (`same_outcome`: the
/// earlier submission, applied) is `Ok` (the result is recorded; nothing more is done).
pub fn check_result_again(
    found: Found<CallFacts<'_>>,
    from_client: &str,
    received_ms: u64,
    same_outcome: bool,
) -> Result<(), Rejection> {
    if let Found::Here(c) = found
        && c.state == CallState::Answered
        && c.client_id == from_client
        && same_outcome
    {
        return Ok(());
    }
    check_result(found, from_client, received_ms)
}

/// What a confirmId binding says about who may confirm it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfirmFacts<'a> {
    /// The page that sent the `needs_confirmation`.
    pub client_id: &'a str,
    /// Already confirmed, or expired because its page was gone.
    pub used: bool,
}

/// Security MUSTs 3 and 4 for a `confirmed`: bound to the page that sent the
/// `needs_confirmation`, accepted once. ConfirmIds are minted by pages, so they are stored per
/// conversation (one conversation's page cannot squat another's id); a confirmId known only in
/// another conversation is a `mismatch`.
pub fn check_confirm(found: Found<ConfirmFacts<'_>>, from_client: &str) -> Result<(), Rejection> {
    let confirm = match found {
        Found::Nowhere => return Err(Rejection::UnknownConfirm),
        Found::Elsewhere => return Err(Rejection::Mismatch),
        Found::Here(c) => c,
    };
    if confirm.client_id != from_client {
        return Err(Rejection::Mismatch);
    }
    if confirm.used {
        return Err(Rejection::Duplicate);
    }
    Ok(())
}

/// [`check_confirm`] of a `confirmed` submitted again after a submission whose outcome the node
/// did not hear: a confirmation its page confirmed (`confirmed_by_page`, not expired by the
/// sweep) is `Ok` (accepted, announced once under its name).
pub fn check_confirm_again(
    found: Found<ConfirmFacts<'_>>,
    from_client: &str,
    confirmed_by_page: bool,
) -> Result<(), Rejection> {
    if let Found::Here(c) = found
        && c.client_id == from_client
        && c.used
        && confirmed_by_page
    {
        return Ok(());
    }
    check_confirm(found, from_client)
}

/// What the confirmation sweep does with one pending confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfirmSweep {
    /// Keep it; `absent_since` is when its page was first seen certainly gone (`None` while it
    /// may be present).
    Keep {
        /// Ms since the epoch, or `None`.
        absent_since: Option<u64>,
    },
    /// Its page has been gone for the whole grace: mark it used and announce it expired (D23).
    Expire,
}

/// Seed D23: only a page that is gone has its confirmIds treated as expired. A page counts as
/// gone when no socket of its conversation may be it ([`Present::possibly`]) for `grace`
/// without a break; any sign of it resets the clock.
pub fn sweep_confirm(
    present: bool,
    absent_since: Option<u64>,
    now_ms: u64,
    grace: Duration,
) -> ConfirmSweep {
    if present {
        return ConfirmSweep::Keep { absent_since: None };
    }
    match absent_since {
        None => ConfirmSweep::Keep {
            absent_since: Some(now_ms),
        },
        Some(since) if now_ms.saturating_sub(since) >= millis(grace) => ConfirmSweep::Expire,
        Some(since) => ConfirmSweep::Keep {
            absent_since: Some(since),
        },
    }
}

/// How long a page must be gone (no socket anywhere that may be it) before its pending
/// confirmations count as expired: longer than the page-side transport's longest reconnect
/// backoff (30 s).
pub const CONFIRM_ABANDON_GRACE: Duration = Duration::from_secs(60);

/// How long a conversation whose pages a draining node closed still accepts calls for its
/// current page: the page reconnects elsewhere and gets them when it is back.
pub const RECONNECT_GRACE: Duration = Duration::from_secs(10);

pub use crate::deadline::SWEEP_GRACE;

/// Every rate is a GCRA / token bucket whose burst is this many seconds of its rate.
pub const BURST_FACTOR: u32 = 2;

/// The burst of a rate of `per_second` (at least 1).
pub fn burst(per_second: u32) -> u32 {
    per_second.max(1).saturating_mul(BURST_FACTOR)
}

/// A rate as a GCRA (generic cell rate algorithm: a token bucket kept as one instant, the
/// theoretical arrival time `tat` of the next call at the rate). A call is allowed while `tat`
/// is at most [`Gcra::tolerance_us`] ahead of now, and moves it one interval later; a bucket
/// never taken, or idle since, is full. Times are µs of one clock. The memory broker runs it
/// per tenant; the Redis `gcra` script function writes the same rule in Lua, on Redis's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    /// The emission interval: µs between two calls at the rate (at least 1).
    pub interval_us: u64,
    /// The burst tolerance: how far ahead of now `tat` may be for a call to be allowed,
    /// [`burst`] less one intervals, so that a full bucket allows a burst at once.
    pub tolerance_us: u64,
}

/// What [`Gcra::take`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Take {
    /// Calls allowed; 0 when refused (or when none were asked for).
    pub taken: u32,
    /// When refused, µs until one call would be allowed (at least 1); 0 otherwise.
    pub wait_us: u64,
    /// The bucket's theoretical arrival time after the decision, µs.
    pub tat_us: u64,
}

impl Gcra {
    /// The GCRA of a rate of `per_second` (at least 1), burst [`burst`].
    pub fn per_second(per_second: u32) -> Gcra {
        let interval_us = (1_000_000 / u64::from(per_second.max(1))).max(1);
        Gcra {
            interval_us,
            tolerance_us: interval_us * u64::from(burst(per_second) - 1),
        }
    }

    /// At `now_us`, with the bucket at `tat_us` (`None`: never taken, or forgotten when full),
    /// gives `back` unspent calls back to it (never past now), then takes up to `want` calls,
    /// as many as it holds now: none when it holds none (refused, with the wait for one).
    pub fn take(&self, tat_us: Option<u64>, now_us: u64, want: u32, back: u32) -> Take {
        let tat = tat_us
            .unwrap_or(now_us)
            .saturating_sub(u64::from(back).saturating_mul(self.interval_us))
            .max(now_us);
        if now_us + self.tolerance_us < tat {
            return Take {
                taken: 0,
                wait_us: tat - self.tolerance_us - now_us,
                tat_us: tat,
            };
        }
        let holds = (now_us + self.tolerance_us - tat) / self.interval_us + 1;
        let taken = holds.min(u64::from(want));
        Take {
            taken: u32::try_from(taken).unwrap_or(want),
            wait_us: 0,
            tat_us: tat + taken * self.interval_us,
        }
    }
}

/// A node that has not refreshed its heartbeat for this many intervals counts as dead: its
/// sockets no longer count as presence anywhere.
pub const DEAD_AFTER_HEARTBEATS: u32 = 5;

/// How long the broker keeps what nobody may still need. The same values serve both brokers;
/// tests compress them to cross every limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// A finished call stays readable at `GET /calls/{id}` this long after its deadline.
    pub finished_calls: Duration,
    /// A confirmId binding lives this long (the page's own confirmation expiry is 600 s).
    pub confirmations: Duration,
    /// What a live page needs (its manifest, its presence) outlives the last refresh by the node
    /// holding it by this long; a conversation without sockets keeps its manifests this long.
    pub conversations: Duration,
    /// Events kept per tenant for `Last-Event-ID` resumption, at most this many…
    pub events_per_tenant: u64,
    /// …and at most this many bytes of event bodies (a manifest event may be 1 MiB).
    pub event_bytes_per_tenant: u64,
    /// The grace of D23 ([`CONFIRM_ABANDON_GRACE`]).
    pub confirm_abandon_grace: Duration,
    /// A page load that is gone and is not its conversation's current page keeps its manifest
    /// this long after it left (for a reconnect that does not send it again), and at most
    /// [`GONE_MANIFESTS_KEPT`] such page loads of a conversation keep one at once.
    pub gone_manifests: Duration,
}

/// How many gone page loads of one conversation (other than its current page) keep their
/// manifest at once, the latest to leave first: a page that reloads fast leaves this many
/// manifests behind, not one per reload.
pub const GONE_MANIFESTS_KEPT: usize = 8;

/// How many names one conversation remembers announcing for its whole life
/// ([`crate::Pages::announce_once`]); past it, a name is answered new without being kept.
pub const ANNOUNCED_PER_CONVERSATION: usize = 1_000;

impl Default for Retention {
    fn default() -> Self {
        Retention {
            finished_calls: Duration::from_secs(300),
            confirmations: Duration::from_secs(900),
            conversations: Duration::from_secs(600),
            events_per_tenant: 10_000,
            event_bytes_per_tenant: 16 * 1024 * 1024,
            confirm_abandon_grace: CONFIRM_ABANDON_GRACE,
            // The page transport's longest reconnect backoff, as the confirmations' grace.
            gone_manifests: CONFIRM_ABANDON_GRACE,
        }
    }
}

/// Which of a tenant's retained events to drop, oldest first, so that at most
/// `retention.events_per_tenant` events and `retention.event_bytes_per_tenant` bytes remain:
/// the number of leading events of `sizes` (oldest first) to drop. The newest event is always
/// kept, even when it alone is over the byte bound.
pub fn events_to_trim(
    sizes: impl ExactSizeIterator<Item = u64>,
    total_bytes: u64,
    retention: &Retention,
) -> usize {
    let count = sizes.len();
    let mut bytes = total_bytes;
    let mut drop = 0;
    for size in sizes {
        let remaining = (count - drop) as u64;
        if remaining <= 1
            || (remaining <= retention.events_per_tenant
                && bytes <= retention.event_bytes_per_tenant)
        {
            break;
        }
        bytes = bytes.saturating_sub(size);
        drop += 1;
    }
    drop
}

/// Milliseconds of a duration, saturating.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_is_checked_in_the_order_of_its_reasons() {
        let pending = |deadline_ms| {
            Found::Here(CallFacts {
                client_id: "p1",
                state: CallState::Pending,
                deadline_ms,
            })
        };
        assert_eq!(
            check_result(Found::Nowhere, "p1", 0),
            Err(Rejection::UnknownId)
        );
        assert_eq!(
            check_result(Found::Elsewhere, "p1", 0),
            Err(Rejection::Mismatch)
        );
        assert_eq!(check_result(pending(10), "p2", 0), Err(Rejection::Mismatch));
        assert_eq!(check_result(pending(10), "p1", 11), Err(Rejection::Late));
        assert_eq!(check_result(pending(10), "p1", 10), Ok(()));
        let done = |state| {
            Found::Here(CallFacts {
                client_id: "p1",
                state,
                deadline_ms: 10,
            })
        };
        assert_eq!(
            check_result(done(CallState::Answered), "p1", 0),
            Err(Rejection::Duplicate)
        );
        assert_eq!(
            check_result(done(CallState::TimedOut), "p1", 0),
            Err(Rejection::Late)
        );
    }

    #[test]
    fn a_confirmation_is_bound_and_single_use() {
        let here = |used| {
            Found::Here(ConfirmFacts {
                client_id: "p1",
                used,
            })
        };
        assert_eq!(
            check_confirm(Found::Nowhere, "p1"),
            Err(Rejection::UnknownConfirm)
        );
        assert_eq!(
            check_confirm(Found::Elsewhere, "p1"),
            Err(Rejection::Mismatch)
        );
        assert_eq!(check_confirm(here(false), "p2"), Err(Rejection::Mismatch));
        assert_eq!(check_confirm(here(true), "p1"), Err(Rejection::Duplicate));
        assert_eq!(check_confirm(here(false), "p1"), Ok(()));
    }

    #[test]
    fn a_confirmation_expires_only_after_its_page_was_gone_for_the_whole_grace() {
        let g = Duration::from_secs(60);
        assert_eq!(
            sweep_confirm(true, Some(5), 100, g),
            ConfirmSweep::Keep { absent_since: None }
        );
        assert_eq!(
            sweep_confirm(false, None, 100, g),
            ConfirmSweep::Keep {
                absent_since: Some(100)
            }
        );
        assert_eq!(
            sweep_confirm(false, Some(100), 60_099, g),
            ConfirmSweep::Keep {
                absent_since: Some(100)
            }
        );
        assert_eq!(
            sweep_confirm(false, Some(100), 60_100, g),
            ConfirmSweep::Expire
        );
    }

    #[test]
    fn events_are_trimmed_by_count_and_by_bytes_keeping_the_newest() {
        let r = Retention {
            events_per_tenant: 3,
            event_bytes_per_tenant: 100,
            ..Retention::default()
        };
        let trim = |sizes: &[u64]| events_to_trim(sizes.iter().copied(), sizes.iter().sum(), &r);
        assert_eq!(trim(&[10, 10, 10]), 0);
        assert_eq!(trim(&[10, 10, 10, 10, 10]), 2);
        assert_eq!(trim(&[60, 30, 30]), 1);
        assert_eq!(
            trim(&[60, 30, 500]),
            2,
            "the newest stays even when it alone is too big"
        );
        assert_eq!(trim(&[]), 0);
    }

    #[test]
    fn bursts_are_twice_the_rate() {
        assert_eq!(burst(100), 200);
        assert_eq!(burst(0), 2);
    }

    #[test]
    fn a_rate_allows_its_burst_at_once_then_one_call_per_interval() {
        let g = Gcra::per_second(10);
        assert_eq!((g.interval_us, g.tolerance_us), (100_000, 1_900_000));
        assert_eq!(Gcra::per_second(0), Gcra::per_second(1));
        let (mut tat, now) = (None, 5_000_000);
        for _ in 0..burst(10) {
            let t = g.take(tat, now, 1, 0);
            assert_eq!((t.taken, t.wait_us), (1, 0));
            tat = Some(t.tat_us);
        }
        let refused = g.take(tat, now, 1, 0);
        assert_eq!((refused.taken, refused.wait_us), (0, 100_000));
        assert_eq!(Some(refused.tat_us), tat, "a refusal changes nothing");
        assert_eq!(g.take(tat, now + 99_999, 1, 0).wait_us, 1);
        assert_eq!(
            g.take(tat, now + 100_000, 1, 0).taken,
            1,
            "one interval refills one"
        );
        // Idle for longer than the burst takes to refill: full again, never more.
        assert_eq!(g.take(tat, now + 60_000_000, 50, 0).taken, burst(10));
    }

    #[test]
    fn a_rate_takes_what_it_holds_and_takes_back_unspent_calls_never_past_now() {
        let g = Gcra::per_second(10);
        let now = 1_000_000;
        let t = g.take(None, now, 15, 0);
        assert_eq!((t.taken, t.tat_us), (15, now + 1_500_000));
        let t = g.take(Some(t.tat_us), now, 15, 0);
        assert_eq!(
            (t.taken, t.tat_us),
            (5, now + 2_000_000),
            "the rest of the burst"
        );
        let back = g.take(Some(t.tat_us), now, 0, 3);
        assert_eq!(
            (back.taken, back.wait_us, back.tat_us),
            (0, 0, now + 1_700_000)
        );
        let back = g.take(Some(back.tat_us), now, 1, 40);
        assert_eq!(
            back.tat_us,
            now + 100_000,
            "given back down to now, then one taken"
        );
    }
}
