//! The event feeds of tenants with live readers on this node: each feed's sender to its
//! readers and the last event id handed to them, so each event reaches them once, in id order.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::broadcast;

use super::lock;
use crate::{Event, event_id_after};

/// The last event id handed to a tenant's readers, and the sender to them.
#[derive(Debug)]
struct Feed {
    tx: broadcast::Sender<Event>,
    last: Option<String>,
}

/// The feeds of tenants with live readers, by tenant.
#[derive(Debug, Default)]
pub(in crate::redis) struct Feeds {
    by_tenant: Mutex<HashMap<String, Feed>>,
}

impl Feeds {
    /// A new reader of `tenant`'s events, and whether it is the first (the feed is new, to be
    /// followed).
    pub(in crate::redis) fn subscribe(&self, tenant: &str) -> (broadcast::Receiver<Event>, bool) {
        let mut feeds = lock(&self.by_tenant);
        let first = !feeds.contains_key(tenant);
        let feed = feeds.entry(tenant.to_owned()).or_insert_with(|| Feed {
            tx: broadcast::channel(4096).0,
            last: None,
        });
        (feed.tx.subscribe(), first)
    }

    /// Drops `tenant`'s feed (it could not be followed).
    pub(in crate::redis) fn remove(&self, tenant: &str) {
        lock(&self.by_tenant).remove(tenant);
    }

    /// Hands `tenant`'s readers the events after `newest` only, unless they got one already.
    pub(in crate::redis) fn start_after(&self, tenant: &str, newest: String) {
        if let Some(feed) = lock(&self.by_tenant).get_mut(tenant)
            && feed.last.is_none()
        {
            feed.last = Some(newest);
        }
    }

    /// Each tenant with live readers and the last event id they got.
    pub(in crate::redis) fn lasts(&self) -> Vec<(String, Option<String>)> {
        lock(&self.by_tenant)
            .iter()
            .map(|(t, f)| (t.clone(), f.last.clone()))
            .collect()
    }

    /// Hands `event` to the tenant's live readers unless they had it: once each, in id order.
    pub(in crate::redis) fn hand(&self, tenant: &str, event: Event) {
        let mut feeds = lock(&self.by_tenant);
        let Some(feed) = feeds.get_mut(tenant) else {
            return;
        };
        if feed
            .last
            .as_deref()
            .is_some_and(|last| !event_id_after(&event.id, last))
        {
            return;
        }
        feed.last = Some(event.id.clone());
        let _ = feed.tx.send(event);
    }
}
