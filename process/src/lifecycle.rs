//! One lifecycle per process: one cancellation token that says the stop has begun and one task
//! tracker that every task of the process is spawned on, so the stop can wait for all of them,
//! bounded by one grace period.
//!
//! The order of a stop (written down in `docs/architecture.md`, tested by the gateway's and the
//! worker's suites): stop accepting (readiness fails, new pages and calls are refused); the
//! tasks watching [`Lifecycle::stopping`] wind down (page sockets close with 1001, jobs finish
//! the item in hand); the process waits for every tracked task, so their events and outcomes
//! reach the broker; only then are the listener and the broker's connections closed, and
//! telemetry is flushed last, by [`crate::cli::serve`].

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The stop token and the task tracker of a process.
#[derive(Debug, Clone, Default)]
pub struct Lifecycle {
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Lifecycle {
    /// A lifecycle that has not begun to stop.
    pub fn new() -> Self {
        Lifecycle::default()
    }

    /// Cancelled once the stop has begun.
    pub fn stopping(&self) -> &CancellationToken {
        &self.stop
    }

    /// Whether the stop has begun.
    pub fn is_stopping(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Begins the stop.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Begins the stop when `signal` resolves (a tracked task that also ends when the stop
    /// begins some other way).
    pub fn stop_on(&self, signal: impl Future<Output = ()> + Send + 'static) {
        let me = self.clone();
        self.spawn(async move {
            tokio::select! {
                () = signal => me.stop(),
                () = me.stop.cancelled() => {}
            }
        });
    }

    /// Spawns a tracked task.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks.spawn(task)
    }

    /// A token that keeps [`Lifecycle::finish`] waiting while it lives (for work the tracker
    /// does not spawn itself, such as an upgraded socket's task).
    pub fn hold(&self) -> tokio_util::task::task_tracker::TaskTrackerToken {
        self.tasks.token()
    }

    /// Waits until every tracked task has ended, at most `grace`. Returns whether they all did.
    pub async fn finish(&self, grace: Duration) -> bool {
        self.tasks.close();
        let done = tokio::time::timeout(grace, self.tasks.wait()).await.is_ok();
        if !done {
            tracing::warn!(
                left = self.tasks.len(),
                "grace period over with tasks still running"
            );
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn finish_waits_for_tasks_that_wind_down_after_the_stop() {
        let life = Lifecycle::new();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..3 {
            let (life2, tx) = (life.clone(), tx.clone());
            life.spawn(async move {
                life2.stopping().cancelled().await;
                tokio::task::yield_now().await;
                tx.send(i).unwrap();
            });
        }
        life.stop_on(async {});
        assert!(life.finish(Duration::from_secs(5)).await);
        drop(tx);
        let mut ended = Vec::new();
        while let Some(i) = rx.recv().await {
            ended.push(i);
        }
        ended.sort_unstable();
        assert_eq!(ended, vec![0, 1, 2]);
    }

    #[tokio::test]
    async fn finish_gives_up_after_the_grace_period() {
        let life = Lifecycle::new();
        life.spawn(std::future::pending::<()>());
        life.stop();
        assert!(!life.finish(Duration::from_millis(50)).await);
    }
}
