//! The arguments of the scripts of calls and confirmations: a call bound, placed, answered,
//! timed out, cancelled, watched and read; a confirmation accepted or expired.

use super::{
    BIND, CANCEL, CONFIRM, EXPIRE_CONFIRM, Lua, Outbox, PENDING, PLACE, READ_CALL, RESULT,
    ScriptArgs, TIMEOUT, WATCH,
};

/// `bind.lua`: stores a call's binding and publishes its page message to the nodes holding the
/// conversation's sockets.
#[derive(Debug, Clone)]
pub struct Bind {
    /// KEYS: the call's hash.
    pub call: String,
    /// KEYS: the conversation's pending set.
    pub pending: String,
    /// KEYS: the partition's deadline set.
    pub deadlines: String,
    /// KEYS: the conversation's sockets hash.
    pub sockets: String,
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
    /// Its member of the deadline set (`codec::deadline_member`).
    pub deadline_member: String,
    /// The start of every node's channel name (`Keys::node_channel_prefix`).
    pub channel_prefix: String,
    /// The end of a node's channel name in this partition.
    pub channel_suffix: String,
}

impl Bind {
    fn keys(&self) -> Vec<String> {
        vec![
            self.call.clone(),
            self.pending.clone(),
            self.deadlines.clone(),
            self.sockets.clone(),
        ]
    }

    fn argv(self) -> Vec<String> {
        vec![
            self.id,
            self.conv_ref,
            self.client,
            self.deadline.to_string(),
            self.node,
            self.summary,
            self.frame,
            self.cancel,
            self.ttl.to_string(),
            self.deadline_member,
            self.channel_prefix,
            self.channel_suffix,
        ]
    }
}

impl ScriptArgs for Bind {
    fn lua() -> &'static Lua {
        &BIND
    }

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        (self.keys(), self.argv())
    }
}

/// `place.lua`: an agent's call in one round trip (conversation read, rate, bind).
#[derive(Debug, Clone)]
pub struct Place {
    /// The binding: the first 4 KEYS and 12 ARGV.
    pub bind: Bind,
    /// KEYS: the conversation's hash.
    pub conv: String,
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
    /// The live node ids (sent after their count).
    pub live: Vec<String>,
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

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        let mut keys = self.bind.keys();
        keys.push(self.conv.clone());
        let rate = match self.rate {
            Some(r) => {
                keys.push(r.rate);
                [
                    r.interval.to_string(),
                    r.burst.to_string(),
                    r.want.to_string(),
                    r.back.to_string(),
                    if r.need { "1" } else { "0" }.to_owned(),
                ]
            }
            None => {
                keys.push(self.conv);
                Default::default()
            }
        };
        let mut argv = self.bind.argv();
        argv.extend([
            self.manifest_prefix,
            self.expected_client,
            self.expected_seq,
            self.now.to_string(),
            self.grace.to_string(),
        ]);
        argv.extend(rate);
        argv.push(self.live.len().to_string());
        argv.extend(self.live);
        argv.extend(self.dead);
        (keys, argv)
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

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        let keys = vec![
            self.call,
            self.confirm,
            self.pending,
            self.deadlines,
            self.outbox.key,
        ];
        let argv = vec![
            self.conv_ref,
            self.client,
            self.outcome,
            self.confirm_id,
            self.confirm_ttl.to_string(),
            self.id,
            self.channel_prefix,
            self.channel_suffix,
            self.message,
            self.deadline_member,
            self.compact_id,
            self.compact_client,
            self.received.map(|ms| ms.to_string()).unwrap_or_default(),
            self.outbox.name,
            self.outbox.entry,
            self.now.to_string(),
        ];
        (keys, argv)
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

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        let keys = vec![
            self.call,
            self.pending,
            self.deadlines,
            self.sockets,
            self.outbox.key,
        ];
        let argv = vec![
            self.id,
            self.outcome,
            self.channel_prefix,
            self.channel_suffix,
            self.message,
            self.deadline_member,
            self.outbox.name,
            self.outbox.entry,
        ];
        (keys, argv)
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

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        (
            vec![self.call, self.sockets],
            vec![self.channel_prefix, self.channel_suffix],
        )
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

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        (vec![self.call], vec![self.node])
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

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        (vec![self.call], Vec::new())
    }
}

/// `pending.lua`: the page messages of a conversation's pending calls.
#[derive(Debug, Clone)]
pub struct PendingFrames {
    /// KEYS: the conversation's pending set.
    pub pending: String,
    /// The call key prefix of the conversation's partition.
    pub call_prefix: String,
}

impl ScriptArgs for PendingFrames {
    fn lua() -> &'static Lua {
        &PENDING
    }

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        (vec![self.pending], vec![self.call_prefix])
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

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        (
            vec![self.confirm, self.outbox.key],
            vec![
                self.client,
                if self.again { "again" } else { "" }.to_owned(),
                self.outbox.name,
                self.outbox.entry,
                self.outcome,
                self.kept.to_string(),
            ],
        )
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

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        let mut argv = vec![
            self.client,
            self.now.to_string(),
            self.grace.to_string(),
            self.outbox.name,
            self.outbox.entry,
            self.outcome,
            self.kept.to_string(),
        ];
        argv.extend(self.live);
        (vec![self.confirm, self.sockets, self.outbox.key], argv)
    }
}
