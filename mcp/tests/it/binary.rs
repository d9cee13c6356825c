//! The command line: flags, exit codes, stderr lines, stdout reserved for MCP, end of input.

use std::process::Stdio;

use tokio::process::Command;

use crate::harness::{Cli, Ending, WsPage, binary};

async fn output(args: &[&str]) -> std::process::Output {
    Command::new(binary())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap()
}

const USAGE: &str = "Usage: toolmark-mcp --allow-origin <origin> [--allow-origin <origin> …] [--port <n>] [--call-timeout <ms>]";

#[tokio::test]
async fn help_and_version_print_to_stdout_and_exit_0() {
    let help = output(&["--help"]).await;
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).starts_with(USAGE));
    assert!(help.stderr.is_empty());
    let version = output(&["--version"]).await;
    assert_eq!(version.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout),
        format!(
            "toolmark-mcp {} ({})\n",
            env!("CARGO_PKG_VERSION"),
            env!("TOOLMARK_BUILD_REVISION")
        )
    );
}

#[tokio::test]
async fn mistakes_print_the_usage_to_stderr_and_exit_2() {
    let cases: &[&[&str]] = &[
        &[],
        &["--allow-origin", "*"],
        &["--allow-origin", "null"],
        &["--allow-origin", "http://localhost:5173/"],
        &["--allow-origin", "http://localhost:5173", "--port", "x"],
        &[
            "--allow-origin",
            "http://localhost:5173",
            "--call-timeout=0",
        ],
        &["--allow-origin", "http://localhost:5173", "--nope"],
        &["--allow-origin"],
    ];
    for args in cases {
        let out = output(args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(USAGE),
            "{args:?}"
        );
    }
}

#[tokio::test]
async fn a_port_in_use_exits_1_with_the_seed_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let port_arg = format!("--port={port}");
    let out = output(&["--allow-origin=http://localhost:5173", &port_arg]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("Toolmark: port {port} is in use; pass --port <other>\n")
    );
    assert!(out.stdout.is_empty());
}

#[tokio::test]
async fn stderr_shows_the_port_and_the_code_and_stdout_stays_silent() {
    let mut cli = Cli::spawn(&[]).await;
    let code = cli.stderr.code(0).await;
    assert_eq!(
        cli.stderr.all()[0],
        format!(
            "Toolmark MCP: pairing server on ws://127.0.0.1:{}",
            cli.port
        )
    );
    assert!(
        code.chars()
            .filter(|c| *c != '-')
            .all(|c| "0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains(c))
    );
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        cli.stdout_raw.all().is_empty(),
        "nothing but MCP frames on stdout"
    );
    assert_eq!(cli.close_stdin_and_wait().await, 0);
}

#[tokio::test]
async fn end_of_input_closes_the_page_with_1001_and_exits_0() {
    let mut cli = Cli::start(&[]).await;
    let code = cli.stderr.code(0).await;
    let mut page = WsPage::connect(cli.port).await;
    page.pair(&code).await;
    assert_eq!(cli.close_stdin_and_wait().await, 0);
    assert_eq!(page.closed().await, Ending::Closed(1001));
}
