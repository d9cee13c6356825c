//! `toolmark-loadgen`: parse the command line, run the scenario on a multi-threaded runtime,
//! map the outcome to an exit code (0 done, 1 the run failed, 2 bad arguments).

use std::process::ExitCode;

use clap::Parser;
use toolmark_loadgen::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolmark-loadgen: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(toolmark_loadgen::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolmark-loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}
