//! The `calls` scenario: pages connected, their manifests visible to the agent API, then agent
//! calls on an open-loop schedule, round-robin over the pages, each round trip recorded.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::json;
use tokio_util::task::TaskTracker;

use crate::agent::{Agent, Http};
use crate::cli::{CallsArgs, Door};
use crate::driver::{self, Driven, Plan};
use crate::error::LoadError;
use crate::fleet::Fleet;
use crate::latency::{Recorder, Summary};
use crate::report;
use crate::rss::{self, Cost};
use crate::syscalls::Syscalls;
use crate::target::Target;
use crate::token::Minter;

/// How long the gateway may take to show a page's manifest to the agent API.
const MANIFEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Conversations checked at once before the run.
const CHECK_CONCURRENCY: usize = 32;

/// Runs the scenario and prints its JSON line and summary.
pub async fn run(args: CallsArgs) -> Result<(), LoadError> {
    let target = Arc::new(Target::resolve(&args.common).await?);
    let minter = Minter::new(&target.tenant, &args.common.token_secret)?;
    let pages = args.pages as usize;
    let agent_target = match &args.agent_url {
        Some(url) => {
            let common = crate::cli::Common {
                url: url.clone(),
                ..args.common.clone()
            };
            Arc::new(Target::resolve(&common).await?)
        }
        None => target.clone(),
    };
    let http = if args.http2 { Http::Two } else { Http::One };
    let mut agent = Agent::speaking(agent_target, &args.api_key, pages, http)?;
    if args.door == Door::Mcp {
        agent.mint_mcp_tokens().await?;
    }
    let fleet = Fleet::launch(target, None, &minter, pages, args.common.ramp_per_sec)?;
    let outcome = drive_calls(&fleet, &agent, &args).await;
    fleet.stop().await;
    outcome
}

async fn drive_calls(fleet: &Fleet, agent: &Agent, args: &CallsArgs) -> Result<(), LoadError> {
    fleet.ready().await?;
    manifests_visible(fleet, agent).await?;
    if args.pause_before_secs > 0 {
        eprintln!(
            "calls: pausing {} s before the first call",
            args.pause_before_secs
        );
        tokio::time::sleep(Duration::from_secs(args.pause_before_secs)).await;
    }
    eprintln!(
        "calls: {} per second for {} s over {} pages",
        args.rate, args.duration_secs, args.pages
    );
    let recorder = Arc::new(Recorder::default());
    let costs = Costs::read(args)?;
    let driven = drive(agent, args, &recorder).await?;
    let summary = recorder.summary();
    let rss = args.gateway_pid.map(rss::read_kib).transpose()?;
    let answered = fleet.tally.answered_total();
    let intact = fleet.intact();
    print(args, &driven, &summary, rss, costs, answered)?;
    if args.pause_after_secs > 0 {
        eprintln!(
            "calls: finished, pausing {} s before the pages close",
            args.pause_after_secs
        );
        tokio::time::sleep(Duration::from_secs(args.pause_after_secs)).await;
    }
    intact.map(|_| ())
}

/// What each process of the run spent over the calls: the gateway (the pages' node), the
/// agent's node when it is another, the broker, and this load generator itself (which shares
/// the machine: its share says how much of a ceiling measured here is the harness's).
struct Costs {
    /// Each process's name in the report, its readings, and its system call count when asked.
    each: Vec<(&'static str, Cost, Option<Syscalls>)>,
}

impl Costs {
    fn read(args: &CallsArgs) -> Result<Self, LoadError> {
        let pids = [
            ("gateway", args.gateway_pid),
            ("agent_gateway", args.agent_gateway_pid),
            ("redis", args.redis_pid),
            ("loadgen", Some(std::process::id())),
        ];
        let mut each = Vec::new();
        for (who, pid) in pids {
            let Some(pid) = pid else { continue };
            let counted = args.syscalls.then(|| Syscalls::start(pid)).transpose()?;
            each.push((who, Cost::read(pid)?, counted));
        }
        Ok(Self { each })
    }

    fn report(self, calls: u64, line: &mut serde_json::Value) -> Result<(), LoadError> {
        for (who, cost, counted) in self.each {
            cost.report(calls, who, "call", line)?;
            if let Some(counted) = counted {
                let per = counted.finish()? as f64 / calls.max(1) as f64;
                line[format!("{who}_syscalls_per_call")] = json!((per * 100.0).round() / 100.0);
            }
        }
        Ok(())
    }
}

/// Waits until the gateway holds every page's manifest: a call sent earlier would be `no_page`.
pub async fn manifests_visible(fleet: &Fleet, agent: &Agent) -> Result<(), LoadError> {
    let deadline = Instant::now() + MANIFEST_TIMEOUT;
    let checks = futures_util::stream::iter(fleet.client_ids.iter().enumerate())
        .map(|(index, client_id)| async move {
            loop {
                match agent.manifest_client_id(index).await {
                    Ok(Some(seen)) if seen == *client_id => return Ok(()),
                    Ok(_) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(100)).await
                    }
                    Ok(seen) => {
                        return Err(format!("page {index}: the gateway holds clientId {seen:?}"));
                    }
                    Err(e) => return Err(format!("page {index}: {e}")),
                }
            }
        })
        .buffer_unordered(CHECK_CONCURRENCY);
    let failures: Vec<String> = checks
        .filter_map(|r| async move { r.err() })
        .collect()
        .await;
    match failures.first() {
        None => Ok(()),
        Some(first) => Err(LoadError::Gateway(format!(
            "{} manifests not visible; first: {first}",
            failures.len()
        ))),
    }
}

async fn drive(
    agent: &Agent,
    args: &CallsArgs,
    recorder: &Arc<Recorder>,
) -> Result<Driven, LoadError> {
    let plan = Plan {
        rate: args.rate,
        total: args.total_calls(),
        max_in_flight: args.max_in_flight as usize,
    };
    let pages = args.pages as usize;
    let tasks = TaskTracker::new();
    let runtime = tokio::runtime::Handle::current();
    let (agent, recorder, spawner) = (agent.clone(), recorder.clone(), tasks.clone());
    let schedule = tokio::task::spawn_blocking(move || {
        driver::drive(plan, &runtime, &spawner, |i, due| {
            let (agent, recorder) = (agent.clone(), recorder.clone());
            async move {
                let sent = Instant::now();
                let index = usize::try_from(i % pages as u64).unwrap_or(0);
                match agent.echo(index, i).await {
                    Ok(()) => {
                        let answered = Instant::now();
                        recorder.ok(answered - due, answered - sent);
                    }
                    Err(reason) => recorder.error(reason),
                }
            }
        })
    });
    let driven = schedule
        .await
        .map_err(|e| LoadError::Local(format!("call driver: {e}")))?;
    tasks.close();
    tasks.wait().await;
    Ok(driven)
}

fn print(
    args: &CallsArgs,
    d: &Driven,
    s: &Summary,
    rss: Option<u64>,
    costs: Costs,
    answered: u64,
) -> Result<(), LoadError> {
    let mut line = json!({
        "rate": args.rate,
        "duration_secs": args.duration_secs,
        "pages": args.pages,
        "door": if args.door == Door::Mcp { "mcp" } else { "api" },
        "http": if args.http2 { "2" } else { "1.1" },
        "sent": d.sent,
        "ok": s.ok,
        "errors": s.errors,
        "skipped": d.skipped,
        "answered_by_pages": answered,
    });
    s.latency_fields(&mut line);
    if let Some(kib) = rss {
        line["gateway_rss_kib"] = json!(kib);
    }
    // The whole run's cost divided by its calls: the pages' pings and the schedule's idle
    // moments are counted too, as an operator's bill would.
    costs.report(d.sent, &mut line)?;
    let achieved = d.sent as f64 / d.elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
    let mut human = format!(
        "calls: {} sent at {achieved:.0}/s (target {}/s), {} ok, {} errors, {} skipped; {}",
        d.sent,
        args.rate,
        s.ok,
        s.errors,
        d.skipped,
        s.latency_text("round trip", "service time"),
    );
    if !s.reasons.is_empty() {
        let reasons: Vec<String> = s.reasons.iter().map(|(r, n)| format!("{r} ×{n}")).collect();
        human.push_str(&format!("\ncall errors: {}", reasons.join("; ")));
    }
    report::emit(&line, &human)
}
