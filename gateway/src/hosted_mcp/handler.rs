//! The rmcp server handler of the hosted endpoint: lists the conversation's page tools, runs a
//! tool call as an agent call, and announces `list_changed`, to a session's `GET` stream
//! (revisions with sessions) or to a `subscriptions/listen` stream (2026-07-28).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, Extensions, GetTaskParams,
    GetTaskResult, JsonObject, ListToolsResult, PaginatedRequestParams, ServerConfig,
    SubscriptionFilter, TASKS_EXTENSION_ID,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use tokio_util::sync::{CancellationToken, DropGuard};
use toolmark_broker::{CallKind, Outcome};
use toolmark_mcp_tools::outcome::NO_PAGE;
use toolmark_mcp_tools::{CallEnd, call_result};
use toolmark_proto::ToolResult;

use super::grant::McpGrant;
use super::listings::{Listings, forward};
use super::state::McpState;
use super::tools::{self, Schemas};
use crate::calls::{CallError, Request};
use crate::http::problem::Problem;
use crate::traces;
use tracing::Instrument as _;

const INSTRUCTIONS: &str = "Tools of the app page the user has open in the browser. With no page open the list is empty: ask the user to open the app. Consequential tools wait for the user's confirmation in the page.";

/// One session's (or one stateless request's) handler.
#[derive(Debug, Clone)]
pub struct HostedMcp {
    app: McpState,
    schemas: Arc<Schemas>,
    listings: Arc<Listings>,
    /// Stops the session's forwarding of `list_changed` when the session ends.
    follower: Arc<Mutex<Option<DropGuard>>>,
}

impl HostedMcp {
    /// A handler of `app`, sharing the node's schema cache and listing followers.
    pub fn new(app: McpState, schemas: Arc<Schemas>, listings: Arc<Listings>) -> Self {
        HostedMcp {
            app,
            schemas,
            listings,
            follower: Arc::default(),
        }
    }
}

/// The grant the auth layer put on the HTTP request a message came in.
fn grant_of(extensions: &Extensions) -> Result<McpGrant, ErrorData> {
    extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<McpGrant>())
        .cloned()
        .ok_or_else(|| ErrorData::invalid_request("no MCP token on this request", None))
}

/// Whether the request asked for `?tools=page`: `page_call` and `page_describe` instead of one
/// MCP tool per page tool.
fn page_mode(extensions: &Extensions) -> bool {
    extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.uri.query())
        .is_some_and(|q| q.split('&').any(|pair| pair == "tools=page"))
}

/// What a `page_call` or `page_describe` asks for: (kind, tool name, input).
fn page_call_of(
    name: &str,
    mut arguments: serde_json::Map<String, Value>,
) -> Result<(CallKind, String, Value), ErrorData> {
    let kind = match name {
        toolmark_proto::llm::PAGE_CALL => CallKind::Call,
        toolmark_proto::llm::PAGE_DESCRIBE => CallKind::Describe,
        _ => {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {name}: the tools are page_call and page_describe"),
                None,
            ));
        }
    };
    let tool = match arguments.remove("tool") {
        Some(Value::String(t)) if toolmark_proto::is_valid_tool_name(&t) => t,
        _ => {
            return Err(ErrorData::invalid_params(
                "tool is a page tool name (^[A-Za-z0-9_.-]{1,128}$)",
                None,
            ));
        }
    };
    let input = match arguments.remove("input") {
        None => Value::Object(serde_json::Map::new()),
        Some(v @ Value::Object(_)) => v,
        Some(_) => return Err(ErrorData::invalid_params("input is an object", None)),
    };
    Ok((kind, tool, input))
}

/// Sleeps `d`; forever for [`Duration::MAX`].
async fn sleep_or_never(d: Duration) {
    if d == Duration::MAX {
        std::future::pending::<()>().await;
    } else {
        tokio::time::sleep(d).await;
    }
}

fn internal(p: &Problem) -> ErrorData {
    ErrorData::internal_error(p.detail.clone(), None)
}

/// The span of one MCP request of `method` (`crate::traces::mcp_span`), from its context.
fn span_of(
    method: &'static str,
    tool: Option<&str>,
    context: &RequestContext<RoleServer>,
) -> tracing::Span {
    if !traces::on() {
        return tracing::Span::none();
    }
    let traceparent = context.meta.get("traceparent").and_then(Value::as_str);
    let session = context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.headers.get("mcp-session-id"))
        .and_then(|v| v.to_str().ok());
    traces::mcp_span(method, tool, traceparent, session)
}

/// Runs an MCP request's work in its span (when traced) and counts its duration under
/// `method`; a JSON-RPC error marks the span with its code.
async fn measured<T>(
    app: &McpState,
    method: &'static str,
    span: tracing::Span,
    work: impl Future<Output = Result<T, ErrorData>>,
) -> Result<T, ErrorData> {
    let started = std::time::Instant::now();
    let answer = if span.is_disabled() {
        work.await
    } else {
        work.instrument(span.clone()).await
    };
    if let Err(e) = &answer {
        // A refusal's own code when the error carries one, else the JSON-RPC code.
        let code = e
            .data
            .as_ref()
            .and_then(|d| d.get("code"))
            .and_then(Value::as_str)
            .map_or_else(|| e.code.0.to_string(), str::to_owned);
        traces::mark_error(&span, &code);
    }
    app.metrics
        .mcp_operation(method, started.elapsed().as_secs_f64());
    answer
}

impl HostedMcp {
    /// A `tools/call`: the tool run as an agent call, its outcome marking `span`.
    async fn run_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        span: tracing::Span,
    ) -> Result<CallToolResponse, ErrorData> {
        let grant = grant_of(&context.extensions)?;

        let conv = grant.conv();
        let arguments = request.arguments.unwrap_or_default();
        // A tool listed by its LLM name is named by the broker against the manifest of the
        // page the call is bound to, in the step that binds it: no read of the conversation
        // of its own. No page: the `no_page` of the placement.
        let (kind, tool, input, by_llm_name) = if page_mode(&context.extensions) {
            let (kind, tool, input) = page_call_of(&request.name, arguments)?;
            (kind, tool, input, false)
        } else {
            let name = request.name.into_owned();
            (CallKind::Call, name, Value::Object(arguments), true)
        };
        let timeout_ms = match context.meta.get("timeoutMs") {
            None => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                ErrorData::invalid_params("_meta.timeoutMs is a number of milliseconds", None)
            })?),
        };
        let call = Request {
            kind,
            tool,
            by_llm_name,
            input: if kind == CallKind::Describe {
                Value::Null
            } else {
                input
            },
            rev: None,
            timeout_ms,
            idempotency: None,
            caller: grant.caller(),
        };
        // A client that declares tasks may be answered with one: its call is announced as an
        // async call's is (`call.result`), so its end is heard on every node.
        let tasks = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        let started = match self.app.calls.start(&grant.tenant, conv, call, tasks).await {
            Ok(started) => started,
            Err(e @ (CallError::Timeout { .. } | CallError::UnknownTool { .. })) => {
                return Err(ErrorData::invalid_params(Problem::from(e).detail, None));
            }
            // A tool the credential may not call, or whose definition the tenant did not pin,
            // is not there for this client: nothing was sent to the page.
            Err(e @ (CallError::NotAllowed { .. } | CallError::NotPinned { .. })) => {
                // The refusal's code rides in the error's data (the span's `error.type`).
                let code = e.code();
                return Err(ErrorData::invalid_params(
                    Problem::from(e).detail,
                    Some(serde_json::json!({ "code": code })),
                ));
            }
            Err(e @ CallError::NoPage) => {
                traces::mark_error(&span, e.code());
                return Ok(call_result(CallEnd::Lost(NO_PAGE), false).into());
            }
            Err(e) => return Err(internal(&Problem::from(e))),
        };
        let task_of = super::tasks::Made {
            id: started.id,
            tool: started.tool,
            untrusted: started.untrusted,
        };
        let mut running = started.outcome;
        let task_after = if tasks {
            self.app.settings.task_after
        } else {
            // Without tasks the call is awaited to its end, as long as the deadline allows.
            Duration::MAX
        };
        let outcome = tokio::select! {
            o = &mut running => o,
            () = sleep_or_never(task_after) => {
                // The supervision goes on in a task of its own (dropped unfinished).
                drop(running);
                return Ok(super::tasks::create(&self.app, &grant, &task_of, None)
                    .await?
                    .into());
            }
            () = context.ct.cancelled() => {
                // The client gave up (`notifications/cancelled`): the page gets the protocol
                // `cancel`; the client expects no answer.
                if let Err(e) = self.app.broker.cancel(&grant.tenant.id, &task_of.id).await {
                    tracing::warn!(call_id = %task_of.id, error = %e, "MCP cancellation not sent to the page");
                }
                return Err(ErrorData::internal_error("cancelled", None));
            }
        };
        if tasks && let Outcome::Result(ToolResult::NeedsConfirmation { summary, .. }) = &outcome {
            let task = super::tasks::create(&self.app, &grant, &task_of, Some(summary)).await?;
            return Ok(task.into());
        }
        traces::mark_outcome(&span, &outcome);
        let end = match outcome {
            Outcome::Result(r) => CallEnd::Answered(r),
            Outcome::Timeout => CallEnd::DeadlinePassed,
        };
        Ok(call_result(end, task_of.untrusted).into())
    }
}

impl ServerHandler for HostedMcp {
    fn get_info(&self) -> ServerConfig {
        let mut config = toolmark_mcp_tools::listing::server_config(
            "toolmark-gateway",
            env!("CARGO_PKG_VERSION"),
            INSTRUCTIONS,
        );
        // Tasks, for the clients that declare them (`super::tasks`).
        config
            .capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
        config
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let span = span_of("tools/list", None, &context);
        measured(&self.app, "tools/list", span, async {
            let grant = grant_of(&context.extensions)?;
            let tools = if page_mode(&context.extensions) {
                tools::page_call_listing(&self.app, &grant).await
            } else {
                tools::listing(&self.app, &self.schemas, &grant).await
            }
            .map_err(|p| internal(&p))?;
            Ok(ListToolsResult::with_all_items(tools))
        })
        .await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let span = span_of("tools/call", Some(&request.name), &context);
        let work = self.run_tool(request, context, span.clone());
        measured(&self.app, "tools/call", span, work).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let span = span_of("tasks/get", None, &context);
        measured(&self.app, "tasks/get", span, async {
            let grant = grant_of(&context.extensions)?;
            let task = super::tasks::get(&self.app, &grant, &request.task_id).await?;
            Ok(GetTaskResult::new(task))
        })
        .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let span = span_of("tasks/cancel", None, &context);
        measured(&self.app, "tasks/cancel", span, async {
            let grant = grant_of(&context.extensions)?;
            super::tasks::cancel(&self.app, &grant, &request.task_id).await
        })
        .await
    }
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A session began here (or was restored here from the broker): it hears its
        // conversation's listing changes from the node's one follower of that conversation.
        let Ok(grant) = grant_of(&context.extensions) else {
            return;
        };
        let stop = CancellationToken::new();
        let previous = self
            .follower
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .replace(stop.clone().drop_guard());
        drop(previous);
        let changes = self.listings.listen(&self.app, &grant);
        let peer = context.peer.clone();
        let stopping = self.app.life.stopping().clone();
        let tasks = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.supports_tasks());
        if tasks {
            // The session's tasks end notified on its stream, wherever they ended.
            let (app, grant, peer) = (self.app.clone(), grant.clone(), peer.clone());
            let (stop, stopping) = (stop.clone(), stopping.clone());
            self.app.life.spawn(async move {
                tokio::select! {
                    () = super::tasks::notify_ends(&app, &grant, &peer) => {}
                    () = stop.cancelled() => {}
                    () = stopping.cancelled() => {}
                }
            });
        }
        self.app.life.spawn(async move {
            tokio::select! {
                () = forward(changes, || {
                    let peer = peer.clone();
                    async move { peer.notify_tool_list_changed().await.is_ok() }
                }) => {}
                () = stop.cancelled() => {}
                () = stopping.cancelled() => {}
            }
        });
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        toolmark_mcp_tools::listing::accepted_filter(requested)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let grant = grant_of(&context.request_context().extensions)?;
        let sink = context.sink().clone();
        let changes = self.listings.listen(&self.app, &grant);
        let stopping = self.app.life.stopping().clone();
        tokio::select! {
            () = forward(changes, || {
                let sink = sink.clone();
                async move { sink.notify_tool_list_changed().await.is_ok() }
            }) => {}
            () = context.cancelled() => {}
            () = stopping.cancelled() => {}
        }
        Ok(())
    }
}
