//! Message rates kept on this node.

use std::num::NonZeroU32;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use toolmark_broker::ConvKey;

/// Page messages of one conversation per second on this node (burst twice that), for
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
    /// `per_second` messages per conversation, burst twice that.
    pub fn new(per_second: u32) -> Self {
        let rate = NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN);
        let burst = rate.saturating_mul(NonZeroU32::MIN.saturating_add(1));
        ConversationRate(RateLimiter::keyed(
            Quota::per_second(rate).allow_burst(burst),
        ))
    }

    /// Takes one message of `conv`; `false` when its rate is exhausted.
    pub fn take(&self, conv: &ConvKey) -> bool {
        if self.0.len() > RATE_KEYS {
            self.0.retain_recent();
        }
        self.0.check_key(conv).is_ok()
    }
}
