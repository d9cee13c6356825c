//! The diagnostics channel: whole lines to stderr (stdout carries only MCP frames). Tests can
//! capture the lines instead.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// Where diagnostic lines go; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Stderr {
    captured: Option<Arc<Mutex<Vec<String>>>>,
}

impl Stderr {
    /// Lines go to the process's stderr.
    pub fn process() -> Self {
        Stderr { captured: None }
    }

    /// Lines are kept in memory (unit tests).
    pub fn capture() -> Self {
        Stderr {
            captured: Some(Arc::default()),
        }
    }

    /// Writes one line. A failing stderr is ignored: diagnostics never stop the server.
    pub fn line(&self, text: &str) {
        match &self.captured {
            Some(lines) => lines
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(text.to_owned()),
            None => {
                let mut err = std::io::stderr().lock();
                let _ = writeln!(err, "{text}");
                let _ = err.flush();
            }
        }
    }

    /// The captured lines (empty for the process's stderr).
    pub fn captured(&self) -> Vec<String> {
        self.captured
            .as_ref()
            .map(|lines| lines.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .unwrap_or_default()
    }
}
