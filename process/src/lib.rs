//! The runtime plumbing every Toolmark Gateway process shares, rather than borrowing it from one
//! of them: the binaries' command lines and `main` pieces ([`cli`]), telemetry, the process's
//! TLS crypto provider, the stop signals, one [`Lifecycle`], the generic metrics pieces
//! ([`metrics`]: a registry that lists its families, the build info, Redis script latencies),
//! and the HTTP clients that send requests to addresses a tenant gave ([`egress`]). The
//! follower of the tenant catalog lives beside the catalogs it follows
//! (`toolmark_store::follower`). What the processes run on,
//! the configuration parsed once into typed settings, is `toolmark-config`'s.

/// The version of these binaries (the workspace's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit they were built from (`TOOLMARK_REVISION` at build time, else git's, else
/// `unknown`).
pub const REVISION: &str = env!("TOOLMARK_BUILD_REVISION");
/// What `--version` prints after the program's name: the release, then the commit
/// (`1.0.0 (3f2a9c1d0e4b)`).
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("TOOLMARK_BUILD_REVISION"),
    ")"
);

pub mod cli;
pub mod egress;
pub mod lifecycle;
pub mod log_writer;
pub mod metrics;
pub mod signal;
pub mod telemetry;
pub mod tls;

pub use lifecycle::Lifecycle;
