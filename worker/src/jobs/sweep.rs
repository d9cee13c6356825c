//! The two sweeps: deadlines nobody is left to enforce, and confirmations of pages that are
//! gone. Each runs every second; the broker makes sure each call or confirmation is swept once,
//! whichever process runs the sweep.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use toolmark_broker::{CONFIRM_ABANDON_GRACE, ConvKey, EventType, Outcome, SharedBroker};

use super::metrics::{self, JobMetrics};

/// How often each sweep runs.
const EVERY: Duration = Duration::from_secs(1);

/// Times out calls whose deadline passed with nobody left to do it and announces them
/// (`call.timeout`, or `call.result` for an async call), sending the page its `cancel`.
#[derive(Debug)]
pub struct DeadlineSweep {
    broker: SharedBroker,
    metrics: Arc<JobMetrics>,
}

impl DeadlineSweep {
    /// The sweep over `broker`.
    pub fn new(broker: SharedBroker, metrics: Arc<JobMetrics>) -> Self {
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
            let outcome = r.outcome.clone().unwrap_or(Outcome::Timeout);
            for (kind, data) in toolmark_broker::outcome_events(&r.binding, &outcome) {
                let once = toolmark_broker::call_event_name(kind, &r.binding.id);
                emit(
                    &self.broker,
                    &self.metrics,
                    kind,
                    &r.binding.conv,
                    data,
                    &once,
                )
                .await;
            }
        }
    }
}

/// Expires the confirmations of pages that are gone (D23) and announces each as a
/// `confirmation.resolved` with `confirmation_expired`.
#[derive(Debug)]
pub struct ConfirmationExpiry {
    broker: SharedBroker,
    metrics: Arc<JobMetrics>,
}

impl ConfirmationExpiry {
    /// The sweep over `broker`.
    pub fn new(broker: SharedBroker, metrics: Arc<JobMetrics>) -> Self {
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
            let data =
                toolmark_broker::confirmation_event(&b, &toolmark_broker::expired_confirmation());
            let once = toolmark_broker::confirmation_event_name(&b.conv, &b.confirm_id);
            emit(
                &self.broker,
                &self.metrics,
                EventType::ConfirmationResolved,
                &b.conv,
                data,
                &once,
            )
            .await;
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

/// How long a sweep asks the broker again for an event whose emission it did not hear of: the
/// change it announces is made and will not be swept again.
const EMIT_HOLD: Duration = Duration::from_secs(30);

/// Emits the event of a swept change once under `once`, asking again (for up to
/// [`EMIT_HOLD`]) while the broker does not answer.
async fn emit(
    broker: &SharedBroker,
    metrics: &JobMetrics,
    kind: EventType,
    conv: &ConvKey,
    data: serde_json::Value,
    once: &str,
) {
    let until = std::time::Instant::now() + EMIT_HOLD;
    let emitted = toolmark_broker::retry::until_answered(
        until,
        |_| true,
        |_| broker.emit_once(&conv.tenant, kind, conv, data.clone(), once),
    )
    .await;
    match emitted {
        Ok(Some(_)) => {
            metrics.events.get_or_create(&metrics::kind(kind)).inc();
        }
        Ok(None) => {}
        Err(e) => {
            tracing::error!(tenant = %conv.tenant, user = %conv.user, conversation = %conv.conversation, event = kind.as_str(), error = %e, "event not emitted: the broker did not answer within 30 s");
        }
    }
}
