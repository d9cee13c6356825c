//! `toolmark-worker`: load config, run the jobs until SIGTERM/SIGINT, exit.

use std::process::ExitCode;

use toolmark_config::Overrides;
use toolmark_process::cli::{
    WorkerArgs as Cli, announce_listening, fail, load_settings, parse_args, serve,
};
use toolmark_process::{Lifecycle, signal};
use toolmark_worker::WorkerError;

const BIN: &str = "toolmark-worker";

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
            Err(
                e @ (WorkerError::NotRedis
                | WorkerError::Broker(toolmark_broker::redis::ConnectError::Release(_))),
            ) => fail(BIN, 2, e),
            Err(e) => fail(BIN, 1, e),
        }
    })
}
