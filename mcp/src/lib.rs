//! `toolmark-mcp`, the desktop MCP CLI: MCP over stdio for a desktop client, and a loopback
//! pairing WebSocket server through which one app page, open in the user's browser, serves its
//! tools (bridge protocol v1, caller `mcp`).
//!
//! [`run`] takes a bound listener and the two stdio streams; `main` only parses flags and binds.

pub mod cli;
pub mod close;
pub mod error;
pub mod handshake;
pub mod link;
pub mod listing;
pub mod mcp;
pub mod opening;
pub mod origin;
pub mod outbox;
pub mod pairing;
pub mod secret;
pub mod server;
pub mod stderr;
pub mod upgrade;

use std::time::Duration;

use rmcp::serve_server;
use rmcp::service::ServerInitializeError;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cli::Config;
use crate::error::{RunError, StartError};
use crate::handshake::Gate;
use crate::link::Link;
use crate::mcp::{Listeners, McpServer, announce_changes};
use crate::pairing::Pairing;
use crate::server::PairingServer;
use crate::stderr::Stderr;

/// How long pages get to see their 1001 close before the process exits.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Binds the pairing port on 127.0.0.1.
pub async fn bind(port: u16) -> Result<TcpListener, StartError> {
    TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::AddrInUse => StartError::PortInUse(port),
            _ => StartError::Bind { port, source },
        })
}

/// Serves until the MCP client closes standard input, then closes the page with 1001.
pub async fn run<R, W>(
    config: Config,
    listener: TcpListener,
    input: R,
    output: W,
    stderr: Stderr,
) -> Result<(), RunError>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let port = listener
        .local_addr()
        .map(|a| a.port())
        .unwrap_or(config.port);
    stderr.line(&format!(
        "Toolmark MCP: pairing server on ws://127.0.0.1:{port}"
    ));
    let pairing = Pairing::new(stderr);
    let shutdown = CancellationToken::new();
    let tasks = TaskTracker::new();
    let link = Link::new(tasks.clone(), shutdown.clone());
    tasks.spawn(pairing.clone().run_expiry(shutdown.clone()));
    let server = PairingServer {
        port,
        allow_origins: config.allow_origins.clone(),
        pairing: pairing.clone(),
        link: link.clone(),
        gate: Gate::default(),
    };
    tasks.spawn(server.run(listener, tasks.clone(), shutdown.clone()));

    let listeners = Listeners::default();
    let handler = McpServer::new(
        link.clone(),
        pairing,
        config.call_timeout,
        listeners.clone(),
    );
    // The baseline of `list_changed`: the listing before the client can list it. Marked here,
    // not in the task, so that a page pairing while the task starts is not missed.
    let mut listing = link.listing();
    listing.mark_unchanged();
    let outcome = match serve_server(handler, (input, output)).await {
        Ok(running) => {
            tasks.spawn(announce_changes(
                listing,
                running.peer().clone(),
                listeners,
                shutdown.clone(),
            ));
            running.waiting().await.map(|_| ()).map_err(RunError::from)
        }
        Err(ServerInitializeError::ConnectionClosed(_)) => Ok(()),
        Err(e) => Err(RunError::from(e)),
    };
    shutdown.cancel();
    tasks.close();
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, tasks.wait()).await;
    outcome
}
