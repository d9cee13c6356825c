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
    /// Pages on one node, calls through another, then drain the first node (SIGTERM): time
    /// until every page is back on the other node, and how every call ended.
    Storm(StormArgs),
    /// Pages on two nodes for a long time at the real TTLs and grace periods (quiet, moving,
    /// confirming late), calls through both: counts 409s for live pages, wrong expirations,
    /// lost or doubled outcomes.
    Soak(SoakArgs),
    /// One open conversation whose page reloads again and again (a new page load with a
    /// manifest each time): the gateway's resident memory per reload.
    Reloads(ReloadsArgs),
    /// Connect many pages at once (a reconnect storm) and time each one's set-up.
    Handshakes(HandshakeArgs),
    /// Another Pusher-protocol server (a reference for `handshakes`): connect many sockets at
    /// once and time each one's upgrade and `pusher:connection_established`.
    PusherHandshakes(PusherHandshakeArgs),
    /// Another Pusher-protocol server (a reference for `calls`): events published through its
    /// HTTP API at a fixed rate, each timed from its due instant to its subscriber.
    PusherPublish(PusherPublishArgs),
    /// Draw an SVG of latency against call rate from `calls` JSON lines.
    Chart(ChartArgs),
    /// (Internal) one process's share of an `idle --processes N` fleet.
    #[command(hide = true)]
    Hold(HoldArgs),
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
    /// Page `i` is user `<prefix><i>`: load generators sharing one gateway fleet each take
    /// their own prefix, so that their conversations never meet.
    #[arg(long, default_value = "u")]
    pub user_prefix: String,
}

/// Which door of the gateway an agent's calls take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Door {
    /// The agent API: `POST …/conversations/{c}/calls`.
    #[default]
    Api,
    /// The hosted MCP endpoint, stateless revision: `tools/call` with an MCP token per
    /// conversation.
    Mcp,
}

/// `reloads`
#[derive(Debug, Clone, Args)]
pub struct ReloadsArgs {
    /// Shared flags.
    #[command(flatten)]
    pub common: Common,
    /// How many reloads.
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u32).range(1..))]
    pub reloads: u32,
    /// The size of each reload's manifest, bytes.
    #[arg(long, default_value_t = 10_240)]
    pub manifest_bytes: usize,
    /// The gateway's process id (its resident memory is read before and after).
    #[arg(long)]
    pub gateway_pid: u32,
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
    /// How long the gateway's CPU time is measured while the pages stay idle (its pings to
    /// them included), after the memory reading. The default is two of the gateway's 30 s ping
    /// intervals, so that every page's pings fall in the window equally often.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub cpu_secs: u64,
    /// The gateway's process id, whose VmRSS is read from /proc.
    #[arg(long)]
    pub gateway_pid: u32,
    /// Processes holding the pages (this binary run again as children): each process may
    /// hold only as many sockets as its open-file limit allows. 1 keeps them in this process.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub processes: u32,
}

/// `handshakes`
#[derive(Debug, Clone, Args)]
pub struct HandshakeArgs {
    /// Shared flags.
    #[command(flatten)]
    pub common: Common,
    /// Pages to connect, one conversation each; all stay open until the last is connected.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub pages: u32,
    /// Set-ups in flight at once.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: u32,
    /// The gateway's process id: when given, its CPU time and threads' context switches per
    /// set-up over the set-ups are reported.
    #[arg(long)]
    pub gateway_pid: Option<u32>,
}

/// The Pusher-protocol server under test and the app the run speaks as.
#[derive(Debug, Clone, Args)]
pub struct PusherServer {
    /// The server's base URL: its HTTP API, and `ws://` on the same host for sockets.
    #[arg(long, default_value = "http://127.0.0.1:6001")]
    pub url: String,
    /// The app's key: sockets connect to `/app/<key>`.
    #[arg(long)]
    pub key: String,
    /// `Origin` header of every socket.
    #[arg(long, default_value = "http://loadgen.test")]
    pub origin: String,
    /// Sockets are spread over the source addresses 127.0.0.1 ..= 127.0.0.N (loopback only).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u8).range(1..=254))]
    pub source_addrs: u8,
    /// The server's process id: when given, its CPU time and threads' context switches per
    /// set-up (`pusher-handshakes`, with its resident memory per open socket) or per published
    /// event (`pusher-publish`) are reported.
    #[arg(long)]
    pub server_pid: Option<u32>,
}

/// `pusher-handshakes`
#[derive(Debug, Clone, Args)]
pub struct PusherHandshakeArgs {
    /// The server.
    #[command(flatten)]
    pub server: PusherServer,
    /// Sockets to connect; all stay open until the last is connected.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,
    /// Set-ups in flight at once.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: u32,
}

/// `pusher-publish`
#[derive(Debug, Clone, Args)]
pub struct PusherPublishArgs {
    /// The server.
    #[command(flatten)]
    pub server: PusherServer,
    /// The app's id: events are POSTed to `/apps/<id>/events`.
    #[arg(long)]
    pub app_id: String,
    /// The app's secret, which signs every publish request.
    #[arg(long, env = "TOOLMARK_BENCH_PUSHER_SECRET", hide_env_values = true)]
    pub secret: String,
    /// Subscriber sockets, one public channel each; events go round-robin over them.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub channels: u32,
    /// Events published per second, on a uniform schedule (open loop).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    pub rate: u32,
    /// How long events are published.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub duration_secs: u64,
    /// Publish requests in flight at most; one due at the bound is skipped and counted.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: u32,
}

/// `hold` (internal): pages `first .. first + count`, held until standard input closes.
#[derive(Debug, Clone, Args)]
pub struct HoldArgs {
    /// Shared flags.
    #[command(flatten)]
    pub common: Common,
    /// The first page's index.
    #[arg(long)]
    pub first: u32,
    /// How many pages.
    #[arg(long)]
    pub count: u32,
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
    /// The gateway's process id: when given, its VmRSS after the run is reported, and its CPU
    /// time and threads' context switches per call over the run.
    #[arg(long)]
    pub gateway_pid: Option<u32>,
    /// Agent calls go to this gateway node instead of `--url` (pages stay on `--url`): the
    /// cross-node round trip with a shared broker.
    #[arg(long)]
    pub agent_url: Option<String>,
    /// The process id of the gateway node behind `--agent-url`: its CPU time and context
    /// switches per call are reported as `agent_gateway_*` (`--gateway-pid` is then the pages'
    /// node).
    #[arg(long)]
    pub agent_gateway_pid: Option<u32>,
    /// The process id of the broker (`redis-server`): its CPU time and context switches per
    /// call are reported as `redis_*`.
    #[arg(long)]
    pub redis_pid: Option<u32>,
    /// Seconds to wait after the pages are ready and before the first call (e.g. to reset
    /// Redis statistics from outside).
    #[arg(long, default_value_t = 0)]
    pub pause_before_secs: u64,
    /// Seconds to wait after the last call and the report, before the pages close (e.g. to
    /// read Redis statistics of the calls alone from outside); says `calls: finished` first.
    #[arg(long, default_value_t = 0)]
    pub pause_after_secs: u64,
    /// The door calls take: the agent API, or the hosted MCP endpoint (stateless revision, an
    /// MCP token minted per conversation before the run).
    #[arg(long, value_enum, default_value_t = Door::Api)]
    pub door: Door,
    /// The agent speaks HTTP/2 with prior knowledge (h2c), its calls multiplexed over one
    /// connection, instead of HTTP/1.1 with a connection per call in flight.
    #[arg(long)]
    pub http2: bool,
    /// Also count the system calls of every process whose pid is given (and of this one) over
    /// the run, with `perf stat` (Linux, root): `<who>_syscalls_per_call`.
    #[arg(long)]
    pub syscalls: bool,
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

/// `storm`
#[derive(Debug, Clone, Args)]
pub struct StormArgs {
    /// Shared flags; `--url` is the node that will be drained.
    #[command(flatten)]
    pub common: Common,
    /// The node pages reconnect to and agent calls go through.
    #[arg(long)]
    pub fallback_url: String,
    /// The pid of the node behind `--url`, sent SIGTERM to drain it.
    #[arg(long)]
    pub drain_pid: u32,
    /// Number of pages, one conversation each.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub pages: u32,
    /// Calls per second through the other node, before and after the drain.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub rate: u32,
    /// Seconds of calls before the drain.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub before_secs: u64,
    /// Seconds of calls after the drain.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub after_secs: u64,
    /// Each call's deadline (`timeoutMs`): a call to a page still away ends `timeout` then.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub call_timeout_ms: u64,
    /// Each page reconnects after a delay spread over 0 ..= this, as real clients jitter.
    #[arg(long, default_value_t = 1000)]
    pub jitter_ms: u64,
    /// The goal: every page back within this many seconds of the drain, or the run fails.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub back_within_secs: u64,
    /// The tenant's agent API key.
    #[arg(long, env = "TOOLMARK_BENCH_API_KEY", hide_env_values = true)]
    pub api_key: String,
    /// Calls in flight at most; a call due while the bound is reached is skipped (and fails
    /// the run).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: u32,
}

/// `chart`
#[derive(Debug, Clone, Args)]
pub struct ChartArgs {
    /// `LABEL=FILE`: a file of `calls` JSON lines (one per rate) drawn as one series; repeat.
    #[arg(long, required = true)]
    pub series: Vec<String>,
    /// The chart's title.
    #[arg(long, default_value = "Call round trip against call rate")]
    pub title: String,
    /// A latency limit drawn as a horizontal line (ms), when inside the plot.
    #[arg(long)]
    pub limit_ms: Option<f64>,
    /// Where the SVG goes.
    #[arg(long)]
    pub output: String,
}

/// `soak`
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Shared flags; `--url` is the first node.
    #[command(flatten)]
    pub common: Common,
    /// The second node's base URL.
    #[arg(long)]
    pub other: String,
    /// The tenant's agent API key.
    #[arg(long, env = "TOOLMARK_BENCH_API_KEY", hide_env_values = true)]
    pub api_key: String,
    /// Pages, one conversation each.
    #[arg(long, default_value_t = 200)]
    pub pages: usize,
    /// How long calls are driven, in minutes.
    #[arg(long, default_value_t = 15)]
    pub minutes: u64,
    /// Each page is called about once in this many seconds.
    #[arg(long, default_value_t = 20.0)]
    pub call_every_secs: f64,
    /// A confirming page approves at most this long after it was asked (the run waits for it).
    #[arg(long, default_value_t = 240)]
    pub confirm_max_secs: u64,
    /// Stall this `redis-server` (SIGSTOP, then SIGCONT) while the calls run: its sockets stay
    /// open and it answers nothing, as a stalled host does.
    #[arg(long)]
    pub stall_redis_pid: Option<u32>,
    /// With `--stall-redis-pid`: a stall every this many seconds.
    #[arg(long, default_value_t = 120)]
    pub stall_every_secs: u64,
    /// With `--stall-redis-pid`: how long each stall lasts.
    #[arg(long, default_value_t = 5)]
    pub stall_secs: u64,
}
