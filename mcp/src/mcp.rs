//! The MCP side: an rmcp server handler that lists `toolmark_pairing` or the paired page's
//! tools, runs calls through the [`Link`], and announces `list_changed`, both to sessions that
//! began with `initialize` and to `subscriptions/listen` streams of the newest revision.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerConfig, SubscriptionFilter, Tool,
};
use rmcp::service::{RequestContext, SubscriptionContext, SubscriptionSink};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use toolmark_mcp_tools::outcome::call_result;

use crate::link::{CallError, Link};
use crate::listing::{PAIRING_TOOL, pairing_text};
use crate::pairing::Pairing;

const INSTRUCTIONS: &str = "Tools of the app page open in the user's browser. While no page is paired, call toolmark_pairing and tell the user what it says. Consequential tools wait for the user's confirmation in the page.";

/// Where `list_changed` goes: `subscriptions/listen` streams (newest revision). Sessions that
/// began with `initialize` are notified through the service's peer by [`announce_changes`].
#[derive(Debug, Clone, Default)]
pub struct Listeners {
    sinks: Arc<Mutex<Vec<SubscriptionSink>>>,
}

impl Listeners {
    fn add(&self, sink: SubscriptionSink) {
        self.sinks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(sink);
    }

    fn remove(&self, sink: &SubscriptionSink) {
        self.sinks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|s| s.id() != sink.id());
    }

    fn all(&self) -> Vec<SubscriptionSink> {
        self.sinks.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The rmcp server handler.
#[derive(Debug, Clone)]
pub struct McpServer {
    link: Link,
    pairing: Pairing,
    call_timeout: Duration,
    listing: watch::Receiver<Arc<Vec<Tool>>>,
    listeners: Listeners,
}

impl McpServer {
    /// A handler over `link` and `pairing`.
    pub fn new(link: Link, pairing: Pairing, call_timeout: Duration, listeners: Listeners) -> Self {
        let listing = link.listing();
        McpServer {
            link,
            pairing,
            call_timeout,
            listing,
            listeners,
        }
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        toolmark_mcp_tools::listing::server_config(
            "toolmark-mcp",
            env!("CARGO_PKG_VERSION"),
            INSTRUCTIONS,
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.listing.borrow().as_ref().clone();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == PAIRING_TOOL {
            let (code, minutes) = self.pairing.current();
            let text = pairing_text(&code, minutes);
            return Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into());
        }
        let input = Value::Object(request.arguments.unwrap_or_default());
        let cancelled: CancellationToken = context.ct.clone();
        match self
            .link
            .call(&request.name, input, self.call_timeout, cancelled)
            .await
        {
            Ok((end, untrusted)) => Ok(call_result(end, untrusted).into()),
            Err(CallError::UnknownTool(name)) => Err(ErrorData::invalid_params(
                format!("unknown tool {name}"),
                None,
            )),
        }
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        toolmark_mcp_tools::listing::accepted_filter(requested)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let sink = context.sink().clone();
        self.listeners.add(sink.clone());
        context.cancelled().await;
        self.listeners.remove(&sink);
        Ok(())
    }
}

/// Sends `notifications/tools/list_changed` whenever the announced listing changes, until
/// `shutdown`. `listing` was marked unchanged before the client's `initialize`, so a change
/// made while this task was being started is announced too (at worst once more than needed).
pub async fn announce_changes(
    mut listing: watch::Receiver<Arc<Vec<Tool>>>,
    peer: Peer<RoleServer>,
    listeners: Listeners,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = listing.changed() => if changed.is_err() { return },
        }
        if peer.peer_info().is_some()
            && let Err(e) = peer.notify_tool_list_changed().await
        {
            tracing::debug!(error = %e, "list_changed not sent");
        }
        for sink in listeners.all() {
            if let Err(e) = sink.notify_tool_list_changed().await {
                tracing::debug!(error = %e, "list_changed not sent on a subscription");
            }
        }
    }
}
