//! Integration tests of `toolmark-gateway`: real servers on ephemeral ports, real WebSockets
//! and real HTTP. Each test starts its own gateway.

mod agent_api;
mod binary;
mod harness;
mod inbound;
mod isolation;
mod lifecycle;
mod nodes;
mod redis_support;
mod security;
mod tokens;
