//! Calls and describes: bind, send, and supervise each call until its result or its deadline.
//! The supervisor runs as its own task, so a call is timed out and cancelled at its deadline
//! even when the agent's HTTP request went away.

use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use toolmark_broker::{
    CallBinding, CallKind, CallRecord, CallRequest, CallState, ConvKey, Outcome, Placed, now_ms,
    partition,
};
use toolmark_proto::is_valid_tool_name;
use toolmark_proto::llm::{PAGE_CALL, PAGE_DESCRIBE, model_content};

use super::{Authed, Body, check_ids, idempotency, parse_body, parse_value};
use crate::problem::Problem;
use crate::state::AppState;
use crate::tenants::Tenant;

mod bodies;
mod run;

pub use bodies::{Accepted, CallAnswer, CallBody, CallView, DescribeBody, InvokeBody, Invoked};
use bodies::{CallHeaders, IdempotencyHeader, PageCallInput, PageDescribeInput};
#[cfg(test)]
use run::supervise;
pub(crate) use run::{Request, start};

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
    params(crate::openapi::TenantPath, crate::openapi::ConversationPath, CallHeaders),
    request_body = CallBody,
    responses((status = 200, description = "The call ended: its outcome", body = CallAnswer), (status = 202, description = "Started; the outcome comes later (GET /calls/{id}, call.result)", body = Accepted,
        headers(("Location" = String, description = "/v1/tenants/{tenant}/calls/{id}"))),
        crate::openapi::Problems),
    security(("apiKey" = [])))]
pub async fn call(
    State(app): State<AppState>,
    Authed(tenant): Authed,
    Path((_, user, conversation)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    check_ids(&user, &conversation)?;
    let key = idempotency::key_of(&headers)?;
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
    };
    let respond_async = wants_async(&headers);
    let route = ("calls", user.as_str(), conversation.as_str());
    respond_once(&app, &tenant, key, route, &body, req, respond_async).await
}

/// `POST /users/{u}/conversations/{c}/describe`
#[utoipa::path(post, path = "/v1/tenants/{tenant}/users/{user}/conversations/{conversation}/describe",
    tag = "calls",
    params(crate::openapi::TenantPath, crate::openapi::ConversationPath, CallHeaders),
    request_body = DescribeBody,
    responses((status = 200, description = "The call ended: its outcome", body = CallAnswer), (status = 202, description = "Started; the outcome comes later (GET /calls/{id}, call.result)", body = Accepted,
        headers(("Location" = String, description = "/v1/tenants/{tenant}/calls/{id}"))),
        crate::openapi::Problems),
    security(("apiKey" = [])))]
pub async fn describe(
    State(app): State<AppState>,
    Authed(tenant): Authed,
    Path((_, user, conversation)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    check_ids(&user, &conversation)?;
    let key = idempotency::key_of(&headers)?;
    let b: DescribeBody = parse_body(&tenant, &body)?;
    check_tool("/tool", &b.tool)?;
    let req = Request {
        kind: CallKind::Describe,
        tool: b.tool,
        input: Value::Null,
        rev: None,
        timeout_ms: b.timeout_ms,
        idempotency: None,
    };
    let respond_async = wants_async(&headers);
    let route = ("describe", user.as_str(), conversation.as_str());
    respond_once(&app, &tenant, key, route, &body, req, respond_async).await
}

async fn respond(
    app: &AppState,
    tenant: &Tenant,
    conv: ConvKey,
    req: Request,
    respond_async: bool,
) -> Result<Response, Problem> {
    let started = start(app, tenant, conv, req, respond_async).await?;
    if respond_async {
        return Ok(accepted(&tenant.id, &started.id, &started.client_id));
    }
    let outcome = started.outcome.await;
    Ok(Json(CallAnswer {
        id: started.id,
        client_id: started.client_id,
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

/// With an `Idempotency-Key`: claims it for this request (`Ok(None)`: run it, `req` now
/// carries the key), or finds the first request's record (`Ok(Some)`: answer as it).
async fn once(
    app: &AppState,
    tenant: &Tenant,
    key: Option<String>,
    (route, user, conversation): (&str, &str, &str),
    body: &Body,
    req: &mut Request,
) -> Result<Option<idempotency::Record>, Problem> {
    let Some(key) = key else {
        return Ok(None);
    };
    let sent = key;
    let key = idempotency::scoped(tenant, &sent);
    let legacy = (key != sent).then_some(sent.as_str());
    let value: Value = serde_json::from_slice(&body.0).unwrap_or(Value::Null);
    let fp = idempotency::fingerprint(route, user, conversation, &value);
    match idempotency::claim(app, &tenant.id, &key, legacy, &fp).await? {
        idempotency::Claimed::First => {
            req.idempotency = Some((key, fp));
            Ok(None)
        }
        idempotency::Claimed::Repeat(record) => {
            req.idempotency = Some((key, fp));
            Ok(Some(record))
        }
    }
}

/// Starts a call or describe and answers it, once per `Idempotency-Key` (a repeat gets the
/// first request's answer).
async fn respond_once(
    app: &AppState,
    tenant: &Tenant,
    key: Option<String>,
    (route, user, conversation): (&str, &str, &str),
    body: &Body,
    mut req: Request,
    respond_async: bool,
) -> Result<Response, Problem> {
    let at = (route, user, conversation);
    if let Some(record) = once(app, tenant, key, at, body, &mut req).await? {
        return Ok(repeat_call(app, tenant, &req, record, respond_async).await);
    }
    let conv = ConvKey::new(&tenant.id, user, conversation);
    respond(app, tenant, conv, req, respond_async).await
}

/// The answer to a repeat of a call or describe: the first request's call, 202 when this
/// request asks for it, else 200 with its outcome once it has one.
async fn repeat_call(
    app: &AppState,
    tenant: &Tenant,
    req: &Request,
    record: idempotency::Record,
    respond_async: bool,
) -> Response {
    let id = record.id.clone().unwrap_or_default();
    let client_id = record.client.clone().unwrap_or_default();
    if respond_async {
        return accepted(&tenant.id, &id, &client_id);
    }
    let key = req
        .idempotency
        .as_ref()
        .map(|(k, _)| k.as_str())
        .unwrap_or_default();
    let outcome = idempotency::outcome(app, &tenant.id, key, record).await;
    Json(CallAnswer {
        id,
        client_id,
        outcome,
    })
    .into_response()
}

/// `POST /users/{u}/conversations/{c}/llm-tools/invoke`: `page_call` / `page_describe` as the
/// model produced them; `content` is what to hand back to the model.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/users/{user}/conversations/{conversation}/llm-tools/invoke",
    tag = "llm-tools",
    params(crate::openapi::TenantPath, crate::openapi::ConversationPath, IdempotencyHeader),
    request_body = InvokeBody,
    responses((status = 200, description = "The outcome and what to hand back to the model", body = Invoked), crate::openapi::Problems),
    security(("apiKey" = [])))]
pub async fn invoke(
    State(app): State<AppState>,
    Authed(tenant): Authed,
    Path((_, user, conversation)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    check_ids(&user, &conversation)?;
    let key = idempotency::key_of(&headers)?;
    let b: InvokeBody = parse_body(&tenant, &body)?;
    let mut req = match b.name.as_str() {
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
            }
        }
        _ => {
            return Err(Problem::invalid(
                "/name",
                "name is page_call or page_describe",
            ));
        }
    };
    if let Some(record) = once(
        &app,
        &tenant,
        key,
        ("invoke", &user, &conversation),
        &body,
        &mut req,
    )
    .await?
    {
        let key = req
            .idempotency
            .as_ref()
            .map(|(k, _)| k.clone())
            .unwrap_or_default();
        let id = record.id.clone().unwrap_or_default();
        let untrusted = record.untrusted;
        let outcome = idempotency::outcome(&app, &tenant.id, &key, record).await;
        return Ok(invoked(&id, untrusted, &outcome));
    }
    let started = start(
        &app,
        &tenant,
        ConvKey::new(&tenant.id, &user, &conversation),
        req,
        false,
    )
    .await?;
    let outcome = started.outcome.await;
    Ok(invoked(&started.id, started.untrusted, &outcome))
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

/// `GET /calls/{id}`
#[utoipa::path(get, path = "/v1/tenants/{tenant}/calls/{id}", tag = "calls",
    params(crate::openapi::TenantPath, crate::openapi::CallPath),
    responses((status = 200, description = "The call", body = CallView), crate::openapi::Problems),
    security(("apiKey" = [])))]
pub async fn get_call(
    State(app): State<AppState>,
    Authed(tenant): Authed,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<CallView>, Problem> {
    let record = app
        .broker
        .call(&tenant.id, &id)
        .await?
        .ok_or_else(|| Problem::not_found("Call"))?;
    Ok(Json(call_json(&record)))
}

/// `POST /calls/{id}/cancel`
#[utoipa::path(post, path = "/v1/tenants/{tenant}/calls/{id}/cancel", tag = "calls",
    params(crate::openapi::TenantPath, crate::openapi::CallPath),
    responses((status = 202, description = "The page is sent the protocol cancel"),
        crate::openapi::Problems),
    security(("apiKey" = [])))]
pub async fn cancel(
    State(app): State<AppState>,
    Authed(tenant): Authed,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, Problem> {
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
    let deadline = humantime::format_rfc3339_millis(
        std::time::UNIX_EPOCH + Duration::from_millis(b.deadline_ms),
    )
    .to_string();
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
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use toolmark_broker::PageIdentity;
    use toolmark_broker::memory::MemoryBroker;
    use toolmark_broker::prelude::*;
    use toolmark_proto::ToolResult;
    use toolmark_proto::{AgentMessage, Describe, ids};

    use super::*;

    #[tokio::test]
    async fn a_call_whose_outcome_message_is_lost_is_answered_from_the_stored_outcome() {
        let registry = Arc::new(crate::registry::Registry::default());
        let broker = Arc::new(MemoryBroker::new("n1", registry.clone()));
        let mcp = toolmark_config::McpConfig::default()
            .parse()
            .expect("default [mcp]");
        let live = Arc::new(crate::hosted_mcp::Live::new(broker.clone(), mcp.clone()));
        let app = AppState::new(
            crate::tenants::Tenants::new(Vec::new()),
            broker.clone(),
            registry,
            Arc::new(crate::metrics::Metrics::new()),
            toolmark_process::Lifecycle::new(),
            None,
            None,
            None,
            mcp,
            live,
            toolmark_config::HoldSettings::default(),
        );
        let conv = ConvKey::new("t", "u", "c");
        let binding = CallBinding {
            id: ids::new_call_id(),
            conv: conv.clone(),
            client_id: "p1".into(),
            tool: "todo.add".into(),
            kind: CallKind::Call,
            // Time enough for the answer below on a busy machine; the supervisor waits it out.
            deadline_ms: now_ms() + 1000,
            node: "n1".into(),
            untrusted: false,
            respond_async: false,
        };
        let frame = AgentMessage::Describe(Describe {
            client_id: "p1".into(),
            id: binding.id.clone(),
            tool: "todo.add".into(),
        });
        // The broker's own outcome message is the one that gets lost: the supervisor waits on
        // a channel nobody ever sends on.
        drop(app.broker.send_call(binding.clone(), frame).await.unwrap());
        let (_never_sent, lost) = oneshot::channel();
        let outcome = app.life.spawn(supervise(
            app.clone(),
            binding.clone(),
            Duration::from_millis(1000),
            lost,
            None,
        ));
        let from = PageIdentity {
            conv,
            client_id: "p1".into(),
        };
        broker
            .submit_result(&from, &binding.id, ToolResult::Ok { data: None })
            .await
            .unwrap();
        assert_eq!(
            outcome.await.unwrap(),
            Outcome::Result(ToolResult::Ok { data: None }),
            "the page answered: the agent must not be told `timeout`"
        );
    }
}
