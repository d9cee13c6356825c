//! Structured logs through `tracing`: `RUST_LOG` filters (default `info`),
//! `TOOLMARK_LOG_FORMAT=json` switches to one JSON object per line.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once; later calls are no-ops.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("TOOLMARK_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}
