//! One follower of each conversation's tool listing on this node, shared by every session and
//! stream of that conversation here: it follows the tenant's event log (so the page may be on
//! any node) and announces each change of the listing to its listeners.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use toolmark_broker::{ConvKey, EventType};

use super::grant::McpGrant;
use super::state::McpState;
use super::tools::footprint;

/// How long a page that left may take to come back before the listing is re-read (a reload
/// with the same tools changes nothing): the desktop CLI's grace.
const RELOAD_GRACE: Duration = Duration::from_millis(2000);

/// The listing followers running on this node, one per conversation listened to.
#[derive(Debug, Default)]
pub struct Listings {
    followers: Mutex<HashMap<ConvKey, broadcast::Sender<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Listings {
    /// Hears every change of `grant`'s conversation listing: one follower per conversation
    /// on this node reads the tenant's event log and the conversation's state, whatever
    /// number of sessions and streams listen; it stops once none does.
    pub fn listen(self: &Arc<Self>, app: &McpState, grant: &McpGrant) -> broadcast::Receiver<()> {
        let conv = grant.conv();
        let mut listings = lock(&self.followers);
        if let Some(tx) = listings.get(&conv) {
            return tx.subscribe();
        }
        let (tx, rx) = broadcast::channel(16);
        listings.insert(conv.clone(), tx.clone());
        drop(listings);
        let me = Arc::clone(self);
        let follower = app.clone();
        let grant = grant.clone();
        app.life.spawn(async move {
            let notify = || {
                let tx = tx.clone();
                async move { tx.send(()).is_ok() || tx.receiver_count() > 0 }
            };
            follow_listing(&follower, &grant, notify, || me.nobody_listens(&conv)).await;
            me.forget_listing(&conv, &tx);
        });
        rx
    }

    /// Whether no one listens to `conv` any more; the follower is then forgotten, so that the
    /// next listener starts a new one.
    fn nobody_listens(&self, conv: &ConvKey) -> bool {
        let mut listings = lock(&self.followers);
        let idle = listings.get(conv).is_none_or(|tx| tx.receiver_count() == 0);
        if idle {
            listings.remove(conv);
        }
        idle
    }

    /// The follower of `conv` stopped (the node drains, or the event log is gone): forgotten,
    /// so that the next listener starts a new one.
    fn forget_listing(&self, conv: &ConvKey, tx: &broadcast::Sender<()>) {
        let mut listings = lock(&self.followers);
        if listings.get(conv).is_some_and(|t| t.same_channel(tx)) {
            listings.remove(conv);
        }
    }
}

/// Calls `notify` for every change `changes` announces, until the follower stops or a
/// `notify` fails (the stream is gone).
pub(super) async fn forward<F, Fut>(mut changes: broadcast::Receiver<()>, mut notify: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    loop {
        match changes.recv().await {
            Ok(()) | Err(RecvError::Lagged(_)) => {
                if !notify().await {
                    return;
                }
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// How often an idle follower looks whether anyone still listens.
const LISTENERS_CHECK: Duration = Duration::from_secs(10);

/// Calls `notify` whenever the conversation's listing changes, until the node's drain, a
/// failed `notify`, or `nobody_listens` (looked at on every event and every
/// [`LISTENERS_CHECK`]). Follows the tenant's event log, so the page may be on any node; a page
/// that left is given [`RELOAD_GRACE`] to come back first.
async fn follow_listing<F, Fut>(
    app: &McpState,
    grant: &McpGrant,
    mut notify: F,
    nobody_listens: impl Fn() -> bool,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let conv = grant.conv();
    let read = || async {
        app.broker
            .conversation(&conv)
            .await
            .ok()
            .map(|s| footprint(&s))
    };
    let Ok(mut feed) = app.broker.events(&grant.tenant.id, None).await else {
        return;
    };
    let mut last = read().await;
    let stopping = app.life.stopping().clone();
    let mut check = tokio::time::interval(LISTENERS_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let event = tokio::select! {
            () = stopping.cancelled() => return,
            _ = check.tick() => {
                if nobody_listens() {
                    return;
                }
                continue;
            }
            e = feed.live.recv() => e,
        };
        if nobody_listens() {
            return;
        }
        let left = match event {
            Ok(e) if e.user == grant.user && e.conversation == grant.conversation => match e.kind {
                EventType::PageManifest => false,
                EventType::PageDisconnected => true,
                _ => continue,
            },
            Ok(_) => continue,
            // Missed events: read the state again.
            Err(RecvError::Lagged(_)) => false,
            Err(RecvError::Closed) => return,
        };
        if left {
            tokio::select! {
                () = stopping.cancelled() => return,
                () = tokio::time::sleep(RELOAD_GRACE) => {}
            }
        }
        let now = read().await;
        if now.is_some() && now != last {
            last = now;
            if !notify().await {
                return;
            }
        }
    }
}
