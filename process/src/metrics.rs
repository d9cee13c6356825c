//! The generic metrics pieces every process exposing `/metrics` uses: a registry that remembers
//! its families ([`Catalogued`], for the docs check), `toolmark_build_info`
//! ([`register_build_info`]) and the Redis script latencies ([`RedisScripts`]), fed by the
//! broker. Each process's own families stay with it (the gateway's, the jobs').

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Metric, Registry};

/// A registry that also remembers the families registered in it, with their types: the text
/// exposition leaves out a labelled family until its first sample, and the docs check
/// (`testkit/tests/docs.rs`) needs every one.
#[derive(Debug, Default)]
pub struct Catalogued {
    registry: Registry,
    families: Vec<(&'static str, &'static str)>,
}

impl Catalogued {
    /// Registers `metric` as `name`.
    pub fn register<M: Metric + TypedMetric>(&mut self, name: &'static str, help: &str, metric: M) {
        let kind = match M::TYPE {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::Info => "info",
            MetricType::Unknown => "unknown",
        };
        self.families.push((name, kind));
        self.registry.register(name, help, metric);
    }

    /// The families registered, as `(name, type)`.
    pub fn families(&self) -> &[(&'static str, &'static str)] {
        &self.families
    }

    /// The registry, for encoding.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

/// Metrics a process exposes beside its own on one `/metrics`: a gateway running the jobs
/// shows theirs after its own, naming only this trait, not the jobs' types.
pub trait Exposed: Send + Sync + std::fmt::Debug {
    /// Appends the metrics' text exposition, without the closing `# EOF`.
    fn encode_into(&self, out: &mut String);
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    revision: &'static str,
}

/// Registers `toolmark_build_info{version,revision}` (always 1): which build a process runs.
pub fn register_build_info(registry: &mut Catalogued) {
    let info = Family::<BuildLabels, Gauge>::default();
    info.get_or_create(&BuildLabels {
        version: crate::VERSION,
        revision: crate::REVISION,
    })
    .set(1);
    registry.register(
        "toolmark_build_info",
        "The version and the commit of this process's build (always 1)",
        info,
    );
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScriptLabel {
    script: &'static str,
}

/// `toolmark_redis_script_duration_seconds{script}`: the round trip of each Redis script a
/// process's broker runs, fed by the broker's `CommandObserver`.
#[derive(Debug, Clone)]
pub struct RedisScripts(Family<ScriptLabel, Histogram, fn() -> Histogram>);

impl RedisScripts {
    /// Registers the family in `registry`.
    pub fn register(registry: &mut Catalogued) -> Self {
        fn buckets() -> Histogram {
            Histogram::new([
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
                2.0,
            ])
        }
        let family = Family::<ScriptLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            buckets as fn() -> Histogram,
        );
        registry.register(
            "toolmark_redis_script_duration_seconds",
            "Round trip of each Redis script the broker runs (calls, results, presence, rates, events), by script",
            family.clone(),
        );
        RedisScripts(family)
    }

    /// Records one round trip.
    pub fn observe(&self, script: &'static str, seconds: f64) {
        self.0
            .get_or_create(&ScriptLabel { script })
            .observe(seconds);
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: &'static str,
}

/// The admin store's figures (`admin.store` a database): each operation's latency and the
/// ones it did not answer, by operation, and how old the node's copy of the records is.
#[derive(Debug, Clone)]
pub struct AdminStore {
    duration: Family<OpLabel, Histogram, fn() -> Histogram>,
    errors: Family<OpLabel, prometheus_client::metrics::counter::Counter>,
    age: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl AdminStore {
    /// Registers the families in `registry`.
    pub fn register(registry: &mut Catalogued) -> Self {
        fn buckets() -> Histogram {
            Histogram::new([
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ])
        }
        let duration = Family::<OpLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            buckets as fn() -> Histogram,
        );
        let errors = Family::<OpLabel, prometheus_client::metrics::counter::Counter>::default();
        let age = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "toolmark_admin_store_duration_seconds",
            "Round trip of each operation on the admin store's database (records, revision, put, remove, audit), by operation",
            duration.clone(),
        );
        registry.register(
            "toolmark_admin_store_errors",
            "Operations on the admin store's database that did not answer (an error or no answer within 5 s), by operation",
            errors.clone(),
        );
        registry.register(
            "toolmark_admin_snapshot_age_seconds",
            "How long ago this node last read the admin store's records (-1 while it never did since it started)",
            age.clone(),
        );
        AdminStore {
            duration,
            errors,
            age,
        }
    }

    /// Records one operation.
    pub fn observe(&self, op: &'static str, took: std::time::Duration, answered: bool) {
        let label = OpLabel { op };
        self.duration
            .get_or_create(&label)
            .observe(took.as_secs_f64());
        if !answered {
            self.errors.get_or_create(&label).inc();
        }
    }

    /// Sets how old the node's records are (`None`: never read).
    pub fn set_age(&self, age: Option<std::time::Duration>) {
        self.age.set(age.map_or(-1.0, |a| a.as_secs_f64()));
    }
}
