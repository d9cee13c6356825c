//! What the binaries' `main` functions share: their command lines ([`GatewayArgs`],
//! [`WorkerArgs`]; here so the docs check can read them), argument errors as one line and exit code 2,
//! configuration loaded with its errors as exit code 2, and the runtime with telemetry around
//! it (initialized before, flushed after).

use std::fmt::Display;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;

use toolmark_config::{Overrides, Settings};

/// The command line of `toolmark-gateway`.
#[derive(Debug, Parser)]
#[command(
    name = "toolmark-gateway",
    version = crate::VERSION_LINE,
    about = "Toolmark Gateway: the hosted server side of the Toolmark bridge protocol v1."
)]
pub struct GatewayArgs {
    /// TOML configuration file; without it the gateway starts in dev mode.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Listen address (overrides server.listen).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Redis URL (sets broker.kind = "redis" and broker.url).
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// This node's id (overrides server.node_id).
    #[arg(long = "node-id", value_name = "ID")]
    pub node_id: Option<String>,
    /// Admin API listen address (overrides admin.listen).
    #[arg(long = "admin-listen", value_name = "ADDR")]
    pub admin_listen: Option<String>,
    /// Validate the configuration and exit (0 when valid, 2 when not).
    #[arg(long)]
    pub check_config: bool,
    /// Copy every record of this configuration's admin.store (tenants, keys, policies, sealed
    /// secrets as they are, the audit log) into STORE (`postgres://…`, `sqlite://PATH` or
    /// `broker`), then exit; safe to run twice.
    #[arg(long = "copy-records-to", value_name = "STORE")]
    pub copy_records_to: Option<String>,
}

/// The command line of `toolmark-worker`.
#[derive(Debug, Parser)]
#[command(
    name = "toolmark-worker",
    version = crate::VERSION_LINE,
    about = "Toolmark Gateway background jobs: deadline sweeps, confirmation expiry and webhook delivery."
)]
pub struct WorkerArgs {
    /// The gateway's TOML configuration file.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Redis URL (sets broker.kind = "redis" and broker.url).
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
}

/// Prints `binary: message` on stderr and returns `code`.
pub fn fail(binary: &str, code: u8, message: impl Display) -> ExitCode {
    eprintln!("{binary}: {message}");
    ExitCode::from(code)
}

/// Parses the command line: `--help` and `--version` print and exit 0; a bad flag exits 2
/// with one line.
pub fn parse_args<T: clap::Parser>(binary: &str) -> Result<T, ExitCode> {
    match T::try_parse() {
        Ok(args) => Ok(args),
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            Err(ExitCode::SUCCESS)
        }
        Err(e) => {
            let text = e.render().to_string();
            let line = text
                .lines()
                .next()
                .unwrap_or("bad arguments")
                .trim_start_matches("error: ");
            Err(fail(binary, 2, format!("{line} (see --help)")))
        }
    }
}

/// Loads the configuration (dev mode without a file) with the process environment; a bad value
/// exits 2 with one line naming the key.
pub fn load_settings(
    binary: &str,
    path: Option<&Path>,
    overrides: &Overrides,
) -> Result<Settings, ExitCode> {
    crate::tls::install_crypto();
    let settings = Settings::from_file(path, std::env::vars(), overrides)
        .map_err(|e| fail(binary, 2, format_args!("config: {e}")))?;
    // The trace export's transport is read from the environment, as every OpenTelemetry SDK
    // does; a value it cannot honour is a configuration error like any other.
    crate::telemetry::Protocol::from_env().map_err(|e| fail(binary, 2, e))?;
    crate::telemetry::check_sampler_env().map_err(|e| fail(binary, 2, e))?;
    Ok(settings)
}

/// The readiness line of the contract, `<binary> listening on http://ADDR`: the binary's one
/// stdout output, so scripts can wait for it.
#[allow(
    clippy::print_stdout,
    reason = "the listening line is the binary's one stdout output"
)]
pub fn announce_listening(binary: &str, bound: std::net::SocketAddr) {
    println!("{binary} listening on http://{bound}");
}

/// A one-shot command's result line on stdout (`--copy-records-to`).
pub fn report(binary: &str, line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout().lock(), "{binary}: {line}");
}

/// The admin listener's line, `<binary> admin listening on http://ADDR`, printed after the
/// readiness line. A reader may have stopped reading at the readiness line: a closed stdout is
/// not an error here.
pub fn announce_admin_listening(binary: &str, bound: std::net::SocketAddr) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{binary} admin listening on http://{bound}");
    let _ = out.flush();
}

/// Runs `main` on a multi-threaded runtime with telemetry installed before it and flushed
/// after the runtime has stopped.
pub fn serve(binary: &'static str, main: impl Future<Output = ExitCode>) -> ExitCode {
    serve_as(binary, None, main)
}

/// [`serve`] for the node `instance`: its spans carry `service.instance.id`.
pub fn serve_as(
    binary: &'static str,
    instance: Option<&str>,
    main: impl Future<Output = ExitCode>,
) -> ExitCode {
    let telemetry = crate::telemetry::init_as(binary, instance);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // A worker's log lines join the process's batch (`log_writer`).
        .on_thread_park(crate::log_writer::on_park)
        .on_thread_stop(crate::log_writer::flush)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(binary, 1, format_args!("cannot start the runtime: {e}")),
    };
    let code = runtime.block_on(main);
    drop(runtime);
    telemetry.shutdown();
    crate::log_writer::flush();
    code
}
