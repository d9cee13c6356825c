//! The arguments of the scripts of tenants and leases: a tenant's rate, its event stream, its
//! catalog record, its counted sessions, its nodes' traffic entries; a lease given back.

use super::{
    Args, CATALOG_PUT, CATALOG_REMOVE, CATALOG_RESTORE, EMIT, GCRA, Lua, PLACES, RELEASE,
    ScriptArgs, TOOLS_SEEN, TRAFFIC_PUT, TRAFFIC_READ,
};

/// `gcra.lua`: calls of a tenant's rate given back, then taken.
#[derive(Debug, Clone)]
pub struct Gcra {
    /// KEYS: the tenant's bucket.
    pub rate: String,
    /// The emission interval, µs.
    pub interval: u64,
    /// The burst.
    pub burst: u32,
    /// How many calls to take at most.
    pub want: u32,
    /// How many unspent calls to give back first.
    pub back: u32,
}

impl ScriptArgs for Gcra {
    fn lua() -> &'static Lua {
        &GCRA
    }

    fn args(self) -> Args {
        Args::new()
            .key("rate", self.rate)
            .arg("interval", self.interval)
            .arg("burst", self.burst)
            .arg("want", self.want)
            .arg("back", self.back)
    }
}

/// `emit.lua`: an event appended to the tenant's stream and published.
#[derive(Debug, Clone)]
pub struct Emit {
    /// KEYS: the tenant's event stream.
    pub stream: String,
    /// KEYS: its byte counter.
    pub bytes: String,
    /// KEYS `once` and ARGV `once_ttl` (ms): the name the event is emitted once under.
    pub once: Option<(String, i64)>,
    /// The most events kept.
    pub max_count: u64,
    /// The most bytes kept.
    pub max_bytes: u64,
    /// The event's JSON.
    pub event: String,
    /// The tenant's live channel.
    pub channel: String,
}

impl ScriptArgs for Emit {
    fn lua() -> &'static Lua {
        &EMIT
    }

    fn args(self) -> Args {
        let mut a = Args::new()
            .key("stream", self.stream)
            .key("bytes", self.bytes);
        if let Some((once, _)) = &self.once {
            a = a.key("once", once.clone());
        }
        a = a
            .arg("max_count", self.max_count)
            .arg("max_bytes", self.max_bytes)
            .arg("event", self.event)
            .arg("channel", self.channel);
        match self.once {
            Some((_, ttl)) => a.arg("once_ttl", ttl),
            None => a,
        }
    }
}

/// `release.lua`: a lease given back, if this node still holds it.
#[derive(Debug, Clone)]
pub struct Release {
    /// KEYS: the lease.
    pub lease: String,
    /// This node.
    pub node: String,
}

impl ScriptArgs for Release {
    fn lua() -> &'static Lua {
        &RELEASE
    }

    fn args(self) -> Args {
        Args::new().key("lease", self.lease).arg("node", self.node)
    }
}

/// `catalog_put.lua`: a tenant's record written if it is as expected.
#[derive(Debug, Clone)]
pub struct CatalogPut {
    /// KEYS: the catalog hash.
    pub catalog: String,
    /// KEYS: its revision counter.
    pub revision: String,
    /// The tenant's id.
    pub id: String,
    /// The record.
    pub record: String,
    /// 'absent', or the version expected.
    pub expected: String,
    /// The catalog's channel.
    pub channel: String,
}

impl ScriptArgs for CatalogPut {
    fn lua() -> &'static Lua {
        &CATALOG_PUT
    }

    fn args(self) -> Args {
        Args::new()
            .key("catalog", self.catalog)
            .key("revision", self.revision)
            .arg("id", self.id)
            .arg("record", self.record)
            .arg("expected", self.expected)
            .arg("channel", self.channel)
    }
}

/// `catalog_remove.lua`: a tenant's record removed if it is at the given version.
#[derive(Debug, Clone)]
pub struct CatalogRemove {
    /// KEYS: the catalog hash.
    pub catalog: String,
    /// KEYS: its revision counter.
    pub revision: String,
    /// The tenant's id.
    pub id: String,
    /// The version expected.
    pub version: u64,
    /// The catalog's channel.
    pub channel: String,
}

impl ScriptArgs for CatalogRemove {
    fn lua() -> &'static Lua {
        &CATALOG_REMOVE
    }

    fn args(self) -> Args {
        Args::new()
            .key("catalog", self.catalog)
            .key("revision", self.revision)
            .arg("id", self.id)
            .arg("version", self.version)
            .arg("channel", self.channel)
    }
}

/// `catalog_restore.lua`: what a node holds written back into a catalog that lost its data.
#[derive(Debug, Clone)]
pub struct CatalogRestore {
    /// KEYS: the catalog hash.
    pub catalog: String,
    /// KEYS: its revision counter.
    pub revision: String,
    /// The revision the node last read.
    pub seen: u64,
    /// Ids the node saw deleted, with the revision it saw each at.
    pub gone: Vec<(String, u64)>,
    /// The held records: id and `<version>\n<record>`.
    pub held: Vec<(String, String)>,
}

impl ScriptArgs for CatalogRestore {
    fn lua() -> &'static Lua {
        &CATALOG_RESTORE
    }

    fn args(self) -> Args {
        Args::new()
            .key("catalog", self.catalog)
            .key("revision", self.revision)
            .arg("seen", self.seen)
            .arg("n", self.gone.len())
            .args(
                "deleted",
                self.gone
                    .into_iter()
                    .flat_map(|(id, at)| [id, at.to_string()]),
            )
            .args(
                "held",
                self.held.into_iter().flat_map(|(id, stored)| [id, stored]),
            )
    }
}

/// `places.lua`: a counted session taken, kept or given.
#[derive(Debug, Clone)]
pub struct Places {
    /// KEYS: the tenant's set.
    pub tenant: String,
    /// KEYS: the holder's set.
    pub holder: String,
    /// `take`, `keep` or `give`.
    pub op: &'static str,
    /// The session id.
    pub id: String,
    /// The tenant's bound.
    pub tenant_bound: usize,
    /// The holder's bound.
    pub holder_bound: usize,
    /// Time to live, ms.
    pub ttl: i64,
}

impl ScriptArgs for Places {
    fn lua() -> &'static Lua {
        &PLACES
    }

    fn args(self) -> Args {
        Args::new()
            .key("tenant", self.tenant)
            .key("holder", self.holder)
            .arg("op", self.op)
            .arg("id", self.id)
            .arg("tenant_bound", self.tenant_bound)
            .arg("holder_bound", self.holder_bound)
            .arg("ttl", self.ttl)
    }
}

/// `traffic_put.lua`: this node's traffic entry of a tenant written, lapsed ones dropped.
#[derive(Debug, Clone)]
pub struct TrafficPut {
    /// KEYS: the tenant's traffic hash.
    pub traffic: String,
    /// This node's id.
    pub node: String,
    /// The entry's JSON.
    pub body: String,
    /// How long it lives, ms.
    pub ttl: i64,
}

impl ScriptArgs for TrafficPut {
    fn lua() -> &'static Lua {
        &TRAFFIC_PUT
    }

    fn args(self) -> Args {
        Args::new()
            .key("traffic", self.traffic)
            .arg("node", self.node)
            .arg("body", self.body)
            .arg("ttl", self.ttl)
    }
}

/// `traffic_read.lua`: every node's traffic entry of a tenant, with Redis's time.
#[derive(Debug, Clone)]
pub struct TrafficRead {
    /// KEYS: the tenant's traffic hash.
    pub traffic: String,
}

impl ScriptArgs for TrafficRead {
    fn lua() -> &'static Lua {
        &TRAFFIC_READ
    }

    fn args(self) -> Args {
        Args::new().key("traffic", self.traffic)
    }
}

/// `tools_seen.lua`: the definitions a page of a tenant presented, marked; the bounds kept.
#[derive(Debug, Clone)]
pub struct ToolsSeenPut {
    /// KEYS: the tenant's hash of definitions presented.
    pub seen: String,
    /// At most this many kept.
    pub kept: usize,
    /// Each kept this long after it was last presented, ms.
    pub age: i64,
    /// `<name>\u{1f}<digest>` of each definition presented.
    pub fields: Vec<String>,
}

impl ScriptArgs for ToolsSeenPut {
    fn lua() -> &'static Lua {
        &TOOLS_SEEN
    }

    fn args(self) -> Args {
        Args::new()
            .key("seen", self.seen)
            .arg("kept", self.kept)
            .arg("age", self.age)
            .args("fields", self.fields)
    }
}
