//! The `storm` scenario: pages on one node, agent calls through another at a fixed rate, then
//! the first node is drained (SIGTERM). Every page is closed with 1001 and reconnects to the
//! other node with its clientId; the run measures how long until every page is back and how
//! every call ended. A page whose socket breaks without a 1001 comes back too (as a real page
//! does), counted as `abrupt`. A call is lost when it does not end with the page's answer or the
//! gateway's `{"status":"timeout"}` (a transport error, an HTTP error, a wrong outcome).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::task::TaskTracker;

use crate::agent::{Agent, Ending};
use crate::calls::manifests_visible;
use crate::cli::{Common, StormArgs};
use crate::driver::{self, Plan};
use crate::error::LoadError;
use crate::fleet::Fleet;
use crate::latency::{Recorder, Summary};
use crate::page::Fallback;
use crate::report;
use crate::target::Target;
use crate::token::Minter;

/// How long after the drain the run waits for pages at most, beyond the goal.
const BACK_SLACK: Duration = Duration::from_secs(20);

/// How the calls of the run ended.
#[derive(Debug, Default)]
struct Endings {
    answered: u64,
    timed_out: u64,
    lost: BTreeMap<String, u64>,
}

/// Runs the scenario and prints its JSON line and summary.
pub async fn run(args: StormArgs) -> Result<(), LoadError> {
    let draining = Arc::new(Target::resolve(&args.common).await?);
    let other = Arc::new(
        Target::resolve(&Common {
            url: args.fallback_url.clone(),
            ..args.common.clone()
        })
        .await?,
    );
    let minter = Minter::new(&draining.tenant, &args.common.token_secret)?;
    let pages = args.pages as usize;
    let agent = Agent::new(other.clone(), &args.api_key, pages)?;
    let fallback = Fallback {
        target: other,
        jitter: Duration::from_millis(args.jitter_ms),
    };
    let fleet = Fleet::launch(
        draining,
        Some(fallback),
        &minter,
        pages,
        args.common.ramp_per_sec,
    )?;
    let outcome = storm(&fleet, &agent, &args).await;
    fleet.stop().await;
    outcome
}

/// Drives the storm once the fleet is up: calls, the drain, the wait for the pages, the report.
async fn storm(fleet: &Fleet, agent: &Agent, args: &StormArgs) -> Result<(), LoadError> {
    fleet.ready().await?;
    manifests_visible(fleet, agent).await?;
    let pages = fleet.client_ids.len();
    eprintln!(
        "storm: {} calls/s through the other node; draining pid {} in {} s",
        args.rate, args.drain_pid, args.before_secs
    );
    let endings = Arc::new(Mutex::new(Endings::default()));
    let recorder = Arc::new(Recorder::default());
    let calls = spawn_calls(agent, args, &endings, &recorder);
    tokio::time::sleep(Duration::from_secs(args.before_secs)).await;
    let drained_at = Instant::now();
    drain(args.drain_pid)?;
    let goal = Duration::from_secs(args.back_within_secs);
    wait_for_pages(fleet, pages, drained_at + goal + BACK_SLACK).await;
    let returns = Returns::read(fleet, drained_at);
    eprintln!(
        "storm: {} of {} pages back; waiting for the last calls",
        returns.back, returns.away
    );
    let driven = calls
        .await
        .map_err(|e| LoadError::Local(format!("call driver: {e}")))?;
    let endings = std::mem::take(
        &mut *endings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let outcome = Outcome {
        pages,
        goal,
        returns,
        driven,
        endings,
        summary: recorder.summary(),
    };
    let line = outcome.line(fleet, args);
    let human = outcome.human(fleet);
    report::emit(&line, &human)?;
    outcome.verdict(fleet)
}

/// Waits until every page has gone away and come back (or dropped), or until `deadline`.
async fn wait_for_pages(fleet: &Fleet, pages: usize, deadline: Instant) {
    loop {
        let (away, back) = fleet.tally.away_and_back();
        if away + fleet.tally.counts().dropped >= pages && back == away {
            break;
        }
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Where the pages stood when the wait ended; times in ms since the drain, sorted.
#[derive(Debug)]
struct Returns {
    away: usize,
    back: usize,
    away_ms: Vec<u64>,
    back_ms: Vec<u64>,
}

impl Returns {
    /// Reads the fleet's tally now.
    fn read(fleet: &Fleet, drained_at: Instant) -> Self {
        let (away, back) = fleet.tally.away_and_back();
        let back_ms = millis_since(drained_at, &fleet.tally.back_instants());
        let away_ms = millis_since(drained_at, &fleet.tally.away_instants());
        Self {
            away,
            back,
            away_ms,
            back_ms,
        }
    }
}

/// Milliseconds from `start` to each of `instants`, sorted.
fn millis_since(start: Instant, instants: &[Instant]) -> Vec<u64> {
    let mut ms: Vec<u64> = instants
        .iter()
        .map(|t| u64::try_from((*t - start).as_millis()).unwrap_or(u64::MAX))
        .collect();
    ms.sort_unstable();
    ms
}

/// The value at quantile `q` of the sorted `ms`, 0 when there is none.
fn pick(ms: &[u64], q: f64) -> u64 {
    let i = ((ms.len() as f64 * q).ceil() as usize).saturating_sub(1);
    ms.get(i).copied().unwrap_or(0)
}

/// Everything the run measured, once the last call has ended.
#[derive(Debug)]
struct Outcome {
    pages: usize,
    goal: Duration,
    returns: Returns,
    driven: driver::Driven,
    endings: Endings,
    summary: Summary,
}

impl Outcome {
    /// Calls lost, any reason.
    fn lost(&self) -> u64 {
        self.endings.lost.values().sum()
    }

    /// When the last page came back, if every page did.
    fn all_back_ms(&self) -> Option<u64> {
        let returns = &self.returns;
        (returns.back == self.pages).then(|| returns.back_ms.last().copied().unwrap_or(0))
    }

    /// The JSON line.
    fn line(&self, fleet: &Fleet, args: &StormArgs) -> Value {
        let (returns, endings) = (&self.returns, &self.endings);
        json!({
            "scenario": "storm",
            "pages": self.pages,
            "went_away": returns.away,
            "abrupt": fleet.tally.abrupt(),
            "dropped": fleet.tally.counts().dropped,
            "came_back": returns.back,
            "away_p50_ms": pick(&returns.away_ms, 0.5),
            "all_away_ms": returns.away_ms.last().copied(),
            "all_back_ms": self.all_back_ms(),
            "back_p50_ms": pick(&returns.back_ms, 0.5),
            "back_p99_ms": pick(&returns.back_ms, 0.99),
            "jitter_ms": args.jitter_ms,
            "back_within_goal_ms": self.goal.as_millis() as u64,
            "rate": args.rate,
            "call_timeout_ms": args.call_timeout_ms,
            "sent": self.driven.sent,
            "skipped": self.driven.skipped,
            "answered": endings.answered,
            "timed_out": endings.timed_out,
            "lost": self.lost(),
            "lost_reasons": endings.lost,
            "answered_p50_us": self.summary.corrected.p50,
            "answered_p99_us": self.summary.corrected.p99,
        })
    }

    /// The summary line for people.
    fn human(&self, fleet: &Fleet) -> String {
        let (pages, back, lost) = (self.pages, self.returns.back, self.lost());
        let all_back = self.all_back_ms();
        format!(
            "storm: {pages} pages drained ({} without a 1001 close), {back} back on the other node, all back {}; calls: {} sent, {} answered, {} timed out, {lost} lost, {} skipped",
            fleet.tally.abrupt(),
            all_back.map_or_else(|| "never".to_owned(), |ms| format!("after {ms} ms")),
            self.driven.sent,
            self.endings.answered,
            self.endings.timed_out,
            self.driven.skipped,
        )
    }

    /// Fails the run when a page did not come back in time or a call was lost or skipped.
    fn verdict(&self, fleet: &Fleet) -> Result<(), LoadError> {
        let (pages, back, lost) = (self.pages, self.returns.back, self.lost());
        let (goal, driven) = (self.goal, self.driven);
        let reasons = fleet.tally.reasons();
        match self.all_back_ms() {
            None => Err(LoadError::Pages(format!(
                "{back} of {pages} pages came back; {reasons}"
            ))),
            Some(ms) if ms > goal.as_millis() as u64 => Err(LoadError::Pages(format!(
                "every page back only after {ms} ms (goal {} ms)",
                goal.as_millis()
            ))),
            Some(_) if lost > 0 || driven.skipped > 0 => Err(LoadError::Gateway(format!(
                "{lost} calls lost, {} skipped",
                driven.skipped
            ))),
            Some(_) => Ok(()),
        }
    }
}

/// Drives the calls for the whole storm (before and after the drain) on a thread of its own.
fn spawn_calls(
    agent: &Agent,
    args: &StormArgs,
    endings: &Arc<Mutex<Endings>>,
    recorder: &Arc<Recorder>,
) -> tokio::task::JoinHandle<driver::Driven> {
    let plan = Plan {
        rate: args.rate,
        total: u64::from(args.rate) * (args.before_secs + args.after_secs),
        max_in_flight: args.max_in_flight as usize,
    };
    let pages = args.pages as u64;
    let timeout_ms = args.call_timeout_ms;
    let runtime = tokio::runtime::Handle::current();
    let (agent, endings, recorder) = (agent.clone(), endings.clone(), recorder.clone());
    tokio::task::spawn_blocking(move || {
        let tasks = TaskTracker::new();
        let driven = driver::drive(plan, &runtime, &tasks, |i, due| {
            let (agent, endings, recorder) = (agent.clone(), endings.clone(), recorder.clone());
            async move {
                let sent = Instant::now();
                let index = usize::try_from(i % pages).unwrap_or(0);
                let ending = agent.echo_with_deadline(index, i, timeout_ms).await;
                let mut e = endings
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match ending {
                    Ending::Answered => {
                        let now = Instant::now();
                        recorder.ok(now - due, now - sent);
                        e.answered += 1;
                    }
                    Ending::TimedOut => e.timed_out += 1,
                    Ending::Lost(reason) => *e.lost.entry(reason).or_default() += 1,
                }
            }
        });
        tasks.close();
        runtime.block_on(tasks.wait());
        driven
    })
}

/// Sends SIGTERM to the node to drain (through `kill`, which every Linux has).
fn drain(pid: u32) -> Result<(), LoadError> {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .map_err(|e| LoadError::Local(format!("kill -TERM {pid}: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(LoadError::Local(format!("kill -TERM {pid}: {status}")))
    }
}
