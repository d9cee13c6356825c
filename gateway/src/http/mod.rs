//! What every door of the gateway shares over HTTP, below all of them: the connections as the
//! node serves them, the problem+json answers, the request extractors and parsers, and the
//! OpenAPI pieces the handlers name.
//! Nothing here knows a route, a tenant or the broker.

pub mod connections;
pub mod doc;
pub mod extract;
pub mod idempotency_key;
pub mod problem;

pub use extract::{Body, QueryOf, check_ids, parse_json, parse_value};
pub use idempotency_key::IdempotencyKey;
pub use problem::Problem;
