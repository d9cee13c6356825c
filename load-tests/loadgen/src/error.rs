//! Why a load run failed: the operator's arguments, the machine, or the gateway under test.

/// A run that could not complete.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A flag's value cannot be used.
    #[error("{0}")]
    Args(String),
    /// Reading the gateway's memory figures failed (wrong pid, not Linux).
    #[error("cannot read the RSS of pid {pid}: {reason}")]
    Rss {
        /// The process whose /proc entry was read.
        pid: u32,
        /// Why.
        reason: String,
    },
    /// Pages could not be connected, or dropped before the measurement.
    #[error("pages: {0}")]
    Pages(String),
    /// The gateway did not show a page's manifest to the agent API in time.
    #[error("gateway: {0}")]
    Gateway(String),
    /// The run saw faults it exists to rule out (the soak).
    #[error("faults: {0}")]
    Failed(String),
    /// A local resource (client, timer, thread) failed.
    #[error("local: {0}")]
    Local(String),
}
