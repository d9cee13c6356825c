//! Per-tenant traffic of this node, as the admin stats show it (`GET /admin/v1/stats`,
//! `GET /admin/v1/tenants/{id}/stats`): calls finished by outcome status, their rate over the
//! last seconds, and agent requests answered with a problem, by code. Counted where each
//! happens; read without a scan over pages or calls.
//!
//! A call is counted once, by the node whose agent request supervised it. Every
//! `server.stats_flush_ms` ([`flush`]) the node writes the counts of the tenants whose figures
//! moved into the broker ([`toolmark_broker::SharedTraffic`]), never a write per call, and the
//! stats sum the entries of the nodes still writing: the cluster's figures.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;
use toolmark_broker::NodeTraffic;

/// How many one-second buckets a tenant keeps; the rate is read over the last
/// [`RATE_WINDOW_SECS`] whole seconds of them.
const BUCKETS: usize = 16;

/// The seconds a rate is averaged over (the running second is left out: it is not over).
pub const RATE_WINDOW_SECS: u64 = 10;

/// The traffic of every tenant this node has served since it started.
#[derive(Debug)]
pub struct Traffic {
    started: Instant,
    tenants: RwLock<HashMap<String, Arc<Entry>>>,
}

impl Default for Traffic {
    fn default() -> Self {
        Traffic {
            started: Instant::now(),
            tenants: RwLock::default(),
        }
    }
}

/// One tenant's counts, of one incarnation of it (read without a lock).
#[derive(Debug)]
struct Entry {
    incarnation: u64,
    counts: Mutex<Counts>,
}

impl Entry {
    fn new(incarnation: u64) -> Arc<Entry> {
        Arc::new(Entry {
            incarnation,
            counts: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One tenant's counts.
#[derive(Debug, Default, Clone)]
struct Counts {
    /// Calls and describes finished, by outcome status (`ok`, `timeout`…).
    outcomes: BTreeMap<&'static str, u64>,
    /// Agent requests answered with a problem, by its code (`rate_limited`, `no_page`…).
    refusals: BTreeMap<&'static str, u64>,
    /// Requests that failed authentication.
    unauthenticated: u64,
    /// Finished calls per second: `(second since start, count)`, a ring indexed by second.
    seconds: [(u64, u64); BUCKETS],
    /// Whether something was counted since the counts were last written into the broker.
    changed: bool,
    /// When they were last written (`None`: never).
    written: Option<Instant>,
    /// Whether the window last written held calls: it slides, so it is written again until
    /// it holds none.
    window_busy: bool,
}

/// A shared entry lapses after this many flush intervals unwritten ([`flush`]).
pub const LAPSE_FLUSHES: u32 = 5;

/// An entry whose figures did not move is written again after this many intervals, well
/// before it lapses.
const REFRESH_FLUSHES: u32 = 2;

/// How many tenants' entries one flush writes at once (concurrent commands share the broker's
/// connection, pipelined).
const WRITES_AT_ONCE: usize = 64;

/// What one tenant's traffic reads as now.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TrafficView {
    /// Finished calls a second over the last [`RATE_WINDOW_SECS`] seconds.
    pub calls_per_second: f64,
    /// Finished calls by outcome status, since the node started.
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Problems answered, by code, since the node started.
    pub refusals: BTreeMap<&'static str, u64>,
    /// Requests that failed authentication, since the node started.
    pub unauthenticated: u64,
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
        self.unauthenticated += other.unauthenticated;
    }
}

impl Traffic {
    fn second(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// The counts of `tenant`'s incarnation `incarnation`, made on its first use (those of
    /// another incarnation are dropped: a tenant created again under its id starts at zero).
    /// Only known tenants are counted (the caller checks), so the map cannot be grown by
    /// requests naming made-up ids.
    fn counts(&self, tenant: &str, incarnation: u64) -> Arc<Entry> {
        let current = |c: &Arc<Entry>| c.incarnation == incarnation;
        if let Some(c) = self
            .tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
            .filter(|c| current(c))
        {
            return Arc::clone(c);
        }
        let mut all = self.tenants.write().unwrap_or_else(PoisonError::into_inner);
        let entry = all
            .entry(tenant.to_owned())
            .or_insert_with(|| Entry::new(incarnation));
        if !current(entry) {
            *entry = Entry::new(incarnation);
        }
        Arc::clone(entry)
    }

    /// Counts a call or describe of `tenant` that finished with `status` (through
    /// `calls::finished`, which counts it in the metrics too).
    pub(crate) fn call_finished(&self, tenant: &str, incarnation: u64, status: &'static str) {
        let now = self.second();
        let counts = self.counts(tenant, incarnation);
        let mut c = counts.lock();
        c.changed = true;
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

    /// Counts an agent request of `tenant` answered with the problem `code`; one that failed
    /// authentication (`unauthorized`) is counted apart, never as the tenant's own refusal.
    pub fn refused(&self, tenant: &str, incarnation: u64, code: &'static str) {
        let counts = self.counts(tenant, incarnation);
        let mut c = counts.lock();
        c.changed = true;
        if code == "unauthorized" {
            c.unauthenticated += 1;
        } else {
            *c.refusals.entry(code).or_default() += 1;
        }
    }

    /// Forgets the counts of every tenant that `current` does not hold as it is counted (gone,
    /// or created again with a new incarnation): run by every node at each flush, so a deleted
    /// tenant's figures leave every node, not only the one that deleted it.
    pub fn keep_only(&self, current: impl Fn(&str, u64) -> bool) {
        self.tenants
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|id, c| current(id, c.incarnation));
    }

    /// The entries to write now, marked written: the tenants whose counts changed, whose last
    /// written window held calls, or whose entry was written `refresh` ago or longer.
    fn due(&self, refresh: Duration) -> Vec<(String, NodeTraffic)> {
        let now = self.second();
        let all: Vec<(String, Arc<Entry>)> = self
            .tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(t, c)| (t.clone(), Arc::clone(c)))
            .collect();
        let mut due = Vec::new();
        for (tenant, counts) in all {
            let mut c = counts.lock();
            let stale = c.written.is_none_or(|w| w.elapsed() >= refresh);
            if !(c.changed || c.window_busy || stale) {
                continue;
            }
            let seconds = c.window(now);
            c.changed = false;
            c.written = Some(Instant::now());
            // Calls of the running second enter the window once it is over.
            c.window_busy = seconds.iter().any(|n| *n > 0) || c.running(now) > 0;
            let owned = |m: &BTreeMap<&'static str, u64>| {
                m.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
            };
            due.push((
                tenant,
                NodeTraffic {
                    seconds,
                    outcomes: owned(&c.outcomes),
                    refusals: owned(&c.refusals),
                    unauthenticated: c.unauthenticated,
                    incarnation: Some(counts.incarnation),
                },
            ));
        }
        due
    }

    /// Marks `tenant`'s counts unwritten (a write failed: the next flush tries again).
    fn unwritten(&self, tenant: &str) {
        if let Some(c) = self
            .tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
        {
            c.lock().changed = true;
        }
    }

    /// The traffic of `tenant`'s incarnation `incarnation` now (all zero for one this node has
    /// not served).
    pub fn view(&self, tenant: &str, incarnation: u64) -> TrafficView {
        let counts = self
            .tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
            .filter(|c| c.incarnation == incarnation)
            .cloned();
        let Some(counts) = counts else {
            return TrafficView::default();
        };
        let c = counts.lock().clone();
        let calls: u64 = c.window(self.second()).iter().sum();
        // Counts of calls stay far below 2^52.
        #[allow(clippy::cast_precision_loss)]
        let calls_per_second = calls as f64 / RATE_WINDOW_SECS as f64;
        TrafficView {
            calls_per_second,
            outcomes: c.outcomes,
            refusals: c.refusals,
            unauthenticated: c.unauthenticated,
        }
    }

    /// Forgets a deleted tenant's counts: one created again under its id starts at zero, and its
    /// shared entry lapses (no node writes it again).
    pub fn forget(&self, tenant: &str) {
        self.tenants
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(tenant);
    }
}

impl Counts {
    /// Finished calls of the running second `now`.
    fn running(&self, now: u64) -> u64 {
        self.seconds
            .iter()
            .find(|(s, _)| *s == now)
            .map_or(0, |(_, n)| *n)
    }

    /// Finished calls in each of the [`RATE_WINDOW_SECS`] whole seconds before `now`, oldest
    /// first.
    fn window(&self, now: u64) -> Vec<u64> {
        // Seconds before the node started count as seconds without calls.
        (1..=RATE_WINDOW_SECS)
            .rev()
            .map(|back| {
                now.checked_sub(back).map_or(0, |second| {
                    self.seconds
                        .iter()
                        .find(|(s, n)| *s == second && *n > 0)
                        .map_or(0, |(_, n)| *n)
                })
            })
            .collect()
    }
}

/// Writes this node's due entries ([`Traffic::due`]) into the broker every `every`, each to
/// lapse after [`LAPSE_FLUSHES`] intervals, until `stop`; a failed write is tried again at the
/// next interval.
pub async fn flush(
    traffic: Arc<Traffic>,
    broker: Arc<dyn toolmark_broker::SharedTraffic>,
    tenants: crate::tenants::Tenants,
    every: Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let lapse = every * LAPSE_FLUSHES;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        traffic.keep_only(|id, incarnation| {
            tenants
                .get(id)
                .is_some_and(|t| t.incarnation == incarnation)
        });
        let due = traffic.due(every * REFRESH_FLUSHES);
        futures_util::stream::iter(due)
            .for_each_concurrent(WRITES_AT_ONCE, |(tenant, figures)| {
                let (traffic, broker) = (&traffic, &broker);
                async move {
                    if let Err(e) = broker.put_traffic(&tenant, &figures, lapse).await {
                        tracing::debug!(tenant, error = %e, "traffic figures not written: tried again");
                        traffic.unwritten(&tenant);
                    }
                }
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_and_refusals_are_counted_per_tenant() {
        let t = Traffic::default();
        t.call_finished("a", 0, "ok");
        t.call_finished("a", 0, "ok");
        t.call_finished("a", 0, "timeout");
        t.refused("a", 0, "rate_limited");
        t.call_finished("b", 0, "error");
        let a = t.view("a", 0);
        assert_eq!(a.outcomes.get("ok"), Some(&2));
        assert_eq!(a.outcomes.get("timeout"), Some(&1));
        assert_eq!(a.refusals.get("rate_limited"), Some(&1));
        assert_eq!(t.view("b", 0).outcomes.get("error"), Some(&1));
        assert_eq!(t.view("c", 0), TrafficView::default());
        t.forget("a");
        assert_eq!(t.view("a", 0), TrafficView::default());
    }

    #[test]
    fn a_tenant_created_again_starts_at_zero_and_failed_authentication_is_counted_apart() {
        let t = Traffic::default();
        t.refused("a", 1, "rate_limited");
        t.refused("a", 1, "unauthorized");
        t.refused("a", 1, "unauthorized");
        let a = t.view("a", 1);
        assert_eq!(a.refusals.get("rate_limited"), Some(&1));
        assert_eq!(a.refusals.get("unauthorized"), None);
        assert_eq!(a.unauthenticated, 2);
        let due = t.due(Duration::from_secs(60));
        assert_eq!(due[0].1.incarnation, Some(1));
        assert_eq!(due[0].1.unauthenticated, 2);
        // Created again under its id: nothing of its predecessor, here or in what is written.
        assert_eq!(t.view("a", 2), TrafficView::default());
        t.refused("a", 2, "no_page");
        assert_eq!(t.view("a", 1), TrafficView::default());
        let due = t.due(Duration::from_secs(60));
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].1.incarnation, Some(2));
        assert_eq!(due[0].1.refusals.get("rate_limited"), None);
        // Every node forgets a tenant that is gone at its next flush.
        t.refused("b", 0, "no_page");
        t.keep_only(|id, _| id == "b");
        assert_eq!(t.view("a", 2), TrafficView::default());
        assert_eq!(t.view("b", 0).refusals.get("no_page"), Some(&1));
    }

    #[test]
    fn the_rate_counts_whole_seconds_of_the_window_only() {
        let t = Traffic {
            started: Instant::now() - std::time::Duration::from_secs(100),
            tenants: RwLock::default(),
        };
        let now = t.second();
        {
            let counts = t.counts("a", 0);
            let mut c = counts.lock();
            // Five calls two seconds ago, three long before the window.
            c.seconds[((now - 2) % BUCKETS as u64) as usize] = (now - 2, 5);
            c.seconds[((now - 12) % BUCKETS as u64) as usize] = (now - 12, 3);
        }
        let v = t.view("a", 0);
        assert!(
            (v.calls_per_second - 0.5).abs() < 1e-9,
            "{}",
            v.calls_per_second
        );
        let due = t.due(Duration::from_secs(60));
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].1.seconds, [0, 0, 0, 0, 0, 0, 0, 0, 5, 0]);
    }

    #[test]
    fn only_moved_or_stale_figures_are_due() {
        let t = Traffic::default();
        let refresh = Duration::from_secs(60);
        assert!(t.due(refresh).is_empty());
        t.refused("a", 0, "no_page");
        t.refused("b", 0, "no_page");
        assert_eq!(t.due(refresh).len(), 2);
        assert!(t.due(refresh).is_empty(), "nothing moved");
        t.call_finished("a", 0, "ok");
        let due = t.due(refresh);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].0, "a");
        assert_eq!(due[0].1.outcomes.get("ok"), Some(&1));
        t.unwritten("a");
        assert_eq!(t.due(refresh).len(), 1, "a failed write is tried again");
        assert_eq!(
            t.due(Duration::ZERO).len(),
            2,
            "stale entries are written again"
        );
    }
}
