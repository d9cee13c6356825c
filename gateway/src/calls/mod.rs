//! The call engine, below both front doors (the agent API and the hosted MCP endpoint): a
//! call's life from its `Idempotency-Key` claimed ([`once`]) to its start on the page ([`start`]:
//! the deadline, the rate, the binding) and its supervision to the outcome ([`supervise`]),
//! counted once for the metrics and the admin stats ([`finished`]), the key bound to the call,
//! written its outcome or given back. The doors only parse what they were sent and render what
//! the engine answers; a call it did not start is a [`CallError`], which each door words.

mod error;
mod finished;
mod follow;
pub mod idempotency;
mod once;
mod start;
mod supervise;

pub(crate) use error::CallError;
pub(crate) use follow::{Phase, follow, phase};
pub(crate) use once::{Once, Route, once};
pub(crate) use start::{Request, authorize_tool, start};
