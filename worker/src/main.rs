//! `toolmark-worker`: load config, run the jobs until SIGTERM/SIGINT, exit.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use toolmark_process::cli::{announce_listening, fail, load_settings, parse_args, serve};
use toolmark_process::config::Overrides;
use toolmark_process::{Lifecycle, signal};
use toolmark_worker::WorkerError;

const BIN: &str = "toolmark-worker";

#[derive(Debug, Parser)]
#[command(
    name = "toolmark-worker",
    version,
    about = "Toolmark Gateway background jobs: deadline sweeps, confirmation expiry and webhook delivery."
)]
struct Cli {
    /// The gateway's TOML configuration file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Redis URL (sets broker.kind = "redis" and broker.url).
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
}

fn main() -> ExitCode {
    let cli: Cli = match parse_args(BIN) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let overrides = Overrides {
        redis: cli.redis,
        ..Overrides::default()
    };
    let settings = match load_settings(BIN, Some(&cli.config), &overrides) {
        Ok(s) => s,
        Err(code) => return code,
    };
    serve(BIN, async move {
        let life = Lifecycle::new();
        life.stop_on(signal::terminated());
        match toolmark_worker::run(settings, life, |a| announce_listening(BIN, a)).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e @ WorkerError::NotRedis) => fail(BIN, 2, e),
            Err(e) => fail(BIN, 1, e),
        }
    })
}
