//! The probes of this node's subscriptions: per partition, since when a probe a subscriber took
//! has been awaited back through this node's channel, and since when some subscription has been
//! lost and not restored (what `/readyz` reads).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::lock;

/// A probe not back for this long has its channel subscribed again.
pub(in crate::redis) const PROBE_SILENT: Duration = Duration::from_secs(3);

/// How long the node may fail to restore a subscription before `/readyz` says so: well past
/// what a failover or a reshard takes, so that every node does not turn unready together over
/// a Redis-side event each recovers from by itself.
pub(in crate::redis) const UNREADY_AFTER: Duration = Duration::from_secs(30);

/// What one round of probes found on one partition's channel.
#[derive(Debug, Clone, Copy)]
pub(in crate::redis) struct Probed {
    /// The channel is known lost (no subscriber took the probe, its slot moved, or the
    /// subscriber reconnected).
    pub(in crate::redis) lost: bool,
    /// A subscriber took the probe.
    pub(in crate::redis) taken: bool,
}

/// Delivery-verified subscriptions.
#[derive(Debug)]
pub(in crate::redis) struct Probes {
    /// Per partition, since when a probe a subscriber took has been awaited (`None` once one
    /// came back).
    awaited: Mutex<Vec<Option<Instant>>>,
    /// Since when some subscription has been lost and not restored.
    unsubscribed_since: Mutex<Option<Instant>>,
    /// The last round of subscribing again failed for some channel: the next round of probes
    /// subscribes everything again, whatever the probes find (an event channel has no probe).
    again_failed: Mutex<bool>,
}

impl Probes {
    /// Probes of `partitions` channels, none awaited.
    pub(in crate::redis) fn new(partitions: u16) -> Self {
        Probes {
            awaited: Mutex::new(vec![None; usize::from(partitions)]),
            unsubscribed_since: Mutex::default(),
            again_failed: Mutex::default(),
        }
    }

    /// A probe came back on partition `k`'s channel.
    pub(in crate::redis) fn came_back(&self, k: u16) {
        if let Some(awaited) = lock(&self.awaited).get_mut(usize::from(k)) {
            *awaited = None;
        }
    }

    /// The partitions whose channel is lost after a round of probes (`probed`, one per
    /// partition): known lost, or a probe silent for [`PROBE_SILENT`]. A probe a subscriber took
    /// is awaited from now on, unless one is already (its arrival clears it): only probes Redis
    /// answered for count as silent, so a stall (nothing answered) is no reason to subscribe
    /// again.
    pub(in crate::redis) fn settle(&self, probed: &[Probed]) -> Vec<u16> {
        let mut awaited = lock(&self.awaited);
        let lost = (0u16..)
            .zip(probed)
            .filter(|(k, p)| {
                p.lost || awaited[usize::from(*k)].is_some_and(|t| t.elapsed() > PROBE_SILENT)
            })
            .map(|(k, _)| k)
            .collect();
        for (i, p) in probed.iter().enumerate() {
            if p.taken && awaited[i].is_none() {
                awaited[i] = Some(Instant::now());
            }
        }
        lost
    }

    /// Some subscription is lost (since now, unless it was already).
    pub(in crate::redis) fn unsubscribed(&self) {
        lock(&self.unsubscribed_since).get_or_insert_with(Instant::now);
    }

    /// Every subscription holds.
    pub(in crate::redis) fn subscribed(&self) {
        *lock(&self.unsubscribed_since) = None;
    }

    /// How the last round of subscribing every channel again ended.
    pub(in crate::redis) fn subscribed_again(&self, all: bool) {
        *lock(&self.again_failed) = !all;
    }

    /// Whether the last round of subscribing again left some channel unsubscribed.
    pub(in crate::redis) fn again_failed(&self) -> bool {
        *lock(&self.again_failed)
    }

    /// Whether the subscriptions hold, or have not been lost for long.
    pub(in crate::redis) fn ready(&self) -> bool {
        lock(&self.unsubscribed_since).is_none_or(|t| t.elapsed() < UNREADY_AFTER)
    }
}
