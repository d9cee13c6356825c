//! Integration tests of `toolmark-mcp`: the real binary over stdio, real page WebSockets.

mod attacks;
mod binary;
mod calls;
mod harness;
mod pairing;
