//! What happened to the pages of a run: how many are ready, failed to connect, or were dropped
//! later, with the reasons, so a run can tell a gateway limit from a local one.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// Shared counters of one fleet of pages; each page task updates its own outcome.
#[derive(Debug, Default)]
pub struct Tally {
    /// Pages connected with their manifest sent.
    ready: AtomicUsize,
    /// Pages that never got that far.
    failed: AtomicUsize,
    /// Ready pages whose socket ended before the run closed it.
    dropped: AtomicUsize,
    /// Calls answered by all pages.
    answered: AtomicU64,
    /// Pages closed with 1001 (node draining), or whose socket broke, that set out to
    /// reconnect elsewhere (only pages given a fallback node do).
    went_away: AtomicUsize,
    /// Of those, pages whose socket ended without a 1001 close (reset, end of stream).
    abrupt: AtomicUsize,
    /// The instant each page went away, in order.
    away_at: Mutex<Vec<Instant>>,
    /// Of those, pages connected again; `back_at` holds when, for the storm's timings.
    came_back: AtomicUsize,
    /// The instant each page came back, in order of arrival.
    back_at: Mutex<Vec<Instant>>,
    /// Why pages failed or dropped, with counts; written only on those rare paths.
    reasons: Mutex<BTreeMap<String, usize>>,
}

/// A point-in-time copy of a [`Tally`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Pages connected with their manifest sent.
    pub ready: usize,
    /// Pages that never got that far.
    pub failed: usize,
    /// Ready pages whose socket ended early.
    pub dropped: usize,
}

impl Counts {
    /// Pages connected now.
    pub fn alive(&self) -> usize {
        self.ready - self.dropped
    }

    /// Pages that have either become ready or failed.
    pub fn settled(&self) -> usize {
        self.ready + self.failed
    }
}

impl Tally {
    /// A page is connected and its manifest sent.
    pub fn ready(&self) {
        self.ready.fetch_add(1, Ordering::Relaxed);
    }

    /// A page could not connect or send its manifest.
    pub fn failed(&self, reason: String) {
        self.note(reason);
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// A ready page's socket ended before the run closed it.
    pub fn dropped(&self, reason: String) {
        self.note(reason);
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// A page was closed by its draining node (`abrupt`: its socket broke without a 1001) and
    /// is reconnecting.
    pub fn went_away(&self, abrupt: bool) {
        let now = Instant::now();
        self.away_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(now);
        if abrupt {
            self.abrupt.fetch_add(1, Ordering::Relaxed);
        }
        self.went_away.fetch_add(1, Ordering::Relaxed);
    }

    /// Pages that went away without a 1001 close.
    pub fn abrupt(&self) -> usize {
        self.abrupt.load(Ordering::Relaxed)
    }

    /// When each page went away, in order.
    pub fn away_instants(&self) -> Vec<Instant> {
        self.away_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A page that went away is connected again.
    pub fn came_back(&self) {
        let now = Instant::now();
        self.back_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(now);
        self.came_back.fetch_add(1, Ordering::Relaxed);
    }

    /// Pages that went away and pages back so far.
    pub fn away_and_back(&self) -> (usize, usize) {
        (
            self.went_away.load(Ordering::Relaxed),
            self.came_back.load(Ordering::Relaxed),
        )
    }

    /// When each page came back, in order of arrival.
    pub fn back_instants(&self) -> Vec<Instant> {
        self.back_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A page answered a call.
    pub fn answered(&self) {
        self.answered.fetch_add(1, Ordering::Relaxed);
    }

    /// Calls answered so far.
    pub fn answered_total(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// The counters now.
    pub fn counts(&self) -> Counts {
        Counts {
            ready: self.ready.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }

    /// `reason ×count` for every reason seen, most frequent first.
    pub fn reasons(&self) -> String {
        let reasons = self
            .reasons
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut list: Vec<_> = reasons.iter().collect();
        list.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let parts: Vec<String> = list.iter().map(|(r, n)| format!("{r} ×{n}")).collect();
        parts.join("; ")
    }

    fn note(&self, reason: String) {
        let mut reasons = self
            .reasons
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *reasons.entry(reason).or_default() += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_reasons_add_up() {
        let t = Tally::default();
        t.ready();
        t.ready();
        t.ready();
        t.failed("connect: refused".into());
        t.dropped("close 4429".into());
        t.dropped("close 4429".into());
        let c = t.counts();
        assert_eq!(
            (c.ready, c.failed, c.dropped, c.alive(), c.settled()),
            (3, 1, 2, 1, 4)
        );
        assert_eq!(t.reasons(), "close 4429 ×2; connect: refused ×1");
    }
}
