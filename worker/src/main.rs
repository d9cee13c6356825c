//! `toolmark-worker`: load config, run the jobs until SIGTERM/SIGINT, exit.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use toolmark_gateway::config::{Config, Overrides};

#[derive(Debug, Parser)]
#[command(
    name = "toolmark-worker",
    version,
    about = "Toolmark Gateway background jobs: deadline sweeps and webhook delivery."
)]
struct Cli {
    /// The gateway's TOML configuration file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Redis URL (sets broker.kind = "redis" and broker.url).
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("toolmark-worker: {message}");
    ExitCode::from(code)
}

fn main() -> ExitCode {
    toolmark_gateway::tls::install_crypto();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let text = e.render().to_string();
            let line = text
                .lines()
                .next()
                .unwrap_or("bad arguments")
                .trim_start_matches("error: ");
            return fail(2, &format!("{line} (see --help)"));
        }
    };
    let text = match std::fs::read_to_string(&cli.config) {
        Ok(t) => t,
        Err(e) => {
            return fail(
                2,
                &format!("config: cannot read {}: {e}", cli.config.display()),
            );
        }
    };
    let overrides = Overrides {
        redis: cli.redis,
        ..Overrides::default()
    };
    let config = match Config::load(&text, std::env::vars(), &overrides) {
        Ok(c) => c,
        Err(e) => return fail(2, &format!("config: {e}")),
    };
    let telemetry = toolmark_gateway::telemetry::init("toolmark-worker");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(1, &format!("cannot start the runtime: {e}")),
    };
    let result = runtime.block_on(toolmark_worker::run(config, shutdown_signal()));
    drop(runtime);
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ toolmark_worker::WorkerError::Config { .. }) => fail(2, &e.to_string()),
        Err(e) => fail(1, &e.to_string()),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
