//! The `handshakes` scenario: how long a page waits to be connected when many connect at once
//! (a reconnect storm). Opens `--pages` page sockets with at most `--concurrency` set-ups in
//! flight, times each from the TCP connect to the WebSocket upgrade's answer, and keeps every
//! socket open until the last is set up, so that the gateway holds them all. A set-up past
//! 900 ms is counted apart: that is the signature of a dropped SYN retransmitted after 1 s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hdrhistogram::Histogram;
use serde_json::json;

use crate::cli::HandshakeArgs;
use crate::error::LoadError;
use crate::fleet::conversation;
use crate::latency::{histogram, micros};
use crate::page::{self, PageSpec};
use crate::report;
use crate::rss::Cost;
use crate::target::Target;
use crate::token::Minter;

/// A set-up this slow waited for a retransmitted SYN.
const RETRANSMIT_SIGNATURE: Duration = Duration::from_millis(900);
/// Longest wait for one set-up.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The set-up times of a run: their histogram in µs, the set-ups that failed, and those past
/// [`RETRANSMIT_SIGNATURE`].
pub(crate) struct Setups {
    pub hist: Histogram<u64>,
    pub failed: u64,
    pub slow: u64,
}

impl Setups {
    pub fn new() -> Self {
        Self {
            hist: histogram(),
            failed: 0,
            slow: 0,
        }
    }

    /// A set-up that took `took`.
    pub fn record(&mut self, took: Duration) {
        self.hist.saturating_record(micros(took));
        if took > RETRANSMIT_SIGNATURE {
            self.slow += 1;
        }
    }

    /// Adds `failed`, `setup_p50_us` … `setup_max_us` and `setups_over_900ms` to `line`.
    pub fn fields(&self, line: &mut serde_json::Value) {
        let h = &self.hist;
        line["failed"] = json!(self.failed);
        line["setup_p50_us"] = json!(h.value_at_quantile(0.5));
        line["setup_p90_us"] = json!(h.value_at_quantile(0.9));
        line["setup_p99_us"] = json!(h.value_at_quantile(0.99));
        line["setup_max_us"] = json!(h.max());
        line["setups_over_900ms"] = json!(self.slow);
    }
}

/// Runs the scenario and prints its JSON line and summary.
pub async fn run(args: HandshakeArgs) -> Result<(), LoadError> {
    let target = Arc::new(Target::resolve(&args.common).await?);
    let minter = Minter::new(&target.tenant, &args.common.token_secret)?;
    let specs = (0..args.pages as usize)
        .map(|index| {
            Ok(PageSpec {
                index,
                client_id: uuid::Uuid::new_v4().to_string(),
                token: minter.mint(&target.user(index), &conversation(index))?,
            })
        })
        .collect::<Result<Vec<_>, LoadError>>()?;
    let cost = args.gateway_pid.map(Cost::read).transpose()?;
    let started = Instant::now();
    let results: Vec<_> = futures_util::stream::iter(specs)
        .map(|spec| {
            let target = Arc::clone(&target);
            async move {
                let t = Instant::now();
                let r = tokio::time::timeout(SETUP_TIMEOUT, page::connect(&target, &spec)).await;
                (t.elapsed(), r)
            }
        })
        .buffer_unordered(args.concurrency as usize)
        .collect()
        .await;
    let elapsed = started.elapsed();
    let mut setups = Setups::new();
    let mut open = Vec::new();
    for (took, r) in results {
        match r {
            Ok(Ok(ws)) => {
                setups.record(took);
                open.push(ws);
            }
            _ => setups.failed += 1,
        }
    }
    let mut line = json!({
        "pages": args.pages,
        "concurrency": args.concurrency,
        "connected": open.len(),
        "elapsed_ms": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
    });
    setups.fields(&mut line);
    let Setups {
        hist: h,
        failed,
        slow,
    } = setups;
    if let Some(cost) = cost {
        cost.report(open.len() as u64, "gateway", "setup", &mut line)?;
    }
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let human = format!(
        "handshakes: {} of {} pages connected, {} at a time, in {:.1} s; set-up p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {slow} past 900 ms, {failed} failed",
        open.len(),
        args.pages,
        args.concurrency,
        elapsed.as_secs_f64(),
        ms(0.5),
        ms(0.9),
        ms(0.99),
        h.max() as f64 / 1000.0,
    );
    report::emit(&line, &human)?;
    futures_util::future::join_all(open.iter_mut().map(|ws| ws.close(None))).await;
    Ok(())
}
