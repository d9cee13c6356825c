//! Calls and describes: bind, send, and supervise each call until its result or its deadline.
//! The supervisor runs as its own task, so a call is timed out and cancelled at its deadline
//! even when the agent's HTTP request went away.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use toolmark_broker::{CallKind, CallRecord, CallState, ConvKey, Outcome};
use toolmark_proto::is_valid_tool_name;
use toolmark_proto::llm::{PAGE_CALL, PAGE_DESCRIBE, model_content};

use super::request::{Authed, Calls, parse_body};
use crate::api::state::ApiState;
use crate::calls::{Once, Request, Route};
use crate::http::{Body, IdempotencyKey, Problem, QueryOf, check_ids, parse_value};
use crate::tenants::Tenant;

mod bodies;

pub use bodies::{
    Accepted, CallAnswer, CallBody, CallView, ConfirmationView, DescribeBody, InvokeBody, Invoked,
    WaitQuery,
};
use bodies::{CallHeaders, IdempotencyHeader, PageCallInput, PageDescribeInput};

fn wants_async(headers: &HeaderMap) -> bool {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim().eq_ignore_ascii_case("respond-async"))
}

/// A tool's input is a JSON object (`{}` when it takes none).
fn check_object(pointer: &str, input: &Value) -> Result<(), Problem> {
    if input.is_object() {
        Ok(())
    } else {
        Err(Problem::invalid(pointer, "input is an object"))
    }
}

fn check_tool(pointer: &str, tool: &str) -> Result<(), Problem> {
    if is_valid_tool_name(tool) {
        Ok(())
    } else {
        Err(Problem::invalid(
            pointer,
            "tool names match ^[A-Za-z0-9_.-]{1,128}$",
        ))
    }
}

/// `POST /users/{u}/conversations/{c}/calls`
#[utoipa::path(post, path = "/v1/tenants/{tenant}/users/{user}/conversations/{conversation}/calls",
    tag = "calls",
    params(crate::http::doc::TenantPath, crate::http::doc::ConversationPath, CallHeaders),
    request_body = CallBody,
    responses((status = 200, description = "The call ended: its outcome", body = CallAnswer), (status = 202, description = "Started; the outcome comes later (GET /calls/{id}, call.result)", body = Accepted,
        headers(("Location" = String, description = "/v1/tenants/{tenant}/calls/{id}"))),
        crate::http::doc::Problems),
    security(("apiKey" = [])))]
pub async fn call(
    State(app): State<ApiState>,
    Authed(tenant, caller, _): Authed<Calls>,
    Path((_, user, conversation)): Path<(String, String, String)>,
    IdempotencyKey(key): IdempotencyKey,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    check_ids(&user, &conversation)?;
    let b: CallBody = parse_body(&tenant, &body)?;
    check_tool("/tool", &b.tool)?;
    check_object("/input", &b.input)?;
    let req = Request {
        kind: CallKind::Call,
        tool: b.tool,
        input: b.input,
        rev: b.rev,
        timeout_ms: b.timeout_ms,
        idempotency: None,
        by_llm_name: false,
        caller: caller.clone(),
    };
    let respond_async = wants_async(&headers);
    let route = ("calls", user.as_str(), conversation.as_str());
    respond_once(&app, &tenant, key, route, &body, req, respond_async).await
}

/// `POST /users/{u}/conversations/{c}/describe`
#[utoipa::path(post, path = "/v1/tenants/{tenant}/users/{user}/conversations/{conversation}/describe",
    tag = "calls",
    params(crate::http::doc::TenantPath, crate::http::doc::ConversationPath, CallHeaders),
    request_body = DescribeBody,
    responses((status = 200, description = "The call ended: its outcome", body = CallAnswer), (status = 202, description = "Started; the outcome comes later (GET /calls/{id}, call.result)", body = Accepted,
        headers(("Location" = String, description = "/v1/tenants/{tenant}/calls/{id}"))),
        crate::http::doc::Problems),
    security(("apiKey" = [])))]
pub async fn describe(
    State(app): State<ApiState>,
    Authed(tenant, caller, _): Authed<Calls>,
    Path((_, user, conversation)): Path<(String, String, String)>,
    IdempotencyKey(key): IdempotencyKey,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    check_ids(&user, &conversation)?;
    let b: DescribeBody = parse_body(&tenant, &body)?;
    check_tool("/tool", &b.tool)?;
    let req = Request {
        kind: CallKind::Describe,
        tool: b.tool,
        input: Value::Null,
        rev: None,
        timeout_ms: b.timeout_ms,
        idempotency: None,
        by_llm_name: false,
        caller: caller.clone(),
    };
    let respond_async = wants_async(&headers);
    let route = ("describe", user.as_str(), conversation.as_str());
    respond_once(&app, &tenant, key, route, &body, req, respond_async).await
}

/// Starts a call or describe and answers it, once per `Idempotency-Key` (a repeat gets the
/// first request's answer): 202 when the request asks for it, else 200 with the outcome.
async fn respond_once(
    app: &ApiState,
    tenant: &Tenant,
    key: Option<String>,
    route: Route<'_>,
    body: &Body,
    req: Request,
    respond_async: bool,
) -> Result<Response, Problem> {
    let (id, client_id, outcome) = match app.calls.once(tenant, key, route, &body.0, req).await? {
        Once::Repeat(repeat) => {
            if respond_async {
                return Ok(accepted(&tenant.id, &repeat.id, &repeat.client_id));
            }
            let (id, client_id) = (repeat.id.clone(), repeat.client_id.clone());
            (
                id,
                client_id,
                Box::pin(repeat.outcome(&app.calls, tenant)).await,
            )
        }
        Once::Run(req) => {
            let (_, user, conversation) = route;
            let conv = ConvKey::new(&tenant.id, user, conversation);
            let started = app.calls.start(tenant, conv, req, respond_async).await?;
            if respond_async {
                return Ok(accepted(&tenant.id, &started.id, &started.client_id));
            }
            (started.id, started.client_id, started.outcome.await)
        }
    };
    Ok(Json(CallAnswer {
        id,
        client_id,
        outcome,
    })
    .into_response())
}

/// 202 with where the outcome will be: `GET /calls/{id}`.
fn accepted(tenant: &str, id: &str, client_id: &str) -> Response {
    let location = format!("/v1/tenants/{tenant}/calls/{id}");
    (
        StatusCode::ACCEPTED,
        [(axum::http::header::LOCATION, location)],
        Json(Accepted {
            id: id.to_owned(),
            client_id: client_id.to_owned(),
        }),
    )
        .into_response()
}

/// `POST /users/{u}/conversations/{c}/llm-tools/invoke`: `page_call` / `page_describe` as the
/// model produced them; `content` is what to hand back to the model.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/users/{user}/conversations/{conversation}/llm-tools/invoke",
    tag = "llm-tools",
    params(crate::http::doc::TenantPath, crate::http::doc::ConversationPath, IdempotencyHeader),
    request_body = InvokeBody,
    responses((status = 200, description = "The outcome and what to hand back to the model", body = Invoked), crate::http::doc::Problems),
    security(("apiKey" = [])))]
pub async fn invoke(
    State(app): State<ApiState>,
    Authed(tenant, caller, _): Authed<Calls>,
    Path((_, user, conversation)): Path<(String, String, String)>,
    IdempotencyKey(key): IdempotencyKey,
    body: Body,
) -> Result<Response, Problem> {
    check_ids(&user, &conversation)?;
    let b: InvokeBody = parse_body(&tenant, &body)?;
    let req = match b.name.as_str() {
        PAGE_CALL => {
            let i: PageCallInput = parse_value("/input", b.input)?;
            check_tool("/input/tool", &i.tool)?;
            check_object("/input/input", &i.input)?;
            Request {
                kind: CallKind::Call,
                tool: i.tool,
                input: i.input,
                rev: None,
                timeout_ms: None,
                idempotency: None,
                by_llm_name: false,
                caller: caller.clone(),
            }
        }
        PAGE_DESCRIBE => {
            let i: PageDescribeInput = parse_value("/input", b.input)?;
            check_tool("/input/tool", &i.tool)?;
            Request {
                kind: CallKind::Describe,
                tool: i.tool,
                input: Value::Null,
                rev: None,
                timeout_ms: None,
                idempotency: None,
                by_llm_name: false,
                caller: caller.clone(),
            }
        }
        _ => {
            return Err(Problem::invalid(
                "/name",
                "name is page_call or page_describe",
            ));
        }
    };
    let route = ("invoke", user.as_str(), conversation.as_str());
    match app.calls.once(&tenant, key, route, &body.0, req).await? {
        Once::Repeat(repeat) => {
            let (id, untrusted) = (repeat.id.clone(), repeat.untrusted);
            let outcome = Box::pin(repeat.outcome(&app.calls, &tenant)).await;
            Ok(invoked(&id, untrusted, &outcome))
        }
        Once::Run(req) => {
            let conv = ConvKey::new(&tenant.id, &user, &conversation);
            let started = app.calls.start(&tenant, conv, req, false).await?;
            let outcome = started.outcome.await;
            Ok(invoked(&started.id, started.untrusted, &outcome))
        }
    }
}

/// The answer of `llm-tools/invoke`: the outcome and what to hand back to the model.
fn invoked(id: &str, untrusted: bool, outcome: &Outcome) -> Response {
    let content = match outcome {
        Outcome::Result(r) => model_content(r, untrusted),
        Outcome::Timeout => json!(outcome),
    };
    Json(Invoked {
        id: id.to_owned(),
        outcome: outcome.clone(),
        content,
    })
    .into_response()
}

/// `GET /calls/{id}`, `?wait=N` holding the answer until the call or its confirmation changes
/// state.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/calls/{id}", tag = "calls",
    params(crate::http::doc::TenantPath, crate::http::doc::CallPath, WaitQuery),
    responses((status = 200, description = "The call", body = CallView), crate::http::doc::Problems),
    security(("apiKey" = [])))]
pub async fn get_call(
    State(app): State<ApiState>,
    Authed(tenant, caller, _): Authed<Calls>,
    Path((_, id)): Path<(String, String)>,
    QueryOf(q): QueryOf<WaitQuery>,
) -> Result<Json<CallView>, Problem> {
    let wait = match q.wait {
        None => Duration::ZERO,
        Some(n @ 1..=60) => Duration::from_secs(n),
        Some(_) => {
            return Err(Problem::invalid(
                "/wait",
                "wait is between 1 and 60 seconds",
            ));
        }
    };
    let record = app
        .calls
        .follow(&tenant.id, &id, wait)
        .await?
        .ok_or_else(|| Problem::not_found("Call"))?;
    // The call's tool is held to the reader's policy, as a call of it would be.
    app.calls
        .authorize_tool(&caller, &record.binding.conv, &record.binding.tool)
        .await?;
    Ok(Json(call_json(&record)))
}

/// `POST /calls/{id}/cancel`
#[utoipa::path(post, path = "/v1/tenants/{tenant}/calls/{id}/cancel", tag = "calls",
    params(crate::http::doc::TenantPath, crate::http::doc::CallPath),
    responses((status = 202, description = "The page is sent the protocol cancel"),
        crate::http::doc::Problems),
    security(("apiKey" = [])))]
pub async fn cancel(
    State(app): State<ApiState>,
    Authed(tenant, caller, _): Authed<Calls>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, Problem> {
    // A caller whose policy narrows tools cancels only calls of tools it may call: asked
    // before the page is sent anything.
    if caller.limits_tools() {
        let record = app
            .broker
            .call(&tenant.id, &id)
            .await?
            .ok_or_else(|| Problem::not_found("Call"))?;
        app.calls
            .authorize_tool(&caller, &record.binding.conv, &record.binding.tool)
            .await?;
    }
    app.broker
        .cancel(&tenant.id, &id)
        .await?
        .ok_or_else(|| Problem::not_found("Call"))?;
    Ok(StatusCode::ACCEPTED.into_response())
}

fn call_json(r: &CallRecord) -> CallView {
    let b = &r.binding;
    let state = match r.state {
        CallState::Pending => "pending",
        CallState::Answered => "answered",
        CallState::TimedOut => "timed_out",
    };
    let deadline = rfc3339_ms(b.deadline_ms);
    CallView {
        id: b.id.clone(),
        user: b.conv.user.clone(),
        conversation: b.conv.conversation.clone(),
        client_id: b.client_id.clone(),
        tool: b.tool.clone(),
        kind: b.kind,
        state,
        deadline,
        outcome: r.outcome.clone(),
        confirmation: confirmation_json(r),
        caller: b.caller.clone(),
    }
}

fn rfc3339_ms(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// The confirmation of a call answered `needs_confirmation`: pending until its record says how
/// it ended.
fn confirmation_json(r: &CallRecord) -> Option<ConfirmationView> {
    let Some(Outcome::Result(result)) = &r.outcome else {
        return None;
    };
    let confirm_id = result.confirm_id()?.to_owned();
    Some(match &r.resolution {
        None => ConfirmationView {
            confirm_id,
            state: "pending",
            outcome: None,
            resolved_at: None,
        },
        Some(res) => ConfirmationView {
            confirm_id,
            state: "resolved",
            outcome: Some(res.outcome.clone()),
            resolved_at: Some(rfc3339_ms(res.at_ms)),
        },
    })
}
