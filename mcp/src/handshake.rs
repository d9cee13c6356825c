//! The pairing handshake on a fresh socket: one handshake at a time, a pause after each refusal,
//! and the first frame (`pair` with a code or `resume` with a token) read within its deadline
//! and size limit.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::time::Instant;

use crate::close::{MAX_FIRST_FRAME_BYTES, REFUSAL_PAUSE};

/// What the first frame asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairingFrame {
    /// `{"type":"pair","code":"XXXX-XXXX"}`
    Pair(String),
    /// `{"type":"resume","token":"<token>"}`
    Resume(String),
}

/// Parses a first frame: a JSON object of exactly `type` and `code` (pair) or `token` (resume),
/// all strings, at most [`MAX_FIRST_FRAME_BYTES`]. `None` means 4400.
pub fn parse_first_frame(text: &str) -> Option<PairingFrame> {
    if text.len() > MAX_FIRST_FRAME_BYTES {
        return None;
    }
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    if map.len() != 2 {
        return None;
    }
    let field = |name: &str| map.get(name).and_then(Value::as_str).map(str::to_owned);
    match map.get("type").and_then(Value::as_str)? {
        "pair" => field("code").map(PairingFrame::Pair),
        "resume" => field("token").map(PairingFrame::Resume),
        _ => None,
    }
}

/// The `paired` answer.
pub fn paired_frame(token: &str) -> String {
    serde_json::json!({"type": "paired", "token": token}).to_string()
}

#[derive(Debug, Default)]
struct GateState {
    busy: bool,
    refuse_until: Option<Instant>,
}

/// Admits one handshake at a time, and none for [`REFUSAL_PAUSE`] after a refusal.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    state: Arc<Mutex<GateState>>,
}

/// Holds the gate for one handshake; releases it when dropped.
#[derive(Debug)]
pub struct GatePass {
    gate: Gate,
}

impl Gate {
    /// A pass for one handshake, or `None` (the socket gets 4429).
    pub fn enter(&self) -> Option<GatePass> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let paused = state.refuse_until.is_some_and(|t| Instant::now() < t);
        if state.busy || paused {
            return None;
        }
        state.busy = true;
        Some(GatePass { gate: self.clone() })
    }
}

impl GatePass {
    /// Records a refusal (4401): new handshakes wait out the pause.
    pub fn refused(self) {
        let mut state = self.gate.state.lock().unwrap_or_else(|e| e.into_inner());
        state.refuse_until = Some(Instant::now() + REFUSAL_PAUSE);
    }
}

impl Drop for GatePass {
    fn drop(&mut self) {
        self.gate
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .busy = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_frames_are_strict() {
        assert_eq!(
            parse_first_frame(r#"{"type":"pair","code":"7K2Q-M9XD"}"#),
            Some(PairingFrame::Pair("7K2Q-M9XD".into()))
        );
        assert_eq!(
            parse_first_frame(r#"{"token":"ab","type":"resume"}"#),
            Some(PairingFrame::Resume("ab".into()))
        );
        for bad in [
            "",
            "null",
            "[]",
            r#"{"type":"pair"}"#,
            r#"{"type":"pair","code":7}"#,
            r#"{"type":"pair","code":"x","extra":1}"#,
            r#"{"type":"resume","code":"x"}"#,
            r#"{"type":"hello","code":"x"}"#,
        ] {
            assert_eq!(parse_first_frame(bad), None, "{bad}");
        }
        let big = format!(r#"{{"type":"pair","code":"{}"}}"#, "x".repeat(1024));
        assert_eq!(parse_first_frame(&big), None);
    }

    #[tokio::test(start_paused = true)]
    async fn one_handshake_at_a_time_and_a_pause_after_refusals() {
        let gate = Gate::default();
        let pass = gate.enter().unwrap();
        assert!(gate.enter().is_none());
        drop(pass);
        let pass = gate.enter().unwrap();
        pass.refused();
        assert!(gate.enter().is_none());
        tokio::time::sleep(REFUSAL_PAUSE).await;
        assert!(gate.enter().is_some());
    }
}
