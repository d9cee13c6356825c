//! Integration tests of `toolmark-gateway`: real servers on ephemeral ports, real WebSockets
//! and real HTTP. Each test starts its own gateway.

mod admin;
mod agent;
mod agent_api;
mod binary;
mod budget;
mod callers;
mod cluster_stats;
mod console;
mod doors;
mod echo_inbound;
mod faults;
mod harness;
mod hosted_mcp;
mod http2;
mod idempotency;
mod inbound;
mod isolation;
mod lifecycle;
mod mcp_doors;
mod mcp_tasks;
mod nodes;
mod pins;
mod policy;
mod pusher;
mod security;
mod stall;
mod store;
mod tls;
mod tokens;
mod traces;
mod upgrade;
mod webhooks;
mod webmcp;
