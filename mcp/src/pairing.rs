//! The pairing authority: the current code (single use, 5-minute expiry, rotated after 5 failed
//! attempts) and the latest session token. Every new code is announced on stderr.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::secret::{Code, Token};
use crate::stderr::Stderr;

/// How long a code is valid.
pub const CODE_TTL: Duration = Duration::from_secs(300);
/// Failed attempts after which the code is replaced.
pub const MAX_FAILED_ATTEMPTS: u32 = 5;

/// Why a pairing frame was refused (the page gets 4401).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PairingRefused {
    /// Wrong, malformed or expired code.
    #[error("wrong or expired code")]
    WrongCode,
    /// Unknown or revoked token.
    #[error("unknown or revoked token")]
    UnknownToken,
}

#[derive(Debug)]
struct State {
    code: Code,
    expires_at: Instant,
    failures: u32,
    token: Option<Token>,
}

/// Shared pairing state; cheap to clone.
#[derive(Debug, Clone)]
pub struct Pairing {
    state: Arc<Mutex<State>>,
    stderr: Stderr,
}

impl Pairing {
    /// Makes the first code and prints it.
    pub fn new(stderr: Stderr) -> Self {
        let pairing = Pairing {
            state: Arc::new(Mutex::new(State {
                code: Code::random(),
                expires_at: Instant::now() + CODE_TTL,
                failures: 0,
                token: None,
            })),
            stderr,
        };
        let code = pairing.lock().code.display();
        pairing.announce(&code);
        pairing
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn announce(&self, code: &str) {
        self.stderr.line(&format!(
            "Toolmark pairing code: {code} (expires in {} minutes)",
            CODE_TTL.as_secs() / 60
        ));
    }

    /// Replaces the code (caller holds the lock) and returns the new display form.
    fn rotate(state: &mut State) -> String {
        state.code = Code::random();
        state.expires_at = Instant::now() + CODE_TTL;
        state.failures = 0;
        state.code.display()
    }

    /// The current code and the whole minutes left (rounded up), rotating an expired code first.
    pub fn current(&self) -> (String, u64) {
        let mut state = self.lock();
        let mut announced = None;
        if Instant::now() >= state.expires_at {
            announced = Some(Self::rotate(&mut state));
        }
        let left = state.expires_at.saturating_duration_since(Instant::now());
        let minutes = left.as_secs().div_ceil(60).max(1);
        let code = state.code.display();
        drop(state);
        if let Some(code) = announced {
            self.announce(&code);
        }
        (code, minutes)
    }

    /// Checks a code a page sent. On success the code is consumed (a fresh one is printed at
    /// once), a new token replaces any earlier one, and the token is returned.
    pub fn pair(&self, typed: &str) -> Result<Token, PairingRefused> {
        let mut state = self.lock();
        let now = Instant::now();
        let expired = now >= state.expires_at;
        let matched = !expired
            && Code::normalize(typed).is_some_and(|candidate| state.code.matches(&candidate));
        let (result, announced) = if matched {
            let token = Token::random();
            state.token = Some(token.clone());
            (Ok(token), Some(Self::rotate(&mut state)))
        } else if expired {
            (
                Err(PairingRefused::WrongCode),
                Some(Self::rotate(&mut state)),
            )
        } else {
            state.failures += 1;
            let rotated = (state.failures >= MAX_FAILED_ATTEMPTS).then(|| Self::rotate(&mut state));
            (Err(PairingRefused::WrongCode), rotated)
        };
        drop(state);
        if let Some(code) = announced {
            self.announce(&code);
        }
        result
    }

    /// Checks a token a page sent to resume; only the latest token is valid.
    pub fn resume(&self, presented: &str) -> Result<Token, PairingRefused> {
        let state = self.lock();
        match &state.token {
            Some(token) if token.matches(presented) => Ok(token.clone()),
            _ => Err(PairingRefused::UnknownToken),
        }
    }

    /// Replaces each code when it expires, so stderr always shows a usable one.
    pub async fn run_expiry(self, shutdown: CancellationToken) {
        loop {
            let due = self.lock().expires_at;
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep_until(due) => {}
            }
            let mut state = self.lock();
            let rotated = (Instant::now() >= state.expires_at).then(|| Self::rotate(&mut state));
            drop(state);
            if let Some(code) = rotated {
                self.announce(&code);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairing() -> (Pairing, Stderr) {
        let stderr = Stderr::capture();
        (Pairing::new(stderr.clone()), stderr)
    }

    fn printed_codes(stderr: &Stderr) -> Vec<String> {
        stderr
            .captured()
            .iter()
            .filter_map(|l| l.strip_prefix("Toolmark pairing code: "))
            .map(|rest| rest[..9].to_owned())
            .collect()
    }

    #[tokio::test]
    async fn a_code_is_single_use_and_replaced_at_once() {
        let (p, stderr) = pairing();
        let (code, minutes) = p.current();
        assert_eq!(minutes, 5);
        assert_eq!(printed_codes(&stderr), std::slice::from_ref(&code));
        assert_eq!(
            stderr.captured()[0],
            format!("Toolmark pairing code: {code} (expires in 5 minutes)")
        );
        let token = p.pair(&code.to_lowercase()).unwrap();
        assert!(p.resume(&token.encode()).is_ok());
        assert_eq!(p.pair(&code).unwrap_err(), PairingRefused::WrongCode);
        let codes = printed_codes(&stderr);
        assert_eq!(codes.len(), 2);
        assert_ne!(codes[1], code);
        assert_eq!(p.current().0, codes[1]);
    }

    #[tokio::test]
    async fn only_the_latest_token_resumes() {
        let (p, _) = pairing();
        let first = p.pair(&p.current().0).unwrap();
        let second = p.pair(&p.current().0).unwrap();
        assert_eq!(
            p.resume(&first.encode()).unwrap_err(),
            PairingRefused::UnknownToken
        );
        assert!(p.resume(&second.encode()).is_ok());
    }

    #[tokio::test]
    async fn five_failures_rotate_the_code() {
        let (p, stderr) = pairing();
        let (code, _) = p.current();
        for _ in 0..4 {
            assert!(p.pair("0000-0000").is_err());
        }
        assert_eq!(printed_codes(&stderr).len(), 1);
        assert!(p.pair("not a code").is_err());
        let codes = printed_codes(&stderr);
        assert_eq!(codes.len(), 2);
        assert!(p.pair(&code).is_err(), "the old code is gone");
    }

    #[tokio::test(start_paused = true)]
    async fn codes_expire_after_five_minutes() {
        let (p, stderr) = pairing();
        let (code, _) = p.current();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(p.clone().run_expiry(shutdown.clone()));
        tokio::time::sleep(Duration::from_secs(299)).await;
        assert_eq!(p.current(), (code.clone(), 1));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(p.pair(&code).is_err());
        assert_eq!(printed_codes(&stderr).len(), 2);
        shutdown.cancel();
        task.await.unwrap();
    }
}
