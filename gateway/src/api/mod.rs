//! The agent HTTP API under `/v1/tenants/{tenant}/…`: API-key authentication, request parsing
//! with problem+json errors, and the routes.

pub(crate) mod calls;
pub use calls::{CallBody, DescribeBody, InvokeBody};
pub use conversations::TokenRequest;
pub(crate) mod conversations;
pub(crate) mod events;
pub mod inbound;
pub(crate) mod request;
pub(crate) mod state;
pub(crate) mod webhooks;

pub use state::{ApiState, Parts as ApiParts};

use axum::Router;
use axum::routing::{get, post};

/// The agent API routes.
pub fn router() -> Router<ApiState> {
    Router::new()
        .route(
            "/v1/tenants/{tenant}/tokens",
            post(conversations::mint_token),
        )
        .route(
            "/v1/tenants/{tenant}/users/{user}/conversations/{conversation}",
            get(conversations::state),
        )
        .route(
            "/v1/tenants/{tenant}/users/{user}/conversations/{conversation}/calls",
            post(calls::call),
        )
        .route(
            "/v1/tenants/{tenant}/users/{user}/conversations/{conversation}/inbound",
            post(inbound::inbound),
        )
        .route(
            "/v1/tenants/{tenant}/users/{user}/conversations/{conversation}/describe",
            post(calls::describe),
        )
        .route(
            "/v1/tenants/{tenant}/users/{user}/conversations/{conversation}/llm-tools",
            get(conversations::llm_tools),
        )
        .route(
            "/v1/tenants/{tenant}/users/{user}/conversations/{conversation}/llm-tools/invoke",
            post(calls::invoke),
        )
        .route("/v1/tenants/{tenant}/calls/{id}", get(calls::get_call))
        .route(
            "/v1/tenants/{tenant}/calls/{id}/cancel",
            post(calls::cancel),
        )
        .route("/v1/tenants/{tenant}/events", get(events::stream))
        .route(
            "/v1/tenants/{tenant}/webhooks/failed",
            get(webhooks::failed),
        )
        .route(
            "/v1/tenants/{tenant}/webhooks/failed/{id}/retry",
            post(webhooks::retry),
        )
}
