//! Resident memory of a process, read from `/proc/{pid}/status`, the CPU time it used, from
//! `/proc/{pid}/stat`, and its threads' context switches, from `/proc/{pid}/task/*/status`
//! (Linux).

use crate::error::LoadError;

/// `VmRSS` of process `pid`, in KiB.
pub fn read_kib(pid: u32) -> Result<u64, LoadError> {
    read_proc(pid, "status", parse_vm_rss, "no VmRSS line")
}

/// Reads `/proc/{pid}/{file}` and parses it with `parse`; `missing` says why when it fails.
fn read_proc(
    pid: u32,
    file: &str,
    parse: impl FnOnce(&str) -> Option<u64>,
    missing: &str,
) -> Result<u64, LoadError> {
    let text =
        std::fs::read_to_string(format!("/proc/{pid}/{file}")).map_err(|e| LoadError::Rss {
            pid,
            reason: e.to_string(),
        })?;
    parse(&text).ok_or_else(|| LoadError::Rss {
        pid,
        reason: missing.into(),
    })
}

/// Clock ticks per second of `/proc/{pid}/stat` (`USER_HZ`, 100 in the Linux ABI).
const USER_HZ: u64 = 100;

/// CPU time process `pid` has used so far (user and system, all threads), in microseconds.
pub fn cpu_us(pid: u32) -> Result<u64, LoadError> {
    read_proc(pid, "stat", parse_cpu_ticks, "unreadable stat line").map(|t| t * 1_000_000 / USER_HZ)
}

/// Context switches, voluntary and not, of every thread process `pid` has now (a thread that
/// ended takes its count with it).
pub fn context_switches(pid: u32) -> Result<u64, LoadError> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| LoadError::Rss {
        pid,
        reason: e.to_string(),
    })?;
    let mut total = 0;
    for task in tasks.flatten() {
        // A thread may end between the listing and the read: it counts for nothing.
        if let Ok(text) = std::fs::read_to_string(task.path().join("status")) {
            total += parse_switches(&text);
        }
    }
    Ok(total)
}

/// What a server process had spent at one reading: its CPU time and its threads' context
/// switches.
#[derive(Debug, Clone, Copy)]
pub struct Cost {
    pid: u32,
    cpu_us: u64,
    switches: u64,
}

impl Cost {
    /// Process `pid`'s totals now.
    pub fn read(pid: u32) -> Result<Self, LoadError> {
        Ok(Self {
            pid,
            cpu_us: cpu_us(pid)?,
            switches: context_switches(pid)?,
        })
    }

    /// Adds `<who>_cpu_us_per_<unit>` and `<who>_context_switches_per_<unit>` to `line`: what
    /// the process spent since this reading, over `units` calls, set-ups or events.
    pub fn report(
        self,
        units: u64,
        who: &str,
        unit: &str,
        line: &mut serde_json::Value,
    ) -> Result<(), LoadError> {
        let now = Self::read(self.pid)?;
        let n = units.max(1) as f64;
        let cpu = now.cpu_us.saturating_sub(self.cpu_us) as f64 / n;
        let switches = now.switches.saturating_sub(self.switches) as f64 / n;
        line[format!("{who}_cpu_us_per_{unit}")] = serde_json::json!((cpu * 10.0).round() / 10.0);
        line[format!("{who}_context_switches_per_{unit}")] =
            serde_json::json!((switches * 100.0).round() / 100.0);
        Ok(())
    }
}

/// `voluntary_ctxt_switches` plus `nonvoluntary_ctxt_switches` of a status file.
fn parse_switches(status: &str) -> u64 {
    status
        .lines()
        .filter_map(|l| {
            l.strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| l.strip_prefix("nonvoluntary_ctxt_switches:"))
        })
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .sum()
}

/// `utime + stime` (fields 14 and 15) of a stat line; the name in parentheses may hold spaces.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut f = after_name.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The `VmRSS:   1234 kB` line of a status file.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let mut parts = line.split_whitespace();
    let value = parts.next()?.parse().ok()?;
    (parts.next() == Some("kB")).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vm_rss_in_kib() {
        let status = "Name:\tgw\nVmPeak:\t  900 kB\nVmRSS:\t   12345 kB\nThreads:\t3\n";
        assert_eq!(parse_vm_rss(status), Some(12345));
        assert_eq!(parse_vm_rss("Name:\tgw\n"), None);
        assert_eq!(parse_vm_rss("VmRSS:\t12 MB\n"), None);
    }

    #[test]
    fn reads_our_own_process() {
        assert!(read_kib(std::process::id()).unwrap() > 0);
        // Burn a little CPU: the counter moves forward.
        let before = cpu_us(std::process::id()).unwrap();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while cpu_us(std::process::id()).unwrap() == before {
            x = x.wrapping_mul(31).wrapping_add(1);
            assert!(start.elapsed().as_secs() < 10, "no CPU time counted {x}");
        }
    }

    #[test]
    fn counts_both_kinds_of_context_switch() {
        let status = "Name:\tgw\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(parse_switches(status), 127);
        assert_eq!(parse_switches("Name:\tgw\n"), 0);
        // Our own threads have switched at least once by now (this test's thread was started).
        assert!(context_switches(std::process::id()).unwrap() > 0);
    }

    #[test]
    fn reads_user_and_system_ticks_past_a_name_with_spaces() {
        let stat = "42 (tokio rt) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 1";
        assert_eq!(parse_cpu_ticks(stat), Some(325));
    }
}
