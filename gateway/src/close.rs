//! Close codes of the contract, for page WebSockets and Echo sockets.

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
