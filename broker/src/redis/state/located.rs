//! The partitions of calls lately found by their id alone ([`super::super::RedisBroker`]'s
//! `locate`): a call never moves, so a follow-up read by id asks one partition, not every one.

use std::collections::HashMap;
use std::sync::Mutex;

use super::lock;

/// How many ids [`Located`] remembers the partition of; past it, it starts again empty.
const LOCATED: usize = 4_096;

/// Call id → its partition, bounded.
#[derive(Debug, Default)]
pub(in crate::redis) struct Located(Mutex<HashMap<String, u16>>);

impl Located {
    /// The partition call `id` was found in, when remembered.
    pub(in crate::redis) fn get(&self, id: &str) -> Option<u16> {
        lock(&self.0).get(id).copied()
    }

    /// Remembers that call `id` is in `partition` (forgetting every id past [`LOCATED`]).
    pub(in crate::redis) fn remember(&self, id: &str, partition: u16) {
        let mut located = lock(&self.0);
        if located.len() >= LOCATED {
            located.clear();
        }
        located.insert(id.to_owned(), partition);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_remembers_a_bounded_number_of_ids() {
        let l = Located::default();
        l.remember("a", 7);
        assert_eq!(l.get("a"), Some(7));
        assert_eq!(l.get("b"), None);
        for i in 0..LOCATED {
            l.remember(&format!("id{i}"), 1);
        }
        // Past the bound it started again: the first id is forgotten, the last kept.
        assert_eq!(l.get("a"), None);
        assert_eq!(l.get(&format!("id{}", LOCATED - 1)), Some(1));
    }
}
