//! The MCP face of a page's tools, one module for both front doors: `toolmark-mcp` (the desktop
//! CLI, over stdio) and the gateway's hosted MCP endpoint (Streamable HTTP). Both list a page's
//! tools by llmName with the same caps and untrusted-content marks, and render a call's ending
//! the same way, so an MCP client cannot tell which one it talks to from the tools it sees.

pub mod listing;
pub mod outcome;

pub use listing::{
    LISTING_WAIT, PageTool, mcp_tool, page_call_tools, page_listing, untrusted_meta,
};
pub use outcome::{CallEnd, call_result};
