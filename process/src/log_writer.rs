//! Where log lines go: stderr, in one write per batch of lines on the runtime's worker
//! threads. A worker's lines wait in a buffer of its own until it runs out of ready work and
//! is about to park ([`on_park`], the runtime's hook), or until the buffer holds
//! [`FLUSH_AT`] bytes; under load one write carries many access lines, and when the node is
//! quiet a line goes out as soon as the task that logged it yields to an idle worker. No timer,
//! no thread of its own. Every other thread (the main thread, the blocking pool, the OTLP
//! exporter) writes each line at once.
//!
//! A worker's lines are written when the thread stops (the runtime's hook, and the buffer's
//! own drop at the thread's end) and before a panic's message, so that the message follows
//! what was logged before it. A process killed outright loses the lines its workers had not
//! written, at most one batch each.

use std::cell::{Cell, RefCell};
use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

/// A worker's buffered lines are written once they reach this many bytes.
pub const FLUSH_AT: usize = 32 * 1024;

/// A worker's unwritten lines; written when the thread ends.
#[derive(Debug, Default)]
struct Pending(Vec<u8>);

impl Pending {
    /// Adds a line; writes the batch to `out` once it holds [`FLUSH_AT`] bytes.
    fn push(&mut self, line: &[u8], out: &mut impl Write) {
        self.0.extend_from_slice(line);
        if self.0.len() >= FLUSH_AT {
            self.write_to(out);
        }
    }

    /// Writes the batch to `out` in one write (stderr is unbuffered).
    fn write_to(&mut self, out: &mut impl Write) {
        if !self.0.is_empty() {
            let _ = out.write_all(&self.0);
            self.0.clear();
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.write_to(&mut io::stderr().lock());
    }
}

thread_local! {
    /// Set on a thread the runtime parks: its lines wait for the next park.
    static BATCHING: Cell<bool> = const { Cell::new(false) };
    static PENDING: RefCell<Pending> = const { RefCell::new(Pending(Vec::new())) };
}

/// The runtime's `on_thread_park` hook: the worker's lines go out in one write, and from now
/// on its lines wait for its next park.
pub fn on_park() {
    BATCHING.set(true);
    flush();
}

/// Writes this thread's buffered lines now.
pub fn flush() {
    let _ = PENDING.try_with(|p| {
        if let Ok(mut p) = p.try_borrow_mut() {
            p.write_to(&mut io::stderr().lock());
        }
    });
}

/// Writes a panic's message after the lines its thread logged before it.
pub fn flush_before_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        flush();
        previous(info);
    }));
}

/// The `tracing` writer of log lines: stderr, batched on worker threads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stderr;

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line
    }
}

/// One line's writer (the formatter writes a whole line at once).
#[derive(Debug)]
pub struct Line;

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !BATCHING.get() {
            return io::stderr().write(buf);
        }
        let buffered = PENDING.try_with(|p| match p.try_borrow_mut() {
            Ok(mut p) => {
                p.push(buf, &mut io::stderr().lock());
                true
            }
            Err(_) => false,
        });
        if buffered == Ok(true) {
            Ok(buf.len())
        } else {
            io::stderr().write(buf)
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_written_whole_once_it_is_full_or_asked() {
        let mut out = Vec::new();
        let mut pending = Pending::default();
        pending.push(b"one\n", &mut out);
        pending.push(b"two\n", &mut out);
        assert!(out.is_empty(), "held until asked");
        pending.write_to(&mut out);
        assert_eq!(out, b"one\ntwo\n");
        let line = vec![b'x'; FLUSH_AT / 4];
        for _ in 0..3 {
            pending.push(&line, &mut out);
        }
        assert_eq!(out.len(), 8, "three quarters of a batch wait");
        pending.push(&line, &mut out);
        assert_eq!(
            out.len(),
            8 + FLUSH_AT,
            "a full batch goes out without being asked"
        );
        assert!(pending.0.is_empty());
        std::mem::forget(pending);
    }

    #[test]
    fn a_thread_holds_its_lines_only_once_the_runtime_parked_it() {
        std::thread::spawn(|| {
            let held = || PENDING.with_borrow(|p| p.0.len());
            let mut line = Line;
            line.write_all(b"").unwrap();
            assert!(
                !BATCHING.get(),
                "a thread never parked writes each line at once"
            );
            on_park();
            line.write_all(b"held\n").unwrap();
            assert_eq!(held(), 5);
            PENDING.with_borrow_mut(|p| p.0.clear());
        })
        .join()
        .unwrap();
    }
}
