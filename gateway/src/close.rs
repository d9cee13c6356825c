//! Close codes of the contract, for page WebSockets and Echo sockets, and the answer to a
//! peer's close.

/// Bad, expired or wrong-tenant token.
pub const UNAUTHORIZED: u16 = 4401;
/// Origin not allowed.
pub const FORBIDDEN_ORIGIN: u16 = 4403;
/// A connection limit (retryable).
pub const LIMIT: u16 = 4429;
/// Repeated invalid frames, or a frame claiming another page's clientId.
pub const POLICY: u16 = 1008;
/// Frame over 4 MiB.
pub const TOO_BIG: u16 = 1009;
/// The node is draining.
pub const GOING_AWAY: u16 = 1001;
/// The page could not keep up with its outbound queue (retryable).
pub const TRY_AGAIN_LATER: u16 = 1013;
/// Internal error (e.g. the broker is unreachable at admission).
pub const INTERNAL: u16 = 1011;

/// Every code above: the close-code table of `docs/operations.md` lists exactly these.
pub const ALL: [u16; 8] = [
    UNAUTHORIZED,
    FORBIDDEN_ORIGIN,
    LIMIT,
    POLICY,
    TOO_BIG,
    GOING_AWAY,
    TRY_AGAIN_LATER,
    INTERNAL,
];

/// After the peer's close frame: sends the close frame the WebSocket library queued in answer
/// (RFC 6455 section 5.5.1) before the socket is dropped, waiting at most a second.
pub async fn answer_peer_close(socket: &mut axum::extract::ws::WebSocket) {
    let flush = futures_util::SinkExt::flush(socket);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), flush).await;
}
