//! Message rates kept on this node.

use governor::DefaultKeyedRateLimiter;
use toolmark_broker::{ConvKey, rate};

/// Page messages of one conversation per second on this node (burst `model::burst`), for
/// transports without a socket to hold a per-socket rate (`/inbound`).
pub struct ConversationRate(DefaultKeyedRateLimiter<ConvKey>);

impl std::fmt::Debug for ConversationRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConversationRate").finish_non_exhaustive()
    }
}

/// Conversations tracked before the idle ones are forgotten.
const RATE_KEYS: usize = 10_000;

impl ConversationRate {
    /// `per_second` messages per conversation.
    pub fn new(per_second: u32) -> Self {
        ConversationRate(rate::keyed_buckets(per_second))
    }

    /// Takes one message of `conv`; `false` when its rate is exhausted.
    pub fn take(&self, conv: &ConvKey) -> bool {
        if self.0.len() > RATE_KEYS {
            self.0.retain_recent();
        }
        self.0.check_key(conv).is_ok()
    }
}
