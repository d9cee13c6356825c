//! The OpenAPI 3.1 document of the agent API, the hosted MCP endpoint and the admin API, made from the handlers' own annotations and
//! request and answer types (utoipa), served at `GET /v1/openapi.json` and committed as
//! `docs/openapi.json` (a test keeps the two equal).

use axum::http::StatusCode;
use axum::response::IntoResponse;
use utoipa::openapi::RefOr;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::http::doc::{ProblemDoc, Problems, TenantPath};

/// The agent API's bearer API key, and the hosted MCP endpoint's MCP token.
struct Security;

/// The links a client follows from a started call: its state, and its cancel.
struct Links;

impl Modify for Links {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::link::LinkBuilder;
        let follow = |operation: &str, description: &str| {
            LinkBuilder::new()
                .operation_id(operation)
                .parameter("tenant", "$request.path.tenant")
                .parameter("id", "$response.body#/id")
                .description(description)
                .build()
        };
        for route in ["calls", "describe"] {
            let path = format!(
                "/v1/tenants/{{tenant}}/users/{{user}}/conversations/{{conversation}}/{route}"
            );
            let Some(post) = openapi
                .paths
                .paths
                .get_mut(&path)
                .and_then(|item| item.post.as_mut())
            else {
                continue;
            };
            for status in ["200", "202"] {
                if let Some(RefOr::T(response)) = post.responses.responses.get_mut(status) {
                    response.links.insert(
                        "GetCall".into(),
                        RefOr::T(follow("get_call", "The call's state and outcome")),
                    );
                    response.links.insert(
                        "CancelCall".into(),
                        RefOr::T(follow("cancel", "Cancels the call")),
                    );
                }
            }
        }
    }
}

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "apiKey",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("A tenant API key"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "adminKey",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An admin key; the admin API is served on its own listener (admin.listen), never the public one",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "mcpToken",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "An MCP token (POST /tokens with scope mcp), or an access token of the tenant's authorization server",
                    ))
                    .build(),
            ),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Toolmark Gateway API",
        description = "The agent API (docs/agent-api.md), the hosted MCP endpoint (docs/hosted-mcp.md) and the admin API (docs/admin-api.md; on the admin listener only).",
        license(name = "Apache-2.0"),
    ),
    paths(
        crate::api::conversations::mint_token,
        crate::api::conversations::state,
        crate::api::conversations::llm_tools,
        crate::api::calls::call,
        crate::api::calls::describe,
        crate::api::calls::invoke,
        crate::api::calls::get_call,
        crate::api::calls::cancel,
        crate::api::inbound::inbound,
        crate::api::events::stream,
        crate::api::webhooks::failed,
        crate::api::webhooks::retry,
        mcp_post,
        mcp_get,
        mcp_delete,
        openapi_json,
        crate::webmcp::webmcp_js,
        crate::admin::tenants::create,
        crate::admin::tenants::list,
        crate::admin::tenants::read,
        crate::admin::tenants::patch,
        crate::admin::tenants::remove,
        crate::admin::pins::get_tools,
        crate::admin::pins::put_tools,
        crate::admin::pins::seen_tools,
        crate::admin::secrets::add_api_key,
        crate::admin::secrets::patch_api_key,
        crate::admin::secrets::remove_api_key,
        crate::admin::secrets::add_token_key,
        crate::admin::secrets::remove_token_key,
        crate::admin::secrets::add_webhook_secret,
        crate::admin::secrets::remove_webhook_secret,
        crate::admin::secrets::disconnect,
        crate::admin::events::events,
        crate::admin::events::audit,
        crate::admin::stats::cluster_stats,
        crate::admin::stats::tenant_stats,
        crate::admin::debug::tail,
        crate::admin::debug::dead_letters,
        crate::admin::debug::retry,
        crate::admin::console::page,
        crate::admin::console::asset,
    ),
    components(schemas(ProblemDoc)),
    modifiers(&Security, &Links),
)]
struct ApiDoc;

/// The document.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    doc
}

/// The document as served and committed (pretty JSON, a final newline).
pub fn document_json() -> String {
    let mut text = document().to_pretty_json().unwrap_or_default();
    text.push('\n');
    text
}

/// The hosted MCP endpoint (`docs/hosted-mcp.md`): MCP Streamable HTTP. Documented here, served
/// by rmcp's transport (`crate::hosted_mcp`).
#[utoipa::path(post, path = "/v1/tenants/{tenant}/mcp", tag = "mcp",
    params(TenantPath),
    request_body(content = Object, description = "A JSON-RPC message of MCP"),
    responses((status = 200, description = "The JSON-RPC answer, as JSON or an SSE stream", content_type = "text/event-stream"),
        (status = 202, description = "A notification or answer, accepted"),
        (status = 404, description = "Unknown session: initialize again"),
        Problems),
    security(("mcpToken" = [])))]
#[allow(dead_code)]
async fn mcp_post() {}

/// A session's stream of server messages (`list_changed`).
#[utoipa::path(get, path = "/v1/tenants/{tenant}/mcp", tag = "mcp", params(TenantPath),
    responses((status = 200, description = "Server-Sent Events of JSON-RPC messages", content_type = "text/event-stream"),
        Problems),
    security(("mcpToken" = [])))]
#[allow(dead_code)]
async fn mcp_get() {}

/// Ends a session on every node.
#[utoipa::path(delete, path = "/v1/tenants/{tenant}/mcp", tag = "mcp", params(TenantPath),
    responses((status = 204, description = "Ended"), Problems),
    security(("mcpToken" = [])))]
#[allow(dead_code)]
async fn mcp_delete() {}

/// `GET /v1/openapi.json` (no key).
#[utoipa::path(get, path = "/v1/openapi.json", tag = "meta",
    responses((status = 200, description = "This document", content_type = "application/json")))]
pub async fn openapi_json() -> impl IntoResponse {
    (
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        document_json(),
    )
}
