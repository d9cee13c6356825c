//! What this node tells the broker of the tool definitions its pages present (`GET
//! /admin/v1/tenants/{id}/tools/seen`, `toolmark_broker::seen`): each `(tenant, name, digest)`
//! at most once per [`SEEN_EVERY`], so a reconnect storm re-presenting the same manifests costs
//! the broker one write per definition and minute, not one per page. `lastSeen` is as precise
//! as that.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use toolmark_proto::pin::Digest;

/// How often this node writes that a definition was presented again.
pub const SEEN_EVERY: Duration = Duration::from_secs(60);

/// How many definitions this node remembers having written (then it forgets them all and
/// writes each again once).
const REMEMBERED: usize = 100_000;

/// When this node last wrote each definition: tenant → name → digest (looked up by reference,
/// so a page presenting definitions already written allocates nothing here).
type Written = HashMap<String, HashMap<String, HashMap<Digest, Instant>>>;

/// The definitions this node wrote, with when, and how many.
#[derive(Debug, Default)]
pub struct SeenRecently(Mutex<(Written, usize)>);

impl SeenRecently {
    /// Of `tools` (name, digest) of `tenant`, those to write now.
    pub fn due<'a>(
        &self,
        tenant: &str,
        tools: impl IntoIterator<Item = (&'a str, Digest)>,
    ) -> Vec<(String, String)> {
        self.due_at(tenant, tools, Instant::now())
    }

    fn due_at<'a>(
        &self,
        tenant: &str,
        tools: impl IntoIterator<Item = (&'a str, Digest)>,
        now: Instant,
    ) -> Vec<(String, String)> {
        let mut guard = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (written, count) = &mut *guard;
        if *count > REMEMBERED {
            written.clear();
            *count = 0;
        }
        let mut due = Vec::new();
        for (name, digest) in tools {
            let at = written
                .get(tenant)
                .and_then(|names| names.get(name))
                .and_then(|digests| digests.get(&digest));
            if at.is_some_and(|at| now.duration_since(*at) < SEEN_EVERY) {
                continue;
            }
            if !written.contains_key(tenant) {
                written.insert(tenant.to_owned(), HashMap::new());
            }
            let Some(names) = written.get_mut(tenant) else {
                continue;
            };
            if !names.contains_key(name) {
                names.insert(name.to_owned(), HashMap::new());
            }
            let Some(digests) = names.get_mut(name) else {
                continue;
            };
            if digests.insert(digest, now).is_none() {
                *count += 1;
            }
            due.push((name.to_owned(), digest.to_string()));
        }
        due
    }

    /// Forgets that `due` (what [`SeenRecently::due`] gave) of `tenant` were written: their write
    /// failed, and the next page presenting them writes them again rather than a window later
    /// (a definition first presented while Redis stalled would otherwise be missing from the
    /// tenant's list until it is presented again after [`SEEN_EVERY`]).
    pub fn forget(&self, tenant: &str, due: &[(String, String)]) {
        let mut guard = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (written, count) = &mut *guard;
        let Some(names) = written.get_mut(tenant) else {
            return;
        };
        for (name, digest) in due {
            let (Some(digests), Some(digest)) =
                (names.get_mut(name.as_str()), Digest::parse(digest))
            else {
                continue;
            };
            if digests.remove(&digest).is_some() {
                *count -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each definition once per window, per tenant; another digest of the same name is another
    /// definition.
    #[test]
    fn a_definition_is_due_once_per_window() {
        let seen = SeenRecently::default();
        let a = Digest([1; 32]);
        let b = Digest([2; 32]);
        let due = seen.due("t1", [("cart.add", a), ("cart.pay", a)]);
        assert_eq!(
            due,
            [
                ("cart.add".to_owned(), a.to_string()),
                ("cart.pay".to_owned(), a.to_string())
            ]
        );
        assert!(
            seen.due("t1", [("cart.add", a), ("cart.pay", a)])
                .is_empty()
        );
        assert_eq!(
            seen.due("t1", [("cart.add", b)]).len(),
            1,
            "a changed definition"
        );
        assert_eq!(seen.due("t2", [("cart.add", a)]).len(), 1, "another tenant");
        assert_eq!(seen.0.lock().unwrap().1, 4);
        let later = Instant::now() + SEEN_EVERY;
        assert_eq!(
            seen.due_at("t1", [("cart.add", a), ("cart.pay", a)], later)
                .len(),
            2,
            "written again once the window has passed"
        );
        assert!(seen.due_at("t1", [("cart.add", a)], later).is_empty());
        assert_eq!(seen.0.lock().unwrap().1, 4, "the same definitions");
    }

    /// A write that failed is forgotten: the definitions are due again at once, the others not.
    #[test]
    fn a_definition_whose_write_failed_is_due_again() {
        let seen = SeenRecently::default();
        let a = Digest([1; 32]);
        let failed = seen.due("t1", [("cart.add", a)]);
        assert_eq!(seen.due("t1", [("cart.pay", a)]).len(), 1);
        seen.forget("t1", &failed);
        assert_eq!(seen.due("t1", [("cart.add", a), ("cart.pay", a)]), failed);
        assert_eq!(seen.0.lock().unwrap().1, 2);
        seen.forget("t2", &failed);
        assert_eq!(seen.0.lock().unwrap().1, 2, "another tenant's");
    }
}
