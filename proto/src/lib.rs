//! Toolmark bridge protocol v1 as a pure library: message types for both directions, strict
//! validation with the seed's rules, inbound limits checked before any value tree is built,
//! the JSON Schemas, `llmName`, the LLM tool definitions and id minting. No I/O, no async.
//!
//! The entry point for untrusted input is [`decode`] (raw bytes) or [`validate`] (a parsed
//! value); both say why a message was refused through [`DecodeError`].

pub mod codes;
mod decode;
mod error;
pub mod ids;
mod limits;
pub mod llm;
mod manifest;
mod message;
pub mod pin;
mod result;
pub mod schema;
mod strict;

pub use decode::{Direction, Message, decode, decode_to_agent, decode_to_page, validate};
pub use error::{DecodeError, RejectReason};
pub use limits::{DEFAULT_MAX_MESSAGE_BYTES, Limits, MAX_DEPTH, check_limits};
pub use manifest::{
    Hints, Mode, ToolManifest, ToolManifestSummary, is_valid_llm_name, is_valid_tool_name,
};
pub use message::{
    AgentMessage, Call, CallRef, Cancel, CancelRef, Changed, Confirmed, Describe, Manifest,
    PageMessage, ResultMessage,
};
pub use result::{FieldChange, Issue, ToolResult};

/// The protocol version every message carries as `protocol`.
pub const PROTOCOL_VERSION: u64 = 1;
