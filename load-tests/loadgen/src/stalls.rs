//! Redis stalls for the soak: `SIGSTOP` of a `redis-server` for a while, then `SIGCONT`, at a
//! steady pace; the stalls are remembered so that a request failing of one is told apart from a
//! fault.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// When Redis was stalled: (start, end); a stall under way has no end yet.
#[derive(Debug, Default)]
pub struct Stalls(std::sync::Mutex<Vec<(Instant, Option<Instant>)>>);

/// How long after a stall a request may still fail of it (the node's 2 s command timeout,
/// and a margin).
const STALL_TAIL: Duration = Duration::from_secs(3);

impl Stalls {
    /// Whether a request from `sent` to `done` overlapped a stall (or its tail).
    pub fn overlapped(&self, sent: Instant, done: Instant) -> bool {
        let windows = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        windows.iter().any(|(start, end)| {
            let end = end.map_or(done, |e| e + STALL_TAIL);
            *start <= done && sent <= end
        })
    }

    /// Stalls `pid` for `secs` every `every` seconds until `stop`; it is always resumed.
    pub async fn run(self: Arc<Self>, pid: u32, every: u64, secs: u64, stop: CancellationToken) {
        let signal = |sig: &str| {
            let _ = std::process::Command::new("kill")
                .args([sig, &pid.to_string()])
                .status();
        };
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(Duration::from_secs(every)) => {}
            }
            let at = self.start();
            signal("-STOP");
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(Duration::from_secs(secs)) => {}
            }
            signal("-CONT");
            self.end(at);
            if stop.is_cancelled() {
                return;
            }
        }
    }

    /// Stalls begun so far.
    pub fn count(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    fn start(&self) -> usize {
        let mut w = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        w.push((Instant::now(), None));
        w.len() - 1
    }

    fn end(&self, at: usize) {
        let mut w = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(s) = w.get_mut(at) {
            s.1 = Some(Instant::now());
        }
    }
}
