//! MCP tasks (the `io.modelcontextprotocol/tasks` extension) for clients that declare them: a
//! tool call whose page answers `needs_confirmation`, or that the page has not answered within
//! `mcp.task_after_ms`, answers a task handle; `tasks/get` reads where the call stands on any
//! node; `tasks/cancel` sends the protocol `cancel` or marks a task waiting on a confirmation
//! cancelled.
//!
//! A task is its call: its id is the call's id, and its state is read from the call's record
//! (as `crate::calls::CallEngine::follow` reads it), the one source of truth the call
//! resource, `confirmation.resolved` and the webhooks read too. The broker keeps beside it only who owns the task (the token's
//! tenant incarnation, user and conversation, and the principal that made it: its API key, or
//! its OAuth subject and client), its tool (a reader's policy must allow it), and whether it
//! was cancelled, in a record of the front doors' store ([`toolmark_broker::DoorRecords`]), its
//! time to live restarted by each read.
//! The final result, once seen, is written to that record, so a task outlives its call's
//! retention.

use std::time::Duration;

use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, JsonObject, ServerNotification, Task,
    TaskPayload, TaskStatus, TaskStatusNotification, TaskStatusNotificationParams,
};
use rmcp::service::Peer;
use rmcp::{ErrorData, RoleServer};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;
use toolmark_broker::{CallRecord, EventType, Kept, Outcome, now_ms};
use toolmark_mcp_tools::{CallEnd, call_result};
use toolmark_proto::ToolResult;

use super::grant::McpGrant;
use super::state::McpState;
use crate::calls::{Phase, phase};

/// How long a task is kept, restarted by each `tasks/get`: past a confirmation's whole life
/// (its binding is kept 15 minutes) and the 5 minutes its call is kept after it.
pub(super) const TASK_TTL: Duration = Duration::from_secs(20 * 60);

/// The polling interval a task suggests.
const POLL_INTERVAL_MS: u64 = 2000;

/// What the broker keeps of a task beside its call.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TaskRecord {
    /// The owner: the tenant's incarnation, the user and the conversation of the token.
    incarnation: u64,
    user: String,
    conversation: String,
    /// The principal that made it ([`toolmark_broker::CallerRef::principal`]: the API key of
    /// the MCP token, or the OAuth subject and client). `None` in a record of the previous
    /// release, which is held to the conversation alone for the 20 minutes it lives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    principal: Option<String>,
    /// The call's tool, which a reader's policy must allow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool: Option<String>,
    /// Whether the tool is marked untrusted (its result is rendered so).
    #[serde(default)]
    untrusted: bool,
    /// When the task was made (ms since the epoch).
    created_ms: u64,
    /// Set by `tasks/cancel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cancelled_ms: Option<u64>,
    /// The final CallToolResult, once a reader saw it, and when the call ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ended: Option<(JsonObject, u64)>,
}

impl TaskRecord {
    /// Whether `grant` is the task's maker: the same tenant incarnation, user and conversation,
    /// and the same principal (another key's token, or another OAuth subject or client, is not).
    fn owned_by(&self, grant: &McpGrant) -> bool {
        self.incarnation == grant.tenant.incarnation
            && self.user == grant.user
            && self.conversation == grant.conversation
            && self
                .principal
                .as_ref()
                .is_none_or(|p| *p == grant.caller.reference().principal())
    }
}

/// The record in the front doors' store.
fn key(tenant: &str, id: &str) -> Kept {
    Kept::McpTask {
        tenant: tenant.to_owned(),
        id: id.to_owned(),
    }
}

fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

fn internal(e: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(e.to_string(), None)
}

fn not_found() -> ErrorData {
    ErrorData::invalid_params("task not found", None)
}

/// The call a task is made of.
pub(super) struct Made {
    /// Its id (the task's).
    pub id: String,
    /// Its tool.
    pub tool: String,
    /// Whether the tool is marked untrusted.
    pub untrusted: bool,
}

/// Makes the call `started` (placed for `grant`) a task, and answers its handle; the task's
/// record names its maker and its tool.
pub(super) async fn create(
    app: &McpState,
    grant: &McpGrant,
    started: &Made,
    waiting: Option<&str>,
) -> Result<CreateTaskResult, ErrorData> {
    let now = now_ms();
    let call_id = started.id.as_str();
    let record = TaskRecord {
        incarnation: grant.tenant.incarnation,
        user: grant.user.clone(),
        conversation: grant.conversation.clone(),
        principal: Some(grant.caller.reference().principal()),
        tool: Some(started.tool.clone()),
        untrusted: started.untrusted,
        created_ms: now,
        cancelled_ms: None,
        ended: None,
    };
    let body = serde_json::to_string(&record).map_err(internal)?;
    app.broker
        .keep(&key(&grant.tenant.id, call_id), &body, TASK_TTL)
        .await
        .map_err(internal)?;
    let mut task = task(call_id, TaskStatus::Working, &record, now);
    task.status_message = Some(waiting.unwrap_or(RUNNING).to_owned());
    Ok(CreateTaskResult::new(task))
}

/// The status message of a task whose call the page has not answered yet.
const RUNNING: &str = "The page is running the tool.";

fn task(id: &str, status: TaskStatus, record: &TaskRecord, updated_ms: u64) -> Task {
    Task::new(id, status, rfc3339(record.created_ms), rfc3339(updated_ms))
        .with_ttl_ms(u64::try_from(TASK_TTL.as_millis()).unwrap_or(u64::MAX))
        .with_poll_interval_ms(POLL_INTERVAL_MS)
}

/// The task `id` as `grant` may see it; "task not found" for one it did not make, or whose
/// tool its policy does not allow now (read against the page's current manifest, as a call of
/// it would be).
async fn record(app: &McpState, grant: &McpGrant, id: &str) -> Result<TaskRecord, ErrorData> {
    let stored = app
        .broker
        .kept(&key(&grant.tenant.id, id), TASK_TTL)
        .await
        .map_err(internal)?
        .ok_or_else(not_found)?;
    let record: TaskRecord = serde_json::from_str(&stored).map_err(internal)?;
    if !record.owned_by(grant) {
        return Err(not_found());
    }
    if let Some(tool) = &record.tool
        && app
            .calls
            .authorize_tool(&grant.caller, &grant.conv(), tool)
            .await
            .is_err()
    {
        return Err(not_found());
    }
    Ok(record)
}

/// `tasks/get`: where the task's call stands.
pub(super) async fn get(
    app: &McpState,
    grant: &McpGrant,
    id: &str,
) -> Result<DetailedTask, ErrorData> {
    let mut rec = record(app, grant, id).await?;
    if let Some(at) = rec.cancelled_ms {
        return Ok(DetailedTask::new(
            task(id, TaskStatus::Cancelled, &rec, at),
            TaskPayload::Cancelled,
        ));
    }
    if let Some((result, at)) = &rec.ended {
        return Ok(completed(id, &rec, result.clone(), *at));
    }
    let call = app
        .broker
        .call(&grant.tenant.id, id)
        .await
        .map_err(internal)?;
    let Some(call) = call.filter(|c| c.binding.conv == grant.conv()) else {
        // The call left the broker's retention before any reader saw its end.
        return Err(not_found());
    };
    let now = now_ms();
    match ending(&call) {
        Ending::Working(message) => {
            let mut t = task(id, TaskStatus::Working, &rec, now);
            t.status_message = Some(message);
            Ok(DetailedTask::new(t, TaskPayload::Working))
        }
        Ending::Ended(end, at) => {
            let result = result_object(call_result(end, rec.untrusted))?;
            rec.ended = Some((result.clone(), at));
            // Kept with the task: a later read needs no call record.
            if let Ok(body) = serde_json::to_string(&rec) {
                let _ = app
                    .broker
                    .keep(&key(&grant.tenant.id, id), &body, TASK_TTL)
                    .await;
            }
            Ok(completed(id, &rec, result, at))
        }
    }
}

/// `tasks/cancel`: a task whose call is pending sends the page the protocol `cancel`; either
/// way the task is cancelled from now on (protocol v1 cannot withdraw a confirmation the page
/// shows: its `confirmation.resolved` still follows). A task that ended stays as it ended.
pub(super) async fn cancel(app: &McpState, grant: &McpGrant, id: &str) -> Result<(), ErrorData> {
    let mut rec = record(app, grant, id).await?;
    if rec.cancelled_ms.is_some() || rec.ended.is_some() {
        return Ok(());
    }
    let call = app
        .broker
        .call(&grant.tenant.id, id)
        .await
        .map_err(internal)?;
    match call.as_ref().map(phase) {
        Some(Phase::Ended) | None => return Ok(()),
        Some(Phase::Running) => {
            app.broker
                .cancel(&grant.tenant.id, id)
                .await
                .map_err(internal)?;
        }
        Some(Phase::Confirming) => {}
    }
    rec.cancelled_ms = Some(now_ms());
    let body = serde_json::to_string(&rec).map_err(internal)?;
    app.broker
        .keep(&key(&grant.tenant.id, id), &body, TASK_TTL)
        .await
        .map_err(internal)
}

/// The task of `grant` for the call `id` once it ended, for its notification; `None` while it
/// runs, or when the call is no task of `grant`'s.
async fn ended(app: &McpState, grant: &McpGrant, id: &str) -> Option<DetailedTask> {
    let t = get(app, grant, id).await.ok()?;
    t.status().is_terminal().then_some(t)
}

/// Sends `notifications/tasks` to a session's `peer` for each task of `grant` that ends, until
/// the session's stream is gone. A task's end is heard from the tenant's event log, which every
/// node reads: its call's `call.result` or `call.timeout` (a task's call is announced as an
/// async call's is), or its confirmation's `confirmation.resolved`.
pub(super) async fn notify_ends(app: &McpState, grant: &McpGrant, peer: &Peer<RoleServer>) {
    let Ok(mut feed) = app.broker.events(&grant.tenant.id, None).await else {
        return;
    };
    loop {
        let event = match feed.live.recv().await {
            Ok(e) => e,
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return,
        };
        if event.user != grant.user || event.conversation != grant.conversation {
            continue;
        }
        let field = match event.kind {
            EventType::CallResult | EventType::CallTimeout => "id",
            EventType::ConfirmationResolved => "callId",
            _ => continue,
        };
        let Some(id) = event.data.get(field).and_then(|v| v.as_str()) else {
            continue;
        };
        if let Some(task) = ended(app, grant, id).await {
            let note = TaskStatusNotification::new(TaskStatusNotificationParams::new(task));
            if peer
                .send_notification(ServerNotification::TaskStatusNotification(note))
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

/// How a call reads as a task.
enum Ending {
    /// Still running, with what it waits for.
    Working(String),
    /// Ended this way, at this time (ms).
    Ended(CallEnd, u64),
}

fn ending(call: &CallRecord) -> Ending {
    match (phase(call), &call.outcome) {
        (Phase::Running, _) => Ending::Working(RUNNING.to_owned()),
        (
            Phase::Confirming,
            Some(Outcome::Result(ToolResult::NeedsConfirmation { summary, .. })),
        ) => Ending::Working(summary.clone()),
        (Phase::Confirming, _) => Ending::Working(RUNNING.to_owned()),
        (Phase::Ended, _) => {
            let end = match (&call.resolution, &call.outcome) {
                (Some(r), _) => CallEnd::Answered(r.outcome.clone()),
                (None, Some(Outcome::Result(r))) => CallEnd::Answered(r.clone()),
                (None, _) => CallEnd::DeadlinePassed,
            };
            let at = call.resolution.as_ref().map_or_else(now_ms, |r| r.at_ms);
            Ending::Ended(end, at)
        }
    }
}

fn result_object(result: CallToolResult) -> Result<JsonObject, ErrorData> {
    match serde_json::to_value(result).map_err(internal)? {
        serde_json::Value::Object(o) => Ok(o),
        _ => Err(internal("a tool result is an object")),
    }
}

fn completed(id: &str, rec: &TaskRecord, result: JsonObject, at: u64) -> DetailedTask {
    DetailedTask::new(
        task(id, TaskStatus::Completed, rec, at),
        TaskPayload::Completed { result },
    )
}
