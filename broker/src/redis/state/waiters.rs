//! The requests of this node waiting for a call's outcome: the one that placed it, and those
//! watching it (`Calls::watch`), by call id.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::oneshot;

use super::lock;
use crate::Outcome;

/// Who on this node waits for which call's outcome.
#[derive(Debug, Default)]
pub(in crate::redis) struct Waiters {
    /// The request that placed each call.
    placed: Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
    /// Watchers of calls placed anywhere, by call id.
    watchers: Mutex<HashMap<String, Vec<oneshot::Sender<Outcome>>>>,
}

impl Waiters {
    /// The outcome of call `id`, once it comes, for the request placing it.
    pub(in crate::redis) fn wait(&self, id: &str) -> oneshot::Receiver<Outcome> {
        let (tx, rx) = oneshot::channel();
        lock(&self.placed).insert(id.to_owned(), tx);
        rx
    }

    /// No longer waits for call `id` (it was not placed).
    pub(in crate::redis) fn forget(&self, id: &str) {
        lock(&self.placed).remove(id);
    }

    /// The outcome of call `id`, once it comes, for a watcher.
    pub(in crate::redis) fn watch(&self, id: &str) -> oneshot::Receiver<Outcome> {
        let (tx, rx) = oneshot::channel();
        lock(&self.watchers)
            .entry(id.to_owned())
            .or_default()
            .push(tx);
        rx
    }

    /// Forgets the watchers of call `id` that went away.
    pub(in crate::redis) fn unwatch_gone(&self, id: &str) {
        let mut watchers = lock(&self.watchers);
        if let Some(txs) = watchers.get_mut(id) {
            txs.retain(|tx| !tx.is_closed());
            if txs.is_empty() {
                watchers.remove(id);
            }
        }
    }

    /// Forgets every waiter and watcher whose request went away (their outcome never came).
    pub(in crate::redis) fn forget_gone(&self) {
        lock(&self.placed).retain(|_, tx| !tx.is_closed());
        lock(&self.watchers).retain(|_, txs| {
            txs.retain(|tx| !tx.is_closed());
            !txs.is_empty()
        });
    }

    /// Hands a call's outcome to its watchers and its waiter (once: each is taken).
    pub(in crate::redis) fn deliver(&self, id: &str, outcome: Outcome) {
        let watchers = lock(&self.watchers).remove(id).unwrap_or_default();
        for w in watchers {
            let _ = w.send(outcome.clone());
        }
        if let Some(waiter) = lock(&self.placed).remove(id) {
            let _ = waiter.send(outcome);
        }
    }

    /// The ids of the calls waited for or watched.
    pub(in crate::redis) fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = lock(&self.placed).keys().cloned().collect();
        ids.extend(lock(&self.watchers).keys().cloned());
        ids
    }
}
