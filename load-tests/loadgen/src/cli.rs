//! Command line: the two scenarios (`idle`, `calls`) and the flags they share.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// `toolmark-loadgen`: simulated browser pages and an agent backend against a running gateway.
#[derive(Debug, Parser)]
#[command(name = "toolmark-loadgen", version, about)]
pub struct Cli {
    /// Which scenario to run.
    #[command(subcommand)]
    pub scenario: Scenario,
}

/// The scenarios.
#[derive(Debug, Subcommand)]
pub enum Scenario {
    /// Connect idle authenticated pages and measure the gateway's resident memory per page.
    Idle(IdleArgs),
    /// Connect pages, then drive agent calls at a fixed rate and measure their round trip.
    Calls(CallsArgs),
}

/// Flags both scenarios take.
#[derive(Debug, Clone, Args)]
pub struct Common {
    /// The gateway's base URL; pages use the same host with `ws://`.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Tenant id the pages and calls belong to.
    #[arg(long, default_value = "bench")]
    pub tenant: String,
    /// The tenant's HS256 token secret: page tokens are minted locally with it.
    #[arg(long, env = "TOOLMARK_BENCH_TOKEN_SECRET", hide_env_values = true)]
    pub token_secret: String,
    /// `Origin` header of every page socket; must be one of the tenant's allowed origins.
    #[arg(long, default_value = "http://loadgen.test")]
    pub origin: String,
    /// Page sockets are spread over the source addresses 127.0.0.1 ..= 127.0.0.N (loopback
    /// targets only), so that many sockets do not exhaust one address's ephemeral ports.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u8).range(1..=254))]
    pub source_addrs: u8,
    /// Page connections started per second.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    pub ramp_per_sec: u32,
}

/// `idle`
#[derive(Debug, Clone, Args)]
pub struct IdleArgs {
    /// Shared flags.
    #[command(flatten)]
    pub common: Common,
    /// Number of pages, one conversation each.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub pages: u32,
    /// How long the pages stay connected after the measurement.
    #[arg(long, default_value_t = 0)]
    pub hold_secs: u64,
    /// The gateway's process id, whose VmRSS is read from /proc.
    #[arg(long)]
    pub gateway_pid: u32,
}

/// `calls`
#[derive(Debug, Clone, Args)]
pub struct CallsArgs {
    /// Shared flags.
    #[command(flatten)]
    pub common: Common,
    /// Number of pages, one conversation each; calls go round-robin over them.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub pages: u32,
    /// Calls started per second, on a uniform schedule (open loop).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub rate: u32,
    /// How long calls are driven.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub duration_secs: u64,
    /// The tenant's agent API key.
    #[arg(long, env = "TOOLMARK_BENCH_API_KEY", hide_env_values = true)]
    pub api_key: String,
    /// Calls in flight at most; a call due while the bound is reached is skipped and counted.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: u32,
    /// The gateway's process id: when given, its VmRSS after the run is reported.
    #[arg(long)]
    pub gateway_pid: Option<u32>,
    /// Agent calls go to this gateway node instead of `--url` (pages stay on `--url`): the
    /// cross-node round trip with a shared broker.
    #[arg(long)]
    pub agent_url: Option<String>,
    /// Seconds to wait after the pages are ready and before the first call (e.g. to reset
    /// Redis statistics from outside).
    #[arg(long, default_value_t = 0)]
    pub pause_before_secs: u64,
}

impl CallsArgs {
    /// Time between two scheduled calls.
    pub fn period(&self) -> Duration {
        Duration::from_secs(1) / self.rate
    }

    /// Calls the schedule holds.
    pub fn total_calls(&self) -> u64 {
        u64::from(self.rate) * self.duration_secs
    }
}
