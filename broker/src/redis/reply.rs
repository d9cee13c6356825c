//! Reading what Redis answered: replies as strings and counts, a script's rejection codes and
//! call states, stored manifests and events, and a failed command as the broker's error.

use std::time::Duration;

use fred::types::Value;
use serde_json::Value as Json;
use toolmark_proto::{Manifest, ToolManifestSummary};

use crate::{BrokerError, CallState, Event, Rejection};

/// How long a caller is told to wait after Redis failed it.
pub(super) const RETRY: Duration = Duration::from_secs(1);

/// A failed command, as the broker's error (logged).
pub(super) fn unavailable(e: &fred::error::Error) -> BrokerError {
    tracing::warn!(error = %e, "redis command failed");
    BrokerError::Unavailable { retry_after: RETRY }
}

/// `d` in milliseconds, as Redis takes a time to live.
pub(super) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A script's one-string reply (`place.lua`, `result.lua`) split into its lines, at most `n`
/// (the last keeps the rest); nothing for a reply that is not a string.
pub(super) fn parts(v: &Value, n: usize) -> Vec<String> {
    v.as_str()
        .map(|s| s.splitn(n, '\n').map(str::to_owned).collect())
        .unwrap_or_default()
}

/// A reply as strings (an array's items, or the one value).
pub(super) fn strings(v: Value) -> Vec<String> {
    match v {
        Value::Array(items) => items
            .into_iter()
            .map(|i| i.as_string().unwrap_or_default())
            .collect(),
        Value::Null => Vec::new(),
        other => vec![other.as_string().unwrap_or_default()],
    }
}

/// Field/value pairs of an `HGETALL` reply.
pub(super) fn pairs(v: Value) -> Vec<(String, i64)> {
    let flat = strings(v);
    flat.chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| (c[0].clone(), c[1].parse().unwrap_or(0)))
        .collect()
}

/// The rejection a script answered with its code.
pub(super) fn rejection(code: &str) -> Option<Rejection> {
    match code {
        "unknown_id" => Some(Rejection::UnknownId),
        "mismatch" => Some(Rejection::Mismatch),
        "duplicate" => Some(Rejection::Duplicate),
        "late" => Some(Rejection::Late),
        "unknown_confirm" => Some(Rejection::UnknownConfirm),
        _ => None,
    }
}

/// A call's state as stored (`s`).
pub(super) fn state_of(s: &str) -> CallState {
    match s {
        "a" => CallState::Answered,
        "t" => CallState::TimedOut,
        _ => CallState::Pending,
    }
}

/// A manifest as stored (what `put_manifest` wrote).
pub(super) fn parse_manifest(stored: &str) -> Option<Manifest> {
    let v: Json = serde_json::from_str(stored).ok()?;
    let tools: Vec<ToolManifestSummary> = serde_json::from_value(v.get("tools")?.clone()).ok()?;
    Some(Manifest {
        client_id: v.get("clientId")?.as_str()?.to_owned(),
        rev: v.get("rev")?.as_u64()?,
        tools,
    })
}

/// An event as stored in a tenant's stream, under its id.
pub(super) fn parse_event(id: &str, body: &str) -> Option<Event> {
    crate::RawEvent {
        id: id.to_owned(),
        body: body.into(),
    }
    .parse()
}

#[cfg(test)]
mod tests {
    use fred::types::Value;

    use super::parts;

    #[test]
    fn a_scripts_one_string_reply_splits_into_its_lines() {
        // result.lua's: the code, the deadline, the node, then the three lines of the summary
        // kept whole.
        let reply = Value::String("ok\n1765000000000\nnode-2\nfill\ncall\nu".into());
        assert_eq!(
            parts(&reply, 4),
            ["ok", "1765000000000", "node-2", "fill\ncall\nu"]
        );
        // place.lua's, split on every line.
        let reply = Value::String("unknown\nnode-3\nnode-4".into());
        assert_eq!(parts(&reply, usize::MAX), ["unknown", "node-3", "node-4"]);
        assert_eq!(parts(&Value::String("stale".into()), usize::MAX), ["stale"]);
        assert!(parts(&Value::Null, 4).is_empty());
    }
}
