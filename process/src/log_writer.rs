//! Where log lines go: stderr, in one write per batch of lines. A line logged on one of the
//! runtime's worker threads joins the process's batch, which is written once it holds
//! [`FLUSH_AT`] bytes or [`FLUSH_AFTER`] after its first line, whichever comes first (an
//! access log's `buffer` and `flush`, as web servers have them): under load one write carries
//! hundreds of access lines, on a quiet node a line waits at most [`FLUSH_AFTER`]. A thread
//! of its own writes a batch whose time has come; it sleeps while no line waits. Every other
//! thread (the main thread, the blocking pool, the OTLP exporter) writes the batch and its own
//! line at once, so the lines keep the order they were logged in.
//!
//! The batch is written when a worker thread stops (the runtime's hook, before the process
//! ends) and before a panic's message, so that the message follows what was logged before it.
//! A process killed outright loses the lines of its last [`FLUSH_AFTER`], at most.

use std::cell::Cell;
use std::io::{self, Write};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::Thread;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// The batch is written once it holds this many bytes.
pub const FLUSH_AT: usize = 32 * 1024;

/// The batch is written this long after its first line, at most.
pub const FLUSH_AFTER: Duration = Duration::from_millis(100);

/// Lines not written yet.
#[derive(Debug, Default)]
struct Batch(Vec<u8>);

impl Batch {
    /// Adds a line; writes the batch to `out` once it holds [`FLUSH_AT`] bytes. Whether the
    /// line is the batch's first (its time starts).
    fn push(&mut self, line: &[u8], out: &mut impl Write) -> bool {
        let first = self.0.is_empty();
        self.0.extend_from_slice(line);
        if self.0.len() >= FLUSH_AT {
            self.write_to(out);
        }
        first
    }

    /// Writes the batch to `out` in one write (stderr is unbuffered).
    fn write_to(&mut self, out: &mut impl Write) {
        if !self.0.is_empty() {
            let _ = out.write_all(&self.0);
            self.0.clear();
        }
    }
}

/// The process's batch.
static BATCH: Mutex<Batch> = Mutex::new(Batch(Vec::new()));

fn batch() -> MutexGuard<'static, Batch> {
    // A panic while holding it leaves whole lines only: the batch stays usable.
    BATCH.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The thread that writes a batch [`FLUSH_AFTER`] after its first line: woken by that line,
/// asleep while no line waits.
fn flusher() -> &'static Thread {
    static FLUSHER: OnceLock<Thread> = OnceLock::new();
    FLUSHER.get_or_init(|| {
        std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(|| {
                loop {
                    std::thread::park();
                    std::thread::sleep(FLUSH_AFTER);
                    flush();
                }
            })
            .map(|handle| handle.thread().clone())
            // No thread: each batch waits for its size, a worker's end or the next flush.
            .unwrap_or_else(|_| std::thread::current())
    })
}

thread_local! {
    /// Set on a runtime worker thread (the first time the runtime parks it): its lines join
    /// the batch.
    static BATCHING: Cell<bool> = const { Cell::new(false) };
}

/// The runtime's `on_thread_park` hook: from now on the worker's lines join the batch.
pub fn on_park() {
    BATCHING.set(true);
}

/// Writes the batch now.
pub fn flush() {
    batch().write_to(&mut io::stderr().lock());
}

/// Writes a panic's message after the lines logged before it.
pub fn flush_before_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // Not while this thread holds the batch (a panic inside a write): its lines wait.
        if let Ok(mut b) = BATCH.try_lock() {
            b.write_to(&mut io::stderr().lock());
        }
        previous(info);
    }));
}

/// The `tracing` writer of log lines: stderr, in batches.
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
        let mut b = batch();
        if BATCHING.get() {
            // Stderr is locked only when the batch is written.
            if b.push(buf, &mut io::stderr()) {
                drop(b);
                flusher().unpark();
            }
        } else {
            let mut out = io::stderr().lock();
            b.write_to(&mut out);
            out.write_all(buf)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_batch_is_written_whole_once_it_is_full_or_asked() {
        let mut out = Vec::new();
        let mut batch = Batch::default();
        assert!(
            batch.push(b"one\n", &mut out),
            "the first line starts the batch"
        );
        assert!(!batch.push(b"two\n", &mut out));
        assert!(out.is_empty(), "held until asked");
        batch.write_to(&mut out);
        assert_eq!(out, b"one\ntwo\n");
        let line = vec![b'x'; FLUSH_AT / 4];
        for _ in 0..3 {
            batch.push(&line, &mut out);
        }
        assert_eq!(out.len(), 8, "three quarters of a batch wait");
        batch.push(&line, &mut out);
        assert_eq!(
            out.len(),
            8 + FLUSH_AT,
            "a full batch goes out without being asked"
        );
        assert!(batch.0.is_empty());
    }

    #[test]
    fn a_workers_line_waits_in_the_batch_and_is_written_once_its_time_has_passed() {
        std::thread::spawn(|| {
            let waiting = || batch().0.len();
            let mut line = Line;
            assert!(
                !BATCHING.get(),
                "a thread never parked writes each line at once"
            );
            line.write_all(b"").unwrap();
            assert_eq!(waiting(), 0);
            on_park();
            let logged = Instant::now();
            line.write_all(b"held\n").unwrap();
            assert!(waiting() >= 5, "the line joined the batch");
            // Written by the batch's own thread, with nothing else logged: within its time
            // (with room for a busy machine), and not before.
            let deadline = logged + FLUSH_AFTER * 50;
            while waiting() > 0 {
                assert!(Instant::now() < deadline, "the batch was never written");
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(logged.elapsed() >= FLUSH_AFTER, "the batch waited its time");
        })
        .join()
        .unwrap();
    }
}
