//! Test support shared by the suites of `toolmark-broker`, `toolmark-store`,
//! `toolmark-gateway` and `toolmark-worker`, so that no suite imports another's test files:
//! real `redis-server` processes ([`redis::RedisProc`]) and six-node clusters
//! ([`redis::RedisCluster`]), real PostgreSQL servers ([`postgres::PostgresProc`]), faults
//! injected between a client and a server ([`fault::FaultProxy`]: a stall, a lost reply, a cut
//! connection), and the workspace's binaries started until their listening line
//! ([`process::start_listening`]).

pub mod cluster;
pub mod fault;
pub mod postgres;
pub mod process;
pub mod redis;

/// Logs of the code under test on stderr, filtered by `TOOLMARK_TEST_LOG` (an `EnvFilter`
/// directive such as `toolmark_broker=debug,toolmark_gateway=info`); nothing when it is unset.
/// For reading what happened in a failing run.
pub fn logs() {
    if let Ok(filter) = std::env::var("TOOLMARK_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
}
