//! Where log lines go: a buffer that a thread of its own writes out, the lines of up to
//! [`GATHER`] at a time in one write.
//!
//! A line written straight to stderr costs one `write` on the thread that logs, a runtime
//! worker in the middle of a request: about 6 % of an agent-facing node's CPU at one access
//! line per call. A queue with a writer thread that wakes for every line (a channel) moves the
//! `write` off the worker but adds a wake-up per line, which cost more than it saved (measured:
//! `docs/benchmarks.md`, "Log lines gathered"). Here a line is appended to a buffer; only the
//! first line into an empty buffer wakes the writer, which waits [`GATHER`] for more and then
//! writes them all: at most one wake-up and one `write` per [`GATHER`], none while nothing is
//! logged.
//!
//! Nothing is dropped: when [`MAX_QUEUED_BYTES`] wait (the log pipe blocked), whoever logs
//! waits for room, as it would have waited for a blocked `write`. Dropping the [`Guard`] writes
//! what is queued and stops the thread.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the writer waits, after the first line into an empty buffer, for more lines to
/// write with it: the most a line is delayed on its way to stderr.
pub const GATHER: Duration = Duration::from_millis(10);

/// Bytes of lines that may wait for the writer before whoever logs waits for room (about
/// 6,000 access lines).
pub const MAX_QUEUED_BYTES: usize = 2 << 20;

/// A writer thread's buffer capacity kept between writes; a larger one (after a burst) is
/// given back.
const KEPT_CAPACITY: usize = 64 << 10;

#[derive(Debug, Default)]
struct Queue {
    lines: Vec<u8>,
    stopping: bool,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// The writer waits here for a first line (or the stop).
    lines: Condvar,
    /// Whoever logs waits here for room.
    room: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A thread that panicked while holding the lock left whole lines or none: the queue is
        // still good to write.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The `MakeWriter` of the log layer: each line goes into the shared buffer.
#[derive(Debug, Clone)]
pub struct Gathered {
    shared: Arc<Shared>,
    max_queued: usize,
}

/// Stops the writer thread when dropped, after it has written every line queued.
#[derive(Debug)]
pub struct Guard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// A buffer written to `out` by a thread named `log-writer`; at most `max_queued` bytes wait.
pub fn gathered<W: Write + Send + 'static>(out: W, max_queued: usize) -> (Gathered, Guard) {
    let shared = Arc::new(Shared::default());
    let thread = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || write_out(&shared, out))
            // Without its writer thread a process could log nothing: stopping at start is
            // the one honest answer.
            .expect("cannot start the log writer thread")
    };
    (
        Gathered {
            shared: shared.clone(),
            max_queued,
        },
        Guard {
            shared,
            thread: Some(thread),
        },
    )
}

/// The writer thread: waits for a first line, gathers for [`GATHER`], writes all, until the
/// stop finds the buffer empty.
fn write_out<W: Write>(shared: &Shared, mut out: W) {
    let mut taken = Vec::new();
    loop {
        let mut q = shared.lock();
        while q.lines.is_empty() && !q.stopping {
            q = shared.lines.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
        if q.lines.is_empty() {
            return;
        }
        let stopping = q.stopping;
        drop(q);
        if !stopping {
            std::thread::sleep(GATHER);
        }
        std::mem::swap(&mut shared.lock().lines, &mut taken);
        shared.room.notify_all();
        // A log that cannot be written has nowhere to say so.
        let _ = out.write_all(&taken);
        let _ = out.flush();
        taken.clear();
        taken.shrink_to(KEPT_CAPACITY);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.shared.lock().stopping = true;
        self.shared.lines.notify_one();
        self.shared.room.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One line's writer.
#[derive(Debug)]
pub struct Line<'a>(&'a Gathered);

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let g = self.0;
        let mut q = g.shared.lock();
        while q.lines.len() >= g.max_queued && !q.stopping {
            q = g
                .shared
                .room
                .wait(q)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let first = q.lines.is_empty();
        q.lines.extend_from_slice(buf);
        drop(q);
        if first {
            g.shared.lines.notify_one();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Gathered {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        Line(self)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::sync::mpsc;
    use std::time::Instant;

    use tracing_subscriber::fmt::MakeWriter as _;

    use super::*;

    /// A writer that hands each write to the test, and can be held shut.
    #[derive(Clone)]
    struct Out {
        writes: mpsc::Sender<Vec<u8>>,
        open: Arc<Mutex<()>>,
    }

    impl Write for Out {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _open = self.open.lock().unwrap();
            let _ = self.writes.send(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn out() -> (Out, mpsc::Receiver<Vec<u8>>, Arc<Mutex<()>>) {
        let (tx, rx) = mpsc::channel();
        let open = Arc::new(Mutex::new(()));
        (
            Out {
                writes: tx,
                open: open.clone(),
            },
            rx,
            open,
        )
    }

    #[test]
    fn a_lone_line_is_written_without_waiting_for_another() {
        let (o, writes, _open) = out();
        let (w, _guard) = gathered(o, MAX_QUEUED_BYTES);
        w.make_writer().write_all(b"one\n").unwrap();
        let got = writes.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(got, b"one\n");
    }

    #[test]
    fn lines_of_many_threads_come_out_whole_in_each_threads_order_and_all_at_the_stop() {
        let (o, writes, _open) = out();
        let (w, guard) = gathered(o, MAX_QUEUED_BYTES);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let w = w.clone();
                std::thread::spawn(move || {
                    for i in 0..5_000 {
                        w.make_writer()
                            .write_all(
                                format!("t{t} line {i} {}\n", "x".repeat(i % 200)).as_bytes(),
                            )
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        drop(guard);
        let all: Vec<u8> = writes.try_iter().flatten().collect();
        let text = String::from_utf8(all).unwrap();
        let mut next = [0usize; 4];
        for line in text.lines() {
            let mut parts = line.split(' ');
            let t: usize = parts.next().unwrap()[1..].parse().unwrap();
            assert_eq!(parts.next(), Some("line"), "{line}");
            let i: usize = parts.next().unwrap().parse().unwrap();
            assert_eq!(i, next[t], "thread {t} out of order");
            assert_eq!(parts.next().unwrap().len(), i % 200, "{line}");
            next[t] += 1;
        }
        assert_eq!(next, [5_000; 4]);
    }

    #[test]
    fn lines_logged_together_go_out_in_fewer_writes() {
        let (o, writes, _open) = out();
        let (w, guard) = gathered(o, MAX_QUEUED_BYTES);
        // 1,000 lines within one gathering window would be one write; a busy machine may
        // split them over a few.
        let started = Instant::now();
        for i in 0..1_000 {
            w.make_writer()
                .write_all(format!("{i}\n").as_bytes())
                .unwrap();
        }
        let spent = started.elapsed();
        drop(guard);
        let n = writes.try_iter().count();
        let windows = spent.as_micros() / GATHER.as_micros() + 2;
        assert!(
            (n as u128) <= windows,
            "{n} writes for 1,000 lines logged in {spent:?}"
        );
    }

    #[test]
    fn a_blocked_output_makes_the_logger_wait_and_loses_nothing() {
        let (o, writes, open) = out();
        let (w, guard) = gathered(o, 1_000);
        let shut = open.lock().unwrap();
        let (done_tx, done) = mpsc::channel();
        let logger = {
            let w = w.clone();
            std::thread::spawn(move || {
                for i in 0..1_000 {
                    w.make_writer()
                        .write_all(format!("{i:09}\n").as_bytes())
                        .unwrap();
                    let _ = done_tx.send(i);
                }
            })
        };
        // The output is shut: the writer holds at most one taken buffer and the queue at most
        // 1,000 bytes (100 lines) more, so the logger must stop well short of its 1,000 lines.
        while let Ok(i) = done.recv_timeout(Duration::from_millis(500)) {
            assert!(i < 300, "{} lines logged past a shut output", i + 1);
        }
        drop(shut);
        logger.join().unwrap();
        drop(guard);
        let text = String::from_utf8(writes.try_iter().flatten().collect()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1_000);
        for (i, l) in lines.iter().enumerate() {
            assert_eq!(*l, format!("{i:09}"));
        }
    }
}
