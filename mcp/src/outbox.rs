//! The link's end of a page socket and the socket task's end: a bounded queue of text frames,
//! and beside it a close signal that no full queue can hold back.

use tokio::sync::{mpsc, oneshot};

/// Outbound frames queued per socket.
pub const SOCKET_QUEUE: usize = 1024;

/// The link's end of a page socket: a bounded queue of text frames, and beside it a close
/// signal that no full queue can hold back, so that the page always learns its close code.
#[derive(Debug)]
pub struct Outbox {
    frames: mpsc::Sender<String>,
    /// Taken by the first close; a socket is closed once.
    close: Option<oneshot::Sender<u16>>,
}

/// The socket task's end of an [`Outbox`].
#[derive(Debug)]
pub struct Outbound {
    /// Text frames to send, in order.
    pub frames: mpsc::Receiver<String>,
    /// The code to close with, ahead of any queued frame. An error means the link is gone.
    pub close: oneshot::Receiver<u16>,
}

/// A fresh outbox for a socket that completed pairing, and its task's end.
pub fn outbox() -> (Outbox, Outbound) {
    let (frames_tx, frames) = mpsc::channel(SOCKET_QUEUE);
    let (close_tx, close) = oneshot::channel();
    let outbox = Outbox {
        frames: frames_tx,
        close: Some(close_tx),
    };
    (outbox, Outbound { frames, close })
}

impl Outbox {
    /// Queues a text frame; false when the queue is full (or the socket gone).
    pub(crate) fn send(&self, text: String) -> bool {
        self.frames.try_send(text).is_ok()
    }

    /// Tells the socket to close with `code` now, whatever is still queued.
    pub(crate) fn close(&mut self, code: u16) {
        if let Some(close) = self.close.take() {
            let _ = close.send(code);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_close_passes_a_full_queue_and_the_first_code_wins() {
        let (mut outbox, mut outbound) = outbox();
        for i in 0..SOCKET_QUEUE {
            assert!(outbox.send(format!("frame {i}")));
        }
        assert!(!outbox.send("one too many".into()));
        outbox.close(4409);
        outbox.close(1001);
        assert_eq!(outbound.close.try_recv(), Ok(4409));
        assert_eq!(outbound.frames.try_recv().as_deref(), Ok("frame 0"));
    }
}
