//! The `reloads` scenario: one open conversation whose page reloads again and again, each
//! reload a new page load that connects, sends a manifest of `--manifest-bytes` and leaves,
//! while another page load of the conversation stays connected (the conversation stays open,
//! as with a second tab). The gateway's resident memory per reload tells what a gone page load
//! leaves behind; the bench reads Redis's `used_memory` beside it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use crate::cli::ReloadsArgs;
use crate::error::LoadError;
use crate::frames;
use crate::page::{PageSpec, connect};
use crate::report;
use crate::rss;
use crate::target::Target;
use crate::token::Minter;

/// Time for the gateway to apply the last leave and settle its allocator before the reading.
const SETTLE: Duration = Duration::from_secs(3);

/// A manifest of about `bytes` bytes: the echo tool's description pads it.
fn manifest(client_id: &str, bytes: usize) -> String {
    frames::manifest_described(client_id, &"x".repeat(bytes.saturating_sub(200)))
}

/// Runs the scenario and prints its JSON line and summary.
pub async fn run(args: ReloadsArgs) -> Result<(), LoadError> {
    let target = Arc::new(Target::resolve(&args.common).await?);
    let minter = Minter::new(&target.tenant, &args.common.token_secret)?;
    let user = target.user(0);
    let token = minter.mint(&user, "reloads")?;
    let spec = |index: usize| PageSpec {
        index,
        client_id: uuid::Uuid::new_v4().to_string(),
        token: token.clone(),
    };
    let failed = |what: &str, e: String| LoadError::Local(format!("{what}: {e}"));
    // The page load that stays.
    let anchor_spec = spec(0);
    let mut anchor = connect(&target, &anchor_spec)
        .await
        .map_err(|e| failed("the staying page", e))?;
    anchor
        .send(Message::text(frames::manifest(&anchor_spec.client_id)))
        .await
        .map_err(|e| failed("the staying page's manifest", e.to_string()))?;
    tokio::time::sleep(SETTLE).await;
    let before = rss::read_kib(args.gateway_pid)?;
    let started = Instant::now();
    for i in 0..args.reloads {
        let s = spec(i as usize + 1);
        let mut ws = connect(&target, &s)
            .await
            .map_err(|e| failed("a reload", e))?;
        ws.send(Message::text(manifest(&s.client_id, args.manifest_bytes)))
            .await
            .map_err(|e| failed("a reload's manifest", e.to_string()))?;
        // The gateway has taken the manifest once it answers the close.
        if ws.close(None).await.is_ok() {
            while let Some(Ok(_)) = ws.next().await {}
        }
    }
    let took = started.elapsed();
    tokio::time::sleep(SETTLE).await;
    let after = rss::read_kib(args.gateway_pid)?;
    let _ = anchor.close(None).await;
    let reloads = u64::from(args.reloads);
    let per_reload = (after.saturating_sub(before) * 1024) as f64 / reloads.max(1) as f64;
    let line = json!({
        "scenario": "reloads",
        "reloads": reloads,
        "manifest_bytes": args.manifest_bytes,
        "reloads_per_sec": (reloads as f64 / took.as_secs_f64()).round(),
        "rss_before_kib": before,
        "rss_after_kib": after,
        "rss_bytes_per_reload": per_reload.round(),
    });
    let human = format!(
        "reloads: {reloads} reloads of one conversation with a {} B manifest in {:.1} s; gateway RSS {before} KiB -> {after} KiB; {per_reload:.0} B per reload",
        args.manifest_bytes,
        took.as_secs_f64()
    );
    report::emit(&line, &human)
}
