//! Asking the broker again when it did not answer: a change whose outcome is unknown (a stall,
//! a lost reply) may have been applied, so it is submitted again, as such, until the broker
//! answers or the caller's time runs out. One loop for every caller: a page's frame held by its
//! node, an event of a sweep, a placement read back.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::{BrokerError, SubmitError};

/// The longest pause between two attempts: once the broker answers again, every frame held
/// anywhere lands within about this long.
pub const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// Whether a failed broker operation's outcome is unknown to the caller: the broker did not
/// answer (it may have applied it, or may still).
pub trait Unknown {
    /// The broker did not answer.
    fn unknown(&self) -> bool;
}

impl Unknown for BrokerError {
    fn unknown(&self) -> bool {
        true
    }
}

impl Unknown for SubmitError {
    fn unknown(&self) -> bool {
        matches!(self, SubmitError::Broker(_))
    }
}

/// The pause before the `attempt`-th submission again (from 0): 50 ms, doubling up to 1 s.
pub fn pause(attempt: u32) -> Duration {
    Duration::from_millis(50u64.saturating_mul(1u64 << attempt.min(5))).min(LONGEST_PAUSE)
}

/// Runs `attempt(false)`, then, while its outcome is unknown, `attempt(true)` (a submission
/// again) after [`pause`], until the broker answers or `until` passes; the last unknown
/// outcome is returned then. At the first unknown outcome `held` is told; when it answers
/// `false` (the caller will not hold it), that outcome is returned at once.
pub async fn until_answered<T, E, F>(
    until: Instant,
    held: impl FnMut(&E) -> bool,
    mut attempt: impl FnMut(bool) -> F,
) -> Result<T, E>
where
    E: Unknown,
    F: Future<Output = Result<T, E>>,
{
    let first = attempt(false).await;
    answered_after(until, held, attempt, first).await
}

/// [`until_answered`] of which the first attempt was made already, with the outcome `first`:
/// a caller whose first attempt is answered (nearly always) keeps only that attempt's future,
/// and the loop's (with its pause) only when it is not.
pub async fn answered_after<T, E, F>(
    until: Instant,
    mut held: impl FnMut(&E) -> bool,
    mut attempt: impl FnMut(bool) -> F,
    first: Result<T, E>,
) -> Result<T, E>
where
    E: Unknown,
    F: Future<Output = Result<T, E>>,
{
    let mut error = match first {
        Err(e) if e.unknown() => e,
        done => return done,
    };
    if !held(&error) {
        return Err(error);
    }
    let mut tries = 0;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(error);
        }
        tokio::time::sleep(pause(tries).min(left)).await;
        tries += 1;
        error = match attempt(true).await {
            Err(e) if e.unknown() => e,
            done => return done,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_from_50_ms_to_1_s() {
        let p: Vec<u64> = (0..8)
            .map(|n| u64::try_from(pause(n).as_millis()).unwrap())
            .collect();
        assert_eq!(p, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
    }

    #[tokio::test]
    async fn an_unknown_outcome_is_asked_again_as_such_until_answered() {
        let mut seen = Vec::new();
        let got: Result<u32, BrokerError> = until_answered(
            Instant::now() + Duration::from_secs(10),
            |_| true,
            |again| {
                seen.push(again);
                let n = seen.len();
                async move {
                    if n < 3 {
                        Err(BrokerError::Unavailable {
                            retry_after: Duration::ZERO,
                        })
                    } else {
                        Ok(7)
                    }
                }
            },
        )
        .await;
        assert_eq!(got, Ok(7));
        assert_eq!(seen, [false, true, true]);
    }

    #[tokio::test]
    async fn a_known_refusal_and_a_refused_hold_end_at_once() {
        let refused: Result<(), SubmitError> = until_answered(
            Instant::now() + Duration::from_secs(10),
            |_| true,
            |_| async { Err(SubmitError::Rejected(crate::Rejection::Late)) },
        )
        .await;
        assert_eq!(refused, Err(SubmitError::Rejected(crate::Rejection::Late)));
        let mut tries = 0;
        let not_held: Result<(), BrokerError> = until_answered(
            Instant::now() + Duration::from_secs(10),
            |_| false,
            |_| {
                tries += 1;
                async {
                    Err(BrokerError::Unavailable {
                        retry_after: Duration::ZERO,
                    })
                }
            },
        )
        .await;
        assert!(not_held.is_err());
        assert_eq!(tries, 1);
    }
}
