//! `POST /users/{u}/conversations/{c}/inbound`: a page → agent message forwarded by the
//! tenant's own same-origin bridge endpoint (Laravel Echo pages), after its session and CSRF
//! checks. It gets exactly the checks a page WebSocket frame gets (`crate::page::frames`): 202 when
//! accepted, problem+json `invalid_request` with the `reason` when refused.

use axum::extract::{Path, State};
use axum::http::StatusCode;

use toolmark_broker::ConvKey;

use super::request::{AnyKey, Authed};
use crate::http::problem::Problem;
use crate::http::{Body, check_ids};
use crate::page::state::PageState;

/// `POST /users/{u}/conversations/{c}/inbound`
#[utoipa::path(post, path = "/v1/tenants/{tenant}/users/{user}/conversations/{conversation}/inbound",
    tag = "inbound",
    params(crate::http::doc::TenantPath, crate::http::doc::ConversationPath),
    request_body(content = Object, description = "One bridge protocol v1 page message (manifest, result, confirmed, changed), forwarded by the app's backend for a Laravel Echo page"),
    responses((status = 202, description = "Accepted and applied"), crate::http::doc::Problems),
    security(("apiKey" = [])))]
pub async fn inbound(
    State(pages): State<PageState>,
    Authed(tenant, _, _): Authed<AnyKey>,
    Path((_, user, conversation)): Path<(String, String, String)>,
    Body(body): Body,
) -> Result<StatusCode, Problem> {
    check_ids(&user, &conversation)?;
    let conv = ConvKey::new(&tenant.id, &user, &conversation);
    crate::page::inbound::accept(&pages, &tenant, &conv, &body).await?;
    Ok(StatusCode::ACCEPTED)
}
