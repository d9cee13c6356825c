//! A fleet of pages: page `i` is user `u{i}` (or the `--user-prefix`) in conversation `c{i}`, connected on a uniform
//! ramp, tracked until the run stops them all.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::LoadError;
use crate::page::{self, Fallback, PageSpec};
use crate::tally::{Counts, Tally};
use crate::target::Target;
use crate::token::Minter;

/// How long the fleet may take to settle beyond its ramp.
const SETTLE_SLACK: Duration = Duration::from_secs(60);
/// How long stopped pages get to close their sockets.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The user of page `index`.
pub fn user(index: usize) -> String {
    format!("u{index}")
}

/// The conversation of page `index`.
pub fn conversation(index: usize) -> String {
    format!("c{index}")
}

/// Pages being connected or connected; dropping it leaves them running until [`Fleet::stop`].
#[derive(Debug)]
pub struct Fleet {
    /// Outcomes of every page.
    pub tally: Arc<Tally>,
    /// The page load id of page `i` at index `i`.
    pub client_ids: Vec<String>,
    ramp: Duration,
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Fleet {
    /// Mints every page's token, then starts connecting `pages` pages, `per_sec` a second.
    pub fn launch(
        target: Arc<Target>,
        fallback: Option<Fallback>,
        minter: &Minter,
        pages: usize,
        per_sec: u32,
    ) -> Result<Self, LoadError> {
        Self::launch_range(target, fallback, minter, 0..pages, per_sec)
    }

    /// Like [`Fleet::launch`] for the pages `range` only (one process's share of a fleet
    /// spread over several processes); `client_ids[k]` is page `range.start + k`.
    pub fn launch_range(
        target: Arc<Target>,
        fallback: Option<Fallback>,
        minter: &Minter,
        range: std::ops::Range<usize>,
        per_sec: u32,
    ) -> Result<Self, LoadError> {
        let pages = range.len();
        let specs = range
            .map(|index| {
                let token = minter.mint(&target.user(index), &conversation(index))?;
                Ok(PageSpec {
                    index,
                    client_id: uuid::Uuid::new_v4().to_string(),
                    token,
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        let client_ids = specs.iter().map(|s| s.client_id.clone()).collect();
        let tally = Arc::new(Tally::default());
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        let period = Duration::from_secs(1) / per_sec;
        let ramp = period * u32::try_from(pages).unwrap_or(u32::MAX);
        let (spawner, t, s) = (tasks.clone(), tally.clone(), stop.clone());
        tasks.spawn(async move {
            let start = tokio::time::Instant::now();
            for (i, spec) in specs.into_iter().enumerate() {
                tokio::select! {
                    () = s.cancelled() => return,
                    () = tokio::time::sleep_until(start + period * u32::try_from(i).unwrap_or(u32::MAX)) => {}
                }
                spawner.spawn(page::run(target.clone(), fallback.clone(), spec, t.clone(), s.clone()));
            }
        });
        Ok(Fleet {
            tally,
            client_ids,
            ramp,
            stop,
            tasks,
        })
    }

    /// Waits until every page is ready, printing progress; fails naming the reasons when a
    /// page failed, dropped, or the fleet did not settle in time.
    pub async fn ready(&self) -> Result<Counts, LoadError> {
        let pages = self.client_ids.len();
        let deadline = Instant::now() + self.ramp + SETTLE_SLACK;
        let mut last_report = Instant::now();
        loop {
            let c = self.tally.counts();
            if c.failed > 0 || c.dropped > 0 {
                return Err(self.failure(c));
            }
            if c.settled() >= pages {
                eprintln!("pages: {} ready", c.ready);
                return Ok(c);
            }
            if Instant::now() > deadline {
                return Err(LoadError::Pages(format!(
                    "only {} of {pages} pages ready after {:?}",
                    c.ready,
                    self.ramp + SETTLE_SLACK
                )));
            }
            if last_report.elapsed() >= Duration::from_secs(2) {
                eprintln!("pages: {} of {pages} ready", c.ready);
                last_report = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Checks that no page failed or dropped since [`Fleet::ready`].
    pub fn intact(&self) -> Result<Counts, LoadError> {
        let c = self.tally.counts();
        if c.failed > 0 || c.dropped > 0 {
            Err(self.failure(c))
        } else {
            Ok(c)
        }
    }

    fn failure(&self, c: Counts) -> LoadError {
        LoadError::Pages(format!(
            "{} of {} pages ready, {} failed, {} dropped: {}",
            c.ready,
            self.client_ids.len(),
            c.failed,
            c.dropped,
            self.tally.reasons()
        ))
    }

    /// Closes every page socket (close handshake with the gateway) and waits for them.
    pub async fn stop(self) {
        self.stop.cancel();
        self.tasks.close();
        if tokio::time::timeout(STOP_TIMEOUT, self.tasks.wait())
            .await
            .is_err()
        {
            eprintln!("pages: some sockets did not close within {STOP_TIMEOUT:?}");
        }
    }
}
