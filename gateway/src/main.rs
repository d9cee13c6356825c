//! `toolmark-gateway`: load config, bind, serve until SIGTERM/SIGINT, drain, exit.

use std::process::ExitCode;

use toolmark_config::Overrides;
use toolmark_process::cli::{
    GatewayArgs as Cli, announce_listening, fail, load_settings, parse_args, serve, serve_as,
};
use toolmark_process::{Lifecycle, signal};

const BIN: &str = "toolmark-gateway";

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
    let mut settings = match load_settings(BIN, cli.config.as_deref(), &overrides) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if cli.check_config {
        eprintln!("{BIN}: configuration is valid");
        return ExitCode::SUCCESS;
    }
    if let Some(to) = cli.copy_records_to {
        return serve(BIN, async move {
            use toolmark_gateway::records::{CopyError, copy_records};
            match copy_records(&settings, &to).await {
                Ok(done) => {
                    toolmark_process::cli::report(
                        BIN,
                        format_args!(
                            "copied {} records ({} already there as they are) and {} audit entries",
                            done.written, done.unchanged, done.audit
                        ),
                    );
                    ExitCode::SUCCESS
                }
                Err(e @ CopyError::Config(_)) => fail(BIN, 2, format_args!("config: {e}")),
                Err(e) => fail(BIN, 1, e),
            }
        });
    }
    // The node's id is fixed before telemetry starts: every span names it.
    let node = settings
        .server
        .node_id
        .get_or_insert_with(toolmark_gateway::new_node_id)
        .clone();
    serve_as(BIN, Some(&node), async move {
        let life = Lifecycle::new();
        life.stop_on(signal::terminated());
        // Boxed: the whole server's future is large, and lives on the heap once.
        let run = Box::pin(toolmark_gateway::bind_and_run(settings, life, |a| {
            announce_listening(BIN, a)
        }));
        match run.await {
            Ok(()) => ExitCode::SUCCESS,
            // Beside a node of a release it cannot serve with: the operator's to fix.
            Err(
                e @ toolmark_gateway::RunError::Broker(
                    toolmark_broker::redis::ConnectError::Release(_),
                ),
            ) => fail(BIN, 2, e),
            Err(e) => fail(BIN, 1, e),
        }
    })
}
