//! `Idempotency-Key` on `POST …/calls`, `POST …/describe` and `POST …/llm-tools/invoke`: the
//! first request with a key runs; a repeat within 24 h, on any node, with the same route,
//! conversation and body (compared as canonical JSON) gets the same answer, waiting for the
//! outcome like the first while the call is pending; the page never receives a second frame.
//! The same key with another request is 422 `idempotency_mismatch`. Keys are per tenant.
//!
//! The key's record lives in the broker ([`toolmark_broker::Idempotency`]) for 24 h from the
//! first request: first the request's fingerprint alone (the key is claimed), then the call it
//! started (its id, page, deadline), then its outcome, written by the call's supervisor, so a
//! repeat after the call itself left the broker's retention is still answered. A repeat of a
//! pending call waits for the call's outcome notification, as the first request does, heard on
//! its own node ([`toolmark_broker::Calls::watch`]); it never polls the broker. Keys are kept
//! under the tenant's incarnation ([`scoped`]).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use toolmark_broker::{Broker, CallBinding, CallerRef, Idempotency, Outcome, Watch, now_ms};

use super::error::CallError;

/// How long a key is kept from its first request.
pub const KEPT: Duration = Duration::from_secs(24 * 3600);
/// How soon a repeat looks again for the call the first request is about to start (doubled
/// each time, up to [`START_POLL_MAX`]): only while the first request has claimed the key and
/// not yet bound its call, which takes a round trip or two.
const START_POLL: Duration = Duration::from_millis(20);
/// The longest pause between two looks.
const START_POLL_MAX: Duration = Duration::from_millis(500);
/// How long a repeat waits for the first request to start its call.
const START_WAIT: Duration = Duration::from_secs(10);
/// How long past the call's deadline a repeat waits for its outcome to be written.
const OUTCOME_SLACK: Duration = Duration::from_secs(5);

/// A key's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// The request's fingerprint ([`fingerprint`]).
    pub f: String,
    /// The call it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The call's page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Whether the tool is marked untrusted.
    #[serde(default)]
    pub untrusted: bool,
    /// The call's deadline (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// Its outcome, once it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

impl Record {
    /// The record of a key just claimed by a request of `fingerprint`: no call yet.
    fn claimed(fingerprint: &str) -> Self {
        Record {
            f: fingerprint.to_owned(),
            id: None,
            client: None,
            untrusted: false,
            deadline_ms: None,
            outcome: None,
        }
    }

    /// As the broker keeps it.
    fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The key as the broker keeps it: under the principal that sent it (an API key and its MCP
/// tokens, [`CallerRef::principal`]), so that another key's request with the same value is a
/// new call; and a tenant of the admin API's under its incarnation, so that a tenant deleted
/// and created again under its id sees none of the old one's keys.
pub fn scoped(tenant: &crate::tenants::Tenant, caller: &CallerRef, key: &str) -> String {
    let principal = caller.principal();
    if tenant.incarnation == 0 {
        format!("{principal}:{key}")
    } else {
        format!("{}:{principal}:{key}", tenant.incarnation)
    }
}

/// The key as a node of the previous release kept it (shared by the tenant's keys), read once
/// while a rolling upgrade's records live ([`claim`]).
pub fn scoped_before(tenant: &crate::tenants::Tenant, key: &str) -> String {
    if tenant.incarnation == 0 {
        key.to_owned()
    } else {
        format!("{}:{key}", tenant.incarnation)
    }
}

/// What makes two requests the same: the route, the conversation, and the body as canonical
/// JSON (object keys sorted, no insignificant white space).
pub fn fingerprint(route: &str, user: &str, conversation: &str, body: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(body, &mut canonical);
    let digest = Sha256::new()
        .chain_update(route)
        .chain_update([0])
        .chain_update(user)
        .chain_update([0])
        .chain_update(conversation)
        .chain_update([0])
        .chain_update(canonical)
        .finalize();
    hex::encode(digest)
}

/// `value` as JSON with every object's keys in order, whatever the map's own order.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// What a key says of this request.
#[derive(Debug)]
pub enum Claimed {
    /// This request is the first: run it. With the key as the previous release keeps it,
    /// when this request claimed that too ([`Claim::mirror`]).
    First(Option<String>),
    /// A repeat: answer as the first (its call is started; its outcome may not be known yet).
    Repeat(Record),
}

/// Claims `key` for a request of `fingerprint`, or finds the first request's record (waiting
/// for it to start its call, when it is still about to). `legacy`: the key as a node of the
/// previous release keeps it ([`scoped_before`]), claimed too when `key` is free, so that a
/// retry across a rolling upgrade never runs a tool twice, whichever version it reaches: a
/// record found there counts only when its call was made by the same principal as this
/// request (`caller`, read from the call's record); one claimed here is written as the key's
/// own is (the mirror), for older nodes to find. The mirror goes with the previous release.
pub async fn claim(
    broker: &dyn Broker,
    tenant: &str,
    key: &str,
    legacy: Option<&str>,
    caller: &CallerRef,
    fingerprint: &str,
) -> Result<Claimed, CallError> {
    let claimed = claim_scoped(broker, tenant, key, fingerprint).await?;
    let (Claimed::First(_), Some(legacy)) = (&claimed, legacy) else {
        return Ok(claimed);
    };
    let fresh = Record::claimed(fingerprint).to_json();
    let Some(old) = broker
        .claim_idempotency(tenant, legacy, &fresh, KEPT)
        .await?
    else {
        return Ok(Claimed::First(Some(legacy.to_owned())));
    };
    let record: Option<Record> = serde_json::from_str(&old).ok();
    // Another principal's record (or one whose call is gone, so that its maker is unknown) is
    // not this request's: a new call.
    let maker = match record.as_ref().and_then(|r| r.id.as_deref()) {
        Some(id) => broker
            .call(tenant, id)
            .await?
            .and_then(|c| c.binding.caller)
            .map(|c| c.principal()),
        None => None,
    };
    if record.as_ref().is_some_and(|r| r.id.is_some()) && maker != Some(caller.principal()) {
        return Ok(claimed);
    }
    match record {
        Some(r) if r.f == fingerprint && r.id.is_some() => {
            // The first request ran on a node before the upgrade: its record, under the key.
            broker.update_idempotency(tenant, key, &old).await?;
            Ok(Claimed::Repeat(r))
        }
        Some(r) if r.f != fingerprint => {
            broker.release_idempotency(tenant, key).await?;
            Err(CallError::KeyReused)
        }
        // Still starting on an older node: the client asks again in a moment.
        _ => {
            broker.release_idempotency(tenant, key).await?;
            Err(CallError::KeyBusy)
        }
    }
}

async fn claim_scoped(
    broker: &dyn Idempotency,
    tenant: &str,
    key: &str,
    fingerprint: &str,
) -> Result<Claimed, CallError> {
    let body = Record::claimed(fingerprint).to_json();
    let waiting_since = Instant::now();
    let mut pause = START_POLL;
    loop {
        let Some(existing) = broker.claim_idempotency(tenant, key, &body, KEPT).await? else {
            return Ok(Claimed::First(None));
        };
        let record: Record = serde_json::from_str(&existing).map_err(|_| CallError::KeyBusy)?;
        if record.f != fingerprint {
            return Err(CallError::KeyReused);
        }
        if record.id.is_some() {
            return Ok(Claimed::Repeat(record));
        }
        // The first request claimed the key and has not started its call yet (or failed, and
        // gives the key back: then this request claims it on the next turn).
        if waiting_since.elapsed() > START_WAIT {
            return Err(CallError::KeyBusy);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(START_POLL_MAX);
    }
}

/// A key claimed by the request that carries it (the first with it): the engine binds it to
/// the call that request starts ([`Claim::bind`]), or gives it back when it started none
/// ([`Claim::release`]).
#[derive(Debug, Clone)]
pub struct Claim {
    /// The key as the broker keeps it ([`scoped`]).
    pub key: String,
    /// The key as the previous release keeps it, when this request claimed it too: written
    /// as `key` is, for nodes of that release during a rolling upgrade.
    pub mirror: Option<String>,
    /// The request's [`fingerprint`].
    pub fingerprint: String,
}

impl Claim {
    /// Names the call the first request started in the key's record: a repeat answers from it
    /// from here on.
    pub async fn bind(self, broker: &dyn Idempotency, binding: &CallBinding) -> Bound {
        let record = Record {
            f: self.fingerprint,
            id: Some(binding.id.clone()),
            client: Some(binding.client_id.clone()),
            untrusted: binding.untrusted,
            deadline_ms: Some(binding.deadline_ms),
            outcome: None,
        };
        for key in std::iter::once(&self.key).chain(&self.mirror) {
            write(broker, &binding.conv.tenant, key, &record).await;
        }
        Bound {
            key: self.key,
            mirror: self.mirror,
            record,
        }
    }

    /// Gives the key back: the first request failed before it started a call.
    pub async fn release(self, broker: &dyn Idempotency, tenant: &str) {
        for key in std::iter::once(&self.key).chain(&self.mirror) {
            if let Err(e) = broker.release_idempotency(tenant, key).await {
                tracing::warn!(tenant, error = %e, "idempotency key of a failed request not released; it expires in 24 h");
            }
        }
    }
}

/// A key bound to its call, written its outcome by the call's supervisor ([`Bound::finish`]).
#[derive(Debug)]
pub struct Bound {
    key: String,
    mirror: Option<String>,
    record: Record,
}

impl Bound {
    /// Writes the call's outcome to the key (and its mirror): a repeat within 24 h answers
    /// with it, even once the call itself left the broker's retention.
    pub async fn finish(mut self, broker: &dyn Idempotency, tenant: &str, outcome: &Outcome) {
        self.record.outcome = Some(outcome.clone());
        for key in std::iter::once(&self.key).chain(&self.mirror) {
            write(broker, tenant, key, &self.record).await;
        }
    }
}

/// Writes the key's record.
async fn write(broker: &dyn Idempotency, tenant: &str, key: &str, record: &Record) {
    let body = record.to_json();
    if let Err(e) = broker.update_idempotency(tenant, key, &body).await {
        tracing::warn!(tenant, error = %e, "idempotency key not bound to its call; a repeat waits for it, then runs");
    }
}

/// The outcome of a repeat's call: from the key's record once the first request's supervisor
/// wrote it, else from the call's own notification, heard on this node whichever node placed
/// the call ([`toolmark_broker::Calls::watch`]): no poll. Without a notification by the call's
/// deadline (and [`OUTCOME_SLACK`]), or for a call gone from the broker, what was stored.
pub async fn outcome(broker: &dyn Broker, tenant: &str, key: &str, record: Record) -> Outcome {
    if let Some(o) = record.outcome {
        return o;
    }
    let id = record.id.unwrap_or_default();
    let deadline = record.deadline_ms.unwrap_or_else(now_ms);
    let give_up = deadline + u64::try_from(OUTCOME_SLACK.as_millis()).unwrap_or(5000);
    let until =
        tokio::time::Instant::now() + Duration::from_millis(give_up.saturating_sub(now_ms()));
    match broker.watch(tenant, &id).await {
        Ok(Watch::Ended(o)) => return o,
        Ok(Watch::Pending(heard)) => match tokio::time::timeout_at(until, heard).await {
            Ok(Ok(o)) => return o,
            // The node stopped listening (its broker connection was rebuilt): the deadline
            // still bounds the wait.
            Ok(Err(_)) => tokio::time::sleep_until(until).await,
            Err(_) => {}
        },
        Ok(Watch::Unknown) | Err(_) => {}
    }
    stored(broker, tenant, key, &id)
        .await
        .unwrap_or(Outcome::Timeout)
}

/// The outcome written to the key's record, else the call's own, if either is known.
async fn stored(broker: &dyn Broker, tenant: &str, key: &str, id: &str) -> Option<Outcome> {
    if let Ok(Some(stored)) = broker.idempotency(tenant, key).await
        && let Ok(Record {
            outcome: Some(o), ..
        }) = serde_json::from_str::<Record>(&stored)
    {
        return Some(o);
    }
    broker
        .call(tenant, id)
        .await
        .ok()
        .flatten()
        .and_then(|c| c.outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A memory broker, as one node has it.
    fn broker() -> toolmark_broker::SharedBroker {
        let registry = std::sync::Arc::new(crate::registry::Registry::default());
        std::sync::Arc::new(toolmark_broker::memory::MemoryBroker::new("n1", registry))
    }

    /// A call made by `caller`, in the broker as a node of the previous release stores it.
    async fn stored_call(broker: &dyn Broker, caller: &CallerRef) -> String {
        let conv = toolmark_broker::ConvKey::new("t", "u", "c");
        let binding = CallBinding {
            id: broker.mint_call_id(&conv),
            conv,
            client_id: "p1".into(),
            tool: "todo.add".into(),
            kind: toolmark_broker::CallKind::Call,
            deadline_ms: now_ms() + 30_000,
            node: "n1".into(),
            untrusted: false,
            respond_async: false,
            caller: Some(caller.clone()),
        };
        let frame = toolmark_proto::AgentMessage::Describe(toolmark_proto::Describe {
            client_id: "p1".into(),
            id: binding.id.clone(),
            tool: "todo.add".into(),
        });
        drop(broker.send_call(binding.clone(), frame).await.unwrap());
        binding.id
    }

    #[tokio::test]
    async fn a_key_recorded_before_the_incarnation_scope_is_still_a_repeat() {
        let broker = broker();
        let k1 = CallerRef::ApiKey { id: "k1".into() };
        let k2 = CallerRef::ApiKey { id: "k2".into() };
        let call = stored_call(&*broker, &k1).await;
        // A node before the upgrade recorded `order-1` (unscoped) with its call.
        let first = Record {
            f: "fp".into(),
            id: Some(call.clone()),
            client: Some("p1".into()),
            untrusted: false,
            deadline_ms: Some(now_ms() + 30_000),
            outcome: None,
        };
        let body = serde_json::to_string(&first).unwrap();
        broker
            .claim_idempotency("t", "order-1", &body, KEPT)
            .await
            .unwrap();
        // Another key's request with the same value on an upgraded node: a new call, and the
        // first key's record is left as it is.
        assert!(matches!(
            claim(&*broker, "t", "7:k:k2:order-1", Some("order-1"), &k2, "fp").await,
            Ok(Claimed::First(_))
        ));
        // A retry of the same key on an upgraded node: a repeat of that call, and the scoped
        // key now holds it.
        match claim(&*broker, "t", "7:order-1", Some("order-1"), &k1, "fp").await {
            Ok(Claimed::Repeat(r)) => assert_eq!(r.id.as_deref(), Some(call.as_str())),
            other => panic!("{other:?}"),
        }
        let kept = broker.idempotency("t", "7:order-1").await.unwrap();
        assert_eq!(kept.as_deref(), Some(body.as_str()));
        // Another request under an old key: 422, and the scoped key is left free.
        broker
            .claim_idempotency("t", "order-9", &body, KEPT)
            .await
            .unwrap();
        assert!(
            claim(&*broker, "t", "7:order-9", Some("order-9"), &k1, "other")
                .await
                .is_err()
        );
        assert!(
            broker
                .idempotency("t", "7:order-9")
                .await
                .unwrap()
                .is_none()
        );
        // A key nobody recorded: the first request, which claims the older form too, for
        // nodes of the previous release to find.
        assert!(matches!(
            claim(&*broker, "t", "7:fresh", Some("fresh"), &k1, "fp").await,
            Ok(Claimed::First(Some(ref mirror))) if mirror == "fresh"
        ));
        assert!(broker.idempotency("t", "fresh").await.unwrap().is_some());
    }

    #[test]
    fn the_same_request_in_another_key_order_has_the_same_fingerprint() {
        let a = json!({"tool": "todo.add", "input": {"b": [1, {"y": 2, "x": 1}], "a": "é"}});
        let b: Value = serde_json::from_str(
            r#"{ "input" : { "a":"é", "b":[1,{"x":1,"y":2}] }, "tool":"todo.add" }"#,
        )
        .unwrap();
        assert_eq!(
            fingerprint("calls", "u", "c", &a),
            fingerprint("calls", "u", "c", &b)
        );
        assert_ne!(
            fingerprint("calls", "u", "c", &a),
            fingerprint("calls", "u", "c2", &a)
        );
        assert_ne!(
            fingerprint("calls", "u", "c", &a),
            fingerprint("describe", "u", "c", &a)
        );
        let mut other = a.clone();
        other["input"]["a"] = json!("e");
        assert_ne!(
            fingerprint("calls", "u", "c", &a),
            fingerprint("calls", "u", "c", &other)
        );
    }
}
