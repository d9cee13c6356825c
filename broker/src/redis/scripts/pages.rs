//! The arguments of the scripts of page sockets and manifests: a conversation's presence
//! (sockets per node and per page load), its latest manifests and current page, read and kept
//! alive.

use super::{
    ANNOUNCED, CONV_READ, COUNT_DOWN, COUNT_UP, DRAINED, LEAVE, Lua, Outbox, PUT_MANIFEST, REFRESH,
    ScriptArgs,
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

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        let mut keys = vec![self.manifest_key, self.conv, self.gone];
        let mut argv = vec![
            self.manifest,
            self.rev.to_string(),
            self.ttl,
            if self.keep_current { "1" } else { "0" }.to_owned(),
            self.client,
            self.manifest_prefix,
            self.grace.to_string(),
        ];
        if let Some(o) = self.outbox {
            keys.push(o.key);
            argv.extend([o.name, o.entry]);
        }
        (keys, argv)
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
    /// The live node ids.
    pub live: Vec<String>,
}

impl ScriptArgs for ConvRead {
    fn lua() -> &'static Lua {
        &CONV_READ
    }

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        let mut argv = vec![self.manifest_prefix];
        argv.extend(self.live);
        (vec![self.conv, self.sockets], argv)
    }
}

/// `count_up.lua`: one more socket of this node in a count hash.
#[derive(Debug, Clone)]
pub struct CountUp {
    /// KEYS: the count hash.
    pub counts: String,
    /// The field: this node.
    pub field: String,
    /// Time to live, ms.
    pub ttl: i64,
}

impl ScriptArgs for CountUp {
    fn lua() -> &'static Lua {
        &COUNT_UP
    }

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        (vec![self.counts], vec![self.field, self.ttl.to_string()])
    }
}

/// `count_down.lua`: one socket less in a count hash.
#[derive(Debug, Clone)]
pub struct CountDown {
    /// KEYS: the count hash.
    pub counts: String,
    /// The fields counted down.
    pub fields: Vec<String>,
}

impl ScriptArgs for CountDown {
    fn lua() -> &'static Lua {
        &COUNT_DOWN
    }

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        (vec![self.counts], self.fields)
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
    /// The live node ids.
    pub live: Vec<String>,
}

impl ScriptArgs for Leave {
    fn lua() -> &'static Lua {
        &LEAVE
    }

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        let mut keys = vec![self.sockets, self.marker, self.conv, self.gone];
        let mut argv = vec![self.node, self.client, self.marker_ttl.to_string()];
        match self.outbox {
            Some(o) => {
                keys.push(o.key);
                argv.extend([o.name, o.entry]);
            }
            None => argv.extend([String::new(), String::new()]),
        }
        argv.extend([
            self.manifest_prefix,
            self.grace.to_string(),
            self.kept.to_string(),
            self.ttl.to_string(),
        ]);
        argv.extend(self.live);
        (keys, argv)
    }
}

/// `refresh.lua`: what a live page needs kept alive.
#[derive(Debug, Clone)]
pub struct Refresh {
    /// KEYS: the conversation's hash.
    pub conv: String,
    /// KEYS: its sockets hash.
    pub sockets: String,
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

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        let mut argv = vec![self.ttl, self.manifest_prefix];
        argv.extend(self.clients);
        (vec![self.conv, self.sockets], argv)
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

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        (
            vec![self.conv],
            vec![self.now.to_string(), self.ttl.to_string()],
        )
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
    /// The names.
    pub names: Vec<String>,
}

impl ScriptArgs for Announced {
    fn lua() -> &'static Lua {
        &ANNOUNCED
    }

    fn keys_argv(self) -> (Vec<String>, Vec<String>) {
        let mut argv = Vec::with_capacity(2 + self.names.len());
        argv.push(if self.mark { "1" } else { "0" }.to_owned());
        argv.push(self.max.to_string());
        argv.extend(self.names);
        (vec![self.conv], argv)
    }
}
