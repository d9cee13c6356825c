//! Per-tenant traffic of this node, as the admin stats show it (`GET /admin/v1/stats`,
//! `GET /admin/v1/tenants/{id}/stats`): calls finished by outcome status, their rate over the
//! last seconds, and agent requests answered with a problem, by code. Counted where each
//! happens; read without a scan over pages or calls.
//!
//! Node-local on purpose: a call is counted once, by the node whose agent request supervised
//! it, so the cluster's figures are the sum over its nodes (as with the Prometheus series).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;

/// How many one-second buckets a tenant keeps; the rate is read over the last
/// [`RATE_WINDOW_SECS`] whole seconds of them.
const BUCKETS: usize = 16;

/// The seconds a rate is averaged over (the running second is left out: it is not over).
pub const RATE_WINDOW_SECS: u64 = 10;

/// The traffic of every tenant this node has served since it started.
#[derive(Debug)]
pub struct Traffic {
    started: Instant,
    tenants: RwLock<HashMap<String, Arc<Mutex<Counts>>>>,
}

impl Default for Traffic {
    fn default() -> Self {
        Traffic {
            started: Instant::now(),
            tenants: RwLock::default(),
        }
    }
}

/// One tenant's counts.
#[derive(Debug, Default, Clone)]
struct Counts {
    /// Calls and describes finished, by outcome status (`ok`, `timeout`…).
    outcomes: BTreeMap<&'static str, u64>,
    /// Agent requests answered with a problem, by its code (`rate_limited`, `no_page`…).
    refusals: BTreeMap<&'static str, u64>,
    /// Finished calls per second: `(second since start, count)`, a ring indexed by second.
    seconds: [(u64, u64); BUCKETS],
}

/// What one tenant's traffic reads as now.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TrafficView {
    /// Finished calls a second over the last [`RATE_WINDOW_SECS`] seconds.
    pub calls_per_second: f64,
    /// Finished calls by outcome status, since the node started.
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Problems answered, by code, since the node started.
    pub refusals: BTreeMap<&'static str, u64>,
}

impl TrafficView {
    /// Adds `other` into this one (a node's total over its tenants).
    pub fn add(&mut self, other: &TrafficView) {
        self.calls_per_second += other.calls_per_second;
        for (k, v) in &other.outcomes {
            *self.outcomes.entry(k).or_default() += v;
        }
        for (k, v) in &other.refusals {
            *self.refusals.entry(k).or_default() += v;
        }
    }
}

impl Traffic {
    fn second(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// The counts of `tenant`, made on its first use. Only known tenants are counted (the
    /// caller checks), so the map cannot be grown by requests naming made-up ids.
    fn counts(&self, tenant: &str) -> Arc<Mutex<Counts>> {
        if let Some(c) = self
            .tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
        {
            return Arc::clone(c);
        }
        let mut all = self.tenants.write().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(all.entry(tenant.to_owned()).or_default())
    }

    /// Counts a call or describe of `tenant` that finished with `status`.
    pub fn call_finished(&self, tenant: &str, status: &'static str) {
        let now = self.second();
        let counts = self.counts(tenant);
        let mut c = counts.lock().unwrap_or_else(PoisonError::into_inner);
        *c.outcomes.entry(status).or_default() += 1;
        // The ring is indexed by second modulo its length, which fits in usize.
        #[allow(clippy::cast_possible_truncation)]
        let slot = &mut c.seconds[(now % BUCKETS as u64) as usize];
        if slot.0 == now {
            slot.1 += 1;
        } else {
            *slot = (now, 1);
        }
    }

    /// Counts an agent request of `tenant` answered with the problem `code`.
    pub fn refused(&self, tenant: &str, code: &'static str) {
        let counts = self.counts(tenant);
        let mut c = counts.lock().unwrap_or_else(PoisonError::into_inner);
        *c.refusals.entry(code).or_default() += 1;
    }

    /// `tenant`'s traffic now (all zero for a tenant this node has not served).
    pub fn view(&self, tenant: &str) -> TrafficView {
        let counts = self
            .tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
            .cloned();
        let Some(counts) = counts else {
            return TrafficView::default();
        };
        let c = counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let now = self.second();
        let from = now.saturating_sub(RATE_WINDOW_SECS);
        let calls: u64 = c
            .seconds
            .iter()
            .filter(|(s, _)| *s >= from && *s < now)
            .map(|(_, n)| n)
            .sum();
        // Counts of calls stay far below 2^52.
        #[allow(clippy::cast_precision_loss)]
        let calls_per_second = calls as f64 / RATE_WINDOW_SECS as f64;
        TrafficView {
            calls_per_second,
            outcomes: c.outcomes,
            refusals: c.refusals,
        }
    }

    /// Forgets a deleted tenant's counts (one created again under its id starts at zero).
    pub fn forget(&self, tenant: &str) {
        self.tenants
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_and_refusals_are_counted_per_tenant() {
        let t = Traffic::default();
        t.call_finished("a", "ok");
        t.call_finished("a", "ok");
        t.call_finished("a", "timeout");
        t.refused("a", "rate_limited");
        t.call_finished("b", "error");
        let a = t.view("a");
        assert_eq!(a.outcomes.get("ok"), Some(&2));
        assert_eq!(a.outcomes.get("timeout"), Some(&1));
        assert_eq!(a.refusals.get("rate_limited"), Some(&1));
        assert_eq!(t.view("b").outcomes.get("error"), Some(&1));
        assert_eq!(t.view("c"), TrafficView::default());
        t.forget("a");
        assert_eq!(t.view("a"), TrafficView::default());
    }

    #[test]
    fn the_rate_counts_whole_seconds_of_the_window_only() {
        let t = Traffic {
            started: Instant::now() - std::time::Duration::from_secs(100),
            tenants: RwLock::default(),
        };
        let now = t.second();
        {
            let counts = t.counts("a");
            let mut c = counts.lock().unwrap();
            // Five calls two seconds ago, three long before the window.
            c.seconds[((now - 2) % BUCKETS as u64) as usize] = (now - 2, 5);
            c.seconds[((now - 12) % BUCKETS as u64) as usize] = (now - 12, 3);
        }
        let v = t.view("a");
        assert!(
            (v.calls_per_second - 0.5).abs() < 1e-9,
            "{}",
            v.calls_per_second
        );
    }
}
