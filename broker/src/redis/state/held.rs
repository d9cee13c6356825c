//! The pages this node holds: per conversation its sockets, its page loads and their latest
//! manifests, and per tenant its sockets; written to Redis again after Redis lost its data,
//! and kept alive there on the heartbeat.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use toolmark_proto::Manifest;

use super::lock;
use crate::ConvKey;
use crate::partition;

/// What this node holds of one conversation.
#[derive(Debug, Default)]
struct Held {
    sockets: u32,
    clients: HashMap<String, u32>,
    /// By clientId, with the order it was received in.
    manifests: HashMap<String, (u64, Manifest)>,
}

/// A copy of what this node holds of one conversation, taken to write it again without holding
/// the lock.
#[derive(Debug)]
pub(in crate::redis) struct HeldSnapshot {
    /// The conversation.
    pub(in crate::redis) conv: ConvKey,
    /// This node's sockets of it.
    pub(in crate::redis) sockets: u32,
    /// Its identified sockets, per clientId.
    pub(in crate::redis) clients: Vec<(String, u32)>,
    /// Oldest first, so the latest manifest is written last.
    pub(in crate::redis) manifests: Vec<Manifest>,
}

/// The pages and sockets this node holds.
#[derive(Debug)]
pub(in crate::redis) struct HeldPages {
    convs: Mutex<HashMap<ConvKey, Held>>,
    /// This node's sockets per tenant.
    tenant_sockets: Mutex<HashMap<String, u64>>,
    /// The order of the manifests received.
    manifest_seq: AtomicU64,
    /// When the held conversations' keys were last refreshed.
    refreshed_at: Mutex<Instant>,
}

impl Default for HeldPages {
    fn default() -> Self {
        HeldPages {
            convs: Mutex::default(),
            tenant_sockets: Mutex::default(),
            manifest_seq: AtomicU64::new(1),
            refreshed_at: Mutex::new(Instant::now()),
        }
    }
}

impl HeldPages {
    /// One more socket of `conv` here.
    pub(in crate::redis) fn admitted(&self, conv: &ConvKey) {
        lock(&self.convs).entry(conv.clone()).or_default().sockets += 1;
    }

    /// A socket of `conv` named its page load `client_id`; whether this node has that page's
    /// manifest already.
    pub(in crate::redis) fn identified(&self, conv: &ConvKey, client_id: &str) -> bool {
        lock(&self.convs).get_mut(conv).is_some_and(|h| {
            *h.clients.entry(client_id.to_owned()).or_default() += 1;
            h.manifests.contains_key(client_id)
        })
    }

    /// Keeps a copy of the manifest stored for a page that moved here, unless one came since.
    pub(in crate::redis) fn keep_stored(&self, conv: &ConvKey, client_id: &str, m: Manifest) {
        let seq = self.next_seq();
        if let Some(h) = lock(&self.convs).get_mut(conv) {
            h.manifests.entry(client_id.to_owned()).or_insert((seq, m));
        }
    }

    /// Keeps the latest manifest a page of `conv` sent here.
    pub(in crate::redis) fn keep_manifest(&self, conv: &ConvKey, m: &Manifest) {
        let seq = self.next_seq();
        if let Some(h) = lock(&self.convs).get_mut(conv) {
            h.manifests.insert(m.client_id.clone(), (seq, m.clone()));
        }
    }

    fn next_seq(&self) -> u64 {
        self.manifest_seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Forgets one socket of `conv` (the page load `client_id`) and of its tenant.
    pub(in crate::redis) fn forget_socket(&self, conv: &ConvKey, client_id: Option<&str>) {
        {
            let mut held = lock(&self.convs);
            if let Some(h) = held.get_mut(conv) {
                h.sockets = h.sockets.saturating_sub(1);
                if let Some(c) = client_id
                    && let Some(n) = h.clients.get_mut(c)
                {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        h.clients.remove(c);
                        h.manifests.remove(c);
                    }
                }
                if h.sockets == 0 {
                    held.remove(conv);
                }
            }
        }
        self.tenant_released(&conv.tenant);
    }

    /// One more socket of `tenant` here.
    pub(in crate::redis) fn tenant_admitted(&self, tenant: &str) {
        *lock(&self.tenant_sockets)
            .entry(tenant.to_owned())
            .or_default() += 1;
    }

    /// One socket of `tenant` less here.
    pub(in crate::redis) fn tenant_released(&self, tenant: &str) {
        if let Some(n) = lock(&self.tenant_sockets).get_mut(tenant) {
            *n = n.saturating_sub(1);
        }
    }

    /// This node's socket count of each tenant it counted sockets of.
    pub(in crate::redis) fn tenant_counts(&self) -> Vec<(String, u64)> {
        lock(&self.tenant_sockets)
            .iter()
            .map(|(t, n)| (t.clone(), *n))
            .collect()
    }

    /// Each held conversation with the page loads whose manifests it keeps alive.
    pub(in crate::redis) fn page_loads(&self) -> Vec<(ConvKey, Vec<String>)> {
        lock(&self.convs)
            .iter()
            .map(|(k, h)| {
                let mut clients: HashSet<String> = h.clients.keys().cloned().collect();
                clients.extend(h.manifests.keys().cloned());
                (k.clone(), clients.into_iter().collect())
            })
            .collect()
    }

    /// A copy of everything held, to write again.
    pub(in crate::redis) fn snapshot(&self) -> Vec<HeldSnapshot> {
        lock(&self.convs)
            .iter()
            .map(|(k, h)| {
                let mut manifests: Vec<(u64, Manifest)> = h.manifests.values().cloned().collect();
                manifests.sort_by_key(|(seq, _)| *seq);
                HeldSnapshot {
                    conv: k.clone(),
                    sockets: h.sockets,
                    clients: h.clients.iter().map(|(c, n)| (c.clone(), *n)).collect(),
                    manifests: manifests.into_iter().map(|(_, m)| m).collect(),
                }
            })
            .collect()
    }

    /// The held conversations of the partitions `lost`.
    pub(in crate::redis) fn in_partitions(&self, lost: &[u16]) -> Vec<ConvKey> {
        lock(&self.convs)
            .keys()
            .filter(|c| lost.contains(&partition::of_conv(c)))
            .cloned()
            .collect()
    }

    /// Whether the held keys are due a refresh (last one `every` ago or more); if so, the
    /// refresh counts as done now.
    pub(in crate::redis) fn refresh_due(&self, every: Duration) -> bool {
        let due = lock(&self.refreshed_at).elapsed() >= every;
        if due {
            *lock(&self.refreshed_at) = Instant::now();
        }
        due
    }
}
