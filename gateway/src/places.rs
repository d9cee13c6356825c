//! Open streams counted on this node under bounded keys (a tenant, a key, a token): one rule
//! for the hosted MCP's streams (`hosted_mcp::streams`) and the agent API's event streams
//! ([`EventStreams`]). A stream takes a place under each of its keys, or none when one key is
//! at its bound, and gives them back when its [`Held`] is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::caller::Caller;
use crate::http::problem::Problem;

/// Places taken, by key.
#[derive(Debug, Default)]
pub struct Places {
    open: Mutex<HashMap<String, usize>>,
}

/// The places one stream holds; given back when dropped.
#[derive(Debug)]
pub struct Held {
    places: Arc<Places>,
    keys: Vec<String>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut open = self.places.lock();
        for key in &self.keys {
            if let Some(n) = open.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    open.remove(key);
                }
            }
        }
    }
}

impl Places {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place under each of `bounds` (key, bound), all or none: `Err(i)` names the first
    /// bound that is reached.
    pub fn take<const N: usize>(
        self: &Arc<Self>,
        bounds: [(String, usize); N],
    ) -> Result<Held, usize> {
        let mut open = self.lock();
        if let Some(i) = bounds
            .iter()
            .position(|(key, bound)| open.get(key).copied().unwrap_or(0) >= *bound)
        {
            return Err(i);
        }
        let keys: Vec<String> = bounds.into_iter().map(|(key, _)| key).collect();
        for key in &keys {
            *open.entry(key.clone()).or_insert(0) += 1;
        }
        Ok(Held {
            places: Arc::clone(self),
            keys,
        })
    }

    /// Places taken under `key`.
    #[cfg(test)]
    pub fn count(&self, key: &str) -> usize {
        self.lock().get(key).copied().unwrap_or(0)
    }
}

/// Open event streams (`GET …/events`) of this node, bounded per tenant and per key
/// (`server.max_event_streams_per_tenant`, `server.max_event_streams_per_key`).
#[derive(Debug)]
pub struct EventStreams {
    places: Arc<Places>,
    bounds: Mutex<(usize, usize)>,
}

impl Default for EventStreams {
    fn default() -> Self {
        let server = toolmark_config::ServerConfig::default();
        EventStreams {
            places: Arc::default(),
            bounds: Mutex::new((
                server.max_event_streams_per_tenant,
                server.max_event_streams_per_key,
            )),
        }
    }
}

impl EventStreams {
    /// Sets the bounds (per tenant, per key).
    pub fn bound(&self, per_tenant: usize, per_key: usize) {
        *self.bounds.lock().unwrap_or_else(PoisonError::into_inner) = (per_tenant, per_key);
    }

    /// A place for one more stream of `caller` on `tenant`, or 429 naming the bound reached.
    pub fn take(&self, tenant: &str, caller: &Caller) -> Result<Held, Problem> {
        let (per_tenant, per_key) = *self.bounds.lock().unwrap_or_else(PoisonError::into_inner);
        self.places
            .take([
                (format!("t\n{tenant}"), per_tenant),
                (format!("k\n{tenant}\n{}", caller.rate_bucket()), per_key),
            ])
            .map_err(|i| {
                Problem::too_many_event_streams(if i == 0 {
                    "for this tenant"
                } else {
                    "for this key"
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_is_taken_under_every_key_or_none_and_given_back_when_dropped() {
        let places = Arc::new(Places::default());
        let a = places
            .take([("t".to_owned(), 2), ("k1".to_owned(), 1)])
            .unwrap();
        assert_eq!(
            places
                .take([("t".to_owned(), 2), ("k1".to_owned(), 1)])
                .err(),
            Some(1)
        );
        // Refused: nothing taken under the keys that had room.
        assert_eq!(places.count("t"), 1);
        let b = places
            .take([("t".to_owned(), 2), ("k2".to_owned(), 1)])
            .unwrap();
        assert_eq!(
            places
                .take([("t".to_owned(), 2), ("k3".to_owned(), 1)])
                .err(),
            Some(0)
        );
        drop(a);
        assert_eq!((places.count("t"), places.count("k1")), (1, 0));
        drop(b);
        assert_eq!(places.count("t"), 0);
    }
}
