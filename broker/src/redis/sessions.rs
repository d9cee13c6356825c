//! Front-door sessions on Redis: one string per session with its time to live (`SET … PX`),
//! restarted by every read (`GETEX … PX`), so any node serves a session any node began.

use super::*;
use crate::prelude::*;

#[async_trait]
impl Sessions for RedisBroker {
    async fn put_session(&self, id: &str, body: &str, ttl: Duration) -> Result<(), BrokerError> {
        let _: Option<String> = self
            .client
            .set(
                self.keys.session(id),
                body,
                Some(Expiration::PX(millis(ttl))),
                None,
                false,
            )
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(())
    }

    async fn session(&self, id: &str, ttl: Duration) -> Result<Option<String>, BrokerError> {
        // `GETEX key PX ms`: the read and the new expiry in one command.
        let getex =
            fred::types::CustomCommand::new("GETEX", fred::types::ClusterHash::FirstKey, false);
        self.client
            .custom(
                getex,
                vec![
                    self.keys.session(id),
                    "PX".to_owned(),
                    millis(ttl).to_string(),
                ],
            )
            .await
            .map_err(|e| unavailable(&e))
    }

    async fn drop_session(&self, id: &str) -> Result<bool, BrokerError> {
        let dropped: i64 = self
            .client
            .del(self.keys.session(id))
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(dropped > 0)
    }
}
