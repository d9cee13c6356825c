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
use super::state::McpState;
use crate::calls::{self, Request};
use crate::http::problem::Problem;

/// How long a `describe` may take (the desktop CLI's too); a listing waits for it at most
/// [`LISTING_WAIT`].
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(10);

/// At most this many bytes of schemas (and the manifest entries they were learned for) are
/// kept on one node; past it the cache starts again empty. Only what a listing shows is kept
/// (a schema over the listing's caps is kept as `{"type":"object"}`), so a page cannot grow it
/// by more than that per tool.
pub const SCHEMA_BYTES_KEPT: usize = 32 << 20;

/// A page load's tool: the conversation (tenant, user, conversation), the clientId and the
/// tool's name. A clientId is the page's own choice, so the conversation is part of the key:
/// one conversation's page never sees a schema another's page described.
type SchemaKey = (toolmark_broker::ConvKey, String, String);

/// Input schemas learned from pages, with the manifest entry they were learned for: a page
/// load's tool is described once, however many sessions list it. Bounded in bytes
/// ([`SCHEMA_BYTES_KEPT`]); its size is the metric `toolmark_mcp_schema_cache_bytes`.
#[derive(Debug, Default)]
pub struct Schemas {
    known: Mutex<Known>,
    /// The metric of its size.
    bytes_gauge: prometheus_client::metrics::gauge::Gauge,
}

#[derive(Debug, Default)]
struct Known {
    entries: HashMap<SchemaKey, (ToolManifestSummary, Option<Value>)>,
    bytes: usize,
}

/// What one entry costs, about: its key, its manifest entry and its schema as JSON text.
fn entry_bytes(key: &SchemaKey, summary: &ToolManifestSummary, schema: Option<&Value>) -> usize {
    let (conv, client, tool) = key;
    let text = |v: &Value| serde_json::to_string(v).map_or(0, |s| s.len());
    conv.tenant.len()
        + conv.user.len()
        + conv.conversation.len()
        + client.len()
        + tool.len()
        + summary.name.len()
        + summary.llm_name.len()
        + summary.title.as_ref().map_or(0, String::len)
        + summary.description.len()
        + summary.extra.values().map(text).sum::<usize>()
        + schema.map_or(0, text)
        + 128
}

impl Schemas {
    /// An empty cache whose size is reported on `gauge`.
    pub fn new(gauge: prometheus_client::metrics::gauge::Gauge) -> Self {
        Schemas {
            known: Mutex::default(),
            bytes_gauge: gauge,
        }
    }

    fn get(&self, key: &SchemaKey, summary: &ToolManifestSummary) -> Option<Option<Value>> {
        let known = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        known
            .entries
            .get(key)
            .filter(|(s, _)| s == summary)
            .map(|(_, schema)| schema.clone())
    }

    fn put(&self, key: SchemaKey, summary: ToolManifestSummary, schema: Option<Value>) {
        // Only what a listing shows is kept.
        let schema = toolmark_mcp_tools::listing::shown_schema(schema.as_ref());
        let size = entry_bytes(&key, &summary, schema.as_ref());
        let mut known = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if known.bytes + size > SCHEMA_BYTES_KEPT {
            known.entries.clear();
            known.bytes = 0;
        }
        if let Some((s, old)) = known.entries.insert(key.clone(), (summary, schema)) {
            let before = entry_bytes(&key, &s, old.as_ref());
            known.bytes = known.bytes.saturating_sub(before);
        }
        known.bytes += size;
        self.bytes_gauge
            .set(i64::try_from(known.bytes).unwrap_or(i64::MAX));
    }

    /// Bytes kept now.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .bytes
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
    app: &McpState,
    schemas: &Arc<Schemas>,
    grant: &McpGrant,
) -> Result<Vec<Tool>, Problem> {
    let s = app.broker.conversation(&grant.conv()).await?;
    let Some(client_id) = open_page(&s).map(str::to_owned) else {
        return Ok(Vec::new());
    };
    // Only the tools the credential's policy allows are listed.
    let mut summaries = grant
        .caller
        .visible(app.tenants.pinned_view(&grant.conv().tenant, s.tools));
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
pub async fn page_call_listing(app: &McpState, grant: &McpGrant) -> Result<Vec<Tool>, Problem> {
    let s = app.broker.conversation(&grant.conv()).await?;
    Ok(match open_page(&s) {
        Some(_) => toolmark_mcp_tools::page_call_tools(
            &grant
                .caller
                .visible(app.tenants.pinned_view(&grant.conv().tenant, s.tools)),
        ),
        None => Vec::new(),
    })
}

/// Asks the page for a tool's full entry: `Some(schema)` once it answered (`Some(None)` when it
/// would not say), `None` when no answer came (not kept: the next listing asks again).
async fn describe(app: &McpState, grant: &McpGrant, tool: &str) -> Option<Option<Value>> {
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
    let started = match app
        .calls
        .start(&grant.tenant, grant.conv(), request, false)
        .await
    {
        Ok(started) => started,
        // No page, or a refusal: nothing to describe; the listing goes on without the schema.
        Err(e @ (calls::CallError::Broker(_) | calls::CallError::Draining)) => {
            tracing::debug!(
                tool,
                error = e.code(),
                "describe for the MCP listing not started"
            );
            return None;
        }
        Err(_) => return None,
    };
    match started.outcome.await {
        Outcome::Result(ToolResult::Ok { data: Some(data) }) => {
            Some(ToolManifest::from_value(data).ok().map(|m| m.input_schema))
        }
        Outcome::Result(_) => Some(None),
        Outcome::Timeout => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolmark_broker::ConvKey;

    fn summary(name: &str) -> ToolManifestSummary {
        ToolManifestSummary {
            name: name.to_owned(),
            llm_name: name.replace('.', "__"),
            title: None,
            description: "A tool".to_owned(),
            hints: toolmark_proto::Hints::default(),
            mode: None,
            extra: serde_json::Map::new(),
            digest: toolmark_proto::pin::Memo::default(),
        }
    }

    fn key(i: usize) -> SchemaKey {
        (
            ConvKey::new("t", &format!("u{i}"), "c"),
            "client".to_owned(),
            "notes.add".to_owned(),
        )
    }

    /// A schema far over the listing's cap: what a page answering `describe` with 367 KB
    /// schemas sends.
    fn huge_schema() -> Value {
        let props: serde_json::Map<String, Value> = (0..12_000)
            .map(|i| (format!("field{i:05}"), json!({"type": "string"})))
            .collect();
        json!({"type": "object", "properties": props})
    }

    #[test]
    fn a_schema_over_the_listings_cap_is_kept_as_the_listing_shows_it() {
        let gauge = prometheus_client::metrics::gauge::Gauge::default();
        let schemas = Schemas::new(gauge.clone());
        let schema = huge_schema();
        assert!(serde_json::to_string(&schema).unwrap().len() > 300_000);
        schemas.put(key(0), summary("notes.add"), Some(schema));
        assert_eq!(
            schemas.get(&key(0), &summary("notes.add")),
            Some(Some(json!({"type": "object"})))
        );
        assert!(schemas.bytes() < 1024, "{} bytes kept", schemas.bytes());
        assert_eq!(usize::try_from(gauge.get()).unwrap(), schemas.bytes());
        // A schema within the caps is kept whole.
        let small = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        schemas.put(key(1), summary("notes.add"), Some(small.clone()));
        assert_eq!(
            schemas.get(&key(1), &summary("notes.add")),
            Some(Some(small))
        );
        // Described again for the same page load: counted once.
        let before = schemas.bytes();
        schemas.put(
            key(1),
            summary("notes.add"),
            Some(json!({"type": "object"})),
        );
        assert!(schemas.bytes() < before);
    }

    #[test]
    fn the_cache_stays_within_its_bytes_whatever_pages_send() {
        let schemas = Schemas::default();
        // Schemas just under the listing's cap, from ever new page loads.
        let props: serde_json::Map<String, Value> = (0..1_000)
            .map(|i| (format!("f{i:04}"), json!({"type": "string"})))
            .collect();
        let schema = json!({"type": "object", "properties": props});
        let size = serde_json::to_string(&schema).unwrap().len();
        assert!(
            size < toolmark_mcp_tools::listing::MAX_SCHEMA_BYTES,
            "{size}"
        );
        let mut most = 0;
        for i in 0..(2 * SCHEMA_BYTES_KEPT / size) {
            schemas.put(key(i), summary("notes.add"), Some(schema.clone()));
            most = most.max(schemas.bytes());
        }
        assert!(most <= SCHEMA_BYTES_KEPT, "{most} bytes kept");
        assert!(most > SCHEMA_BYTES_KEPT / 2, "{most} bytes kept");
    }
}
