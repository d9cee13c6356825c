//! The arguments of the webhook queue's scripts: a tenant's new events admitted or deferred,
//! its conversations' queues taken when due, popped and rescheduled.

use super::{
    Args, Lua, ScriptArgs, WEBHOOK_ADMIT, WEBHOOK_DEFER, WEBHOOK_POP, WEBHOOK_RESCHEDULE,
    WEBHOOK_TAKE_DUE,
};

/// `webhook_admit.lua`: a new event queued behind its conversation's waiting ones, if any.
#[derive(Debug, Clone)]
pub struct WebhookAdmit {
    /// KEYS: the tenant's event stream.
    pub stream: String,
    /// KEYS: the conversation's queue.
    pub queue: String,
    /// The event's stream entry id.
    pub entry_id: String,
    /// The event as queued.
    pub pending: String,
}

impl ScriptArgs for WebhookAdmit {
    fn lua() -> &'static Lua {
        &WEBHOOK_ADMIT
    }

    fn args(self) -> Args {
        Args::new()
            .key("stream", self.stream)
            .key("queue", self.queue)
            .arg("entry_id", self.entry_id)
            .arg("pending", self.pending)
    }
}

/// `webhook_defer.lua`: a failed event moved into its conversation's queue.
#[derive(Debug, Clone)]
pub struct WebhookDefer {
    /// KEYS: the tenant's event stream.
    pub stream: String,
    /// KEYS: the conversation's queue.
    pub queue: String,
    /// KEYS: the tenant's due set.
    pub due: String,
    /// The event's stream entry id.
    pub entry_id: String,
    /// The event as queued.
    pub pending: String,
    /// The conversation (`user/conversation`).
    pub conv: String,
    /// When it is due, ms.
    pub due_ms: u64,
}

impl ScriptArgs for WebhookDefer {
    fn lua() -> &'static Lua {
        &WEBHOOK_DEFER
    }

    fn args(self) -> Args {
        Args::new()
            .key("stream", self.stream)
            .key("queue", self.queue)
            .key("due", self.due)
            .arg("entry_id", self.entry_id)
            .arg("pending", self.pending)
            .arg("conv", self.conv)
            .arg("due_ms", self.due_ms)
    }
}

/// `webhook_take_due.lua`: due conversations, leased.
#[derive(Debug, Clone)]
pub struct WebhookTakeDue {
    /// KEYS: the tenant's due set.
    pub due: String,
    /// Now, ms.
    pub now: u64,
    /// Leased until, ms.
    pub lease_until: u64,
    /// How many at most.
    pub count: u64,
}

impl ScriptArgs for WebhookTakeDue {
    fn lua() -> &'static Lua {
        &WEBHOOK_TAKE_DUE
    }

    fn args(self) -> Args {
        Args::new()
            .key("due", self.due)
            .arg("now", self.now)
            .arg("lease_until", self.lease_until)
            .arg("count", self.count)
    }
}

/// `webhook_pop.lua`: a queue's head removed.
#[derive(Debug, Clone)]
pub struct WebhookPop {
    /// KEYS: the conversation's queue.
    pub queue: String,
    /// KEYS: the tenant's due set.
    pub due: String,
    /// The conversation.
    pub conv: String,
    /// Now, ms.
    pub now: u64,
}

impl ScriptArgs for WebhookPop {
    fn lua() -> &'static Lua {
        &WEBHOOK_POP
    }

    fn args(self) -> Args {
        Args::new()
            .key("queue", self.queue)
            .key("due", self.due)
            .arg("conv", self.conv)
            .arg("now", self.now)
    }
}

/// `webhook_reschedule.lua`: a queue's head replaced and scheduled again.
#[derive(Debug, Clone)]
pub struct WebhookReschedule {
    /// KEYS: the conversation's queue.
    pub queue: String,
    /// KEYS: the tenant's due set.
    pub due: String,
    /// The conversation.
    pub conv: String,
    /// The head as queued.
    pub pending: String,
    /// When it is due, ms.
    pub due_ms: u64,
}

impl ScriptArgs for WebhookReschedule {
    fn lua() -> &'static Lua {
        &WEBHOOK_RESCHEDULE
    }

    fn args(self) -> Args {
        Args::new()
            .key("queue", self.queue)
            .key("due", self.due)
            .arg("conv", self.conv)
            .arg("pending", self.pending)
            .arg("due_ms", self.due_ms)
    }
}
