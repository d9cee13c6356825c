//! This node's page sockets, by conversation. Delivery never blocks: each socket has a bounded
//! outbound queue, and a socket whose queue is full is dropped from the registry, which closes
//! it (a page that cannot keep up is closed, never buffered without bound).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use std::collections::VecDeque;

use tokio::sync::Notify;
use toolmark_broker::{ConvKey, PageSink};

use crate::tenants::Grant;

/// Frames queued for one socket before it counts as unable to keep up.
pub const OUTBOUND_QUEUE: usize = 64;
const SHARDS: usize = 16;

/// The bounded outbound queue of one socket. It allocates nothing while empty, which keeps
/// idle sockets small; [`Outbox::next`] yields `None` once the queue was closed.
#[derive(Debug, Default)]
pub struct Outbox {
    state: Mutex<OutboxState>,
    ready: Notify,
    /// When the socket last heard from its page (ms since the epoch): any frame or pong.
    heard_ms: AtomicU64,
}

#[derive(Debug, Default)]
struct OutboxState {
    frames: VecDeque<Arc<str>>,
    closed: bool,
    /// Another socket claims this socket's clientId: ping the page to see whether it is alive.
    probe: bool,
    /// This socket's page is behind another socket now (it did not answer the probe): end.
    evict: bool,
    /// Its tenant, token key or user was revoked: close with 4401.
    revoked: bool,
}

/// What a socket's task takes from its outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outgoing {
    /// A frame to send.
    Frame(Arc<str>),
    /// Ping the page now (a liveness probe).
    Probe,
    /// End the socket: its page load reconnected on another socket.
    Evict,
    /// Close the socket with 4401: what admitted it was revoked.
    Revoke,
}

impl Outbox {
    fn lock(&self) -> MutexGuard<'_, OutboxState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a frame; a full queue closes the outbox instead (the page cannot keep up).
    pub fn push(&self, frame: Arc<str>) -> bool {
        let mut s = self.lock();
        if s.closed {
            return false;
        }
        if s.frames.len() >= OUTBOUND_QUEUE {
            s.closed = true;
            drop(s);
            self.ready.notify_one();
            return false;
        }
        s.frames.push_back(frame);
        drop(s);
        self.ready.notify_one();
        true
    }

    /// Closes the outbox: queued frames are still handed out, then `None`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
    }

    /// Records that the page was heard from just now.
    pub fn heard(&self) {
        self.heard_ms
            .store(toolmark_broker::now_ms(), Ordering::Relaxed);
    }

    /// Whether the page was heard from at or after `ms`.
    pub fn heard_since(&self, ms: u64) -> bool {
        self.heard_ms.load(Ordering::Relaxed) >= ms
    }

    /// Asks the socket's task to ping its page.
    pub fn probe(&self) {
        self.lock().probe = true;
        self.ready.notify_one();
    }

    /// Asks the socket's task to close with 4401.
    pub fn revoke(&self) {
        self.lock().revoked = true;
        self.ready.notify_one();
    }

    /// Asks the socket's task to end.
    pub fn evict(&self) {
        self.lock().evict = true;
        self.ready.notify_one();
    }

    /// The next frame, probe or eviction, or `None` once closed (after a full queue, the
    /// frames are dropped).
    pub async fn next(&self) -> Option<Outgoing> {
        loop {
            {
                let mut s = self.lock();
                if s.revoked {
                    return Some(Outgoing::Revoke);
                }
                if s.evict {
                    return Some(Outgoing::Evict);
                }
                if s.probe {
                    s.probe = false;
                    return Some(Outgoing::Probe);
                }
                if s.overflowed() {
                    s.frames = VecDeque::new();
                    return None;
                }
                if let Some(f) = s.pop() {
                    return Some(Outgoing::Frame(f));
                }
                if s.closed {
                    return None;
                }
            }
            self.ready.notified().await;
        }
    }

    /// A frame queued now, without waiting, for the write that carries the frame
    /// [`Self::next`] just gave: none while a probe, an eviction or a revocation waits (they
    /// go before any frame, through [`Self::next`]) or once the queue overflowed.
    pub fn queued_frame(&self) -> Option<Arc<str>> {
        let mut s = self.lock();
        if s.revoked || s.evict || s.probe || s.overflowed() {
            return None;
        }
        s.pop()
    }
}

impl OutboxState {
    /// The queue overflowed: the page could not keep up, and its socket ends.
    fn overflowed(&self) -> bool {
        self.closed && self.frames.len() >= OUTBOUND_QUEUE
    }

    /// The first queued frame; an emptied queue gives its room back.
    fn pop(&mut self) -> Option<Arc<str>> {
        let f = self.frames.pop_front()?;
        if self.frames.is_empty() && self.frames.capacity() > 8 {
            self.frames = VecDeque::new();
        }
        Some(f)
    }
}

struct Slot {
    socket_id: u64,
    client_id: Option<Arc<str>>,
    outbox: Arc<Outbox>,
    grant: Grant,
}

type Shard = Mutex<HashMap<ConvKey, Vec<Slot>>>;

/// Local sockets of every conversation this node holds.
pub struct Registry {
    shards: Vec<Shard>,
    hasher: RandomState,
    next_id: AtomicU64,
    /// Conversations held here, by tenant: changed when a conversation's first socket joins or
    /// its last leaves (under its shard's lock, taken before this one), read by the admin
    /// stats without a walk over the shards.
    conversations: Mutex<HashMap<String, u64>>,
    /// Traced calls sent to this node's pages, until their answer.
    pub traces: crate::traces::PageTraces,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            next_id: AtomicU64::new(1),
            conversations: Mutex::default(),
            traces: crate::traces::PageTraces::default(),
        }
    }
}

impl Registry {
    fn shard(&self, conv: &ConvKey) -> MutexGuard<'_, HashMap<ConvKey, Vec<Slot>>> {
        // The shard count is tiny, so the modulo result always fits in usize.
        #[allow(clippy::cast_possible_truncation)]
        let i = (self.hasher.hash_one(conv) % SHARDS as u64) as usize;
        self.shards[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a socket of `conv`; frames for it arrive in the returned outbox, which yields
    /// `None` once the registry dropped the socket (queue full).
    pub fn join(&self, conv: &ConvKey, grant: Grant) -> (u64, Arc<Outbox>) {
        let outbox = Arc::new(Outbox::default());
        let socket_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut shard = self.shard(conv);
        if !shard.contains_key(conv) {
            *self
                .conversations
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(conv.tenant.clone())
                .or_default() += 1;
        }
        shard
            .entry(conv.clone())
            // Most conversations hold one socket: room for one, not the four a first push makes.
            .or_insert_with(|| Vec::with_capacity(1))
            .push(Slot {
                socket_id,
                client_id: None,
                outbox: Arc::clone(&outbox),
                grant,
            });
        (socket_id, outbox)
    }

    /// Closes with 4401 every socket of `tenant` that `keep` refuses (given its conversation
    /// and what admitted it); returns how many. Walks every shard: it runs on an admin change,
    /// never on a page's or a call's path.
    pub fn revoke(&self, tenant: &str, keep: impl Fn(&ConvKey, &Grant) -> bool) -> usize {
        let mut n = 0;
        for shard in &self.shards {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            for (conv, slots) in shard.iter().filter(|(c, _)| c.tenant == tenant) {
                for s in slots.iter().filter(|s| !keep(conv, &s.grant)) {
                    s.outbox.revoke();
                    n += 1;
                }
            }
        }
        n
    }

    /// Records the socket's clientId (bound by its first message).
    pub fn identify(&self, conv: &ConvKey, socket_id: u64, client_id: &str) {
        if let Some(slots) = self.shard(conv).get_mut(conv)
            && let Some(s) = slots.iter_mut().find(|s| s.socket_id == socket_id)
        {
            s.client_id = Some(client_id.into());
        }
    }

    /// Whether another socket of `conv` is bound to `client_id`.
    pub fn claimed_by_other(&self, conv: &ConvKey, socket_id: u64, client_id: &str) -> bool {
        self.shard(conv).get(conv).is_some_and(|slots| {
            slots
                .iter()
                .any(|s| s.socket_id != socket_id && s.client_id.as_deref() == Some(client_id))
        })
    }

    /// The outbox of another socket of `conv` bound to `client_id`, if one is.
    pub fn bound_elsewhere(
        &self,
        conv: &ConvKey,
        socket_id: u64,
        client_id: &str,
    ) -> Option<Arc<Outbox>> {
        self.shard(conv).get(conv).and_then(|slots| {
            slots
                .iter()
                .find(|s| s.socket_id != socket_id && s.client_id.as_deref() == Some(client_id))
                .map(|s| Arc::clone(&s.outbox))
        })
    }

    /// Removes a socket.
    pub fn leave(&self, conv: &ConvKey, socket_id: u64) {
        let mut shard = self.shard(conv);
        if let Some(slots) = shard.get_mut(conv) {
            slots.retain(|s| s.socket_id != socket_id);
            if slots.is_empty() {
                shard.remove(conv);
                let mut counts = self
                    .conversations
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if let Some(n) = counts.get_mut(&conv.tenant) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        counts.remove(&conv.tenant);
                    }
                }
            }
        }
    }

    /// How many conversations of `tenant` hold a socket on this node.
    pub fn conversations(&self, tenant: &str) -> u64 {
        self.conversations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
            .copied()
            .unwrap_or(0)
    }

    /// How many conversations hold a socket on this node, all tenants together.
    pub fn conversations_total(&self) -> u64 {
        self.conversations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .sum()
    }
}

impl PageSink for Registry {
    fn deliver(&self, conv: &ConvKey, client_id: &str, frame: Arc<str>) {
        let mut shard = self.shard(conv);
        let Some(slots) = shard.get_mut(conv) else {
            return;
        };
        slots.retain(|s| {
            let addressed = s.client_id.as_deref().is_none_or(|c| c == client_id);
            if !addressed {
                return true;
            }
            // A full queue: the page cannot keep up; the socket is dropped and closed.
            s.outbox.push(Arc::clone(&frame))
        });
    }

    fn deliver_traced(&self, conv: &ConvKey, client_id: &str, frame: Arc<str>, trace: &str) {
        self.traces.frame_sent(conv, &frame, trace);
        self.deliver(conv, client_id, frame);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_grant() -> Grant {
        Grant {
            kid: None,
            iat_ms: None,
        }
    }

    #[tokio::test]
    async fn frames_reach_the_addressed_and_unknown_pages_only() {
        let r = Registry::default();
        let conv = ConvKey::new("t", "u", "c");
        let (a, rx_a) = r.join(&conv, test_grant());
        let (b, rx_b) = r.join(&conv, test_grant());
        let (_c, rx_c) = r.join(&conv, test_grant());
        r.identify(&conv, a, "p1");
        r.identify(&conv, b, "p2");
        r.deliver(&conv, "p1", "hello".into());
        assert_eq!(rx_a.next().await, Some(Outgoing::Frame("hello".into())));
        assert!(rx_b.lock().frames.is_empty());
        assert_eq!(
            rx_c.next().await,
            Some(Outgoing::Frame("hello".into())),
            "unknown clientId gets it"
        );
        assert!(r.claimed_by_other(&conv, b, "p1"));
        assert!(!r.claimed_by_other(&conv, a, "p1"));
    }

    #[test]
    fn conversations_are_counted_per_tenant_as_their_first_socket_joins_and_last_leaves() {
        let r = Registry::default();
        let c1 = ConvKey::new("t", "u", "c1");
        let c2 = ConvKey::new("t", "u", "c2");
        let (a, _) = r.join(&c1, test_grant());
        let (b, _) = r.join(&c1, test_grant());
        let (c, _) = r.join(&c2, test_grant());
        let (_d, _) = r.join(&ConvKey::new("o", "u", "c1"), test_grant());
        assert_eq!((r.conversations("t"), r.conversations("o")), (2, 1));
        assert_eq!(r.conversations_total(), 3);
        r.leave(&c1, a);
        assert_eq!(r.conversations("t"), 2, "c1 still has a socket");
        r.leave(&c1, b);
        r.leave(&c2, c);
        r.leave(&c2, c);
        assert_eq!((r.conversations("t"), r.conversations_total()), (0, 1));
    }

    #[tokio::test]
    async fn queued_frames_are_taken_in_order_and_never_before_a_probe_an_eviction_or_an_overflow()
    {
        let r = Registry::default();
        let conv = ConvKey::new("t", "u", "c");
        let (_a, rx) = r.join(&conv, test_grant());
        assert_eq!(rx.queued_frame(), None, "an empty queue gives nothing");
        for f in ["1", "2", "3"] {
            r.deliver(&conv, "p1", f.into());
        }
        assert_eq!(rx.next().await, Some(Outgoing::Frame("1".into())));
        assert_eq!(rx.queued_frame().as_deref(), Some("2"));
        rx.probe();
        assert_eq!(rx.queued_frame(), None, "a probe goes before the frames");
        assert_eq!(rx.next().await, Some(Outgoing::Probe));
        assert_eq!(rx.queued_frame().as_deref(), Some("3"));
        assert_eq!(rx.queued_frame(), None);
        for _ in 0..=OUTBOUND_QUEUE {
            r.deliver(&conv, "p1", "x".into());
        }
        assert_eq!(
            rx.queued_frame(),
            None,
            "an overflowed queue ends the socket"
        );
        assert_eq!(rx.next().await, None);
    }

    #[tokio::test]
    async fn a_full_queue_drops_the_socket() {
        let r = Registry::default();
        let conv = ConvKey::new("t", "u", "c");
        let (_a, rx) = r.join(&conv, test_grant());
        for _ in 0..OUTBOUND_QUEUE {
            r.deliver(&conv, "p1", "x".into());
        }
        assert_eq!(
            rx.next().await,
            Some(Outgoing::Frame("x".into())),
            "a queue with room keeps the socket"
        );
        for _ in 0..=OUTBOUND_QUEUE {
            r.deliver(&conv, "p1", "x".into());
        }
        assert_eq!(
            rx.next().await,
            None,
            "an overflowing queue ends the socket"
        );
        r.deliver(&conv, "p1", "x".into());
        assert!(
            rx.lock().frames.is_empty(),
            "a dropped socket gets nothing more"
        );
    }
}
