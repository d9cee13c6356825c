//! Toolmark load generator: simulated browser pages (page WebSockets answering calls) and an
//! agent backend (the HTTP API) against a running gateway, with memory and latency figures.

pub mod agent;
pub mod calls;
pub mod chart;
pub mod cli;
pub mod driver;
pub mod error;
pub mod fleet;
pub mod frames;
pub mod handshakes;
pub mod idle;
pub mod latency;
pub mod page;
pub mod pusher;
pub mod reloads;
pub mod report;
pub mod rss;
pub mod soak;
pub mod spread;
pub mod stalls;
pub mod storm;
pub mod syscalls;
pub mod tally;
pub mod target;
pub mod token;

use crate::cli::{Cli, Scenario};
use crate::error::LoadError;

/// Runs the scenario `cli` names.
pub async fn run(cli: Cli) -> Result<(), LoadError> {
    match cli.scenario {
        Scenario::Idle(args) => idle::run(args).await,
        Scenario::Reloads(args) => reloads::run(args).await,
        Scenario::Calls(args) => calls::run(args).await,
        Scenario::Storm(args) => storm::run(args).await,
        Scenario::Soak(args) => soak::run(args).await,
        Scenario::Handshakes(args) => handshakes::run(args).await,
        Scenario::PusherHandshakes(args) => pusher::handshakes(args).await,
        Scenario::PusherPublish(args) => pusher::publish(args).await,
        Scenario::Chart(args) => chart::run(&args),
        Scenario::Hold(args) => spread::hold(args).await,
    }
}
