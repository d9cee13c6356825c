//! Results go to standard output: one JSON line a script can parse, then one line for people.

use std::io::Write;

use serde_json::Value;

use crate::error::LoadError;

/// Writes `line` as compact JSON, then `human`, to standard output.
pub fn emit(line: &Value, human: &str) -> Result<(), LoadError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| writeln!(out, "{human}"))
        .and_then(|()| out.flush())
        .map_err(|e| LoadError::Local(format!("writing results: {e}")))
}
