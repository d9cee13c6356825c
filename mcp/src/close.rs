//! WebSocket close codes the pairing server sends to a page, and the handshake limits they enforce.

use std::time::Duration;

/// Invalid pairing frame (shape, binary, larger than 1 KiB). The page stops.
pub const INVALID_PAIRING_FRAME: u16 = 4400;
/// Wrong code, or unknown/revoked token. The page stops and discards a refused token.
pub const REFUSED: u16 = 4401;
/// No pairing frame within [`FIRST_FRAME_DEADLINE`]. The page stops.
pub const NO_PAIRING_FRAME: u16 = 4408;
/// Superseded by a newer pairing or resume. The page stops.
pub const SUPERSEDED: u16 = 4409;
/// Another handshake in progress, or within [`REFUSAL_PAUSE`] after a 4401. The page retries.
pub const BUSY: u16 = 4429;
/// The CLI is shutting down. The page keeps its token and reconnects.
pub const GOING_AWAY: u16 = 1001;
/// A frame larger than [`MAX_FRAME_BYTES`] once paired. The page reconnects.
pub const TOO_BIG: u16 = 1009;

/// Every code above: the close-code table of `docs/desktop-mcp.md` lists exactly these.
pub const ALL: [u16; 7] = [
    INVALID_PAIRING_FRAME,
    REFUSED,
    NO_PAIRING_FRAME,
    SUPERSEDED,
    BUSY,
    GOING_AWAY,
    TOO_BIG,
];

/// The first frame must arrive within this.
pub const FIRST_FRAME_DEADLINE: Duration = Duration::from_millis(3000);
/// The first frame is at most this many bytes, judged on its header before it is read.
pub const MAX_FIRST_FRAME_BYTES: usize = 1024;
/// After a 4401, new handshakes are refused with 4429 for this long.
pub const REFUSAL_PAUSE: Duration = Duration::from_millis(250);
/// Once paired, any frame larger than this closes the socket with 1009.
pub const MAX_FRAME_BYTES: usize = 4 * 1024 * 1024;

/// The reason text sent with a close code (short, never secret).
pub fn reason(code: u16) -> &'static str {
    match code {
        INVALID_PAIRING_FRAME => "invalid pairing frame",
        REFUSED => "pairing refused",
        NO_PAIRING_FRAME => "no pairing frame in time",
        SUPERSEDED => "superseded by a newer pairing",
        BUSY => "busy, retry",
        GOING_AWAY => "toolmark-mcp is shutting down",
        TOO_BIG => "frame too large",
        _ => "",
    }
}
