//! The conversation's current page tools as MCP tools: its manifest (from the broker), each
//! tool's input schema learned with a `describe` to the page (kept per page load on this node),
//! listed by the shared [`toolmark_mcp_tools::page_listing`], exactly as `toolmark-mcp` lists
//! them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use rmcp::model::Tool;
use serde_json::Value;
use toolmark_broker::{CallKind, ConversationState, Outcome};
use toolmark_mcp_tools::listing::MAX_TOOLS;
use toolmark_mcp_tools::{LISTING_WAIT, PageTool, page_listing};
use toolmark_proto::{ToolManifest, ToolManifestSummary, ToolResult};

use super::grant::McpGrant;
use crate::calls::{self, Request};
use crate::http::problem::Problem;
use crate::state::AppState;

/// How long a `describe` may take (the desktop CLI's too); a listing waits for it at most
/// [`LISTING_WAIT`].
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(10);

/// At most this many schemas are kept on one node; past it the cache starts again empty.
const SCHEMAS_KEPT: usize = 20_000;

/// A page load's tool: the conversation (tenant, user, conversation), the clientId and the
/// tool's name. A clientId is the page's own choice, so the conversation is part of the key:
/// one conversation's page never sees a schema another's page described.
type SchemaKey = (toolmark_broker::ConvKey, String, String);

/// Input schemas learned from pages, with the manifest entry they were learned for: a page
/// load's tool is described once, however many sessions list it.
#[derive(Debug, Default)]
pub struct Schemas {
    known: Mutex<HashMap<SchemaKey, (ToolManifestSummary, Option<Value>)>>,
}

impl Schemas {
    fn get(&self, key: &SchemaKey, summary: &ToolManifestSummary) -> Option<Option<Value>> {
        let known = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        known
            .get(key)
            .filter(|(s, _)| s == summary)
            .map(|(_, schema)| schema.clone())
    }

    fn put(&self, key: SchemaKey, summary: ToolManifestSummary, schema: Option<Value>) {
        let mut known = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if known.len() >= SCHEMAS_KEPT {
            known.clear();
        }
        known.insert(key, (summary, schema));
    }
}

/// The page new calls go to, when one of the conversation is connected.
pub fn open_page(s: &ConversationState) -> Option<&str> {
    s.client_id.as_deref().filter(|_| !s.pages.is_empty())
}

/// What the listing is made of: the open page's manifest entries, or nothing. Two equal
/// footprints list the same tools (a page that reloads with the same tools changes nothing).
pub fn footprint(s: &ConversationState) -> Option<Vec<ToolManifestSummary>> {
    open_page(s).map(|_| {
        let mut tools = s.tools.clone();
        tools.sort_by(|a, b| a.llm_name.cmp(&b.llm_name));
        tools
    })
}

/// The MCP listing of the conversation's open page; empty when none is open.
pub async fn listing(
    app: &AppState,
    schemas: &Arc<Schemas>,
    grant: &McpGrant,
) -> Result<Vec<Tool>, Problem> {
    let s = app.broker.conversation(&grant.conv()).await?;
    let Some(client_id) = open_page(&s).map(str::to_owned) else {
        return Ok(Vec::new());
    };
    // Only the tools the credential's policy allows are listed.
    let mut summaries = grant.caller.visible(s.tools);
    summaries.sort_by(|a, b| a.llm_name.cmp(&b.llm_name));
    // Only the first MAX_TOOLS by llmName can be listed: describe those, all at once. Each
    // describe runs on its own and keeps its answer for the next listing; this one waits at
    // most LISTING_WAIT, then lists a tool still unanswered with the fallback schema.
    summaries.truncate(MAX_TOOLS);
    let deadline = tokio::time::Instant::now() + LISTING_WAIT;
    let learn = summaries.into_iter().map(|summary| {
        let key = (grant.conv(), client_id.clone(), summary.name.clone());
        let cached = schemas.get(&key, &summary);
        let learning = cached.is_none().then(|| {
            let (app, schemas, grant) = (app.clone(), Arc::clone(schemas), grant.clone());
            let summary = summary.clone();
            tokio::spawn(async move {
                let schema = describe(&app, &grant, &summary.name).await?;
                schemas.put(key, summary, schema.clone());
                Some(schema)
            })
        });
        async move {
            let input_schema = match (cached, learning) {
                (Some(schema), _) => schema,
                (None, Some(task)) => match tokio::time::timeout_at(deadline, task).await {
                    Ok(Ok(Some(schema))) => schema,
                    _ => None,
                },
                (None, None) => None,
            };
            PageTool {
                summary,
                input_schema,
            }
        }
    });
    let tools = join_all(learn).await;
    Ok(page_listing(&tools))
}

/// `page_call` and `page_describe` for the conversation's open page (`?tools=page`); empty when
/// none is open.
pub async fn page_call_listing(app: &AppState, grant: &McpGrant) -> Result<Vec<Tool>, Problem> {
    let s = app.broker.conversation(&grant.conv()).await?;
    Ok(match open_page(&s) {
        Some(_) => toolmark_mcp_tools::page_call_tools(&grant.caller.visible(s.tools)),
        None => Vec::new(),
    })
}

/// Asks the page for a tool's full entry: `Some(schema)` once it answered (`Some(None)` when it
/// would not say), `None` when no answer came (not kept: the next listing asks again).
async fn describe(app: &AppState, grant: &McpGrant, tool: &str) -> Option<Option<Value>> {
    let timeout = DESCRIBE_TIMEOUT
        .as_millis()
        .min(u128::from(grant.tenant.limits.max_call_timeout_ms));
    let request = Request {
        kind: CallKind::Describe,
        tool: tool.to_owned(),
        input: Value::Null,
        rev: None,
        timeout_ms: u64::try_from(timeout).ok(),
        idempotency: None,
        by_llm_name: false,
        caller: grant.caller(),
    };
    let started = calls::start(app, &grant.tenant, grant.conv(), request, false)
        .await
        .ok()?;
    match started.outcome.await {
        Outcome::Result(ToolResult::Ok { data: Some(data) }) => {
            Some(ToolManifest::from_value(data).ok().map(|m| m.input_schema))
        }
        Outcome::Result(_) => Some(None),
        Outcome::Timeout => None,
    }
}
