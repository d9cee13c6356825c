//! The call engine, below both front doors (the agent API and the hosted MCP endpoint): one
//! service, [`CallEngine`] (`engine`), whose methods are a call's life from its
//! `Idempotency-Key` claimed (`once`) to its start on the page (`start`: the deadline, the
//! rate, the binding) and its supervision to the outcome (`supervise`), counted once for the
//! metrics and the admin stats (`finished`), the key bound to the call, written its outcome or
//! given back (`idempotency`); and a call followed to its next change (`follow`). The doors
//! only parse what they were sent and render what the engine answers, in the engine's own
//! types; a call it did not start is a [`CallError`], which each door words. What happens
//! when a call's deadline passes is `toolmark_broker::deadline`'s.

mod engine;
mod error;
mod finished;
mod follow;
pub mod idempotency;
mod once;
mod start;
mod supervise;

pub(crate) use engine::CallEngine;
pub(crate) use error::CallError;
pub(crate) use follow::{Phase, phase};
pub(crate) use once::{Once, Route};
pub(crate) use start::Request;
