//! Resident memory of a process, read from `/proc/{pid}/status` (Linux).

use crate::error::LoadError;

/// `VmRSS` of process `pid`, in KiB.
pub fn read_kib(pid: u32) -> Result<u64, LoadError> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).map_err(|e| LoadError::Rss {
        pid,
        reason: e.to_string(),
    })?;
    parse_vm_rss(&text).ok_or_else(|| LoadError::Rss {
        pid,
        reason: "no VmRSS line".into(),
    })
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
    }
}
