//! A binary of the workspace started as an operator starts it, read until its readiness line
//! (`<binary> listening on http://ADDR`, the contract's), so a test knows the bound address.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

/// Starts `cmd` with stdout piped (and stderr as the caller set it, else discarded), reads its
/// listening line and returns the child with the address it bound.
pub fn start_listening(mut cmd: Command) -> (Child, SocketAddr) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout is piped"))
        .read_line(&mut line)
        .expect("the listening line is read");
    let addr = line
        .trim()
        .split_once(" listening on http://")
        .and_then(|(_, addr)| addr.parse().ok())
        .unwrap_or_else(|| panic!("not a listening line: {line:?}"));
    (child, addr)
}

/// `cmd` with stderr discarded, for [`start_listening`] when the test does not read the log.
pub fn quiet(mut cmd: Command) -> Command {
    cmd.stderr(Stdio::null());
    cmd
}
