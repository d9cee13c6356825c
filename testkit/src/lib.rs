//! Test support shared by the suites of `toolmark-broker`, `toolmark-gateway` and
//! `toolmark-worker`, so that no suite imports another's test files: real `redis-server`
//! processes ([`redis::RedisProc`]) and six-node clusters ([`redis::RedisCluster`]), faults
//! injected between a client and a server ([`fault::FaultProxy`]: a stall, a lost reply, a cut
//! connection), and the workspace's binaries started until their listening line
//! ([`process::start_listening`]).

pub mod cluster;
pub mod fault;
pub mod process;
pub mod redis;
