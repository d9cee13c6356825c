//! Typed errors at the process boundary: binding the pairing port and serving MCP.

use rmcp::service::ServerInitializeError;

/// Why the pairing server could not start (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Another process holds the port: the user must pick another one.
    #[error("Toolmark: port {0} is in use; pass --port <other>")]
    PortInUse(u16),
    /// Any other failure to listen on 127.0.0.1.
    #[error("Toolmark: cannot listen on 127.0.0.1:{port}: {source}")]
    Bind {
        /// The port asked for.
        port: u16,
        /// What the OS said.
        source: std::io::Error,
    },
}

/// Why serving ended abnormally (exit 1). End of standard input is not an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The MCP client broke the session before it started (not a clean end of input).
    #[error("Toolmark MCP: the MCP session did not start: {0}")]
    Session(Box<ServerInitializeError>),
    /// The MCP service task failed.
    #[error("Toolmark MCP: the MCP service failed: {0}")]
    Service(#[from] tokio::task::JoinError),
}

impl From<ServerInitializeError> for RunError {
    fn from(e: ServerInitializeError) -> Self {
        RunError::Session(Box::new(e))
    }
}
