//! What every Toolmark Gateway process needs, shared by `toolmark-gateway` and
//! `toolmark-worker` rather than borrowed from one of them: the configuration parsed once into
//! typed [`config::Settings`], telemetry, TLS setup, the stop signals, one [`Lifecycle`] and
//! the small pieces of a binary's `main`.

pub mod catalog;
pub mod cli;
pub mod config;
pub mod jwt;
pub mod lifecycle;
pub mod signal;
pub mod signing;
pub mod telemetry;
pub mod tls;

pub use lifecycle::Lifecycle;
