//! Front-door sessions in the process: a map of records with their expiry, expired ones
//! dropped as they are met and swept once the map grows.

use super::*;
use crate::prelude::*;

/// Above this many records, a write first drops the expired ones.
const SWEEP_ABOVE: usize = 4096;

#[async_trait]
impl Sessions for MemoryBroker {
    async fn put_session(&self, id: &str, body: &str, ttl: Duration) -> Result<(), BrokerError> {
        let now = Instant::now();
        let mut sessions = lock(&self.sessions);
        if sessions.len() >= SWEEP_ABOVE {
            sessions.retain(|_, (_, until)| *until > now);
        }
        sessions.insert(id.to_owned(), (body.to_owned(), now + ttl));
        Ok(())
    }

    async fn session(&self, id: &str, ttl: Duration) -> Result<Option<String>, BrokerError> {
        let now = Instant::now();
        let mut sessions = lock(&self.sessions);
        match sessions.get_mut(id) {
            Some((body, until)) if *until > now => {
                *until = now + ttl;
                Ok(Some(body.clone()))
            }
            Some(_) => {
                sessions.remove(id);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    async fn drop_session(&self, id: &str) -> Result<bool, BrokerError> {
        let now = Instant::now();
        Ok(lock(&self.sessions)
            .remove(id)
            .is_some_and(|(_, until)| until > now))
    }
}
