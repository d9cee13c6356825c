//! `toolmark-gateway`: load config, bind, serve until SIGTERM/SIGINT, drain, exit.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use toolmark_gateway::config::{Config, Overrides};

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
    /// Validate the configuration and exit (0 when valid, 2 when not).
    #[arg(long)]
    check_config: bool,
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("toolmark-gateway: {message}");
    ExitCode::from(code)
}

fn main() -> ExitCode {
    toolmark_gateway::tls::install_crypto();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let first = e.render().to_string();
            let line = first
                .lines()
                .next()
                .unwrap_or("bad arguments")
                .trim_start_matches("error: ");
            return fail(2, &format!("{line} (see --help)"));
        }
    };
    let overrides = Overrides {
        listen: cli.listen,
        redis: cli.redis,
        node_id: cli.node_id,
    };
    let env = std::env::vars();
    let loaded = match &cli.config {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => Config::load(&text, env, &overrides),
            Err(e) => return fail(2, &format!("config: cannot read {}: {e}", path.display())),
        },
        None => Config::dev(env, &overrides),
    };
    let config = match loaded {
        Ok(c) => c,
        Err(e) => return fail(2, &format!("config: {e}")),
    };
    if cli.check_config {
        eprintln!("toolmark-gateway: configuration is valid");
        return ExitCode::SUCCESS;
    }
    let telemetry = toolmark_gateway::telemetry::init("toolmark-gateway");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(1, &format!("cannot start the runtime: {e}")),
    };
    let code = runtime.block_on(serve(config));
    drop(runtime);
    telemetry.shutdown();
    code
}

async fn serve(mut config: Config) -> ExitCode {
    let addr = match config.listen_addr() {
        Ok(a) => a,
        Err(e) => return fail(2, &format!("config: {e}")),
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => return fail(1, &format!("cannot listen on {addr}: {e}")),
    };
    let bound = listener.local_addr().unwrap_or(addr);
    let mut dev = None;
    if config.dev_mode {
        let (tenant, info, secret) = toolmark_gateway::dev_tenant(bound);
        eprintln!(
            "toolmark-gateway: dev mode: tenant \"dev\", API key {}, token secret {secret}, pusher key {}, pusher secret {}",
            info.api_key,
            info.pusher_key,
            tenant.pusher_secret.as_deref().unwrap_or_default()
        );
        eprintln!(
            "toolmark-gateway: demo page http://{bound}/demo, agent console http://{bound}/demo/agent"
        );
        config.tenants.push(tenant);
        dev = Some(info);
    }
    let ready = move || announce(bound);
    match toolmark_gateway::run_with_ready(listener, config, dev, shutdown_signal(), ready).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(1, &e.to_string()),
    }
}

/// The contract's readiness line, on stdout so scripts can wait for it.
#[allow(
    clippy::print_stdout,
    reason = "the listening line is the binary's one stdout output"
)]
fn announce(bound: std::net::SocketAddr) {
    println!("toolmark-gateway listening on http://{bound}");
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
