//! What every Toolmark Gateway process needs, shared by `toolmark-gateway` and
//! `toolmark-worker` rather than borrowed from one of them: the configuration parsed once into
//! typed [`config::Settings`], telemetry, TLS setup, the stop signals, one [`Lifecycle`] and
//! the small pieces of a binary's `main`.

pub mod catalog;

/// The version of these binaries (the workspace's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit they were built from (`TOOLMARK_REVISION` at build time, else git's, else
/// `unknown`).
pub const REVISION: &str = env!("TOOLMARK_BUILD_REVISION");
pub mod cli;
pub mod config;
pub mod jwt;
pub mod lifecycle;
pub mod signal;
pub mod signing;
pub mod telemetry;
pub mod tls;

pub use lifecycle::Lifecycle;
