//! The arguments of the scripts of calls and confirmations: a call bound, placed, answered,
//! timed out, cancelled, watched and read; a confirmation accepted or expired.

use super::{
    Args, BIND, CANCEL, CONFIRM, DUE, EXPIRE_CONFIRM, Lua, Outbox, PENDING, PLACE, READ_CALL,
    RESULT, ScriptArgs, TIMEOUT, WATCH,
};

/// `bind.lua`: stores a call's binding and publishes its page message to the nodes holding the
/// conversation's sockets.
#[derive(Debug, Clone)]
pub struct Bind {
    /// KEYS: the call's hash.
    pub call: String,
    /// KEYS: the conversation's pending set, for a call stored as a hash (none: the
    /// conversation's hash stands in for it, in the same slot, and is not touched as such).
    pub pending: Option<String>,
    /// KEYS: the partition's deadline set, for a call stored as a hash (none: as `pending`).
    pub deadlines: Option<String>,
    /// KEYS: the conversation's sockets hash.
    pub sockets: String,
    /// KEYS: the conversation's hash (its `due`).
    pub conv: String,
    /// KEYS: the conversation's calls by deadline (a call stored as one string).
    pub due: String,
    /// KEYS: the partition's conversations with calls by deadline.
    pub due_convs: String,
    /// The call id, compact (`codec::compact_id`).
    pub id: String,
    /// The conversation (`codec::conv_ref`).
    pub conv_ref: String,
    /// The clientId, compact.
    pub client: String,
    /// The deadline, ms since the epoch.
    pub deadline: u64,
    /// The waiting node.
    pub node: String,
    /// Tool, kind and flags (`codec::call_summary`).
    pub summary: String,
    /// The page message.
    pub frame: String,
    /// The call's cancel, as the pages get it.
    pub cancel: String,
    /// The call's time to live, ms.
    pub ttl: u64,
    /// Its member of the deadline set (`codec::deadline_member`), for a call stored as a
    /// hash ('' for one string).
    pub deadline_member: String,
    /// The start of every node's channel name (`Keys::node_channel_prefix`).
    pub channel_prefix: String,
    /// The end of a node's channel name in this partition.
    pub channel_suffix: String,
    /// Whether the call is stored as one string with its expiry; else as a hash (while a node
    /// of 0.4.0 or older is live: it reads no other form).
    pub one_string: bool,
}

impl Bind {
    /// The binding's 7 keys, first of [`Bind`]'s and [`Place`]'s (short: copied, hence by
    /// reference).
    fn named_keys(&self, a: Args) -> Args {
        a.key("call", &self.call)
            .key("pending", self.pending.as_ref().unwrap_or(&self.conv))
            .key("deadlines", self.deadlines.as_ref().unwrap_or(&self.conv))
            .key("sockets", &self.sockets)
            .key("conv", &self.conv)
            .key("due", &self.due)
            .key("due_convs", &self.due_convs)
    }

    /// The binding's 13 arguments, first of [`Bind`]'s and [`Place`]'s.
    fn named_args(self, a: Args) -> Args {
        a.arg("id", self.id)
            .arg("conv_ref", self.conv_ref)
            .arg("client", self.client)
            .arg("deadline", self.deadline)
            .arg("node", self.node)
            .arg("summary", self.summary)
            .arg("frame", self.frame)
            .arg("cancel", self.cancel)
            .arg("ttl", self.ttl)
            .arg("deadline_member", self.deadline_member)
            .arg("channel_prefix", self.channel_prefix)
            .arg("channel_suffix", self.channel_suffix)
            .arg("one_string", if self.one_string { "1" } else { "" })
    }
}

impl ScriptArgs for Bind {
    fn lua() -> &'static Lua {
        &BIND
    }

    fn args(self) -> Args {
        let a = self.named_keys(Args::new());
        self.named_args(a)
    }
}

/// `place.lua`: an agent's call in one round trip (conversation read, rate, bind).
#[derive(Debug, Clone)]
pub struct Place {
    /// The binding: the first 7 KEYS and 13 ARGV.
    pub bind: Bind,
    /// The tenant's rate, when the script takes some of it (`KEYS` `rate`, `ARGV` `interval`,
    /// `burst`, `want`, `back` and `need`); without, the call's token was taken already (the
    /// conversation's key stands in for the rate's, and all five are '').
    pub rate: Option<PlaceRate>,
    /// The conversation's manifest key prefix.
    pub manifest_prefix: String,
    /// The page the caller expects current ('' for none).
    pub expected_client: String,
    /// That page's manifest `seq` the caller read ('' for none).
    pub expected_seq: String,
    /// Now, ms since the epoch.
    pub now: u64,
    /// The reconnect grace, ms.
    pub grace: u64,
    /// The live node ids (sent after their count): the node's snapshot of the live set, not
    /// a copy of it.
    pub live: std::sync::Arc<std::collections::HashSet<String>>,
    /// The nodes known dead.
    pub dead: Vec<String>,
}

/// A tenant's rate as [`Place`] takes it.
#[derive(Debug, Clone)]
pub struct PlaceRate {
    /// KEYS: the tenant's GCRA bucket.
    pub rate: String,
    /// The emission interval, µs.
    pub interval: u64,
    /// The burst.
    pub burst: u32,
    /// How many tokens to take at most (the call's own and a batch for the node's reserve).
    pub want: u32,
    /// Unspent tokens given back first.
    pub back: u32,
    /// Whether the call's own token is among those taken: refused when none is; without, the
    /// call spent a held token and the take is the reserve's batch only.
    pub need: bool,
}

impl ScriptArgs for Place {
    fn lua() -> &'static Lua {
        &PLACE
    }

    fn args(self) -> Args {
        let mut a = self.bind.named_keys(Args::new());
        a = match &self.rate {
            Some(r) => a.key("rate", &r.rate),
            None => a.key("rate", &self.bind.conv),
        };
        let mut a = self
            .bind
            .named_args(a)
            .arg("manifest_prefix", self.manifest_prefix)
            .arg("expected_client", self.expected_client)
            .arg("expected_seq", self.expected_seq)
            .arg("now", self.now)
            .arg("grace", self.grace);
        a = match self.rate {
            Some(r) => a
                .arg("interval", r.interval)
                .arg("burst", r.burst)
                .arg("want", r.want)
                .arg("back", r.back)
                .arg("need", if r.need { "1" } else { "0" }),
            None => a
                .arg("interval", "")
                .arg("burst", "")
                .arg("want", "")
                .arg("back", "")
                .arg("need", ""),
        };
        a.arg("nlive", self.live.len())
            .args("live", self.live.iter())
            .args("dead", self.dead)
    }
}

/// `result.lua`: a page's result checked against the call's binding and recorded.
#[derive(Debug, Clone)]
pub struct PageResult {
    /// KEYS: the call's hash.
    pub call: String,
    /// KEYS: the confirmation's hash (the call's again without a confirmId).
    pub confirm: String,
    /// KEYS: the conversation's pending set.
    pub pending: String,
    /// KEYS: the partition's deadline set.
    pub deadlines: String,
    /// KEYS `outbox`, ARGV `outbox_name` and `outbox_entry`: the change of an async call.
    pub outbox: Outbox,
    /// KEYS: the conversation's calls by deadline (a call stored as one string).
    pub due: String,
    /// The conversation (`codec::conv_ref`).
    pub conv_ref: String,
    /// The clientId of the page that answered.
    pub client: String,
    /// The outcome, as stored.
    pub outcome: String,
    /// The result's confirmId, or ''.
    pub confirm_id: String,
    /// How long a confirmation is kept, ms.
    pub confirm_ttl: i64,
    /// The call id.
    pub id: String,
    /// The start of every node's channel name.
    pub channel_prefix: String,
    /// The end of a node's channel name in this partition.
    pub channel_suffix: String,
    /// The outcome message (`codec::outcome_message`).
    pub message: String,
    /// The call's member of the deadline set.
    pub deadline_member: String,
    /// The call id, compact (as the pending set holds it).
    pub compact_id: String,
    /// The clientId, compact (as the call's hash holds it).
    pub compact_client: String,
    /// For a result submitted again after an unknown outcome, when the node received it (ms).
    pub received: Option<u64>,
    /// Now on this node, ms since the epoch: the deadline is judged then (or at `received`,
    /// when earlier).
    pub now: u64,
}

impl ScriptArgs for PageResult {
    fn lua() -> &'static Lua {
        &RESULT
    }

    fn args(self) -> Args {
        Args::new()
            .key("call", self.call)
            .key("confirm", self.confirm)
            .key("pending", self.pending)
            .key("deadlines", self.deadlines)
            .key("outbox", self.outbox.key)
            .key("due", self.due)
            .arg("conv_ref", self.conv_ref)
            .arg("client", self.client)
            .arg("outcome", self.outcome)
            .arg("confirm_id", self.confirm_id)
            .arg("confirm_ttl", self.confirm_ttl)
            .arg("id", self.id)
            .arg("channel_prefix", self.channel_prefix)
            .arg("channel_suffix", self.channel_suffix)
            .arg("message", self.message)
            .arg("deadline_member", self.deadline_member)
            .arg("compact_id", self.compact_id)
            .arg("compact_client", self.compact_client)
            .arg(
                "received",
                self.received.map(|ms| ms.to_string()).unwrap_or_default(),
            )
            .arg("outbox_name", self.outbox.name)
            .arg("outbox_entry", self.outbox.entry)
            .arg("now", self.now)
    }
}

/// `timeout.lua`: a pending call timed out.
#[derive(Debug, Clone)]
pub struct Timeout {
    /// KEYS: the call's hash.
    pub call: String,
    /// KEYS: the conversation's pending set.
    pub pending: String,
    /// KEYS: the partition's deadline set.
    pub deadlines: String,
    /// KEYS: the conversation's sockets hash.
    pub sockets: String,
    /// KEYS `outbox`, ARGV `outbox_name` and `outbox_entry`: the call's change.
    pub outbox: Outbox,
    /// KEYS: the conversation's calls by deadline (a call stored as one string).
    pub due: String,
    /// The call id, compact.
    pub id: String,
    /// The timeout outcome, as stored.
    pub outcome: String,
    /// The start of every node's channel name.
    pub channel_prefix: String,
    /// The end of a node's channel name in this partition.
    pub channel_suffix: String,
    /// The outcome message.
    pub message: String,
    /// The call's member of the deadline set.
    pub deadline_member: String,
}

impl ScriptArgs for Timeout {
    fn lua() -> &'static Lua {
        &TIMEOUT
    }

    fn args(self) -> Args {
        Args::new()
            .key("call", self.call)
            .key("pending", self.pending)
            .key("deadlines", self.deadlines)
            .key("sockets", self.sockets)
            .key("outbox", self.outbox.key)
            .key("due", self.due)
            .arg("id", self.id)
            .arg("outcome", self.outcome)
            .arg("channel_prefix", self.channel_prefix)
            .arg("channel_suffix", self.channel_suffix)
            .arg("message", self.message)
            .arg("deadline_member", self.deadline_member)
            .arg("outbox_name", self.outbox.name)
            .arg("outbox_entry", self.outbox.entry)
    }
}

/// `cancel.lua`: a pending call's cancel sent to the pages.
#[derive(Debug, Clone)]
pub struct Cancel {
    /// KEYS: the call's hash.
    pub call: String,
    /// KEYS: the conversation's sockets hash.
    pub sockets: String,
    /// The start of every node's channel name.
    pub channel_prefix: String,
    /// The end of a node's channel name in this partition.
    pub channel_suffix: String,
}

impl ScriptArgs for Cancel {
    fn lua() -> &'static Lua {
        &CANCEL
    }

    fn args(self) -> Args {
        Args::new()
            .key("call", self.call)
            .key("sockets", self.sockets)
            .arg("channel_prefix", self.channel_prefix)
            .arg("channel_suffix", self.channel_suffix)
    }
}

/// `watch.lua`: this node among the watchers of a pending call.
#[derive(Debug, Clone)]
pub struct WatchCall {
    /// KEYS: the call's hash.
    pub call: String,
    /// This node.
    pub node: String,
}

impl ScriptArgs for WatchCall {
    fn lua() -> &'static Lua {
        &WATCH
    }

    fn args(self) -> Args {
        Args::new().key("call", self.call).arg("node", self.node)
    }
}

/// `read_call.lua`: a call, pending or finished.
#[derive(Debug, Clone)]
pub struct ReadCall {
    /// KEYS: the call's hash.
    pub call: String,
}

impl ScriptArgs for ReadCall {
    fn lua() -> &'static Lua {
        &READ_CALL
    }

    fn args(self) -> Args {
        Args::new().key("call", self.call)
    }
}

/// `pending.lua`: the page messages of a conversation's pending calls.
#[derive(Debug, Clone)]
pub struct PendingFrames {
    /// KEYS: the conversation's pending set (calls stored as hashes).
    pub pending: String,
    /// KEYS: the conversation's calls by deadline (calls stored as one string).
    pub due: String,
    /// The call key prefix of the conversation's partition.
    pub call_prefix: String,
}

impl ScriptArgs for PendingFrames {
    fn lua() -> &'static Lua {
        &PENDING
    }

    fn args(self) -> Args {
        Args::new()
            .key("pending", self.pending)
            .key("due", self.due)
            .arg("call_prefix", self.call_prefix)
    }
}

/// `due.lua`: a conversation's calls whose deadline passed, for the deadline sweep, and its
/// entry of the partition's conversations by deadline set right.
#[derive(Debug, Clone)]
pub struct DueCalls {
    /// KEYS: the conversation's calls by deadline.
    pub due: String,
    /// KEYS: the partition's conversations by deadline.
    pub due_convs: String,
    /// KEYS: the conversation's hash (its `due`).
    pub conv: String,
    /// The conversation (`codec::conv_ref`), as the partition's set holds it.
    pub conv_ref: String,
    /// The latest deadline due, ms since the epoch.
    pub max: u64,
}

impl ScriptArgs for DueCalls {
    fn lua() -> &'static Lua {
        &DUE
    }

    fn args(self) -> Args {
        Args::new()
            .key("due", self.due)
            .key("due_convs", self.due_convs)
            .key("conv", self.conv)
            .arg("conv_ref", self.conv_ref)
            .arg("max", self.max)
    }
}

/// `confirm.lua`: a confirmed accepted once.
#[derive(Debug, Clone)]
pub struct Confirm {
    /// KEYS: the confirmation's hash.
    pub confirm: String,
    /// KEYS `outbox`, ARGV `outbox_name` and `outbox_entry`: the confirmation's change.
    pub outbox: Outbox,
    /// The clientId of the page that confirmed.
    pub client: String,
    /// Submitted again after an unknown outcome.
    pub again: bool,
    /// The page's final outcome (JSON), written to the call.
    pub outcome: String,
    /// How long the call is kept once its confirmation ended, ms.
    pub kept: u64,
}

impl ScriptArgs for Confirm {
    fn lua() -> &'static Lua {
        &CONFIRM
    }

    fn args(self) -> Args {
        Args::new()
            .key("confirm", self.confirm)
            .key("outbox", self.outbox.key)
            .arg("client", self.client)
            .arg("again", if self.again { "again" } else { "" })
            .arg("outbox_name", self.outbox.name)
            .arg("outbox_entry", self.outbox.entry)
            .arg("outcome", self.outcome)
            .arg("kept", self.kept)
    }
}

/// `expire_confirm.lua`: the confirmation sweep of one pending confirmation.
#[derive(Debug, Clone)]
pub struct ExpireConfirm {
    /// KEYS: the confirmation's hash.
    pub confirm: String,
    /// KEYS: the conversation's sockets hash.
    pub sockets: String,
    /// KEYS `outbox`, ARGV `outbox_name` and `outbox_entry`: the expiry's change.
    pub outbox: Outbox,
    /// The clientId of the page the confirmation waits for.
    pub client: String,
    /// Now, ms since the epoch.
    pub now: u64,
    /// How long the page must be certainly absent, ms.
    pub grace: u64,
    /// The expiry's refusal (JSON), written to the call as its final outcome.
    pub outcome: String,
    /// How long the call is kept once its confirmation ended, ms.
    pub kept: u64,
    /// The live node ids.
    pub live: Vec<String>,
}

impl ScriptArgs for ExpireConfirm {
    fn lua() -> &'static Lua {
        &EXPIRE_CONFIRM
    }

    fn args(self) -> Args {
        Args::new()
            .key("confirm", self.confirm)
            .key("sockets", self.sockets)
            .key("outbox", self.outbox.key)
            .arg("client", self.client)
            .arg("now", self.now)
            .arg("grace", self.grace)
            .arg("outbox_name", self.outbox.name)
            .arg("outbox_entry", self.outbox.entry)
            .arg("outcome", self.outcome)
            .arg("kept", self.kept)
            .args("live", self.live)
    }
}
