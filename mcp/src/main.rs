//! `toolmark-mcp`: parse the flags, bind the pairing port, serve MCP on stdio until it closes.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use toolmark_mcp::cli::{self, Command, HELP_DETAILS, USAGE};
use toolmark_mcp::stderr::Stderr;

fn main() -> ExitCode {
    let config = match cli::parse(std::env::args().skip(1)) {
        Ok(Command::Run(config)) => config,
        Ok(Command::Help) => return print_stdout(&format!("{USAGE}\n\n{HELP_DETAILS}")),
        Ok(Command::Version) => {
            return print_stdout(&format!(
                "toolmark-mcp {} ({})",
                env!("CARGO_PKG_VERSION"),
                env!("TOOLMARK_BUILD_REVISION")
            ));
        }
        Err(e) => {
            eprintln!("toolmark-mcp: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("Toolmark MCP: cannot start: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(async {
        let listener = match toolmark_mcp::bind(config.port).await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(1);
            }
        };
        let (input, output) = rmcp::transport::stdio_pipes();
        match toolmark_mcp::run(config, listener, input, output, Stderr::process()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_millis(500));
    code
}

/// `--help` and `--version` are the only things this program prints on stdout itself.
fn print_stdout(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(1),
    }
}
