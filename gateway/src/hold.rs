//! Frames a page sent, held while the broker does not answer. A page sends a `result`, a
//! `confirmed` or a manifest once and never again, so a node that accepted one does not give up
//! on it when Redis stalls, restarts or loses a reply: it submits it again until Redis answers,
//! for up to `broker.stall_hold_secs` from when the frame came. The broker's transitions are
//! idempotent when submitted again (`submit_result_again`, `submit_confirmed_again`, a manifest
//! stored twice is stored once) and each records its events with its state, emitted once under
//! a name of the change (`toolmark_broker::Change`), so an attempt that was applied without its
//! reply reaching the node is neither applied nor announced twice.
//!
//! Frames are held in place: each page's frames are handled in order by its own socket task, so
//! a frame held keeps the page's later frames behind it (in order, in the socket's buffers). The
//! node bounds what it holds in count and bytes (`broker.stall_hold_frames`,
//! `broker.stall_hold_bytes`); past a bound or the hold time a frame is dropped, counted
//! (`toolmark_frames_dropped_total{reason}`) and logged at ERROR naming its conversation. A
//! manifest's pin events, written after it is stored, are held with it, and dropped past the
//! hold the same way as the frame `pins` (the manifest stays stored).

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use prometheus_client::metrics::gauge::Gauge;
use toolmark_broker::retry::{self, Unknown};
use toolmark_broker::{ConvKey, now_ms};
use toolmark_config::HoldSettings;

use crate::metrics::Metrics;

/// What a node holds at once, and the names of the frames it received.
#[derive(Debug)]
pub struct Hold {
    settings: HoldSettings,
    frames: AtomicUsize,
    bytes: AtomicUsize,
    /// A name of this process, unique among the nodes: the prefix of its frames' names.
    process: String,
    seq: AtomicU64,
    /// `toolmark_frames_holding`.
    gauge: Gauge,
}

impl Hold {
    /// A node's hold under `settings`, showing what it holds on `gauge`.
    pub fn new(settings: HoldSettings, gauge: Gauge) -> Self {
        Hold {
            settings,
            frames: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            process: uuid::Uuid::new_v4().simple().to_string()[..16].to_owned(),
            seq: AtomicU64::new(0),
            gauge,
        }
    }

    /// A frame of `bytes` just received.
    pub fn frame(&self, bytes: usize) -> Frame<'_> {
        Frame {
            hold: self,
            received: Instant::now(),
            received_ms: now_ms(),
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            bytes,
            holding: false,
        }
    }

    /// Frames held now.
    pub fn frames(&self) -> usize {
        self.frames.load(Ordering::Relaxed)
    }
}

/// One frame a page sent, from when this node received it.
#[derive(Debug)]
pub struct Frame<'a> {
    hold: &'a Hold,
    received: Instant,
    received_ms: u64,
    seq: u64,
    bytes: usize,
    /// Counted in the hold.
    holding: bool,
}

impl Frame<'_> {
    /// When the node received it (ms since the epoch): a result is judged as at this instant.
    pub fn received_ms(&self) -> u64 {
        self.received_ms
    }

    /// The name of what this frame changes (its events are emitted once under it): unique
    /// among every node's frames.
    pub fn name(&self, what: &str) -> String {
        format!("{what}:{}:{}", self.hold.process, self.seq)
    }

    /// Runs `attempt` until the broker answers ([`retry::until_answered`]), until the hold time
    /// since the frame came has passed. `None` when the frame is dropped: the node holds too
    /// much already, or the time ran out (counted and logged, naming `what` and the
    /// conversation).
    pub async fn until_known<T, E, F>(
        &mut self,
        metrics: &Metrics,
        conv: &ConvKey,
        what: &'static str,
        mut attempt: impl FnMut(bool) -> F,
    ) -> Option<Result<T, E>>
    where
        E: Unknown + std::fmt::Display,
        F: Future<Output = Result<T, E>>,
    {
        let first = attempt(false).await;
        self.known_after(metrics, conv, what, attempt, first).await
    }

    /// [`Frame::until_known`] of which the first attempt was made already, with the outcome
    /// `first` ([`retry::answered_after`]). A frame's path that awaits its first attempt
    /// itself, and this only when that outcome is unknown (boxed), keeps a small future for
    /// the common case: a page's result is handled in a box of its own per frame.
    pub async fn known_after<T, E, F>(
        &mut self,
        metrics: &Metrics,
        conv: &ConvKey,
        what: &'static str,
        attempt: impl FnMut(bool) -> F,
        first: Result<T, E>,
    ) -> Option<Result<T, E>>
    where
        E: Unknown + std::fmt::Display,
        F: Future<Output = Result<T, E>>,
    {
        let until = self.received + self.hold.settings.time;
        let mut full = false;
        let held = |error: &E| {
            if self.holding {
                return true;
            }
            if !self.take() {
                full = true;
                return false;
            }
            metrics.frame_held();
            tracing::warn!(tenant = %conv.tenant, user = %conv.user, conversation = %conv.conversation, frame = what, error = %error, "page frame held until the broker answers");
            true
        };
        match retry::answered_after(until, held, attempt, first).await {
            Err(error) if error.unknown() && full => {
                metrics.frame_dropped("hold_full");
                tracing::error!(tenant = %conv.tenant, user = %conv.user, conversation = %conv.conversation, frame = what, bytes = self.bytes, error = %error, "page frame dropped: the node holds as many frames as broker.stall_hold_frames and broker.stall_hold_bytes allow");
                None
            }
            Err(error) if error.unknown() => {
                metrics.frame_dropped("hold_time");
                tracing::error!(tenant = %conv.tenant, user = %conv.user, conversation = %conv.conversation, frame = what, held_ms = u64::try_from(self.received.elapsed().as_millis()).unwrap_or(u64::MAX), error = %error, "page frame dropped: the broker did not answer within broker.stall_hold_secs");
                None
            }
            done => Some(done),
        }
    }

    /// Counts this frame in the hold, if the bounds allow it.
    fn take(&mut self) -> bool {
        let s = &self.hold.settings;
        let frames = self.hold.frames.fetch_add(1, Ordering::Relaxed);
        let bytes = self.hold.bytes.fetch_add(self.bytes, Ordering::Relaxed);
        if frames >= s.frames || bytes + self.bytes > s.bytes {
            self.hold.frames.fetch_sub(1, Ordering::Relaxed);
            self.hold.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
            return false;
        }
        self.holding = true;
        self.hold.gauge.inc();
        true
    }
}

impl Drop for Frame<'_> {
    fn drop(&mut self) {
        if self.holding {
            self.hold.frames.fetch_sub(1, Ordering::Relaxed);
            self.hold.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
            self.hold.gauge.dec();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_hold_refuses_a_frame_past_either_bound_and_gives_places_back() {
        let gauge = Gauge::default();
        let hold = Hold::new(
            HoldSettings {
                time: Duration::from_secs(30),
                frames: 2,
                bytes: 100,
            },
            gauge.clone(),
        );
        let mut a = hold.frame(40);
        let mut b = hold.frame(70);
        assert!(a.take());
        assert!(!b.take(), "40 + 70 bytes is past 100");
        let mut c = hold.frame(60);
        assert!(c.take());
        let mut d = hold.frame(1);
        assert!(!d.take(), "two frames are held already");
        assert_eq!((hold.frames(), gauge.get()), (2, 2));
        drop(a);
        assert!(d.take());
        drop((c, d, b));
        assert_eq!((hold.frames(), gauge.get()), (0, 0));
        assert_eq!(hold.bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn frames_are_named_apart_within_a_process_and_between_processes() {
        let settings = HoldSettings::default();
        let (one, two) = (
            Hold::new(settings, Gauge::default()),
            Hold::new(settings, Gauge::default()),
        );
        let names = [
            one.frame(1).name("confirmed"),
            one.frame(1).name("confirmed"),
            two.frame(1).name("confirmed"),
        ];
        assert_ne!(names[0], names[1]);
        assert_ne!(names[0], names[2]);
    }
}
