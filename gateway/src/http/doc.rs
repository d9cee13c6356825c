//! The OpenAPI pieces every handler names in its annotation: the path parameters and the
//! problem answers. `crate::openapi` assembles the document from the handlers at the top; the
//! handlers take these from here, below them.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::openapi::{ContentBuilder, RefOr, ResponseBuilder};
use utoipa::{IntoParams, IntoResponses, ToSchema};

use super::problem::CODES;

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

/// The stable problem codes (`crate::http::problem::CODES`).
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
