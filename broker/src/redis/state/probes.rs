//! The probes of this node's subscriptions: per partition, since when a probe a subscriber took
//! has been awaited back through this node's channel and whether anything was heard on that
//! channel since the last round, and since when some subscription has been lost and not
//! restored (what `/readyz` reads).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// No probe was sent: a message came through the channel since the last round
    /// ([`Probes::needs_probe`]), which clears a probe still awaited there.
    pub(in crate::redis) heard: bool,
}

/// Delivery-verified subscriptions.
#[derive(Debug)]
pub(in crate::redis) struct Probes {
    /// Per partition, since when a probe a subscriber took has been awaited (`None` once one
    /// came back).
    awaited: Mutex<Vec<Option<Instant>>>,
    /// Per partition, whether a message came through this node's channel since the last round
    /// of probes: proof enough that the channel is subscribed where its publishers send, so
    /// that round has no probe to send there (issue 58: a node under load sent 64 probes a
    /// second its calls' own messages had already proven).
    heard: Vec<AtomicBool>,
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
            heard: (0..partitions).map(|_| AtomicBool::new(false)).collect(),
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

    /// A page frame or an outcome came through partition `k`'s channel (a probe's own return
    /// does not count: an idle channel is probed every round).
    pub(in crate::redis) fn heard(&self, k: u16) {
        if let Some(h) = self.heard.get(usize::from(k))
            && !h.load(Ordering::Relaxed)
        {
            h.store(true, Ordering::Relaxed);
        }
    }

    /// Whether partition `k`'s channel needs a probe this round: nothing came through it since
    /// the last round asked. Asking starts the next round's count.
    pub(in crate::redis) fn needs_probe(&self, k: u16) -> bool {
        self.heard
            .get(usize::from(k))
            .is_none_or(|h| !h.swap(false, Ordering::Relaxed))
    }

    /// The partitions whose channel is lost after a round of probes (`probed`, one per
    /// partition): known lost, or a probe silent for [`PROBE_SILENT`]. A probe a subscriber took
    /// is awaited from now on, unless one is already (its arrival clears it): only probes Redis
    /// answered for count as silent, so a stall (nothing answered) is no reason to subscribe
    /// again. A channel heard since the last round is not lost, and its awaited probe is
    /// forgotten: the channel delivered since.
    pub(in crate::redis) fn settle(&self, probed: &[Probed]) -> Vec<u16> {
        let mut awaited = lock(&self.awaited);
        let lost = (0u16..)
            .zip(probed)
            .filter(|(k, p)| {
                p.lost
                    || (!p.heard
                        && awaited[usize::from(*k)].is_some_and(|t| t.elapsed() > PROBE_SILENT))
            })
            .map(|(k, _)| k)
            .collect();
        for (i, p) in probed.iter().enumerate() {
            if p.heard {
                awaited[i] = None;
            } else if p.taken && awaited[i].is_none() {
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

#[cfg(test)]
mod tests {
    use super::*;

    const SENT: Probed = Probed {
        lost: false,
        taken: true,
        heard: false,
    };
    const HEARD: Probed = Probed {
        lost: false,
        taken: false,
        heard: true,
    };

    /// A channel something came through is spared one round's probe, and only that round: the
    /// round after, with nothing heard, probes it again.
    #[test]
    fn a_channel_heard_since_the_last_round_is_not_probed_that_round_only() {
        let p = Probes::new(4);
        assert!((0..4).all(|k| p.needs_probe(k)));
        p.heard(2);
        p.heard(2);
        assert!(p.needs_probe(0) && p.needs_probe(1) && p.needs_probe(3));
        assert!(!p.needs_probe(2));
        assert!(p.needs_probe(2), "heard once, spared once");
        // A partition this node does not have is always probed.
        p.heard(9);
        assert!(p.needs_probe(9));
    }

    /// A probe a subscriber took and that never came back loses its channel after
    /// `PROBE_SILENT`, unless the channel delivered something since: that forgets it.
    #[test]
    fn a_silent_probe_loses_its_channel_unless_the_channel_was_heard_since() {
        let p = Probes::new(2);
        assert!(p.settle(&[SENT, SENT]).is_empty());
        let long_ago = Instant::now().checked_sub(PROBE_SILENT * 2).unwrap();
        lock(&p.awaited).fill(Some(long_ago));
        assert_eq!(p.settle(&[HEARD, SENT]), vec![1]);
        assert_eq!(
            lock(&p.awaited)[0],
            None,
            "the heard channel's probe is forgotten"
        );
        // Heard once, then silent again: a new probe is awaited from now, not from before.
        assert!(!p.settle(&[SENT, SENT]).contains(&0));
        assert!(lock(&p.awaited)[0].is_some_and(|t| t.elapsed() < PROBE_SILENT));
    }
}
