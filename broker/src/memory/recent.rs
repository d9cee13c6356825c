//! Names the memory broker remembers for a while (releases of page sockets, emissions of
//! events), bounded by count as well as by time.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// How many release names the memory broker remembers. A name is asked again only by a node
/// that did not learn the outcome of its first attempt, which this broker always answers at
/// once: memory bounded by count, not only by [`crate::ONCE_TTL`].
pub(super) const RECENT_KEPT: usize = 4096;

/// How many emission names ([`crate::Events::emit_once`]) a tenant's log remembers: every transition
/// of this broker records its events once under its lock, so a name comes again only from a
/// caller's retry, within moments; the bound is wide for that, and still a bound.
pub(super) const EMISSIONS_KEPT: usize = 65_536;

/// The latest names, with what each meant, oldest first; forgotten past `cap` names or
/// [`crate::ONCE_TTL`], whichever comes first.
pub(super) struct Recent<V> {
    order: VecDeque<(String, Instant)>,
    meant: HashMap<String, (V, Instant)>,
    cap: usize,
}

impl<V> Recent<V> {
    pub(super) fn new(cap: usize) -> Self {
        Recent {
            order: VecDeque::new(),
            meant: HashMap::new(),
            cap,
        }
    }
}

impl<V> Default for Recent<V> {
    fn default() -> Self {
        Self::new(RECENT_KEPT)
    }
}

impl<V: Clone> Recent<V> {
    /// What `name` meant, unless it is forgotten (or past its time, not yet forgotten).
    pub(super) fn get(&self, name: &str, now: Instant) -> Option<V> {
        let (v, at) = self.meant.get(name)?;
        (now.duration_since(*at) <= crate::ONCE_TTL).then(|| v.clone())
    }

    /// Remembers a name, forgetting the oldest past either bound.
    pub(super) fn insert(&mut self, name: String, v: V, now: Instant) {
        while let Some((old, at)) = self.order.front()
            && (self.order.len() >= self.cap || now.duration_since(*at) > crate::ONCE_TTL)
        {
            // A name remembered again since keeps its later entry.
            if self.meant.get(old).is_some_and(|(_, when)| when == at) {
                self.meant.remove(old);
            }
            self.order.pop_front();
        }
        self.meant.insert(name.clone(), (v, now));
        self.order.push_back((name, now));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_name_is_forgotten_past_the_count_or_the_time_whichever_comes_first() {
        let t0 = Instant::now();
        let mut r = Recent::new(3);
        for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
            r.insert(name.to_owned(), i, t0);
        }
        assert_eq!(r.get("a", t0), Some(0));
        // A fourth name: the oldest goes.
        r.insert("d".to_owned(), 3, t0);
        assert_eq!(r.get("a", t0), None);
        assert_eq!(r.get("b", t0), Some(1));
        // Past its time a name is forgotten, whether or not an insert pruned it yet.
        let late = t0 + crate::ONCE_TTL + Duration::from_millis(1);
        assert_eq!(r.get("d", late), None);
        // A name remembered again keeps its later entry when the earlier one is pruned.
        r.insert("b".to_owned(), 9, late);
        assert_eq!(r.get("b", late), Some(9));
        assert_eq!(r.order.len(), 1, "the entries past their time were pruned");
    }
}
