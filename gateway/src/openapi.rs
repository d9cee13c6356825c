//! The OpenAPI 3.1 document of the agent API, the hosted MCP endpoint and the admin API, made from the handlers' own annotations and
//! request and answer types (utoipa), served at `GET /v1/openapi.json` and committed as
//! `docs/openapi.json` (a test keeps the two equal).

use std::collections::BTreeMap;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, RefOr, ResponseBuilder};
use utoipa::{IntoParams, IntoResponses, Modify, OpenApi, ToSchema};

use crate::problem::CODES;

/// The `{tenant}` path segment.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TenantPath {
    /// The tenant id, `^[a-z0-9][a-z0-9-]{0,62}$`.
    #[param(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    #[allow(dead_code)]
    tenant: String,
}

/// The `{user}` and `{conversation}` path segments.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ConversationPath {
    /// The user id, `^[A-Za-z0-9_-]{1,128}$`.
    #[param(pattern = "^[A-Za-z0-9_-]{1,128}$")]
    #[allow(dead_code)]
    user: String,
    /// The conversation id, `^[A-Za-z0-9_-]{1,128}$`.
    #[param(pattern = "^[A-Za-z0-9_-]{1,128}$")]
    #[allow(dead_code)]
    conversation: String,
}

/// The `{id}` path segment of a call.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct CallPath {
    /// The call id (a UUID).
    #[allow(dead_code)]
    id: String,
}

/// An RFC 9457 problem, as every error answer carries it (`application/problem+json`).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Problem)]
pub struct ProblemDoc {
    /// `urn:toolmark:problem:<code>`.
    #[serde(rename = "type")]
    kind: String,
    /// A short fixed text for the code.
    title: String,
    /// The HTTP status, repeated.
    status: u16,
    /// The stable machine-readable code: branch on it.
    code: ProblemCode,
    /// A human-readable explanation (its wording may change).
    detail: String,
    /// With `invalid_request`: the JSON pointer of the bad field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pointer: Option<String>,
    /// Why a forwarded page message was refused (`/inbound`).
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// The stable problem codes (`crate::problem::CODES`).
#[derive(Debug, Serialize)]
pub struct ProblemCode(String);

impl utoipa::PartialSchema for ProblemCode {
    fn schema() -> RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(CODES.iter().map(|(code, _)| *code)))
            .description(Some("A stable problem code."))
            .into()
    }
}

impl ToSchema for ProblemCode {}

/// The error answers every route may give, each a [`ProblemDoc`].
#[derive(Debug)]
pub struct Problems;

impl IntoResponses for Problems {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::response::Response>> {
        let problem = || {
            ContentBuilder::new()
                .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                    "Problem",
                ))))
                .build()
        };
        [
            ("400", "Invalid request (`invalid_request`, with a pointer)"),
            ("401", "Missing or wrong credentials (`unauthorized`)"),
            ("404", "Unknown call, dead letter or route (`not_found`)"),
            ("409", "No page of the conversation (`no_page`)"),
            ("413", "Body over the limit (`payload_too_large`)"),
            (
                "422",
                "An Idempotency-Key used with another request (`idempotency_mismatch`)",
            ),
            (
                "429",
                "The tenant's call rate is used up (`rate_limited`), with Retry-After",
            ),
            (
                "503",
                "The shared state is unreachable (`unavailable`), with Retry-After",
            ),
        ]
        .into_iter()
        .map(|(status, description)| {
            let response = ResponseBuilder::new()
                .description(description)
                .content("application/problem+json", problem())
                .build();
            (status.to_owned(), RefOr::T(response))
        })
        .collect()
    }
}

/// The error answers of an admin change: [`Problems`], and 412 for a stale `If-Match`.
#[derive(Debug)]
pub struct AdminProblems;

impl IntoResponses for AdminProblems {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::response::Response>> {
        let mut all = Problems::responses();
        let response = ResponseBuilder::new()
            .description(
                "If-Match names a version that is no longer current (`precondition_failed`)",
            )
            .content(
                "application/problem+json",
                ContentBuilder::new()
                    .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                        "Problem",
                    ))))
                    .build(),
            )
            .build();
        all.insert("412".to_owned(), RefOr::T(response));
        all
    }
}

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
        crate::admin::secrets::add_api_key,
        crate::admin::secrets::remove_api_key,
        crate::admin::secrets::add_token_key,
        crate::admin::secrets::remove_token_key,
        crate::admin::secrets::add_webhook_secret,
        crate::admin::secrets::remove_webhook_secret,
        crate::admin::secrets::disconnect,
        crate::admin::events::events,
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
