//! A request with an `Idempotency-Key` runs once: the first claims the key and runs; a repeat
//! answers as the first did ([`Repeat`]), whichever door it came through.

use serde_json::Value;
use toolmark_broker::Outcome;

use super::engine::CallEngine;
use super::error::CallError;
use super::idempotency::{self, Claim, Claimed, Record};
use super::start::Request;
use crate::tenants::Tenant;

/// Where a request was made, part of its fingerprint: the route's name, the user and the
/// conversation.
pub(crate) type Route<'a> = (&'a str, &'a str, &'a str);

/// What the key says of a request.
pub(crate) enum Once {
    /// Run it (it carries the key it claimed, if any).
    Run(Request),
    /// Answer as the first request with the key.
    Repeat(Repeat),
}

/// The first request's call, as a repeat answers it.
pub(crate) struct Repeat {
    /// The call's id.
    pub id: String,
    /// Its page.
    pub client_id: String,
    /// Whether its tool is marked untrusted.
    pub untrusted: bool,
    key: String,
    record: Record,
}

impl Repeat {
    /// The call's outcome, once it has one (waiting as the first request does).
    pub(crate) async fn outcome(self, engine: &CallEngine, tenant: &Tenant) -> Outcome {
        idempotency::outcome(&*engine.parts().broker, &tenant.id, &self.key, self.record).await
    }
}

impl CallEngine {
    /// With an `Idempotency-Key` (`key`): claims it for this request, or finds the first
    /// request's call. Without one: run.
    pub(crate) async fn once(
        &self,
        tenant: &Tenant,
        key: Option<String>,
        (route, user, conversation): Route<'_>,
        body: &[u8],
        req: Request,
    ) -> Result<Once, CallError> {
        let Some(sent) = key else {
            return Ok(Once::Run(req));
        };
        // Boxed: a call without a key (most) carries none of the claim's work in its future.
        Box::pin(self.claimed(tenant, sent, (route, user, conversation), body, req)).await
    }

    /// [`CallEngine::once`] with the key `sent`.
    async fn claimed(
        &self,
        tenant: &Tenant,
        sent: String,
        (route, user, conversation): Route<'_>,
        body: &[u8],
        mut req: Request,
    ) -> Result<Once, CallError> {
        // A repeat is held to the caller's policy as it is now, as a first request is in
        // `start`.
        let conv = toolmark_broker::ConvKey::new(&tenant.id, user, conversation);
        let caller = req.caller.reference();
        let key = idempotency::scoped(tenant, &caller, &sent);
        let legacy = idempotency::scoped_before(tenant, &sent);
        let value: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let fingerprint = idempotency::fingerprint(route, user, conversation, &value);
        match idempotency::claim(
            &*self.parts().broker,
            &tenant.id,
            &key,
            Some(&legacy),
            &caller,
            &fingerprint,
        )
        .await?
        {
            Claimed::First(mirror) => {
                req.idempotency = Some(Claim {
                    key,
                    mirror,
                    fingerprint,
                });
                Ok(Once::Run(req))
            }
            Claimed::Repeat(record) => {
                self.authorize_tool(&req.caller, &conv, &req.tool).await?;
                Ok(Once::Repeat(Repeat {
                    id: record.id.clone().unwrap_or_default(),
                    client_id: record.client.clone().unwrap_or_default(),
                    untrusted: record.untrusted,
                    key,
                    record,
                }))
            }
        }
    }
}
