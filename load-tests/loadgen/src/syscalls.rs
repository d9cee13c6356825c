//! System calls a process makes over a window, counted by `perf stat` on the
//! `raw_syscalls:sys_enter` tracepoint (every system call, whatever its kind: reads, writes,
//! `epoll_wait`, futex waits and wakes). The count is the kernel's, not a sample.

use std::io::Read;
use std::process::{Child, Command, Stdio};

use crate::error::LoadError;

/// A running count of process `pid`'s system calls.
#[derive(Debug)]
pub struct Syscalls {
    pid: u32,
    perf: Child,
}

impl Syscalls {
    /// Starts counting `pid`'s system calls now (perf attaches within milliseconds; the run's
    /// first calls are scheduled after the counters started).
    pub fn start(pid: u32) -> Result<Self, LoadError> {
        let perf = Command::new("perf")
            .args(["stat", "-x,", "-e", "raw_syscalls:sys_enter", "-p"])
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                LoadError::Args(format!(
                    "--syscalls needs `perf` (Debian: apt-get install linux-perf): {e}"
                ))
            })?;
        Ok(Self { pid, perf })
    }

    /// Stops the count (SIGINT, as a terminal would) and returns it.
    pub fn finish(mut self) -> Result<u64, LoadError> {
        let interrupted = Command::new("kill")
            .args(["-INT", &self.perf.id().to_string()])
            .status()
            .map_err(|e| LoadError::Local(format!("kill -INT perf: {e}")))?;
        if !interrupted.success() {
            return Err(LoadError::Local("perf ended before the window did".into()));
        }
        let mut text = String::new();
        if let Some(mut err) = self.perf.stderr.take() {
            err.read_to_string(&mut text)
                .map_err(|e| LoadError::Local(format!("perf output: {e}")))?;
        }
        let _ = self.perf.wait();
        parse_count(&text).ok_or_else(|| {
            LoadError::Local(format!(
                "perf stat of pid {} counted nothing (tracepoints need root or \
                 kernel.perf_event_paranoid <= -1): {}",
                self.pid,
                text.trim()
            ))
        })
    }
}

/// The count of the `raw_syscalls:sys_enter` line of `perf stat -x,` output; `<not counted>`
/// (a process that made no call in the window) is 0.
fn parse_count(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|l| l.contains(",raw_syscalls:sys_enter,"))?;
    let count = line.split(',').next()?;
    if count == "<not counted>" {
        return Some(0);
    }
    count.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_count_of_perf_stats_csv_line() {
        let out = "116596,,raw_syscalls:sys_enter,904359530,100.00,,\n";
        assert_eq!(parse_count(out), Some(116_596));
        assert_eq!(
            parse_count("<not counted>,,raw_syscalls:sys_enter,0,100.00,,"),
            Some(0)
        );
        assert_eq!(parse_count("perf: no such process\n"), None);
    }
}
