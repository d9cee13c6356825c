//! The page side of the gateway: a page's WebSocket ([`socket`]), the page session any
//! transport carries (a page WebSocket or a Laravel Echo subscription, [`session`]), and the
//! frames a page sends to the agent, checked and applied the same whichever transport carried
//! them ([`frames`]).

pub mod frames;
pub mod inbound;
pub mod session;
pub mod socket;
pub(crate) mod state;

pub use state::{PageState, Parts as PageParts};
