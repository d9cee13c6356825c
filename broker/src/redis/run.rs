//! Running the Lua scripts of [`super::scripts`] on Redis: each observed under its name, written
//! once where running it twice unbeknown to its caller would be wrong, and loaded on every
//! primary before the node uses them.

use std::time::{Duration, Instant};

use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::Value;

use super::RedisBroker;
use super::reply::{RETRY, unavailable};
use super::scripts::{self, Lua, ScriptArgs};
use crate::BrokerError;

impl RedisBroker {
    /// Runs the script of `args`, observed under its name.
    pub(super) async fn run<A: ScriptArgs>(&self, args: A) -> Result<Value, BrokerError> {
        self.run_as(args, A::lua().name()).await
    }

    /// [`RedisBroker::run`], observed under `name`.
    pub(super) async fn run_as<A: ScriptArgs>(
        &self,
        args: A,
        name: &'static str,
    ) -> Result<Value, BrokerError> {
        let (keys, argv) = args.keys_argv();
        self.eval(A::lua(), name, keys, argv).await
    }

    /// Runs `lua` with `keys` and `args` (loading it first where Redis lacks it), sent again
    /// while its slot moves; observed under `name`.
    async fn eval(
        &self,
        lua: &Lua,
        name: &'static str,
        keys: Vec<bytes::Bytes>,
        args: Vec<bytes::Bytes>,
    ) -> Result<Value, BrokerError> {
        if !self.conn.client.is_connected() {
            return Err(BrokerError::Unavailable { retry_after: RETRY });
        }
        let script = lua.script();
        let started = Instant::now();
        // Each attempt sends a copy: the short values are slices of one buffer (`Args`), so a
        // copy costs a reference count per value, not an allocation.
        let keys: Vec<fred::types::Key> = keys.into_iter().map(fred::types::Key::from).collect();
        let args: Vec<Value> = args.into_iter().map(Value::from).collect();
        let answer = self
            .again(name, || async {
                let sha = script.sha1().clone();
                match self
                    .conn
                    .client
                    .evalsha(sha, keys.clone(), args.clone())
                    .await
                {
                    Err(e) if e.details().starts_with("NOSCRIPT") => {
                        script.load(&self.conn.client).await?;
                        let sha = script.sha1().clone();
                        self.conn
                            .client
                            .evalsha(sha, keys.clone(), args.clone())
                            .await
                    }
                    answer => answer,
                }
            })
            .await
            .map_err(|e| unavailable(&e));
        self.conn.opts.observe.observe(name, started.elapsed());
        answer
    }

    /// [`RedisBroker::run`], written once: a command whose connection closes before its
    /// reply came is not written again by the client (it may have been applied), but fails, so
    /// that its caller submits it again as such (`submit_result_again`,
    /// `submit_confirmed_again`): a script that is not idempotent by itself must never run twice
    /// unbeknown to its caller. On one Redis only, for now: see below.
    pub(super) async fn run_once<A: ScriptArgs>(&self, args: A) -> Result<Value, BrokerError> {
        if !self.conn.client.is_connected() {
            return Err(BrokerError::Unavailable { retry_after: RETRY });
        }
        let lua = A::lua();
        let name = lua.name();
        let (keys, args) = args.keys_argv();
        let script = lua.script();
        let started = Instant::now();
        if self.conn.client.is_clustered() {
            // On a Cluster the client counts a write to a node it is still connecting to, or
            // one sent where a slot moved, as an attempt: written once, such a command fails
            // where it would have succeeded. There the client's resend stays (issue of the
            // Cluster's failovers and reshards, `docs/architecture.md`, "Faults").
            return self.eval(lua, name, keys, args).await;
        }
        let once = self
            .conn
            .client
            .with_options(&fred::types::config::Options {
                max_attempts: Some(1),
                ..Default::default()
            });
        // EVALSHA sha numkeys keys… args…, sent to the slot of its first key.
        let command =
            fred::types::CustomCommand::new("EVALSHA", fred::types::ClusterHash::Offset(2), false);
        let mut call: Vec<Value> = Vec::with_capacity(2 + keys.len() + args.len());
        call.push(script.sha1().clone().into());
        call.push(Value::from(i64::try_from(keys.len()).unwrap_or(i64::MAX)));
        call.extend(keys.into_iter().map(Value::from));
        call.extend(args.into_iter().map(Value::from));
        let answer = match once
            .custom::<Value, Value>(command.clone(), call.clone())
            .await
        {
            Err(e) if e.details().starts_with("NOSCRIPT") => {
                if let Err(e) = script.load(&self.conn.client).await {
                    Err(e)
                } else {
                    once.custom(command, call).await
                }
            }
            answer => answer,
        }
        .map_err(|e| unavailable(&e));
        self.conn.opts.observe.observe(name, started.elapsed());
        answer
    }

    /// Runs `command` again while Redis refuses it because its slot moved or is moving
    /// ([`moving`]: such a command did not run), pausing 10 ms, doubling up to 200 ms, within
    /// the command timeout: the client follows no redirection itself (see `builder`). `what`
    /// names it in the debug log.
    pub(super) async fn again<T, F, Fut>(
        &self,
        what: &'static str,
        mut command: F,
    ) -> Result<T, fred::error::Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, fred::error::Error>>,
    {
        let started = Instant::now();
        let mut pause = Duration::from_millis(10);
        loop {
            match command().await {
                Err(e)
                    if moving(&e) && started.elapsed() + pause < self.conn.opts.command_timeout =>
                {
                    tracing::debug!(command = what, error = %e, "slot moving: sent again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                answer => return answer,
            }
        }
    }

    /// Loads every script into Redis (each primary, on a Cluster) before this node uses them:
    /// at start and when the connection comes back, so that the first calls and the
    /// re-publication of a restarted (empty) Redis do not each fail with `NOSCRIPT` and load
    /// the script again. A script that fails to load here is loaded by its first use.
    pub(super) async fn load_scripts(&self) {
        // One boxed future per script, made one at a time: an array of them all would sit on
        // the stack at once (in a debug build, past a thread's 2 MiB).
        let loads = scripts::ALL.iter().map(|lua| {
            Box::pin(async move {
                if let Err(e) = lua.script().load(&self.conn.client).await {
                    tracing::warn!(script = lua.name(), error = %e, "redis script not loaded");
                }
            })
        });
        futures_util::future::join_all(loads).await;
    }
}

/// Whether a command was refused, not run, because its slot moved or is moving: a redirection
/// the client does not follow itself (`MOVED` once the slot map was read again, `ASK` during a
/// migration: see `builder`), `TRYAGAIN` (keys split between the two masters of a migration),
/// or `CLUSTERDOWN` while a failover completes.
pub(super) fn moving(e: &fred::error::Error) -> bool {
    let d = e.details();
    *e.kind() == fred::error::ErrorKind::Routing
        || ["TRYAGAIN", "CLUSTERDOWN", "MOVED", "ASK"]
            .iter()
            .any(|p| d.starts_with(p))
}
