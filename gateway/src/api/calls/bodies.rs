//! The bodies the call routes take and the answers they give, as the OpenAPI document shows
//! them.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolmark_broker::{CallKind, Outcome};
use toolmark_proto::ToolResult;
use utoipa::{IntoParams, ToSchema};

/// `POST …/calls`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CallBody {
    /// The page tool's full name, `^[A-Za-z0-9_.-]{1,128}$`.
    #[schema(pattern = "^[A-Za-z0-9_.-]{1,128}$")]
    pub(super) tool: String,
    /// The tool's input (default `{}`).
    #[serde(default = "empty_object")]
    #[schema(value_type = Object)]
    pub(super) input: Value,
    /// The manifest revision the call was made for (a page at another one refuses `stale`).
    pub(super) rev: Option<u64>,
    /// The deadline, 1 to the tenant's `max_call_timeout_ms` (default: the tenant's).
    #[schema(minimum = 1, maximum = 600_000)]
    pub(super) timeout_ms: Option<u64>,
}

/// `POST …/describe`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DescribeBody {
    /// The page tool's full name.
    #[schema(pattern = "^[A-Za-z0-9_.-]{1,128}$")]
    pub(super) tool: String,
    /// The deadline, 1 to the tenant's `max_call_timeout_ms`.
    #[schema(minimum = 1, maximum = 600_000)]
    pub(super) timeout_ms: Option<u64>,
}

/// `POST …/llm-tools/invoke`'s body: a tool use as the model produced it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InvokeBody {
    /// `page_call` or `page_describe`.
    #[schema(pattern = "^(page_call|page_describe)$")]
    pub(super) name: String,
    /// `{tool, input}` for `page_call`, `{tool}` for `page_describe`.
    #[serde(default = "empty_object")]
    #[schema(value_type = Object)]
    pub(super) input: Value,
}

/// The answer of a call or describe that ended.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallAnswer {
    /// The call id.
    pub id: String,
    /// The page it went to.
    pub client_id: String,
    /// The page's ToolResult, or `{"status": "timeout"}`.
    #[schema(value_type = Object)]
    pub outcome: Outcome,
}

/// The answer of a call started with `Prefer: respond-async`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    /// The call id (`GET /calls/{id}` gives its state).
    pub id: String,
    /// The page it went to.
    pub client_id: String,
}

/// The answer of `llm-tools/invoke`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Invoked {
    /// The call id.
    pub id: String,
    /// The outcome.
    #[schema(value_type = Object)]
    pub outcome: Outcome,
    /// What to hand back to the model (untrusted content wrapped).
    #[schema(value_type = Object)]
    pub content: Value,
}

/// A call as `GET /calls/{id}` shows it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallView {
    /// The call id.
    pub id: String,
    /// The user.
    pub user: String,
    /// The conversation.
    pub conversation: String,
    /// The page it went to.
    pub client_id: String,
    /// The tool.
    pub tool: String,
    /// `call` or `describe`.
    #[schema(value_type = String)]
    pub kind: CallKind,
    /// `pending`, `answered` or `timed_out`.
    pub state: &'static str,
    /// The deadline, RFC 3339 with milliseconds.
    pub deadline: String,
    /// The outcome, once there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub outcome: Option<Outcome>,
    /// For a call answered `needs_confirmation`: its confirmation, pending, then resolved with
    /// the page's final result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<ConfirmationView>,
    /// Who made it: `{"kind": "apiKey", "id"}`, `{"kind": "mcpToken", "id", "apiKeyId"}` or
    /// `{"kind": "oauth", "sub", "clientId"}` (none for a call stored by an older version).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub caller: Option<toolmark_broker::CallerRef>,
}

/// A call's deferred confirmation, as `GET /calls/{id}` shows it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfirmationView {
    /// The confirmId the page minted.
    pub confirm_id: String,
    /// `pending`, or `resolved` once the page confirmed it or it expired.
    pub state: &'static str,
    /// Once resolved: the page's final result (`refused` with `confirmation_expired` when it
    /// expired).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub outcome: Option<ToolResult>,
    /// Once resolved: when, RFC 3339 with milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<String>,
}

/// `GET /calls/{id}`'s query.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// Hold the answer until the call or its confirmation changes state, at most this many
    /// seconds (1–60), on any node.
    #[param(minimum = 1, maximum = 60)]
    pub wait: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PageCallInput {
    pub(super) tool: String,
    #[serde(default = "empty_object")]
    pub(super) input: Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PageDescribeInput {
    pub(super) tool: String,
}

pub(super) fn empty_object() -> Value {
    json!({})
}

/// `Idempotency-Key` and `Prefer` of a call or describe.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub(super) struct CallHeaders {
    /// 1–255 visible ASCII characters: a repeat within 24 h gets the first answer.
    #[param(rename = "Idempotency-Key")]
    pub(super) idempotency_key: Option<String>,
    /// `respond-async`: answer 202 at once.
    #[param(rename = "Prefer")]
    pub(super) prefer: Option<String>,
}

/// `Idempotency-Key` of an invoke.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub(super) struct IdempotencyHeader {
    /// 1–255 visible ASCII characters: a repeat within 24 h gets the first answer.
    #[param(rename = "Idempotency-Key")]
    pub(super) idempotency_key: Option<String>,
}
