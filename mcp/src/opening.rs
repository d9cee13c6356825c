//! The opening bytes of a page socket, read before any WebSocket layer buffers them: each frame
//! header is judged as it arrives, so a first message larger than [`MAX_FIRST_FRAME_BYTES`] is
//! refused on its header, and no more than a pairing frame's worth of bytes is ever held.

use std::io::Cursor;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_tungstenite::tungstenite::protocol::frame::FrameHeader;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Control, OpCode};

use crate::close::MAX_FIRST_FRAME_BYTES;

/// Bytes read before the first data message is complete: its frames and any control frames
/// ahead of it. More than this is refused like an oversized first frame.
const MAX_OPENING_BYTES: usize = 4 * MAX_FIRST_FRAME_BYTES;
/// The largest payload a control frame may have (RFC 6455, 5.5).
const MAX_CONTROL_PAYLOAD: u64 = 125;
/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 1024;

/// What the opening bytes hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// The first data message is complete and within the limit, or the opening is something the
    /// WebSocket layer refuses by itself (a close, an invalid header). Hand the bytes over.
    Ready,
    /// The first data message is larger than the limit, a control frame before it is larger
    /// than a control frame may be, or too many bytes came first: 4400.
    TooBig,
    /// The connection ended, or failed, first.
    Gone,
}

/// Reads from `stream` into `bytes` (which may already hold bytes read past the upgrade) until
/// the opening can be judged. Cancel-safe: what was read stays in `bytes`.
pub async fn read_opening<S: AsyncRead + Unpin>(stream: &mut S, bytes: &mut Vec<u8>) -> Opening {
    loop {
        if let Some(opening) = judge(bytes) {
            return opening;
        }
        if bytes.len() >= MAX_OPENING_BYTES {
            return Opening::TooBig;
        }
        let mut chunk = [0u8; READ_CHUNK];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return Opening::Gone,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Walks the frames in `bytes`; `None` while more bytes are needed to judge.
fn judge(bytes: &[u8]) -> Option<Opening> {
    let mut at = 0usize;
    let mut message = 0u64;
    loop {
        let mut cursor = Cursor::new(&bytes[at..]);
        let (header, len) = match FrameHeader::parse(&mut cursor) {
            Ok(Some(parsed)) => parsed,
            Ok(None) => return None,
            Err(_) => return Some(Opening::Ready),
        };
        let data = matches!(header.opcode, OpCode::Data(_));
        if data {
            message = message.saturating_add(len);
            if message > MAX_FIRST_FRAME_BYTES as u64 {
                return Some(Opening::TooBig);
            }
        } else if len > MAX_CONTROL_PAYLOAD {
            return Some(Opening::TooBig);
        }
        let end = (at as u64)
            .saturating_add(cursor.position())
            .saturating_add(len);
        if end > bytes.len() as u64 {
            return None;
        }
        if header.opcode == OpCode::Control(Control::Close) || (data && header.is_final) {
            return Some(Opening::Ready);
        }
        at = end as usize;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame (the mask is zero: the payload reads as sent).
    fn frame(first: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![first];
        match payload.len() {
            n if n < 126 => out.push(0x80 | n as u8),
            n if n <= usize::from(u16::MAX) => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(payload);
        out
    }

    const TEXT: u8 = 0x81;
    const TEXT_PART: u8 = 0x01;
    const CONTINUATION_END: u8 = 0x80;
    const PING: u8 = 0x89;
    const CLOSE: u8 = 0x88;

    #[test]
    fn a_first_message_within_the_limit_is_ready_once_complete() {
        let whole = frame(TEXT, &[b'x'; MAX_FIRST_FRAME_BYTES]);
        assert_eq!(judge(&whole), Some(Opening::Ready));
        assert_eq!(judge(&whole[..whole.len() - 1]), None);
        assert_eq!(judge(&whole[..1]), None);
        assert_eq!(judge(&[]), None);
        // Bytes after the first message are left to the WebSocket layer.
        let mut more = whole.clone();
        more.extend(frame(TEXT, &[b'y'; 5000]));
        assert_eq!(judge(&more), Some(Opening::Ready));
    }

    #[test]
    fn an_oversized_first_message_is_refused_on_its_header() {
        let big = frame(TEXT, &[b'x'; MAX_FIRST_FRAME_BYTES + 1]);
        assert_eq!(judge(&big[..14]), Some(Opening::TooBig));
        let huge = frame(TEXT, &vec![b'x'; 100 * 1024]);
        assert_eq!(judge(&huge[..14]), Some(Opening::TooBig));
        // Fragments count together.
        let mut parts = frame(TEXT_PART, &[b'x'; 1000]);
        parts.extend(frame(CONTINUATION_END, &[b'x'; 100]));
        assert_eq!(judge(&parts), Some(Opening::TooBig));
    }

    #[test]
    fn control_frames_ahead_are_stepped_over_and_bounded() {
        let mut opening = frame(PING, b"hi");
        opening.extend(frame(TEXT, b"{}"));
        assert_eq!(judge(&opening), Some(Opening::Ready));
        assert_eq!(judge(&frame(CLOSE, &[0x03, 0xe8])), Some(Opening::Ready));
        assert_eq!(judge(&frame(PING, &[0; 126])[..8]), Some(Opening::TooBig));
        // An invalid opcode is left to the WebSocket layer to refuse.
        assert_eq!(judge(&frame(0x83, b"x")), Some(Opening::Ready));
    }

    #[tokio::test]
    async fn reading_stops_at_the_limit_of_bytes_before_the_first_message() {
        let mut pings = Vec::new();
        while pings.len() < 2 * MAX_OPENING_BYTES {
            pings.extend(frame(PING, &[0; 100]));
        }
        let mut stream = Cursor::new(pings);
        let mut bytes = Vec::new();
        assert_eq!(read_opening(&mut stream, &mut bytes).await, Opening::TooBig);
        assert!(bytes.len() < MAX_OPENING_BYTES + READ_CHUNK);
        let mut short = Cursor::new(frame(TEXT, b"{}")[..3].to_vec());
        assert_eq!(
            read_opening(&mut short, &mut Vec::new()).await,
            Opening::Gone
        );
    }
}
