//! Model-based property test of the two rules the Redis scripts write again in Lua beside the
//! model, and the memory broker runs from it: a tenant's call rate (`model::Gcra`) and event
//! retention (`model::events_to_trim`). Runs on memory, Redis and Redis Cluster.
//!
//! - Rates: random sequences of bursts of calls (two tenants of random rates, through two
//!   nodes sharing one state) and waits that let the buckets refill, each call's decision and
//!   wait checked against the model. The broker decides on its own clock (Redis `TIME`, the
//!   memory broker's monotonic clock), which the test reads before and after each call: a
//!   decision the model makes the same at both bounds must be the broker's; one at a refill's
//!   boundary (the bounds disagree) may go either way, and what it was narrows what the test
//!   knows of the bucket. So a stalled machine widens the bounds and never fails the test.
//! - Retention: random sequences of events of random sizes emitted through either node, with a
//!   small random bound in count and in bytes: after each, the tenant's log holds exactly the
//!   events the model keeps, in order.
//!
//! Failing cases are kept in `proptest-regressions/`.

use std::time::{Duration, Instant, SystemTime};

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use serde_json::json;
use toolmark_broker::model::{self, Gcra};
use toolmark_broker::{ConvKey, Event, EventType, Retention, SharedBroker, TakeError};

use crate::support::{Backend, Nodes, short};

/// What the test knows of one tenant's bucket: its theoretical arrival time is in `lo..=hi`,
/// µs of the test's reading of the broker's clock (0: full).
#[derive(Debug, Clone, Copy, Default)]
struct Tat {
    lo: u64,
    hi: u64,
}

impl Tat {
    /// Checks a call decided at a time in `now` (`lo..=hi`, µs) against the model: `got` is
    /// `Ok` (allowed) or the wait it was refused with. Then narrows what is known of the
    /// bucket to what the decision tells.
    fn call(&mut self, g: Gcra, now: (u64, u64), got: Result<(), Duration>) -> Result<(), String> {
        let tol = g.tolerance_us;
        match got {
            Ok(()) => {
                // Allowed at the best of the bounds (earliest `tat`, latest now)?
                if g.take(Some(self.lo), now.1, 1, 0).taken == 0 {
                    return Err(format!(
                        "allowed; the model refuses at {now:?} with {self:?}"
                    ));
                }
                // Allowed means now + tolerance ≥ tat: of the times and buckets within the
                // bounds, those that allow it take the bucket from here.
                let earliest = now.0.max(self.lo.saturating_sub(tol));
                let latest_tat = self.hi.min(now.1 + tol);
                let (a, b) = (
                    g.take(Some(self.lo), earliest, 1, 0),
                    g.take(Some(latest_tat), now.1, 1, 0),
                );
                assert_eq!((a.taken, b.taken), (1, 1), "both bounds allow");
                *self = Tat {
                    lo: a.tat_us,
                    hi: b.tat_us,
                };
            }
            Err(wait) => {
                // Refused at the worst of the bounds (latest `tat`, earliest now)?
                if g.take(Some(self.hi), now.0, 1, 0).taken == 1 {
                    return Err(format!(
                        "refused; the model allows at {now:?} with {self:?}"
                    ));
                }
                // Refused with `wait` means tat = now + tolerance + wait, which changes not.
                let wait = u64::try_from(wait.as_micros()).unwrap();
                let lo = self.lo.max(now.0 + tol + wait);
                let hi = self.hi.min(now.1 + tol + wait);
                if wait == 0 || lo > hi {
                    return Err(format!(
                        "refused with a wait of {wait} µs, which the model gives at no time of \
                         {now:?} with {self:?}"
                    ));
                }
                let t = g.take(Some(lo), lo - tol - wait, 1, 0);
                assert_eq!(
                    (t.taken, t.wait_us),
                    (0, wait),
                    "the model refuses with that wait"
                );
                *self = Tat { lo, hi };
            }
        }
        Ok(())
    }
}

/// How the test reads the clock a backend's rate decides with, in µs: the memory broker reads
/// this process's monotonic clock, Redis the host's wall clock (`TIME`, a server on this host).
/// Only differences matter (a bucket starts full at its first call).
#[derive(Debug, Clone, Copy)]
enum Clock {
    Monotonic(Instant),
    Wall,
}

impl Clock {
    fn now_us(self) -> u64 {
        let d = match self {
            Clock::Monotonic(origin) => origin.elapsed(),
            Clock::Wall => SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap(),
        };
        u64::try_from(d.as_micros()).unwrap()
    }
}

#[derive(Debug, Clone)]
enum RateOp {
    /// `n` calls of tenant `tenant` back to back, through node `node`.
    Calls { node: usize, tenant: usize, n: u32 },
    /// Calls of tenant `tenant` back to back through node `node` until one is refused: the
    /// bucket is spent, whatever it held.
    Drain { node: usize, tenant: usize },
    /// Nothing for `ms`: the buckets refill.
    Wait { ms: u64 },
}

/// The rates, burst sizes and waits a backend is tried with: slow enough that a call's own
/// latency on a quiet machine is a small part of an interval (most decisions are then
/// unambiguous), fast enough that the waits cross several refills and a case takes well
/// under a second.
struct Scale {
    per_second: std::ops::RangeInclusive<u32>,
    calls: std::ops::RangeInclusive<u32>,
    wait_ms: std::ops::RangeInclusive<u64>,
}

fn scale(backend: Backend) -> Scale {
    match backend {
        Backend::Memory => Scale {
            per_second: 100..=1000,
            calls: 1..=600,
            wait_ms: 0..=25,
        },
        Backend::Redis | Backend::Cluster => Scale {
            per_second: 10..=100,
            calls: 1..=60,
            wait_ms: 0..=120,
        },
    }
}

fn rate_case(s: &Scale) -> impl Strategy<Value = ([u32; 2], Vec<RateOp>)> {
    let op = prop_oneof![
        3 => (0..2usize, 0..2usize, prop_oneof![1..=8u32, s.calls.clone()])
            .prop_map(|(node, tenant, n)| RateOp::Calls { node, tenant, n }),
        1 => (0..2usize, 0..2usize).prop_map(|(node, tenant)| RateOp::Drain { node, tenant }),
        2 => s.wait_ms.clone().prop_map(|ms| RateOp::Wait { ms }),
    ];
    (
        [s.per_second.clone(), s.per_second.clone()],
        prop::collection::vec(op, 1..12),
    )
}

/// One case of rates on `nodes`, for two tenants of its own (`case`).
async fn rates(
    nodes: &[SharedBroker],
    clock: Clock,
    case: u32,
    per_second: [u32; 2],
    ops: Vec<RateOp>,
) -> Result<(), TestCaseError> {
    let tenants = [format!("r{case}a"), format!("r{case}b")];
    let mut known = [Tat::default(); 2];
    for (i, op) in ops.into_iter().enumerate() {
        let (node, tenant, n, drain) = match op {
            RateOp::Wait { ms } => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                continue;
            }
            RateOp::Calls { node, tenant, n } => (node, tenant, n, false),
            // Refused by the model before that, at any pace (a burst refills in 2 s).
            RateOp::Drain { node, tenant } => (
                node,
                tenant,
                4 * model::burst(per_second[tenant]) + 16,
                true,
            ),
        };
        let g = Gcra::per_second(per_second[tenant]);
        for call in 0..n {
            // A µs either side: the broker's reading and the test's are rounded apart.
            let before = clock.now_us().saturating_sub(1);
            let got = nodes[node % nodes.len()]
                .take_call(&tenants[tenant], per_second[tenant])
                .await;
            let after = clock.now_us() + 1;
            let got = match got {
                Ok(()) => Ok(()),
                Err(TakeError::Limited(r)) => Err(r.retry_after),
                Err(TakeError::Broker(e)) => panic!("broker error: {e}"),
            };
            let (seen, refused) = (format!("{got:?}"), got.is_err());
            known[tenant].call(g, (before, after), got).map_err(|why| {
                TestCaseError::fail(format!(
                    "op {i}, call {call} of tenant {tenant} ({} /s): {seen}: {why}",
                    per_second[tenant]
                ))
            })?;
            if drain && refused {
                break;
            }
            prop_assert!(!drain || call + 1 < n, "op {}: never refused", i);
        }
    }
    Ok(())
}

/// The bytes of an event the broker counts against `event_bytes_per_tenant`: the memory
/// broker its fields, Redis the body it stores in the stream.
fn counted_bytes(backend: Backend, e: &Event) -> u64 {
    let len = match backend {
        Backend::Memory => {
            e.id.len()
                + e.timestamp.len()
                + e.user.len()
                + e.conversation.len()
                + e.data.to_string().len()
        }
        Backend::Redis | Backend::Cluster => json!({
            "type": e.kind,
            "timestamp": e.timestamp,
            "user": e.user,
            "conversation": e.conversation,
            "data": e.data,
        })
        .to_string()
        .len(),
    };
    len as u64
}

#[derive(Debug, Clone)]
struct Emit {
    node: usize,
    kind: usize,
    pad: usize,
}

fn event_case() -> impl Strategy<Value = (u64, u64, Vec<Emit>)> {
    let emit = (0..2usize, 0..EventType::ALL.len(), 0..400usize)
        .prop_map(|(node, kind, pad)| Emit { node, kind, pad });
    (1..8u64, 60..2500u64, prop::collection::vec(emit, 1..30))
}

/// One case of retention: `emits` through `nodes`, whose retention is `retention`, checked
/// after each against the events the model keeps.
async fn retention(
    backend: Backend,
    nodes: &[SharedBroker],
    retention: &Retention,
    emits: Vec<Emit>,
) -> Result<(), TestCaseError> {
    let conv = ConvKey::new("t", "u", "c");
    // (id, bytes) of the events the model keeps, oldest first, and their bytes.
    let mut kept: Vec<(String, u64)> = Vec::new();
    let mut bytes = 0;
    for (i, e) in emits.into_iter().enumerate() {
        let node = &nodes[e.node % nodes.len()];
        let data = json!({"i": i, "pad": "x".repeat(e.pad)});
        let event = node
            .emit("t", EventType::ALL[e.kind], &conv, data)
            .await
            .unwrap();
        prop_assert!(!event.held_for_webhooks, "no webhook holds events here");
        let size = counted_bytes(backend, &event);
        kept.push((event.id.clone(), size));
        bytes += size;
        let drop = model::events_to_trim(kept.iter().map(|k| k.1), bytes, retention);
        for (_, size) in kept.drain(..drop) {
            bytes -= size;
        }
        let log = nodes[0].retained("t", "0-0").await.unwrap();
        let got: Vec<&str> = log.iter().map(|e| e.id.as_str()).collect();
        let want: Vec<&str> = kept.iter().map(|k| k.0.as_str()).collect();
        prop_assert_eq!(got, want, "after event {} ({} bytes)", i, size);
    }
    Ok(())
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        ))),
        source_file: Some(file!()),
        ..Config::default()
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Two nodes sharing one state of `backend` (the memory broker is one node).
async fn two_nodes(backend: Backend, retention: Retention) -> (Nodes, Vec<SharedBroker>) {
    let mut nodes = Nodes::new(backend, retention);
    let (n1, _) = nodes.node("n1").await;
    let (n2, _) = nodes.node("n2").await;
    (nodes, vec![n1, n2])
}

fn check_rates(backend: Backend, cases: u32) {
    let rt = runtime();
    // One pair of nodes for every case; each case has tenants of its own.
    let (_nodes, brokers) = rt.block_on(two_nodes(backend, short()));
    let clock = match backend {
        Backend::Memory => Clock::Monotonic(Instant::now()),
        Backend::Redis | Backend::Cluster => Clock::Wall,
    };
    let case = std::cell::Cell::new(0);
    let result = runner(cases).run(&rate_case(&scale(backend)), |(per_second, ops)| {
        case.set(case.get() + 1);
        rt.block_on(rates(&brokers, clock, case.get(), per_second, ops))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

fn check_retention(backend: Backend, cases: u32) {
    let rt = runtime();
    let result = runner(cases).run(&event_case(), |(count, bytes, emits)| {
        rt.block_on(async {
            let r = Retention {
                events_per_tenant: count,
                event_bytes_per_tenant: bytes,
                ..short()
            };
            let (_nodes, brokers) = two_nodes(backend, r).await;
            let result = retention(backend, &brokers, &r, emits).await;
            for b in brokers {
                b.close().await;
            }
            result
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn memory_rates_follow_the_model() {
    check_rates(Backend::Memory, 64);
}

#[test]
fn redis_rates_follow_the_model() {
    check_rates(Backend::Redis, 24);
}

#[test]
fn redis_cluster_rates_follow_the_model() {
    check_rates(Backend::Cluster, 16);
}

#[test]
fn memory_event_retention_follows_the_model() {
    check_retention(Backend::Memory, 64);
}

#[test]
fn redis_event_retention_follows_the_model() {
    check_retention(Backend::Redis, 32);
}

#[test]
fn redis_cluster_event_retention_follows_the_model() {
    check_retention(Backend::Cluster, 24);
}
