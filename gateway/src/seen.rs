//! What this node tells the broker of the tool definitions its pages present (`GET
//! /admin/v1/tenants/{id}/tools/seen`, `toolmark_broker::seen`): each `(tenant, name, digest)`
//! at most once per [`SEEN_EVERY`], so a reconnect storm re-presenting the same manifests costs
//! the broker one write per definition and minute, not one per page. `lastSeen` is as precise
//! as that.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often this node writes that a definition was presented again.
pub const SEEN_EVERY: Duration = Duration::from_secs(60);

/// How many definitions this node remembers having written (then it forgets them all and
/// writes each again once).
const REMEMBERED: usize = 100_000;

/// The definitions this node wrote, with when.
#[derive(Debug, Default)]
pub struct SeenRecently(Mutex<HashMap<(String, String, String), Instant>>);

impl SeenRecently {
    /// Of `tools` (name, digest) of `tenant`, those to write now.
    pub fn due(&self, tenant: &str, tools: Vec<(String, String)>) -> Vec<(String, String)> {
        let now = Instant::now();
        let mut written = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if written.len() > REMEMBERED {
            written.clear();
        }
        tools
            .into_iter()
            .filter(|(name, digest)| {
                let key = (tenant.to_owned(), name.clone(), digest.clone());
                match written.get(&key) {
                    Some(at) if now.duration_since(*at) < SEEN_EVERY => false,
                    _ => {
                        written.insert(key, now);
                        true
                    }
                }
            })
            .collect()
    }
}
