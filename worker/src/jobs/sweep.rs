//! The two sweeps: deadlines nobody is left to enforce, and confirmations of pages that are
//! gone. Each runs every second; the broker makes sure each call or confirmation is swept once,
//! whichever process runs the sweep. What the deadline sweep times out, and when, is
//! `toolmark_broker::deadline`'s rule (step 3 there), run by the broker's `sweep_deadlines`.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use toolmark_broker::{CONFIRM_ABANDON_GRACE, Calls, Change, Confirmations};

use super::metrics::{self, JobMetrics};

/// How often each sweep runs.
const EVERY: Duration = Duration::from_secs(1);

/// Times out calls whose deadline passed with nobody left to do it, sending the page its
/// `cancel` (the broker records `call.timeout`, and `call.result` for an async call, with each),
/// and emits the events of changes whose node did not.
#[derive(Debug)]
pub struct DeadlineSweep {
    broker: Arc<dyn Calls>,
    metrics: Arc<JobMetrics>,
}

impl DeadlineSweep {
    /// The sweep over `broker`.
    pub fn new(broker: Arc<dyn Calls>, metrics: Arc<JobMetrics>) -> Self {
        DeadlineSweep { broker, metrics }
    }

    /// Sweeps every second until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        every(&shutdown, || self.once()).await;
    }

    async fn once(&self) {
        let records = match self.broker.sweep_deadlines().await {
            Ok(r) => r,
            Err(e) => return tracing::debug!(error = %e, "deadline sweep skipped"),
        };
        for r in records {
            self.metrics.swept.inc();
            tracing::info!(tenant = %r.binding.conv.tenant, call_id = %r.binding.id, "orphaned call timed out by the deadline sweep");
            self.trace(&r).await;
            count(&self.metrics, &Change::Call(r));
        }
    }

    /// With tracing on, a swept call that was traced gets `timeout {tool}`, linked to its
    /// trace (the agent's node that would have timed it out inside the call's span is gone).
    async fn trace(&self, r: &toolmark_broker::CallRecord) {
        if !toolmark_process::telemetry::tracing_on() {
            return;
        }
        let b = &r.binding;
        let Ok(Some(traceparent)) = self.broker.call_trace(&b.conv, &b.id).await else {
            return;
        };
        if let Some(mut span) = toolmark_process::telemetry::LinkedSpan::start(
            format!("timeout {}", b.tool),
            false,
            &traceparent,
            vec![
                ("gen_ai.tool.name", b.tool.clone()),
                ("toolmark.tenant", b.conv.tenant.clone()),
                ("toolmark.call.id", b.id.clone()),
            ],
        ) {
            span.fail("timeout");
        }
    }
}

/// Expires the confirmations of pages that are gone (D23); the broker records each one's
/// `confirmation.resolved` with `confirmation_expired`.
#[derive(Debug)]
pub struct ConfirmationExpiry {
    broker: Arc<dyn Confirmations>,
    metrics: Arc<JobMetrics>,
}

impl ConfirmationExpiry {
    /// The sweep over `broker`.
    pub fn new(broker: Arc<dyn Confirmations>, metrics: Arc<JobMetrics>) -> Self {
        ConfirmationExpiry { broker, metrics }
    }

    /// Sweeps every second until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        every(&shutdown, || self.once()).await;
    }

    async fn once(&self) {
        let expired = match self
            .broker
            .expire_abandoned_confirmations(CONFIRM_ABANDON_GRACE)
            .await
        {
            Ok(e) => e,
            Err(e) => return tracing::debug!(error = %e, "confirmation sweep skipped"),
        };
        for b in expired {
            self.metrics.confirmations_expired.inc();
            tracing::info!(tenant = %b.conv.tenant, confirm_id = %b.confirm_id, "confirmation of a gone page expired");
            count(
                &self.metrics,
                &Change::Confirmation {
                    binding: b,
                    outcome: toolmark_broker::expired_confirmation(),
                },
            );
        }
    }
}

/// Runs `once` every [`EVERY`] until `shutdown`; a round in progress is finished.
async fn every<F, Fut>(shutdown: &CancellationToken, once: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => once().await,
        }
    }
}

/// Counts the events a swept change announced (the broker recorded them with the change).
fn count(metrics: &JobMetrics, change: &Change) {
    for a in change.events() {
        metrics.events.get_or_create(&metrics::kind(a.kind)).inc();
    }
}
