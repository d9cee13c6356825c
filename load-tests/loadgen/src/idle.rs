//! The `idle` scenario: the gateway's resident memory per idle authenticated page, from its
//! VmRSS before any page and after all pages are connected and have sent their manifests. The
//! pages live in this process, or with `--processes N` in N child processes (see `spread`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::cli::IdleArgs;
use crate::error::LoadError;
use crate::fleet::Fleet;
use crate::report;
use crate::rss;
use crate::spread::Spread;
use crate::target::Target;
use crate::token::Minter;

/// Time for the gateway to process the last manifests and settle its allocator before the
/// second reading.
const SETTLE: Duration = Duration::from_secs(3);

/// Runs the scenario and prints its JSON line and summary.
pub async fn run(args: IdleArgs) -> Result<(), LoadError> {
    if args.processes > 1 {
        return run_spread(args).await;
    }
    let target = Arc::new(Target::resolve(&args.common).await?);
    let minter = Minter::new(&target.tenant, &args.common.token_secret)?;
    let pages = args.pages as usize;
    let before = rss::read_kib(args.gateway_pid)?;
    let fleet = Fleet::launch(target, None, &minter, pages, args.common.ramp_per_sec)?;
    let outcome = async {
        fleet.ready().await?;
        tokio::time::sleep(SETTLE).await;
        let after = rss::read_kib(args.gateway_pid)?;
        let cpu = idle_cpu(&args).await?;
        let alive = fleet.intact()?.alive();
        print(&args, alive as u64, before, after, cpu)?;
        hold(&args).await;
        Ok(())
    }
    .await;
    fleet.stop().await;
    outcome
}

async fn run_spread(args: IdleArgs) -> Result<(), LoadError> {
    let before = rss::read_kib(args.gateway_pid)?;
    let common = args.common.clone();
    let (pages, processes) = (args.pages, args.processes);
    let mut spread = tokio::task::spawn_blocking(move || Spread::start(&common, pages, processes))
        .await
        .map_err(|e| LoadError::Local(format!("starting hold processes: {e}")))??;
    let (spread, ready) = tokio::task::spawn_blocking(move || {
        let ready = spread.ready();
        (spread, ready)
    })
    .await
    .map_err(|e| LoadError::Local(format!("hold processes: {e}")))?;
    let measured = match ready {
        Ok(n) => {
            eprintln!("pages: {n} ready in {processes} processes");
            tokio::time::sleep(SETTLE).await;
            match rss::read_kib(args.gateway_pid) {
                Ok(rss) => idle_cpu(&args).await.map(|cpu| (rss, cpu)),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    };
    if measured.is_ok() {
        hold(&args).await;
    }
    let alive = tokio::task::spawn_blocking(move || spread.finish())
        .await
        .map_err(|e| LoadError::Local(format!("hold processes: {e}")))?;
    let (after, cpu) = measured?;
    print(&args, alive?, before, after, cpu)
}

/// The gateway's CPU time over `--cpu-secs` while the pages stay idle (pings included), in µs
/// per second.
async fn idle_cpu(args: &IdleArgs) -> Result<f64, LoadError> {
    let start = rss::cpu_us(args.gateway_pid)?;
    let t = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(args.cpu_secs)).await;
    let used = rss::cpu_us(args.gateway_pid)?.saturating_sub(start);
    Ok(used as f64 / t.elapsed().as_secs_f64())
}

async fn hold(args: &IdleArgs) {
    if args.hold_secs > 0 {
        eprintln!("holding {} pages for {} s", args.pages, args.hold_secs);
        tokio::time::sleep(Duration::from_secs(args.hold_secs)).await;
    }
}

fn print(
    args: &IdleArgs,
    pages: u64,
    before: u64,
    after: u64,
    cpu_us_per_sec: f64,
) -> Result<(), LoadError> {
    let per_page = after.saturating_sub(before) as f64 / pages.max(1) as f64;
    let cpu_per_page = cpu_us_per_sec / pages.max(1) as f64;
    let line = json!({
        "scenario": "idle",
        "pages": pages,
        "processes": args.processes,
        "rss_before_kib": before,
        "rss_after_kib": after,
        "kib_per_page": (per_page * 100.0).round() / 100.0,
        "idle_cpu_secs": args.cpu_secs,
        "cpu_us_per_page_per_sec": (cpu_per_page * 1000.0).round() / 1000.0,
    });
    let human = format!(
        "idle: {pages} pages connected; gateway RSS {before} KiB -> {after} KiB; {per_page:.2} KiB per page; idle CPU {cpu_per_page:.3} µs per page per second"
    );
    report::emit(&line, &human)
}
