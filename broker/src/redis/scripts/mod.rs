//! The Lua scripts, one `.lua` file each beside this one, and their arguments. Each script
//! touches the keys of one hash tag only (a conversation's partition, or a tenant), so it runs
//! atomically on one Redis Cluster shard; each is the single round trip of its operation.
//! Functions several scripts share are written once, in `prelude.lua`, put before each script
//! that needs one; so each rule is written once here too.
//!
//! Each script has one struct of its arguments, fields named as the script's header names its
//! `KEYS` and `ARGV`, which gives them, each under its name, in the order the script reads them
//! ([`ScriptArgs::args`]); every run in a debug build checks the names against the script's
//! header (`args.rs`). The scripts are hashed once, loaded and run by `run.rs`.

mod args;
mod calls;
mod pages;
mod tenants;
mod webhooks;

use std::sync::OnceLock;

use fred::types::scripts::Script;

pub use args::Args;
pub use calls::*;
pub use pages::*;
pub use tenants::*;
pub use webhooks::*;

use super::codec::{self, Outboxed};
use crate::now_ms;

/// One Lua script: its name (the `script` label of its latency) and its code, hashed on first
/// use.
#[derive(Debug)]
pub struct Lua {
    name: &'static str,
    code: &'static str,
    hashed: OnceLock<Script>,
}

impl Lua {
    const fn new(name: &'static str, code: &'static str) -> Self {
        Lua {
            name,
            code,
            hashed: OnceLock::new(),
        }
    }

    /// The script's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The script with its SHA1, as `EVALSHA` and `SCRIPT LOAD` take it: after the prelude,
    /// only the prelude's functions the script uses ([`needed_prelude`]).
    pub fn script(&self) -> &Script {
        self.hashed
            .get_or_init(|| match self.code.strip_prefix(PRELUDE) {
                Some(body) => Script::from_lua(needed_prelude(PRELUDE, body) + body),
                None => Script::from_lua(self.code),
            })
    }
}

/// `prelude.lua`.
const PRELUDE: &str = include_str!("prelude.lua");

/// The functions of `prelude` (each a `local function` to the next) that `body` uses, directly
/// or through another, in the prelude's order (each defined before its first use there). Redis
/// runs a script's whole text on each `EVALSHA`, so a function defined there is a closure made
/// and collected on every run: the place script uses 10 of the prelude's 24.
fn needed_prelude(prelude: &str, body: &str) -> String {
    let mut functions: Vec<(&str, &str)> = Vec::new();
    let mut rest = prelude;
    while let Some(at) = rest.find("\nlocal function ") {
        let from = &rest[at + 1..];
        let end = from[1..]
            .find("\nlocal function ")
            .map_or(from.len(), |e| e + 2);
        let name = &from["local function ".len()..];
        let name = &name[..name.find('(').unwrap_or(name.len())];
        functions.push((name, &from[..end]));
        rest = &from[end - 1..];
    }
    let mut used = vec![false; functions.len()];
    let mut texts = vec![body];
    while let Some(text) = texts.pop() {
        for (i, (name, code)) in functions.iter().enumerate() {
            if !used[i] && names(text, name) {
                used[i] = true;
                texts.push(code);
            }
        }
    }
    functions
        .iter()
        .zip(used)
        .filter(|(_, used)| *used)
        .map(|((_, code), _)| *code)
        .collect()
}

/// Whether `name` occurs in `text` as a whole word.
fn names(text: &str, name: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    text.match_indices(name).any(|(at, _)| {
        !word(text[..at].chars().next_back()) && !word(text[at + name.len()..].chars().next())
    })
}

/// The code of `<file>.lua`, after the prelude with `prelude`.
macro_rules! lua {
    ($file:literal) => {
        include_str!(concat!($file, ".lua"))
    };
    (prelude $file:literal) => {
        concat!(
            include_str!("prelude.lua"),
            include_str!(concat!($file, ".lua"))
        )
    };
}

/// `bind.lua`: [`Bind`].
pub static BIND: Lua = Lua::new("bind", lua!(prelude "bind"));
/// `place.lua`: [`Place`].
pub static PLACE: Lua = Lua::new("place", lua!(prelude "place"));
/// `result.lua`: [`PageResult`].
pub static RESULT: Lua = Lua::new("result", lua!(prelude "result"));
/// `timeout.lua`: [`Timeout`].
pub static TIMEOUT: Lua = Lua::new("timeout", lua!(prelude "timeout"));
/// `cancel.lua`: [`Cancel`].
pub static CANCEL: Lua = Lua::new("cancel", lua!(prelude "cancel"));
/// `watch.lua`: [`WatchCall`].
pub static WATCH: Lua = Lua::new("watch", lua!(prelude "watch"));
/// `read_call.lua`: [`ReadCall`].
pub static READ_CALL: Lua = Lua::new("read_call", lua!(prelude "read_call"));
/// `pending.lua`: [`PendingFrames`].
pub static PENDING: Lua = Lua::new("pending", lua!(prelude "pending"));
/// `due.lua`: [`DueCalls`].
pub static DUE: Lua = Lua::new("due", lua!("due"));
/// `confirm.lua`: [`Confirm`].
pub static CONFIRM: Lua = Lua::new("confirm", lua!(prelude "confirm"));
/// `expire_confirm.lua`: [`ExpireConfirm`].
pub static EXPIRE_CONFIRM: Lua = Lua::new("expire_confirm", lua!(prelude "expire_confirm"));
/// `put_manifest.lua`: [`PutManifest`].
pub static PUT_MANIFEST: Lua = Lua::new("put_manifest", lua!("put_manifest"));
/// `conv_read.lua`: [`ConvRead`].
pub static CONV_READ: Lua = Lua::new("conv_read", lua!(prelude "conv_read"));
/// `count_up.lua`: [`CountUp`].
pub static COUNT_UP: Lua = Lua::new("count_up", lua!(prelude "count_up"));
/// `count_down.lua`: [`CountDown`].
pub static COUNT_DOWN: Lua = Lua::new("count_down", lua!(prelude "count_down"));
/// `own_sockets.lua`: [`OwnSockets`].
pub static OWN_SOCKETS: Lua = Lua::new("own_sockets", lua!(prelude "own_sockets"));
/// `leave.lua`: [`Leave`].
pub static LEAVE: Lua = Lua::new("leave", lua!(prelude "leave"));
/// `refresh.lua`: [`Refresh`].
pub static REFRESH: Lua = Lua::new("refresh", lua!("refresh"));
/// `drained.lua`: [`Drained`].
pub static DRAINED: Lua = Lua::new("drained", lua!("drained"));
/// `announced.lua`: [`Announced`].
pub static ANNOUNCED: Lua = Lua::new("announced", lua!("announced"));
/// `gcra.lua`: [`Gcra`].
pub static GCRA: Lua = Lua::new("gcra", lua!(prelude "gcra"));
/// `emit.lua`: [`Emit`].
pub static EMIT: Lua = Lua::new("emit", lua!("emit"));
/// `release.lua`: [`Release`].
pub static RELEASE: Lua = Lua::new("release", lua!("release"));
/// `catalog_put.lua`: [`CatalogPut`].
pub static CATALOG_PUT: Lua = Lua::new("catalog_put", lua!("catalog_put"));
/// `catalog_remove.lua`: [`CatalogRemove`].
pub static CATALOG_REMOVE: Lua = Lua::new("catalog_remove", lua!("catalog_remove"));
/// `catalog_restore.lua`: [`CatalogRestore`].
pub static CATALOG_RESTORE: Lua = Lua::new("catalog_restore", lua!("catalog_restore"));
/// `places.lua`: [`Places`].
pub static PLACES: Lua = Lua::new("places", lua!("places"));
/// `webhook_admit.lua`: [`WebhookAdmit`].
pub static WEBHOOK_ADMIT: Lua = Lua::new("webhook_admit", lua!("webhook_admit"));
/// `webhook_defer.lua`: [`WebhookDefer`].
pub static WEBHOOK_DEFER: Lua = Lua::new("webhook_defer", lua!("webhook_defer"));
/// `webhook_take_due.lua`: [`WebhookTakeDue`].
pub static WEBHOOK_TAKE_DUE: Lua = Lua::new("webhook_take_due", lua!("webhook_take_due"));
/// `webhook_pop.lua`: [`WebhookPop`].
pub static WEBHOOK_POP: Lua = Lua::new("webhook_pop", lua!("webhook_pop"));
/// `webhook_reschedule.lua`: [`WebhookReschedule`].
pub static WEBHOOK_RESCHEDULE: Lua = Lua::new("webhook_reschedule", lua!("webhook_reschedule"));

/// `traffic_put.lua`: [`TrafficPut`].
pub static TRAFFIC_PUT: Lua = Lua::new("traffic_put", lua!("traffic_put"));
/// `traffic_read.lua`: [`TrafficRead`].
pub static TRAFFIC_READ: Lua = Lua::new("traffic_read", lua!("traffic_read"));

/// `tools_seen.lua`: [`ToolsSeenPut`].
pub static TOOLS_SEEN: Lua = Lua::new("tools_seen", lua!("tools_seen"));

/// Every script, loaded on every primary before the node uses them.
pub static ALL: [&Lua; 35] = [
    &BIND,
    &PLACE,
    &RESULT,
    &TIMEOUT,
    &CANCEL,
    &WATCH,
    &READ_CALL,
    &PENDING,
    &DUE,
    &CONFIRM,
    &EXPIRE_CONFIRM,
    &PUT_MANIFEST,
    &CONV_READ,
    &COUNT_UP,
    &COUNT_DOWN,
    &OWN_SOCKETS,
    &LEAVE,
    &REFRESH,
    &DRAINED,
    &ANNOUNCED,
    &GCRA,
    &EMIT,
    &RELEASE,
    &CATALOG_PUT,
    &CATALOG_REMOVE,
    &CATALOG_RESTORE,
    &PLACES,
    &WEBHOOK_ADMIT,
    &WEBHOOK_DEFER,
    &WEBHOOK_TAKE_DUE,
    &WEBHOOK_POP,
    &WEBHOOK_RESCHEDULE,
    &TRAFFIC_PUT,
    &TRAFFIC_READ,
    &TOOLS_SEEN,
];

/// The arguments of one script.
pub trait ScriptArgs {
    /// The script they are for.
    fn lua() -> &'static Lua;

    /// The script's `KEYS` and `ARGV`, each under the name its header gives it, in the order
    /// the script reads them.
    fn args(self) -> Args;

    /// What Redis is sent; in a debug build (every test), first checked against the script's
    /// header: a mismatch panics, naming the script and both orders.
    fn keys_argv(self) -> (Vec<bytes::Bytes>, Vec<bytes::Bytes>)
    where
        Self: Sized,
    {
        let args = self.args();
        #[cfg(debug_assertions)]
        if let Err(e) = args.check(Self::lua()) {
            panic!("a script's arguments disagree with its header: {e}");
        }
        args.into_parts()
    }
}

/// A change recorded in a partition's outbox by the script that made it (`outbox.rs`): the
/// outbox's key (`KEYS` `outbox`), the change's name and entry (`ARGV` `outbox_name`,
/// `outbox_entry`).
#[derive(Debug, Clone)]
pub struct Outbox {
    /// The partition's outbox.
    pub key: String,
    /// The change's name in it.
    pub name: String,
    /// The change, as the sweep reads it back (`codec::outbox_entry`).
    pub entry: String,
}

impl Outbox {
    /// `change`, recorded now in the outbox `key`.
    pub fn new(key: String, change: &Outboxed) -> Self {
        Outbox {
            key,
            name: change.name(),
            entry: codec::outbox_entry(change, now_ms()).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ALL, PLACE, PRELUDE, needed_prelude};

    #[test]
    fn a_script_carries_the_prelude_functions_it_uses_and_no_other() {
        let body = PLACE
            .code
            .strip_prefix(PRELUDE)
            .expect("place has the prelude");
        let code = needed_prelude(PRELUDE, body);
        let defined: Vec<&str> = code
            .lines()
            .filter_map(|l| l.strip_prefix("local function "))
            .map(|l| &l[..l.find('(').unwrap_or(l.len())])
            .collect();
        // What place.lua calls, and what those call (`conv_state` reads `sockets`, which
        // parses with `socket_entry`); in the prelude's order.
        assert_eq!(
            defined,
            [
                "socket_entry",
                "sockets",
                "summary_parse",
                "summary_entries",
                "summary_sockets",
                "set_of",
                "to_nodes",
                "conv_state",
                "gcra",
                "bind"
            ]
        );
        // Each function whole: a body using all of them gets the prelude after its comments.
        let all: String = PRELUDE
            .lines()
            .filter_map(|l| l.strip_prefix("local function "))
            .collect();
        let functions = &PRELUDE[PRELUDE.find("\nlocal function ").unwrap() + 1..];
        assert_eq!(needed_prelude(PRELUDE, &all), functions);
        assert!(code.contains("redis.call('ZADD', k[7], 'LT', a[4], a[2])"));
        assert!(!code.contains("local function bound_gone"));
        // A script without the prelude is its own code.
        assert_eq!(needed_prelude(PRELUDE, "return 1\n"), "");
    }

    #[test]
    fn every_script_has_its_own_name_and_code() {
        for (i, a) in ALL.iter().enumerate() {
            for b in &ALL[i + 1..] {
                assert_ne!(a.name(), b.name());
                assert_ne!(a.script().sha1(), b.script().sha1(), "{}", a.name());
            }
        }
    }
}
