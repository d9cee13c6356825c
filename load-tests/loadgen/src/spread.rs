//! A fleet of idle pages spread over several processes: each process may hold only so many open
//! files (20,000 here), and every page is one socket in the load generator. The parent re-runs
//! this binary as `hold` children, each connecting its share of the pages; a child prints
//! `ready N` once its pages are ready and holds them until its standard input closes, then
//! prints `alive N` (pages still connected) and exits.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;

use crate::cli::{Common, HoldArgs};
use crate::error::LoadError;
use crate::fleet::Fleet;
use crate::target::Target;
use crate::token::Minter;

/// The child processes holding one fleet.
#[derive(Debug)]
pub struct Spread {
    children: Vec<(Child, BufReader<ChildStdout>)>,
}

/// The `--first`/`--count` shares of `pages` over `processes`.
pub fn shares(pages: u32, processes: u32) -> Vec<(u32, u32)> {
    let processes = processes.clamp(1, pages.max(1));
    (0..processes)
        .map(|k| {
            let first = pages / processes * k + k.min(pages % processes);
            let count = pages / processes + u32::from(k < pages % processes);
            (first, count)
        })
        .collect()
}

impl Spread {
    /// Starts one `hold` child per share; the ramp is split between them.
    pub fn start(common: &Common, pages: u32, processes: u32) -> Result<Self, LoadError> {
        let exe = std::env::current_exe()
            .map_err(|e| LoadError::Local(format!("own executable: {e}")))?;
        let shares = shares(pages, processes);
        let ramp = (common.ramp_per_sec / shares.len() as u32).max(1);
        let mut children = Vec::new();
        for (first, count) in shares {
            let mut child = Command::new(&exe)
                .arg("hold")
                .args(["--url", &common.url, "--tenant", &common.tenant])
                .args(["--origin", &common.origin])
                .args(["--source-addrs", &common.source_addrs.to_string()])
                .args(["--ramp-per-sec", &ramp.to_string()])
                .args(["--first", &first.to_string(), "--count", &count.to_string()])
                .env("TOOLMARK_BENCH_TOKEN_SECRET", &common.token_secret)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| LoadError::Local(format!("starting a hold process: {e}")))?;
            let stdout = child
                .stdout
                .take()
                .ok_or_else(|| LoadError::Local("hold process without stdout".into()))?;
            children.push((child, BufReader::new(stdout)));
        }
        Ok(Spread { children })
    }

    /// Waits until every child says its pages are ready; the total.
    pub fn ready(&mut self) -> Result<u64, LoadError> {
        self.children
            .iter_mut()
            .map(|(_, out)| expect_line(out, "ready"))
            .sum()
    }

    /// Closes every child's input and collects how many pages each still held; fails when a
    /// child failed.
    pub fn finish(mut self) -> Result<u64, LoadError> {
        for (child, _) in &mut self.children {
            drop(child.stdin.take());
        }
        let mut alive = 0;
        let mut failure = None;
        for (mut child, mut out) in self.children {
            match expect_line(&mut out, "alive") {
                Ok(n) => alive += n,
                Err(e) => failure = failure.or(Some(e)),
            }
            let status = child
                .wait()
                .map_err(|e| LoadError::Local(format!("hold process: {e}")))?;
            if !status.success() {
                failure = failure.or(Some(LoadError::Pages(format!(
                    "a hold process ended with {status}"
                ))));
            }
        }
        failure.map_or(Ok(alive), Err)
    }
}

/// Reads the line `word N` from a child; an error when the child says anything else or ends.
fn expect_line(out: &mut BufReader<ChildStdout>, word: &str) -> Result<u64, LoadError> {
    let mut line = String::new();
    out.read_line(&mut line)
        .map_err(|e| LoadError::Local(format!("reading a hold process: {e}")))?;
    line.trim()
        .strip_prefix(word)
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| {
            LoadError::Pages(format!(
                "a hold process said {:?} instead of {word}",
                line.trim()
            ))
        })
}

/// The `hold` child: connects pages `first .. first + count`, says `ready N`, holds them until
/// standard input closes, says `alive N`.
pub async fn hold(args: HoldArgs) -> Result<(), LoadError> {
    let target = Arc::new(Target::resolve(&args.common).await?);
    let minter = Minter::new(&target.tenant, &args.common.token_secret)?;
    let first = args.first as usize;
    let range = first..first + args.count as usize;
    let fleet = Fleet::launch_range(target, None, &minter, range, args.common.ramp_per_sec)?;
    let outcome = async {
        let ready = fleet.ready().await?.ready;
        say(&format!("ready {ready}"))?;
        tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await
        .map_err(|e| LoadError::Local(format!("waiting on stdin: {e}")))?;
        let alive = fleet.intact()?.alive();
        say(&format!("alive {alive}"))
    }
    .await;
    fleet.stop().await;
    outcome
}

fn say(line: &str) -> Result<(), LoadError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| LoadError::Local(format!("writing to the parent: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_every_page_once() {
        assert_eq!(shares(10, 3), vec![(0, 4), (4, 3), (7, 3)]);
        assert_eq!(shares(19_000, 2), vec![(0, 9_500), (9_500, 9_500)]);
        assert_eq!(shares(2, 5), vec![(0, 1), (1, 1)]);
    }
}
