//! How a call ends and reads to the MCP client: the shared [`toolmark_mcp_tools::outcome`].

pub use toolmark_mcp_tools::outcome::*;
