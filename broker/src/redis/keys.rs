//! The Redis key and channel layout. Every key of one conversation shares the hash tag
//! `{tenant/user/conversation}`, so one Lua script can check and mark atomically on Redis
//! Cluster too; per-tenant keys share `{tenant}`. The tenant is inside every tag, so a key of
//! another tenant is simply never addressed.

use crate::ConvKey;

/// Key and channel names under one prefix (`tm` by default; tests and tenants sharing a Redis
/// use their own).
#[derive(Debug, Clone)]
pub struct Keys {
    /// `<prefix>:`
    p: String,
}

/// `{tenant/user/conversation}`
pub fn conv_tag(c: &ConvKey) -> String {
    format!("{{{}/{}/{}}}", c.tenant, c.user, c.conversation)
}

/// Parses a conversation tag back (ids never contain `/`, `{` or `}`).
pub fn parse_conv_tag(tag: &str) -> Option<ConvKey> {
    let inner = tag.strip_prefix('{')?.strip_suffix('}')?;
    let mut parts = inner.splitn(3, '/');
    Some(ConvKey::new(parts.next()?, parts.next()?, parts.next()?))
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

    /// The hash of one call: binding, state, outcome.
    pub fn call(&self, c: &ConvKey, id: &str) -> String {
        format!("{}{}:call:{id}", self.p, conv_tag(c))
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
        format!("{}{}:confirm:{confirm_id}", self.p, conv_tag(c))
    }

    /// Prefix of the manifest hashes of a conversation (`…:manifest:<clientId>`: `m` the
    /// manifest, `s` its order, `r` its revision).
    pub fn manifest_prefix(&self, c: &ConvKey) -> String {
        format!("{}{}:manifest:", self.p, conv_tag(c))
    }

    /// The conversation hash: `current` clientId, the manifest counter `seq`, `drained`.
    pub fn conv(&self, c: &ConvKey) -> String {
        format!("{}{}:conv", self.p, conv_tag(c))
    }

    /// Sockets of a conversation per node: `<node>` → sockets, `<node>|<clientId>` → sockets.
    pub fn sockets(&self, c: &ConvKey) -> String {
        format!("{}{}:socks", self.p, conv_tag(c))
    }

    /// Ids of the conversation's calls that may still be pending.
    pub fn pending(&self, c: &ConvKey) -> String {
        format!("{}{}:pending", self.p, conv_tag(c))
    }

    /// Prefix of the call hashes of a conversation (`…:call:<id>`).
    pub fn call_prefix(&self, c: &ConvKey) -> String {
        format!("{}{}:call:", self.p, conv_tag(c))
    }

    /// The sharded channel of a conversation's pages.
    pub fn conv_channel(&self, c: &ConvKey) -> String {
        format!("{}ch:{}", self.p, conv_tag(c))
    }

    /// Prefix of conversation channels.
    pub fn conv_channel_prefix(&self) -> String {
        format!("{}ch:", self.p)
    }

    /// Call id → `tenant\nuser\nconversation`, for `GET /calls/{id}` and for telling a
    /// result for another conversation's or tenant's call (mismatch) from an unknown id.
    pub fn call_index(&self, id: &str) -> String {
        format!("{}callidx:{id}", self.p)
    }

    /// The tenant's event stream.
    pub fn events(&self, tenant: &str) -> String {
        format!("{}{}:events", self.p, tenant_tag(tenant))
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
        format!("{}{}:rate", self.p, tenant_tag(tenant))
    }

    /// Page sockets of the tenant per node: `<node>` → sockets.
    pub fn tenant_sockets(&self, tenant: &str) -> String {
        format!("{}{}:conns", self.p, tenant_tag(tenant))
    }

    /// Live nodes: member node id, score last heartbeat (ms).
    pub fn nodes(&self) -> String {
        format!("{}nodes", self.p)
    }

    /// Pending calls by deadline: member `tenant\nuser\nconversation\nid`.
    pub fn deadlines(&self) -> String {
        format!("{}deadlines", self.p)
    }

    /// A node's own channel: outcomes of the calls it waits for.
    pub fn node_channel(&self, node: &str) -> String {
        format!("{}node:{node}", self.p)
    }

    /// Prefix of node channels.
    pub fn node_channel_prefix(&self) -> String {
        format!("{}node:", self.p)
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

    #[test]
    fn every_key_of_a_conversation_shares_its_tag() {
        let k = Keys::new("tm");
        let c = ConvKey::new("acme", "u_1", "c-2");
        let tag = "{acme/u_1/c-2}";
        for key in [
            k.call(&c, "id"),
            k.confirm(&c, "k"),
            k.manifest_prefix(&c),
            k.conv(&c),
            k.sockets(&c),
            k.conv_channel(&c),
        ] {
            assert!(key.starts_with("tm:") && key.contains(tag), "{key}");
        }
        assert_eq!(parse_conv_tag(tag), Some(c));
        assert!(k.events("acme").contains("{acme}") && k.rate("acme").contains("{acme}"));
    }
}
