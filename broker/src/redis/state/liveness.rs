//! Node liveness: the set of live nodes as this node last read it (heartbeats within
//! `model::DEAD_AFTER_HEARTBEATS` intervals), the nodes found dead lately, and whether a live
//! node is of a release that finds a call only by the partition its id names.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use super::lock;

/// The live nodes and the nodes known dead, as this node sees them.
#[derive(Debug)]
pub(in crate::redis) struct Liveness {
    /// This node: always live to itself.
    own: String,
    /// How often nodes announce themselves.
    heartbeat: Duration,
    live: RwLock<Arc<HashSet<String>>>,
    /// Nodes with sockets in some conversation that were still not live after the live set was
    /// read again, and when: not asked about again for a heartbeat.
    dead_seen: Mutex<HashMap<String, Instant>>,
    /// A live node did not announce that it finds a call by any id (a release up to 0.4.0).
    legacy: AtomicBool,
}

impl Liveness {
    /// This node alone, until the live set is read.
    pub(in crate::redis) fn new(own: &str, heartbeat: Duration) -> Self {
        Liveness {
            own: own.to_owned(),
            heartbeat,
            live: RwLock::new(Arc::new(HashSet::from([own.to_owned()]))),
            dead_seen: Mutex::default(),
            legacy: AtomicBool::new(false),
        }
    }

    /// Whether a live node finds a call only by the partition its id names: call ids are then
    /// minted in that form.
    pub(in crate::redis) fn legacy_ids(&self) -> bool {
        self.legacy.load(Ordering::Relaxed)
    }

    /// The live nodes.
    pub(in crate::redis) fn nodes(&self) -> Arc<HashSet<String>> {
        Arc::clone(&self.live.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The live node ids, as a script's arguments take them.
    pub(in crate::redis) fn ids(&self) -> Vec<String> {
        self.nodes().iter().cloned().collect()
    }

    /// The live set as read from Redis (this node added), and the live nodes that announced
    /// they find a call by any id.
    pub(in crate::redis) fn read(&self, nodes: Vec<String>, any_id: &[String]) {
        let any_id: HashSet<&str> = any_id.iter().map(String::as_str).collect();
        let legacy = nodes
            .iter()
            .any(|n| n != &self.own && !any_id.contains(n.as_str()));
        self.legacy.store(legacy, Ordering::Relaxed);
        let mut set: HashSet<String> = nodes.into_iter().collect();
        set.insert(self.own.clone());
        *self.live.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(set);
    }

    /// Sum of the per-node counts (fields without `|`) of live nodes.
    pub(in crate::redis) fn total(&self, fields: &[(String, i64)]) -> i64 {
        let live = self.nodes();
        fields
            .iter()
            .filter(|(f, _)| !f.contains('|') && live.contains(f.as_str()))
            .map(|(_, n)| *n)
            .sum()
    }

    /// Whether one of `nodes` (not in the live set) was not found dead within the last
    /// heartbeat: then the live set is worth reading again.
    pub(in crate::redis) fn any_not_known_dead(&self, nodes: &[String]) -> bool {
        let seen = lock(&self.dead_seen);
        nodes
            .iter()
            .any(|n| seen.get(n).is_none_or(|t| t.elapsed() > self.heartbeat))
    }

    /// The nodes found dead within the last heartbeat (their sockets are not asked about).
    pub(in crate::redis) fn dead(&self) -> Vec<String> {
        lock(&self.dead_seen)
            .iter()
            .filter(|(_, t)| t.elapsed() <= self.heartbeat)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Records `nodes` as dead (still not live after the live set was read again).
    pub(in crate::redis) fn known_dead(&self, nodes: &[String]) {
        let mut seen = lock(&self.dead_seen);
        let now = Instant::now();
        seen.retain(|_, t| t.elapsed() < Duration::from_secs(3600));
        for n in nodes {
            seen.insert(n.clone(), now);
        }
    }
}
