//! Metrics of the background jobs (webhook delivery, the sweeps), exposed on `/metrics` by
//! whichever process runs the jobs.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use toolmark_process::metrics::{Catalogued, RedisScripts, register_build_info};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TenantLabel {
    pub tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct EventLabel {
    pub r#type: &'static str,
}

/// The label of an event type.
pub(crate) fn kind(kind: toolmark_broker::EventType) -> EventLabel {
    EventLabel {
        r#type: kind.as_str(),
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FailureLabels {
    pub tenant: String,
    pub status: String,
}

/// Webhook and sweep metrics.
#[derive(Debug)]
pub struct JobMetrics {
    registry: Catalogued,
    /// Conversations with events waiting for a retry, per tenant.
    pub(crate) queue_depth: Family<TenantLabel, Gauge>,
    /// Delivery attempts.
    pub(crate) attempts: Family<TenantLabel, Counter>,
    /// Successful deliveries.
    pub(crate) delivered: Family<TenantLabel, Counter>,
    /// Failed attempts by HTTP status (`timeout`, `connect` for no answer).
    pub(crate) failures: Family<FailureLabels, Counter>,
    /// Events moved to the dead letters.
    pub(crate) dead_letters: Family<TenantLabel, Counter>,
    /// From an event's emission to its successful delivery, seconds.
    pub(crate) delivery_latency: Histogram,
    /// Calls timed out by the deadline sweep.
    pub swept: Counter,
    /// Confirmations of gone pages expired by the confirmation sweep.
    pub confirmations_expired: Counter,
    /// Events the sweeps emitted, by type.
    pub(crate) events: Family<EventLabel, Counter>,
    /// The worker's Redis script latencies (`for_worker` only: a gateway has its own).
    pub redis_scripts: Option<RedisScripts>,
}

impl Default for JobMetrics {
    fn default() -> Self {
        let mut m = JobMetrics {
            registry: Catalogued::default(),
            queue_depth: Family::default(),
            attempts: Family::default(),
            delivered: Family::default(),
            failures: Family::default(),
            dead_letters: Family::default(),
            delivery_latency: Histogram::new([
                0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0, 3600.0, 86_400.0,
            ]),
            swept: Counter::default(),
            confirmations_expired: Counter::default(),
            events: Family::default(),
            redis_scripts: None,
        };
        let r = &mut m.registry;
        r.register(
            "toolmark_webhook_queue_depth",
            "Conversations with events waiting for a retry",
            m.queue_depth.clone(),
        );
        r.register(
            "toolmark_webhook_attempts",
            "Webhook delivery attempts",
            m.attempts.clone(),
        );
        r.register(
            "toolmark_webhook_delivered",
            "Webhook events delivered",
            m.delivered.clone(),
        );
        r.register(
            "toolmark_webhook_failures",
            "Failed webhook attempts by HTTP status",
            m.failures.clone(),
        );
        r.register(
            "toolmark_webhook_dead_letters",
            "Webhook events moved to the dead letters",
            m.dead_letters.clone(),
        );
        r.register(
            "toolmark_webhook_delivery_seconds",
            "From an event's emission to its delivery",
            m.delivery_latency.clone(),
        );
        r.register(
            "toolmark_deadline_sweeps",
            "Calls timed out by the deadline sweep",
            m.swept.clone(),
        );
        r.register(
            "toolmark_confirmations_expired",
            "Confirmations of gone pages expired by the confirmation sweep",
            m.confirmations_expired.clone(),
        );
        r.register(
            "toolmark_job_events",
            "Events emitted by the sweeps, by type",
            m.events.clone(),
        );
        m
    }
}

impl JobMetrics {
    /// The jobs' metrics of a `toolmark-worker`, which exposes them alone: with
    /// `toolmark_build_info` (a gateway running the jobs has its own).
    pub fn for_worker() -> Self {
        let mut m = Self::default();
        register_build_info(&mut m.registry);
        m.redis_scripts = Some(RedisScripts::register(&mut m.registry));
        m
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, self.registry.registry());
        out
    }

    /// Appends the metrics without the closing `# EOF`, for a process exposing them beside its
    /// own.
    pub fn encode_into(&self, out: &mut String) {
        let _ = prometheus_client::encoding::text::encode_registry(out, self.registry.registry());
    }

    /// Every family these metrics register, as `(name, type)`.
    pub fn families(&self) -> &[(&'static str, &'static str)] {
        self.registry.families()
    }
}

impl toolmark_process::metrics::Exposed for JobMetrics {
    fn encode_into(&self, out: &mut String) {
        JobMetrics::encode_into(self, out);
    }
}
