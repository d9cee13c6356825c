//! The memory broker's calls by id: a pending call whole (its record, who waits for it, its
//! frame for a page that reconnects), a finished one [`packed`](super::packed) for the rest of
//! its retention, in shards so that no single lock (or rehash of a huge map) stalls every call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Instant;

use tokio::sync::oneshot;

use super::packed;
use crate::{CallRecord, Outcome};

/// A call id as the table keys it: a canonical UUID (the ids the gateway mints) as its 16
/// bytes, anything else as its text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum CallKey {
    Uuid([u8; 16]),
    Text(Box<str>),
}

impl CallKey {
    pub(super) fn of(id: &str) -> Self {
        match packed::canonical_uuid(id) {
            Some(bytes) => CallKey::Uuid(bytes),
            None => CallKey::Text(id.into()),
        }
    }
}

/// A call still waiting for its outcome.
pub(super) struct PendingCall {
    pub(super) record: CallRecord,
    pub(super) waiter: Option<oneshot::Sender<Outcome>>,
    /// Watchers of its outcome ([`crate::Calls::watch`]).
    pub(super) watchers: Vec<oneshot::Sender<Outcome>>,
    /// The frame sent, for a page that reconnects while the call is pending.
    pub(super) frame: Arc<str>,
}

impl PendingCall {
    /// Everyone waiting for the outcome: the placing request and the watchers.
    pub(super) fn listeners(&mut self) -> Vec<oneshot::Sender<Outcome>> {
        let mut all = std::mem::take(&mut self.watchers);
        all.extend(self.waiter.take());
        all
    }
}

pub(super) enum CallEntry {
    Pending(Box<PendingCall>),
    /// A finished call: until when it is kept ([`kept_ms`], 8 bytes) then its record
    /// [`packed`](packed::pack), in one allocation (nobody waits for it any more and no page
    /// needs its frame again). It is kept `retention.finished_calls` after it finished, or,
    /// answered `needs_confirmation`, `retention.confirmations` and then
    /// `retention.finished_calls` after its confirmation ended.
    Finished(Box<[u8]>),
}

/// An instant as a finished call keeps it: milliseconds since the first the process asked for
/// (a table entry of 40 bytes where an `Instant` beside the bytes would make it 56).
fn kept_ms(t: Instant) -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(t.saturating_duration_since(epoch).as_millis()).unwrap_or(u64::MAX)
}

impl CallEntry {
    /// The entry of a call that just finished with `record`, kept until `kept_until`.
    pub(super) fn finished(record: &CallRecord, kept_until: Instant, own_node: &str) -> Self {
        let mut bytes = Vec::with_capacity(128);
        bytes.extend_from_slice(&kept_ms(kept_until).to_le_bytes());
        packed::pack_into(&mut bytes, record, own_node);
        CallEntry::Finished(bytes.into_boxed_slice())
    }

    /// A pending call packed as finished, kept until `kept_until`: what it was (none: it was
    /// finished already). Its record is moved out, not copied.
    pub(super) fn finish(&mut self, kept_until: Instant, own_node: &str) -> Option<PendingCall> {
        let CallEntry::Pending(p) = self else {
            return None;
        };
        let finished = CallEntry::finished(&p.record, kept_until, own_node);
        match std::mem::replace(self, finished) {
            CallEntry::Pending(p) => Some(*p),
            CallEntry::Finished(_) => None,
        }
    }

    /// The call's record (decoded when it is packed).
    pub(super) fn record(&self, id: &str, own_node: &str) -> Option<CallRecord> {
        match self {
            CallEntry::Pending(p) => Some(p.record.clone()),
            CallEntry::Finished(bytes) => packed::unpack(id, bytes.get(8..)?, own_node),
        }
    }

    pub(super) fn is_pending(&self) -> bool {
        matches!(self, CallEntry::Pending(_))
    }

    /// Whether it is still kept at `now`.
    pub(super) fn kept_at(&self, now: Instant) -> bool {
        match self {
            CallEntry::Pending(_) => true,
            CallEntry::Finished(bytes) => bytes
                .first_chunk::<8>()
                .is_some_and(|until| kept_ms(now) < u64::from_le_bytes(*until)),
        }
    }
}

pub(super) type CallMap = HashMap<CallKey, CallEntry>;

/// The calls of the memory broker: sharded by id, each shard behind its own lock; and the
/// trace contexts of traced calls ([`crate::Calls::call_trace`]), by call id.
pub(super) struct CallTable {
    pub(super) shards: Vec<Mutex<CallMap>>,
    hasher: std::hash::RandomState,
    pub(super) traces: Mutex<super::recent::Recent<String>>,
}

const CALL_SHARDS: usize = 32;

/// How many traced calls' trace contexts the memory broker keeps
/// ([`crate::Calls::call_trace`]), at most [`crate::ONCE_TTL`] each: a webhook or a timeout
/// comes within the call's life.
const TRACES_KEPT: usize = 16_384;

impl Default for CallTable {
    fn default() -> Self {
        CallTable {
            shards: (0..CALL_SHARDS).map(|_| Mutex::default()).collect(),
            hasher: std::hash::RandomState::new(),
            traces: Mutex::new(super::recent::Recent::new(TRACES_KEPT)),
        }
    }
}

impl CallTable {
    /// The shard holding call `id`.
    pub(super) fn shard(&self, id: &str) -> MutexGuard<'_, CallMap> {
        use std::hash::BuildHasher;
        // The shard count is tiny, so the modulo result always fits in usize.
        #[allow(clippy::cast_possible_truncation)]
        let i = (self.hasher.hash_one(id) % CALL_SHARDS as u64) as usize;
        self.shards[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
