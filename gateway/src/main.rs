//! `toolmark-gateway`: load config, bind, serve until SIGTERM/SIGINT, drain, exit.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use toolmark_process::cli::{announce_listening, fail, load_settings, parse_args, serve};
use toolmark_process::config::Overrides;
use toolmark_process::{Lifecycle, signal};

const BIN: &str = "toolmark-gateway";

#[derive(Debug, Parser)]
#[command(
    name = "toolmark-gateway",
    version,
    about = "Toolmark Gateway: the hosted server side of the Toolmark bridge protocol v1."
)]
struct Cli {
    /// TOML configuration file; without it the gateway starts in dev mode.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Listen address (overrides server.listen).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Redis URL (sets broker.kind = "redis" and broker.url).
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// This node's id (overrides server.node_id).
    #[arg(long = "node-id", value_name = "ID")]
    node_id: Option<String>,
    /// Admin API listen address (overrides admin.listen).
    #[arg(long = "admin-listen", value_name = "ADDR")]
    admin_listen: Option<String>,
    /// Validate the configuration and exit (0 when valid, 2 when not).
    #[arg(long)]
    check_config: bool,
}

fn main() -> ExitCode {
    let cli: Cli = match parse_args(BIN) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let overrides = Overrides {
        listen: cli.listen,
        redis: cli.redis,
        node_id: cli.node_id,
        admin_listen: cli.admin_listen,
    };
    let settings = match load_settings(BIN, cli.config.as_deref(), &overrides) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if cli.check_config {
        eprintln!("{BIN}: configuration is valid");
        return ExitCode::SUCCESS;
    }
    serve(BIN, async move {
        let life = Lifecycle::new();
        life.stop_on(signal::terminated());
        match toolmark_gateway::bind_and_run(settings, life, |a| announce_listening(BIN, a)).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(BIN, 1, e),
        }
    })
}
