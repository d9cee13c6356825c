//! A finished call counted once, for everything that shows it: the Prometheus series
//! (`toolmark_calls_total`, `toolmark_call_duration_seconds`) and the tenant's traffic the
//! admin stats and the console read. One function feeds both, so the two cannot drift apart.
//! Refusals (a request answered with a problem before any call started) are the traffic's
//! alone: the HTTP metrics count them by route and status.

use std::time::Duration;

use toolmark_broker::{CallBinding, CallKind, Outcome};

use super::engine::Parts;

/// Counts the call of `binding`, finished with `outcome` after `took`; its outcome status
/// (`ok`, `error`, `timeout`…), the label both count it under.
pub(super) fn count_finished(
    parts: &Parts,
    binding: &CallBinding,
    outcome: &Outcome,
    took: Duration,
) -> &'static str {
    let kind = match binding.kind {
        CallKind::Call => "call",
        CallKind::Describe => "describe",
    };
    let status = match outcome {
        Outcome::Result(r) => r.status(),
        Outcome::Timeout => "timeout",
    };
    parts
        .metrics
        .call_finished(kind, status, took.as_secs_f64());
    let incarnation = parts
        .tenants
        .get(&binding.conv.tenant)
        .map_or(0, |t| t.incarnation);
    parts
        .traffic
        .call_finished(&binding.conv.tenant, incarnation, status);
    status
}
