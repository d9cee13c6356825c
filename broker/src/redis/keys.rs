//! The Redis key and channel layout. Every key of one conversation carries the hash tag of its
//! partition (`{p<k>}`, [`crate::partition`]), followed by `tenant/user/conversation`, so one
//! Lua script can check, mark and publish atomically on Redis Cluster too: the call hashes, the
//! deadline set and the node channels of that partition share the slot. Per-tenant keys share
//! `{tenant}`. The tenant is inside every conversation's name, so a key of another tenant is
//! simply never addressed.

use super::codec;
use crate::ConvKey;
use crate::partition;

/// Key and channel names under one prefix (`tm` by default; tests and tenants sharing a Redis
/// use their own).
#[derive(Debug, Clone)]
pub struct Keys {
    /// `<prefix>:`
    p: String,
}

/// `{p<k>}`: the hash tag of partition `k`.
pub fn partition_tag(k: u16) -> String {
    let mut s = String::with_capacity(8);
    push_tag(&mut s, k);
    s
}

/// Appends `{p<k>}` to `s`. A call's keys, messages and channels are built on every call:
/// pushed into a string of the right size, not through `format!` (a profile of the agent's
/// node found the formatting machinery at 5 % of its time, issue 58).
pub(super) fn push_tag(s: &mut String, k: u16) {
    s.push_str("{p");
    s.push_str(itoa::Buffer::new().format(k));
    s.push('}');
}

/// The partition `k` of a hash tag `{p<k>}` ([`push_tag`]), none for any other text.
pub(super) fn parse_tag(tag: &str) -> Option<u16> {
    let k = tag.strip_prefix("{p")?.strip_suffix('}')?;
    if k.is_empty() || !k.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    k.parse().ok()
}

/// `:{p<k>}`: the end of a node's channel name in partition `k` (after the node's id).
pub fn channel_suffix(k: u16) -> String {
    let mut s = String::with_capacity(9);
    s.push(':');
    push_tag(&mut s, k);
    s
}

/// The parts joined, in a string of their length.
pub(super) fn cat(parts: &[&str]) -> String {
    let mut s = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        s.push_str(p);
    }
    s
}

/// `{p<k>}tenant/user/conversation`: the start of every key of a conversation.
pub fn conv_base(c: &ConvKey) -> String {
    let mut s = String::with_capacity(10 + c.tenant.len() + c.user.len() + c.conversation.len());
    push_tag(&mut s, partition::of_conv(c));
    for (i, part) in [&c.tenant, &c.user, &c.conversation]
        .into_iter()
        .enumerate()
    {
        if i > 0 {
            s.push('/');
        }
        s.push_str(part);
    }
    s
}

/// `{tenant}`
pub fn tenant_tag(tenant: &str) -> String {
    format!("{{{tenant}}}")
}

impl Keys {
    /// Names under `prefix`.
    pub fn new(prefix: &str) -> Self {
        Keys {
            p: format!("{prefix}:"),
        }
    }

    /// The hash of one call (binding, state, outcome) in partition `k` (its conversation's),
    /// under the id's [`codec::compact_id`] form.
    pub fn call(&self, k: u16, id: &str) -> String {
        let mut s = self.call_prefix(k);
        s.push_str(&codec::compact_id(id));
        s
    }

    /// Prefix of the call hashes of partition `k` (`…:c:<compact id>`).
    pub fn call_prefix(&self, k: u16) -> String {
        let mut s = String::with_capacity(self.p.len() + 36);
        s.push_str(&self.p);
        push_tag(&mut s, k);
        s.push_str(":c:");
        s
    }

    /// Marks a page-minted confirmId as used by some conversation (to tell `mismatch` from
    /// `unknown_confirm`).
    pub fn confirm_index(&self, confirm_id: &str) -> String {
        format!("{}confirmidx:{confirm_id}", self.p)
    }

    /// Bytes of the tenant's retained event bodies (beside its stream, same tag).
    pub fn event_bytes(&self, tenant: &str) -> String {
        format!("{}{}:events:bytes", self.p, tenant_tag(tenant))
    }

    /// The hash of one confirmId binding.
    pub fn confirm(&self, c: &ConvKey, confirm_id: &str) -> String {
        format!("{}{}:confirm:{confirm_id}", self.p, conv_base(c))
    }

    /// Prefix of the manifest hashes of a conversation (`…:manifest:<clientId>`: `m` the
    /// manifest, `s` its order, `r` its revision).
    pub fn manifest_prefix(&self, c: &ConvKey) -> String {
        cat(&[&self.p, &conv_base(c), ":manifest:"])
    }

    /// Where a build before the partitioned layout kept a page's manifest
    /// (`<prefix>:{tenant/user/conversation}:manifest:<clientId>`): read once, when a page that
    /// moved from such a node speaks, so that a rolling upgrade keeps its manifest.
    pub fn legacy_manifest(&self, c: &ConvKey, client_id: &str) -> String {
        format!(
            "{}{{{}/{}/{}}}:manifest:{client_id}",
            self.p, c.tenant, c.user, c.conversation
        )
    }

    /// The conversation hash: `current` clientId, the manifest counter `seq`, `drained`, the
    /// current page's order `cm`, announced names `a:<name>`, `@`, the summary of its
    /// sockets hash (`own_sockets.lua`), and `due`, its score in [`Keys::due_convs`] while its
    /// [`Keys::due`] set holds calls.
    pub fn conv(&self, c: &ConvKey) -> String {
        cat(&[&self.p, &conv_base(c), ":conv"])
    }

    /// The conversation's gone page loads: clientId → when it left (ms), a sorted set.
    pub fn gone(&self, c: &ConvKey) -> String {
        format!("{}{}:gone", self.p, conv_base(c))
    }

    /// Sockets of a conversation per node: `<node>` → sockets, `<node>|<clientId>` → sockets.
    pub fn sockets(&self, c: &ConvKey) -> String {
        cat(&[&self.p, &conv_base(c), ":socks"])
    }

    /// The conversation hash beside a conversation's sockets hash (`sockets`), for a key of
    /// that form.
    pub fn conv_of_sockets(sockets: &str) -> Option<String> {
        sockets
            .strip_suffix(":socks")
            .map(|base| cat(&[base, ":conv"]))
    }

    /// The marker of one release of a page socket (`Pages::release_page`): whether it meant
    /// the page gone; a release asked again under its name is applied once.
    pub fn released(&self, c: &ConvKey, name: &str) -> String {
        format!("{}{}:left:{name}", self.p, conv_base(c))
    }

    /// Ids of the conversation's calls that may still be pending ([`codec::compact_id`]s).
    pub fn pending(&self, c: &ConvKey) -> String {
        cat(&[&self.p, &conv_base(c), ":pending"])
    }

    /// The conversation's pending calls by deadline, a sorted set: compact id
    /// ([`codec::compact_id`]) → deadline (ms). Kept for calls stored as one string (no node of
    /// 0.4.0 or older live); a call stored as a hash is in [`Keys::pending`] and the partition's
    /// [`Keys::deadlines`] instead.
    pub fn due(&self, c: &ConvKey) -> String {
        cat(&[&self.p, &conv_base(c), ":due"])
    }

    /// The tenant's event stream.
    pub fn events(&self, tenant: &str) -> String {
        format!("{}{}:events", self.p, tenant_tag(tenant))
    }

    /// The name of one `emit_once` emission (beside the tenant's stream, on its slot).
    pub fn event_once(&self, tenant: &str, once: &str) -> String {
        format!("{}{}:once:{once}", self.p, tenant_tag(tenant))
    }

    /// The tenant's live event channel.
    pub fn events_channel(&self, tenant: &str) -> String {
        format!("{}ev:{}", self.p, tenant_tag(tenant))
    }

    /// Prefix of event channels.
    pub fn events_channel_prefix(&self) -> String {
        format!("{}ev:", self.p)
    }

    /// The tenant's call-rate state (GCRA theoretical arrival time).
    pub fn rate(&self, tenant: &str) -> String {
        cat(&[&self.p, "{", tenant, "}:rate"])
    }

    /// The call-rate state of one credential of the tenant (`bucket`), in the tenant's slot.
    pub fn caller_rate(&self, tenant: &str, bucket: &str) -> String {
        format!("{}{}:rate:{bucket}", self.p, tenant_tag(tenant))
    }

    /// Page sockets of the tenant per node: `<node>` → sockets.
    pub fn tenant_sockets(&self, tenant: &str) -> String {
        format!("{}{}:conns", self.p, tenant_tag(tenant))
    }

    /// Each node's traffic entry of the tenant: node id → `<lapse>|<written>|<json>`
    /// ([`crate::traffic`]).
    pub fn traffic(&self, tenant: &str) -> String {
        format!("{}{}:traffic", self.p, tenant_tag(tenant))
    }

    /// The tool definitions the tenant's pages presented ([`crate::seen`]), in the tenant's
    /// slot.
    pub fn tools_seen(&self, tenant: &str) -> String {
        format!("{}{}:seen", self.p, tenant_tag(tenant))
    }

    /// Live nodes: member node id, score last heartbeat (ms).
    pub fn nodes(&self) -> String {
        format!("{}nodes", self.p)
    }

    /// The live nodes that find a call by an id naming no partition (releases after 0.4.0),
    /// scored as [`Keys::nodes`]: a node in `nodes` but not here is of an older release, and
    /// while one is live, call ids are minted in the legacy form
    /// ([`partition::new_legacy_call_id`]).
    pub fn nodes_any_id(&self) -> String {
        format!("{}nodes:any-id", self.p)
    }

    /// Each live node's release (releases after 0.4.0): member `node\n<release> <oldest it
    /// serves beside>` ([`crate::release::announcement`]), scored as [`Keys::nodes`]; read by a
    /// starting node ([`crate::release::refusal`]).
    pub fn nodes_release(&self) -> String {
        format!("{}nodes:release", self.p)
    }

    /// Pending calls of partition `k` by deadline: member `tenant\nuser\nconversation\nid`.
    pub fn deadlines(&self, k: u16) -> String {
        let mut s = String::with_capacity(self.p.len() + 18);
        s.push_str(&self.p);
        push_tag(&mut s, k);
        s.push_str(":deadlines");
        s
    }

    /// The conversations of partition `k` with pending calls in their [`Keys::due`] set, a
    /// sorted set: conversation ([`codec::conv_ref`]) → a time no later than its earliest
    /// deadline (what the deadline sweep reads; the conversation hash's `due` says the same).
    pub fn due_convs(&self, k: u16) -> String {
        let mut s = String::with_capacity(self.p.len() + 18);
        s.push_str(&self.p);
        push_tag(&mut s, k);
        s.push_str(":dueconvs");
        s
    }

    /// The outbox of partition `k`: changes whose events are not emitted yet, by name
    /// (`codec::outbox_entry`), written by the script that made the change.
    pub fn outbox(&self, k: u16) -> String {
        format!("{}{}:outbox", self.p, partition_tag(k))
    }

    /// A node's channel of partition `k`: frames for its pages of that partition's
    /// conversations, outcomes of the calls it waits for, its own probes.
    pub fn node_channel(&self, node: &str, k: u16) -> String {
        format!("{}node:{node}:{}", self.p, partition_tag(k))
    }

    /// The tenant catalog: tenant id → `<version>\n<record>` (all on the `{catalog}` slot).
    pub fn catalog(&self) -> String {
        format!("{}{{catalog}}:tenants", self.p)
    }

    /// The catalog's revision.
    pub fn catalog_revision(&self) -> String {
        format!("{}{{catalog}}:rev", self.p)
    }

    /// The admin audit log (a stream on the catalog's slot).
    pub fn catalog_audit(&self) -> String {
        format!("{}{{catalog}}:audit", self.p)
    }

    /// Where every change of the catalog is announced (the tenant's id), on the catalog's slot.
    pub fn catalog_channel(&self) -> String {
        format!("{}{{catalog}}:changes", self.p)
    }

    /// An idempotency key of the tenant's agent API (the key as sent: visible ASCII).
    pub fn idempotency(&self, tenant: &str, key: &str) -> String {
        format!("{}{}:idem:{key}", self.p, tenant_tag(tenant))
    }

    /// The tenant's counted sessions: member session id, score when it lapses (ms).
    pub fn places(&self, tenant: &str) -> String {
        format!("{}{}:places", self.p, tenant_tag(tenant))
    }

    /// One holder's counted sessions (same slot as [`Keys::places`]).
    pub fn holder_places(&self, tenant: &str, holder: &str) -> String {
        format!("{}{}:places:{holder}", self.p, tenant_tag(tenant))
    }

    /// A front door's record (`DoorRecords`): one string with its time to live. The names are
    /// those 0.4.0 wrote (a node of either release reads the other's).
    pub fn kept(&self, what: &crate::Kept) -> String {
        use crate::Kept;
        match what {
            Kept::McpSession(id) => format!("{}session:mcp:{id}", self.p),
            Kept::McpOwner(id) => format!("{}session:mcp-owner:{id}", self.p),
            Kept::McpTask { tenant, id } => format!("{}session:task:{tenant}:{id}", self.p),
        }
    }

    /// Prefix of node channels (scripts append `<node>:` and the partition's tag).
    pub fn node_channel_prefix(&self) -> String {
        cat(&[&self.p, "node:"])
    }

    /// Hashes holding fields of `node`, so a restarted node with the same id can clear them.
    pub fn node_keys(&self, node: &str) -> String {
        format!("{}nodekeys:{node}", self.p)
    }

    /// Pending confirmations to watch: member `tenant\nuser\nconversation\nconfirmId\nclientId`,
    /// score when to look next.
    pub fn pending_confirms(&self) -> String {
        format!("{}pendingconfirms", self.p)
    }

    /// The lease of the confirmation sweep.
    pub fn confirm_lease(&self) -> String {
        format!("{}lease:confirms", self.p)
    }

    /// The lease of the deadline sweep.
    pub fn sweep_lease(&self) -> String {
        format!("{}lease:sweep", self.p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names built without `format!` are the layout every release stores and reads.
    #[test]
    fn names_built_by_hand_are_the_layout_stored() {
        for k in [0u16, 7, 10, 63, 99, 100, 65_535] {
            assert_eq!(partition_tag(k), format!("{{p{k}}}"));
            assert_eq!(channel_suffix(k), format!(":{{p{k}}}"));
        }
        let keys = Keys::new("tm");
        let c = ConvKey::new("acme", "u_1", "c-2");
        let p = partition::of_conv(&c);
        let base = format!("{{p{p}}}acme/u_1/c-2");
        assert_eq!(conv_base(&c), base);
        assert_eq!(keys.conv(&c), format!("tm:{base}:conv"));
        assert_eq!(
            Keys::conv_of_sockets(&keys.sockets(&c)),
            Some(keys.conv(&c))
        );
        assert_eq!(Keys::conv_of_sockets(&keys.tenant_sockets("acme")), None);
        assert_eq!(keys.sockets(&c), format!("tm:{base}:socks"));
        assert_eq!(keys.pending(&c), format!("tm:{base}:pending"));
        assert_eq!(keys.manifest_prefix(&c), format!("tm:{base}:manifest:"));
        assert_eq!(keys.deadlines(p), format!("tm:{{p{p}}}:deadlines"));
        assert_eq!(keys.rate("acme"), "tm:{acme}:rate");
        assert_eq!(keys.node_channel_prefix(), "tm:node:");
        let id = "0b9f2a8e-3c1d-4e5f-8a7b-1c2d3e4f5a6b";
        assert_eq!(
            keys.call(3, id),
            format!("tm:{{p3}}:c:{}", codec::compact_id(id))
        );
        assert_eq!(codec::compact_id(id), "C58qjjwdTl-KexwtPk9aaw");
        // Not the lowercase hyphenated form: kept as sent.
        let upper = id.to_uppercase();
        assert_eq!(codec::compact_id(&upper), format!("~{upper}"));
    }

    /// A node's channel names its partition: read back from the channel a message came on.
    #[test]
    fn a_channels_partition_is_read_back_from_its_tag() {
        let keys = Keys::new("tm");
        let own = cat(&[&keys.node_channel_prefix(), "n1", ":"]);
        for k in [0u16, 7, 63, 65_535] {
            let channel = keys.node_channel("n1", k);
            assert_eq!(
                channel.strip_prefix(own.as_str()).and_then(parse_tag),
                Some(k)
            );
        }
        for bad in [
            "", "{p}", "{p7", "p7}", "{p+7}", "{p 7}", "{p70000}", "{q7}", "{p7}x",
        ] {
            assert_eq!(parse_tag(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn every_key_of_a_conversation_its_calls_and_its_node_channels_share_one_slot() {
        let k = Keys::new("tm");
        let c = ConvKey::new("acme", "u_1", "c-2");
        let p = partition::of_conv(&c);
        let tag = partition_tag(p);
        let id = partition::new_call_id();
        for key in [
            k.call(p, &id),
            k.confirm(&c, "k"),
            k.manifest_prefix(&c),
            k.conv(&c),
            k.sockets(&c),
            k.pending(&c),
            k.deadlines(p),
            k.due(&c),
            k.due_convs(p),
            k.node_channel("n1", p),
        ] {
            assert!(key.starts_with("tm:") && key.contains(&tag), "{key}");
            assert_eq!(
                fred::util::redis_keyslot(key.as_bytes()),
                fred::util::redis_keyslot(tag.as_bytes()),
                "{key}"
            );
        }
        assert!(k.conv(&c).contains("acme/u_1/c-2"));
        assert!(k.events("acme").contains("{acme}") && k.rate("acme").contains("{acme}"));
    }
}
