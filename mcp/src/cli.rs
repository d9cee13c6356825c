//! The command line of `toolmark-mcp`: flags, defaults and the usage text, parsed by hand so that
//! every message and exit code is exactly the one the desktop MCP spec gives.

use std::time::Duration;

use crate::origin::check_allowed_origin;

/// The usage line, printed by `--help` (stdout) and on every command-line error (stderr).
pub const USAGE: &str = "Usage: toolmark-mcp --allow-origin <origin> [--allow-origin <origin> …] [--port <n>] [--call-timeout <ms>]";

/// The flag table printed under the usage line by `--help`.
pub const HELP_DETAILS: &str = "\
Serves MCP over stdio and pairs with an app page open in the browser.

  --allow-origin <origin>  Page origin allowed to pair (scheme, host and port, no path). Repeatable; required.
  --port <n>               Pairing WebSocket port on 127.0.0.1 (default 17840; 0 picks a free port).
  --call-timeout <ms>      Deadline of each page call in ms (default 600000).
  --help                   Print this help and exit.
  --version                Print the version and exit.";

/// The default pairing port.
pub const DEFAULT_PORT: u16 = 17840;
/// The default deadline of each page call, in milliseconds.
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 600_000;

/// A validated configuration for one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Page origins allowed to pair, each equal to its own serialized origin.
    pub allow_origins: Vec<String>,
    /// Pairing port on 127.0.0.1; 0 lets the OS pick one.
    pub port: u16,
    /// Deadline of each page call.
    pub call_timeout: Duration,
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Serve with this configuration.
    Run(Config),
    /// Print the usage to stdout and exit 0.
    Help,
    /// Print the version to stdout and exit 0.
    Version,
}

/// A command-line mistake: the usage goes to stderr and the process exits 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CliError {
    /// A flag this program does not know.
    #[error("unknown flag {0}")]
    UnknownFlag(String),
    /// A flag given without its value.
    #[error("{0} needs a value")]
    MissingValue(&'static str),
    /// A flag value that does not parse or is out of range.
    #[error("bad value for {flag}: {value:?} ({why})")]
    BadValue {
        /// The flag.
        flag: &'static str,
        /// The value given.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// No `--allow-origin` at all.
    #[error("--allow-origin is required")]
    NoOrigin,
}

/// Parses the arguments after the program name. `--help` and `--version` win over anything else.
pub fn parse<I, S>(args: I) -> Result<Command, CliError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let args: Vec<String> = args.into_iter().map(Into::into).collect();
    if args.iter().any(|a| a == "--help") {
        return Ok(Command::Help);
    }
    if args.iter().any(|a| a == "--version") {
        return Ok(Command::Version);
    }
    let mut allow_origins = Vec::new();
    let mut port = DEFAULT_PORT;
    let mut call_timeout_ms = DEFAULT_CALL_TIMEOUT_MS;
    let mut rest = args.into_iter();
    while let Some(arg) = rest.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => {
                (name.to_owned(), Some(value.to_owned()))
            }
            _ => (arg.clone(), None),
        };
        let flag: &'static str = match name.as_str() {
            "--allow-origin" => "--allow-origin",
            "--port" => "--port",
            "--call-timeout" => "--call-timeout",
            _ => return Err(CliError::UnknownFlag(arg)),
        };
        let value = match inline {
            Some(v) => v,
            None => rest.next().ok_or(CliError::MissingValue(flag))?,
        };
        let bad = |why: &str| CliError::BadValue {
            flag,
            value: value.clone(),
            why: why.to_owned(),
        };
        match flag {
            "--allow-origin" => {
                check_allowed_origin(&value).map_err(|e| bad(&e.to_string()))?;
                if !allow_origins.contains(&value) {
                    allow_origins.push(value);
                }
            }
            "--port" => port = parse_digits(&value).ok_or_else(|| bad("expected 0 to 65535"))?,
            _ => {
                call_timeout_ms = parse_digits::<u64>(&value)
                    .filter(|ms| *ms > 0)
                    .ok_or_else(|| bad("expected a positive integer of milliseconds"))?;
            }
        }
    }
    if allow_origins.is_empty() {
        return Err(CliError::NoOrigin);
    }
    Ok(Command::Run(Config {
        allow_origins,
        port,
        call_timeout: Duration::from_millis(call_timeout_ms),
    }))
}

/// Plain ASCII digits only: no sign, no spaces, no `0x`.
fn parse_digits<T: std::str::FromStr>(value: &str) -> Option<T> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Config {
        match parse(args.iter().copied()) {
            Ok(Command::Run(c)) => c,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults_and_both_value_forms() {
        let c = run(&["--allow-origin", "http://localhost:5173"]);
        assert_eq!(c.port, 17840);
        assert_eq!(c.call_timeout, Duration::from_millis(600_000));
        let c = run(&[
            "--allow-origin=http://localhost:5173",
            "--port=0",
            "--call-timeout",
            "1500",
            "--allow-origin",
            "https://app.example.com",
        ]);
        assert_eq!(
            c.allow_origins,
            ["http://localhost:5173", "https://app.example.com"]
        );
        assert_eq!(c.port, 0);
        assert_eq!(c.call_timeout, Duration::from_millis(1500));
    }

    #[test]
    fn help_and_version_win() {
        assert_eq!(parse(["--bogus", "--help"]), Ok(Command::Help));
        assert_eq!(parse(["--version"]), Ok(Command::Version));
    }

    #[test]
    fn mistakes_are_refused() {
        let cases: &[&[&str]] = &[
            &[],
            &["--port", "1"],
            &["--allow-origin"],
            &["--allow-origin", "*"],
            &["--allow-origin", "null"],
            &["--allow-origin", "http://localhost:5173/"],
            &["--allow-origin", "http://a.test", "--port", "65536"],
            &["--allow-origin", "http://a.test", "--port", "-1"],
            &["--allow-origin", "http://a.test", "--port", " 1"],
            &["--allow-origin", "http://a.test", "--call-timeout", "0"],
            &["--allow-origin", "http://a.test", "--call-timeout", "1.5"],
            &["--allow-origin", "http://a.test", "--verbose"],
            &["--allow-origin", "http://a.test", "stray"],
            &["--allow-origin", "http://a.test", "--help=1"],
        ];
        for args in cases {
            assert!(parse(args.iter().copied()).is_err(), "{args:?}");
        }
    }
}
