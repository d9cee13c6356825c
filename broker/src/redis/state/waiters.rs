//! The requests of this node waiting for a call's outcome: the one that placed it, and those
//! watching it (`Calls::watch`), by call id, each with the partition the call is in.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::oneshot;

use super::lock;
use crate::Outcome;

/// The watchers of one call, and the call's partition.
type Watching = (u16, Vec<oneshot::Sender<Outcome>>);

/// Who on this node waits for which call's outcome.
#[derive(Debug, Default)]
pub(in crate::redis) struct Waiters {
    /// The request that placed each call, and the call's partition.
    placed: Mutex<HashMap<String, (u16, oneshot::Sender<Outcome>)>>,
    /// Watchers of calls placed anywhere, by call id, and the call's partition.
    watchers: Mutex<HashMap<String, Watching>>,
}

impl Waiters {
    /// The outcome of call `id` (of partition `k`), once it comes, for the request placing it.
    pub(in crate::redis) fn wait(&self, id: &str, k: u16) -> oneshot::Receiver<Outcome> {
        let (tx, rx) = oneshot::channel();
        lock(&self.placed).insert(id.to_owned(), (k, tx));
        rx
    }

    /// No longer waits for call `id` (it was not placed).
    pub(in crate::redis) fn forget(&self, id: &str) {
        lock(&self.placed).remove(id);
    }

    /// The outcome of call `id` (of partition `k`), once it comes, for a watcher.
    pub(in crate::redis) fn watch(&self, id: &str, k: u16) -> oneshot::Receiver<Outcome> {
        let (tx, rx) = oneshot::channel();
        lock(&self.watchers)
            .entry(id.to_owned())
            .or_insert_with(|| (k, Vec::new()))
            .1
            .push(tx);
        rx
    }

    /// Forgets the watchers of call `id` that went away.
    pub(in crate::redis) fn unwatch_gone(&self, id: &str) {
        let mut watchers = lock(&self.watchers);
        if let Some((_, txs)) = watchers.get_mut(id) {
            txs.retain(|tx| !tx.is_closed());
            if txs.is_empty() {
                watchers.remove(id);
            }
        }
    }

    /// Forgets every waiter and watcher whose request went away (their outcome never came).
    pub(in crate::redis) fn forget_gone(&self) {
        lock(&self.placed).retain(|_, (_, tx)| !tx.is_closed());
        lock(&self.watchers).retain(|_, (_, txs)| {
            txs.retain(|tx| !tx.is_closed());
            !txs.is_empty()
        });
    }

    /// Hands a call's outcome to its watchers and its waiter (once: each is taken).
    pub(in crate::redis) fn deliver(&self, id: &str, outcome: Outcome) {
        let watchers = lock(&self.watchers)
            .remove(id)
            .map(|(_, w)| w)
            .unwrap_or_default();
        for w in watchers {
            let _ = w.send(outcome.clone());
        }
        if let Some((_, waiter)) = lock(&self.placed).remove(id) {
            let _ = waiter.send(outcome);
        }
    }

    /// The ids of the calls waited for or watched, each with its partition.
    pub(in crate::redis) fn ids(&self) -> Vec<(String, u16)> {
        let mut ids: Vec<(String, u16)> = lock(&self.placed)
            .iter()
            .map(|(id, (k, _))| (id.clone(), *k))
            .collect();
        ids.extend(
            lock(&self.watchers)
                .iter()
                .map(|(id, (k, _))| (id.clone(), *k)),
        );
        ids
    }
}
