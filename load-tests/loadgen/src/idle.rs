//! The `idle` scenario: the gateway's resident memory per idle authenticated page, from its
//! VmRSS before any page and after all pages are connected and have sent their manifests.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::cli::IdleArgs;
use crate::error::LoadError;
use crate::fleet::Fleet;
use crate::report;
use crate::rss;
use crate::target::Target;
use crate::token::Minter;

/// Time for the gateway to process the last manifests and settle its allocator before the
/// second reading.
const SETTLE: Duration = Duration::from_secs(3);

/// Runs the scenario and prints its JSON line and summary.
pub async fn run(args: IdleArgs) -> Result<(), LoadError> {
    let target = Arc::new(Target::resolve(&args.common).await?);
    let minter = Minter::new(&target.tenant, &args.common.token_secret)?;
    let pages = args.pages as usize;
    let before = rss::read_kib(args.gateway_pid)?;
    let fleet = Fleet::launch(target, &minter, pages, args.common.ramp_per_sec)?;
    let outcome = measure(&fleet, &args, before).await;
    if outcome.is_ok() && args.hold_secs > 0 {
        eprintln!("holding {} pages for {} s", pages, args.hold_secs);
        tokio::time::sleep(Duration::from_secs(args.hold_secs)).await;
    }
    fleet.stop().await;
    outcome
}

async fn measure(fleet: &Fleet, args: &IdleArgs, before: u64) -> Result<(), LoadError> {
    fleet.ready().await?;
    tokio::time::sleep(SETTLE).await;
    let after = rss::read_kib(args.gateway_pid)?;
    let pages = fleet.intact()?.alive();
    let per_page = after.saturating_sub(before) as f64 / pages as f64;
    let line = json!({
        "pages": pages,
        "rss_before_kib": before,
        "rss_after_kib": after,
        "kib_per_page": (per_page * 100.0).round() / 100.0,
    });
    let human = format!(
        "idle: {pages} pages connected; gateway RSS {before} KiB -> {after} KiB; {per_page:.2} KiB per page"
    );
    report::emit(&line, &human)
}
