//! Confirmations on Redis: per conversation (confirm hash beside its call), single use in one
//! script, expired by the leased sweep implementing `model::sweep_confirm`.

use super::*;
use crate::prelude::*;

#[async_trait]
impl Confirmations for RedisBroker {
    async fn submit_confirmed(
        &self,
        from: &PageIdentity,
        confirm_id: &str,
    ) -> Result<ConfirmBinding, SubmitError> {
        let reply = strings(
            self.script(
                &self.scripts.confirm,
                vec![self.keys.confirm(&from.conv, confirm_id)],
                vec![from.client_id.clone()],
            )
            .await?,
        );
        match reply.first().map(String::as_str) {
            Some("ok") => reply
                .get(1)
                .and_then(|b| Self::confirm_binding(confirm_id, b))
                .ok_or(SubmitError::Rejected(Rejection::UnknownConfirm)),
            Some("unknown_confirm") => {
                let elsewhere: bool = self
                    .client
                    .exists::<i64, _>(self.keys.confirm_index(confirm_id))
                    .await
                    .map_err(|e| unavailable(&e))?
                    > 0;
                Err(SubmitError::Rejected(if elsewhere {
                    Rejection::Mismatch
                } else {
                    Rejection::UnknownConfirm
                }))
            }
            Some(code) => Err(SubmitError::Rejected(
                rejection(code).unwrap_or(Rejection::UnknownConfirm),
            )),
            None => Err(SubmitError::Broker(BrokerError::Unavailable {
                retry_after: RETRY,
            })),
        }
    }

    async fn expire_abandoned_confirmations(
        &self,
        grace: Duration,
    ) -> Result<Vec<ConfirmBinding>, BrokerError> {
        self.sweep_confirms(grace).await
    }
}
