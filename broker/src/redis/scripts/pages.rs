//! The arguments of the scripts of page sockets and manifests: a conversation's presence
//! (sockets per node and per page load), its latest manifests and current page, read and kept
//! alive.

use super::{
    ANNOUNCED, Args, CONV_READ, COUNT_DOWN, COUNT_UP, DRAINED, LEAVE, Lua, OWN_SOCKETS, Outbox,
    PUT_MANIFEST, REFRESH, ScriptArgs,
};

/// `put_manifest.lua`: a page's latest manifest kept, the page made current.
#[derive(Debug, Clone)]
pub struct PutManifest {
    /// KEYS: the page load's manifest hash.
    pub manifest_key: String,
    /// KEYS: the conversation's hash.
    pub conv: String,
    /// KEYS `outbox`, ARGV `outbox_name` and `outbox_entry`, when the change is announced
    /// (not when re-publishing).
    pub outbox: Option<Outbox>,
    /// The manifest's JSON.
    pub manifest: String,
    /// Its revision.
    pub rev: u64,
    /// Time to live, ms.
    pub ttl: String,
    /// Keeps an existing current page (re-publishing after Redis lost its data).
    pub keep_current: bool,
    /// The page load's clientId.
    pub client: String,
    /// KEYS: the conversation's gone page loads.
    pub gone: String,
    /// The conversation's manifest key prefix.
    pub manifest_prefix: String,
    /// How long a gone page load other than the current one keeps its manifest, ms.
    pub grace: i64,
}

impl ScriptArgs for PutManifest {
    fn lua() -> &'static Lua {
        &PUT_MANIFEST
    }

    fn args(self) -> Args {
        let mut a = Args::new()
            .key("manifest_key", self.manifest_key)
            .key("conv", self.conv)
            .key("gone", self.gone);
        if let Some(o) = &self.outbox {
            a = a.key("outbox", o.key.clone());
        }
        a = a
            .arg("manifest", self.manifest)
            .arg("rev", self.rev)
            .arg("ttl", self.ttl)
            .arg("keep_current", if self.keep_current { "1" } else { "0" })
            .arg("client", self.client)
            .arg("manifest_prefix", self.manifest_prefix)
            .arg("grace", self.grace);
        match self.outbox {
            Some(o) => a.arg("outbox_name", o.name).arg("outbox_entry", o.entry),
            None => a,
        }
    }
}

/// `conv_read.lua`: the conversation as the agent API sees it.
#[derive(Debug, Clone)]
pub struct ConvRead {
    /// KEYS: the conversation's hash.
    pub conv: String,
    /// KEYS: its sockets hash.
    pub sockets: String,
    /// Its manifest key prefix.
    pub manifest_prefix: String,
    /// No node of 0.4.0 or older is live: the sockets may be read from the conversation's
    /// summary of them.
    pub one_string: bool,
    /// The live node ids.
    pub live: Vec<String>,
}

impl ScriptArgs for ConvRead {
    fn lua() -> &'static Lua {
        &CONV_READ
    }

    fn args(self) -> Args {
        Args::new()
            .key("conv", self.conv)
            .key("sockets", self.sockets)
            .arg("manifest_prefix", self.manifest_prefix)
            .arg("one_string", if self.one_string { "1" } else { "" })
            .args("live", self.live)
    }
}

/// `count_up.lua`: one more socket of this node in a count hash.
#[derive(Debug, Clone)]
pub struct CountUp {
    /// KEYS: the count hash.
    pub counts: String,
    /// KEYS: the conversation's hash, whose sockets' summary moves too (a page socket).
    pub conv: Option<String>,
    /// The field: this node, or `<node>|<clientId>`.
    pub field: String,
    /// Time to live, ms.
    pub ttl: i64,
    /// Whether the script returns nothing (no limit is checked against the counts).
    pub quiet: bool,
}

impl ScriptArgs for CountUp {
    fn lua() -> &'static Lua {
        &COUNT_UP
    }

    fn args(self) -> Args {
        let mut a = Args::new().key("counts", self.counts);
        if let Some(conv) = self.conv {
            a = a.key("conv", conv);
        }
        let a = a.arg("field", self.field).arg("ttl", self.ttl);
        if self.quiet { a.arg("quiet", "1") } else { a }
    }
}

/// `count_down.lua`: one socket less in a count hash.
#[derive(Debug, Clone)]
pub struct CountDown {
    /// KEYS: the count hash.
    pub counts: String,
    /// KEYS: the conversation's hash, whose sockets' summary moves too (a page socket).
    pub conv: Option<String>,
    /// The fields counted down.
    pub fields: Vec<String>,
}

impl ScriptArgs for CountDown {
    fn lua() -> &'static Lua {
        &COUNT_DOWN
    }

    fn args(self) -> Args {
        let mut a = Args::new().key("counts", self.counts);
        if let Some(conv) = self.conv {
            a = a.key("conv", conv);
        }
        a.args("fields", self.fields)
    }
}

/// `own_sockets.lua`: this node's socket counts of a conversation put anew (none: cleared).
#[derive(Debug, Clone)]
pub struct OwnSockets {
    /// KEYS: the conversation's sockets hash.
    pub sockets: String,
    /// KEYS: the conversation's hash (its sockets' summary).
    pub conv: String,
    /// This node.
    pub node: String,
    /// Time to live, ms.
    pub ttl: i64,
    /// Field, count, …
    pub counts: Vec<String>,
}

impl ScriptArgs for OwnSockets {
    fn lua() -> &'static Lua {
        &OWN_SOCKETS
    }

    fn args(self) -> Args {
        Args::new()
            .key("sockets", self.sockets)
            .key("conv", self.conv)
            .arg("node", self.node)
            .arg("ttl", self.ttl)
            .args("counts", self.counts)
    }
}

/// `leave.lua`: a page socket released once under its name.
#[derive(Debug, Clone)]
pub struct Leave {
    /// KEYS: the conversation's sockets hash.
    pub sockets: String,
    /// KEYS: the release's marker.
    pub marker: String,
    /// KEYS `outbox`, ARGV `outbox_name` and `outbox_entry` ('' each without), when the page's
    /// leaving is announced.
    pub outbox: Option<Outbox>,
    /// This node.
    pub node: String,
    /// The socket's clientId, or ''.
    pub client: String,
    /// How long the marker is kept, ms.
    pub marker_ttl: i64,
    /// KEYS: the conversation's hash.
    pub conv: String,
    /// KEYS: the conversation's gone page loads.
    pub gone: String,
    /// The conversation's manifest key prefix.
    pub manifest_prefix: String,
    /// How long a gone page load other than the current one keeps its manifest, ms.
    pub grace: i64,
    /// How many gone page loads keep a manifest at once (`model::GONE_MANIFESTS_KEPT`).
    pub kept: usize,
    /// The conversation's time to live, ms.
    pub ttl: i64,
    /// No node of 0.4.0 or older is live: the page's other sockets may be read from the
    /// conversation's summary of them.
    pub one_string: bool,
    /// The live node ids.
    pub live: Vec<String>,
}

impl ScriptArgs for Leave {
    fn lua() -> &'static Lua {
        &LEAVE
    }

    fn args(self) -> Args {
        let mut a = Args::new()
            .key("sockets", self.sockets)
            .key("marker", self.marker)
            .key("conv", self.conv)
            .key("gone", self.gone);
        let (name, entry) = match self.outbox {
            Some(o) => {
                a = a.key("outbox", o.key);
                (o.name, o.entry)
            }
            None => (String::new(), String::new()),
        };
        a.arg("node", self.node)
            .arg("client", self.client)
            .arg("marker_ttl", self.marker_ttl)
            .arg("outbox_name", name)
            .arg("outbox_entry", entry)
            .arg("manifest_prefix", self.manifest_prefix)
            .arg("grace", self.grace)
            .arg("kept", self.kept)
            .arg("ttl", self.ttl)
            .arg("one_string", if self.one_string { "1" } else { "" })
            .args("live", self.live)
    }
}

/// `refresh.lua`: what a live page needs kept alive.
#[derive(Debug, Clone)]
pub struct Refresh {
    /// KEYS: the conversation's hash.
    pub conv: String,
    /// KEYS: its sockets hash.
    pub sockets: String,
    /// KEYS: its pending calls' set.
    pub pending: String,
    /// Time to live, ms.
    pub ttl: String,
    /// The conversation's manifest key prefix.
    pub manifest_prefix: String,
    /// The clientIds of the page loads this node holds.
    pub clients: Vec<String>,
}

impl ScriptArgs for Refresh {
    fn lua() -> &'static Lua {
        &REFRESH
    }

    fn args(self) -> Args {
        Args::new()
            .key("conv", self.conv)
            .key("sockets", self.sockets)
            .key("pending", self.pending)
            .arg("ttl", self.ttl)
            .arg("manifest_prefix", self.manifest_prefix)
            .args("clients", self.clients)
    }
}

/// `drained.lua`: a draining node closed the conversation's sockets.
#[derive(Debug, Clone)]
pub struct Drained {
    /// KEYS: the conversation's hash.
    pub conv: String,
    /// Now, ms since the epoch.
    pub now: u64,
    /// Time to live, ms.
    pub ttl: u64,
}

impl ScriptArgs for Drained {
    fn lua() -> &'static Lua {
        &DRAINED
    }

    fn args(self) -> Args {
        Args::new()
            .key("conv", self.conv)
            .arg("now", self.now)
            .arg("ttl", self.ttl)
    }
}

/// `announced.lua`: marks (or unmarks) names announced once for the conversation's life.
#[derive(Debug, Clone)]
pub struct Announced {
    /// KEYS: the conversation's hash.
    pub conv: String,
    /// Whether to mark (else unmark).
    pub mark: bool,
    /// How many names a conversation keeps.
    pub max: usize,
    /// The announcement marking them (its frame's name).
    pub by: String,
    /// The names.
    pub names: Vec<String>,
}

impl ScriptArgs for Announced {
    fn lua() -> &'static Lua {
        &ANNOUNCED
    }

    fn args(self) -> Args {
        Args::new()
            .key("conv", self.conv)
            .arg("mark", if self.mark { "1" } else { "0" })
            .arg("max", self.max)
            .arg("by", self.by)
            .args("names", self.names)
    }
}
