//! A call's deadline, and what happens when it passes: the one place that says it.
//!
//! A call's deadline is one instant, ms since the epoch ([`Deadline`]), made once when the
//! call is placed ([`Deadline::after`], on the agent's node, from the request's `timeoutMs` or
//! the tenant's default) and stored with the call's binding (`CallBinding::deadline_ms`, the
//! page message's `deadline`, the partition's deadline set on Redis). Every part that acts on
//! it reads that instant; none keeps a duration of its own.
//!
//! When it passes:
//!
//! 1. **The agent's node times the call out**, at that instant: the call's supervisor
//!    (`gateway::calls::supervise`) sleeps [`Deadline::remaining`] and asks the broker's atomic
//!    check-and-mark (`Calls::time_out`; `timeout.lua` on Redis). A page's answer recorded
//!    before it wins; otherwise the call is timed out (4.). An unreachable broker is asked
//!    again until it answers (the page's answer may still win meanwhile): the agent is never
//!    told `timeout` for a call the page answered.
//! 2. **A page's result after it is late**: a result is checked against the binding
//!    ([`crate::model::check_result`]) at the clock of the page's node when it arrives, or when
//!    that node received it for a result submitted again after an unknown outcome
//!    ([`Deadline::passed_at`]): on time up to and including the deadline's millisecond, `late`
//!    after it (the frame is dropped and counted, never answered).
//! 3. **Nobody left to time it out** (the agent's node died, or the call was async and its
//!    request long answered): the leased deadline sweep (`Broker::sweep`, run by any node with
//!    jobs and by the worker) times out each call [`SWEEP_GRACE`] past its deadline
//!    ([`sweep_due`]), the grace leaving the first turn to the agent's node.
//! 4. **What a timeout does, whoever ran it**, in one atomic step: the call is kept as timed out
//!    (readable at `GET /calls/{id}` for `retention.finished_calls`); the pages get the call's
//!    stored `cancel`; the agent's node and every node watching the call get the outcome; the
//!    change goes to the partition's outbox, announced as `call.timeout` (and delivered to the
//!    tenant's webhook). A sweep's timeout is a span `timeout {tool}` linked to the call's trace.
//! 5. **The agent** waiting is answered the outcome `{"status":"timeout"}` (an MCP client: the
//!    call's error, its task `failed`); an async call's agent reads `call.timeout`.
//!
//! Tested here (the arithmetic) and end to end in the gateway's suites:
//! `security::a_late_result_is_rejected_after_the_timeout_and_the_page_gets_a_cancel`,
//! `security::a_call_whose_agent_hung_up_still_times_out_and_the_page_gets_its_cancel`,
//! `faults::sigkill_of_a_node_with_100_pages_moves_them_and_orphaned_calls_time_out`,
//! `stall::a_call_whose_deadline_passes_while_redis_stalls_times_out_with_one_event` and
//! `traces::an_async_calls_webhook_and_a_swept_timeout_link_to_the_calls_trace`.

use std::time::Duration;

/// How far past its deadline a pending call waits before the deadline sweep times it out: the
/// waiting request's own timer normally gets there first.
pub const SWEEP_GRACE: Duration = Duration::from_secs(1);

/// A call's deadline: one instant, ms since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(u64);

impl Deadline {
    /// The deadline `timeout_ms` after `now_ms`.
    pub fn after(now_ms: u64, timeout_ms: u64) -> Self {
        Deadline(now_ms.saturating_add(timeout_ms))
    }

    /// The deadline stored as `ms` since the epoch.
    pub fn at(ms: u64) -> Self {
        Deadline(ms)
    }

    /// Its instant, ms since the epoch.
    pub fn ms(self) -> u64 {
        self.0
    }

    /// How long from `now_ms` until it passes (zero once it has).
    pub fn remaining(self, now_ms: u64) -> Duration {
        Duration::from_millis(self.0.saturating_sub(now_ms))
    }

    /// Whether it had passed at `ms`: a result then is `late`. Its own millisecond is on time.
    pub fn passed_at(self, ms: u64) -> bool {
        ms > self.0
    }

    /// Whether the deadline sweep at `now_ms` times the call out ([`sweep_due`]).
    pub fn swept_at(self, now_ms: u64) -> bool {
        self.0 <= sweep_due(now_ms)
    }
}

/// The latest deadline the sweep at `now_ms` times out: [`SWEEP_GRACE`] ago.
pub fn sweep_due(now_ms: u64) -> u64 {
    now_ms.saturating_sub(crate::model::millis(SWEEP_GRACE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_own_millisecond_is_on_time_the_next_is_late() {
        let d = Deadline::after(1_000, 500);
        assert_eq!(d.ms(), 1_500);
        assert!(!d.passed_at(1_499));
        assert!(!d.passed_at(1_500));
        assert!(d.passed_at(1_501));
    }

    #[test]
    fn the_supervisor_sleeps_to_the_same_instant_whenever_it_starts() {
        let d = Deadline::after(10_000, 2_000);
        // Placement took 30 ms: the supervisor sleeps what is left, not the whole timeout.
        assert_eq!(d.remaining(10_030), Duration::from_millis(1_970));
        assert_eq!(d.remaining(12_000), Duration::ZERO);
        assert_eq!(d.remaining(99_000), Duration::ZERO);
    }

    #[test]
    fn the_sweep_leaves_the_agents_node_a_second_first() {
        let d = Deadline::at(50_000);
        assert!(!d.swept_at(50_000));
        assert!(!d.swept_at(50_999));
        assert!(d.swept_at(51_000));
        assert_eq!(sweep_due(51_000), 50_000);
        assert_eq!(sweep_due(10), 0);
    }

    #[test]
    fn a_deadline_past_the_end_of_time_saturates() {
        assert_eq!(Deadline::after(u64::MAX - 1, 10).ms(), u64::MAX);
    }
}
