//! The open-loop schedule: call `i` is due at `start + i / rate` and is started at that instant
//! whatever earlier calls are doing, from a dedicated thread whose sleeps are finer than the
//! async timer's millisecond. In-flight calls are bounded; a call due at the bound is skipped
//! and counted, never delayed.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

/// What to drive.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Calls per second.
    pub rate: u32,
    /// Calls in the schedule.
    pub total: u64,
    /// Calls in flight at most.
    pub max_in_flight: usize,
}

/// What the schedule did.
#[derive(Debug, Clone, Copy)]
pub struct Driven {
    /// Calls started.
    pub sent: u64,
    /// Calls due while `max_in_flight` were in flight.
    pub skipped: u64,
    /// From the first call's due time to the last call's start.
    pub elapsed: Duration,
}

/// When call `i` is due, after the start.
pub fn due_offset(i: u64, rate: u32) -> Duration {
    let nanos = u128::from(i) * 1_000_000_000 / u128::from(rate.max(1));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Runs the schedule on the calling thread (blocking it), starting `call(i, due)` on `runtime`
/// under `tasks` for each call. Call from a thread of its own, e.g. `spawn_blocking`.
pub fn drive<F, Fut>(plan: Plan, runtime: &Handle, tasks: &TaskTracker, mut call: F) -> Driven
where
    F: FnMut(u64, Instant) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let bound = Arc::new(Semaphore::new(plan.max_in_flight));
    let (mut sent, mut skipped) = (0, 0);
    let start = Instant::now();
    for i in 0..plan.total {
        let due = start + due_offset(i, plan.rate);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        match bound.clone().try_acquire_owned() {
            Ok(permit) => {
                let fut = call(i, due);
                tasks.spawn_on(
                    async move {
                        fut.await;
                        drop(permit);
                    },
                    runtime,
                );
                sent += 1;
            }
            Err(_) => skipped += 1,
        }
    }
    Driven {
        sent,
        skipped,
        elapsed: start.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    #[test]
    fn calls_are_spread_uniformly() {
        assert_eq!(due_offset(0, 2000), Duration::ZERO);
        assert_eq!(due_offset(1, 2000), Duration::from_micros(500));
        assert_eq!(due_offset(3, 3), Duration::from_secs(1));
        assert_eq!(
            due_offset(4_000_000_000, 1),
            Duration::from_secs(4_000_000_000)
        );
    }

    #[test]
    fn the_bound_skips_instead_of_waiting() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let tasks = TaskTracker::new();
        let done = Arc::new(AtomicU64::new(0));
        let plan = Plan {
            rate: 1000,
            total: 50,
            max_in_flight: 5,
        };
        let d = drive(plan, rt.handle(), &tasks, |_, _| {
            let done = done.clone();
            // A current-thread runtime runs nothing until `block_on`, so every permit stays taken.
            async move {
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
        assert_eq!((d.sent, d.skipped), (5, 45));
        assert!(d.elapsed >= Duration::from_millis(49));
        tasks.close();
        rt.block_on(tasks.wait());
        assert_eq!(done.load(Ordering::Relaxed), 5);
    }
}
