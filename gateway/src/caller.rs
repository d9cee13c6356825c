//! Who makes a request of an agent's door, and what its policy lets it do: an API key of the
//! tenant, an MCP token minted by one, or an access token of the tenant's authorization server.
//! The policies come from the tenant snapshot each node keeps (no broker read), so a change of
//! a key's policy, or its deletion, holds on every node as soon as the snapshot follows it.

use std::sync::Arc;

use toolmark_broker::{CallerRef, facts_of};
use toolmark_config::policy::{AllOf, Policy, Scope, ToolFacts};
use toolmark_proto::ToolManifestSummary;

use crate::http::Problem;
use crate::metrics::Metrics;

/// The credential of a request, with the policies that all apply to it.
#[derive(Debug, Clone)]
pub enum Caller {
    /// An API key of the tenant.
    ApiKey {
        /// Its id.
        id: String,
        /// Its policy.
        policy: Arc<Policy>,
    },
    /// An MCP token minted by an API key.
    McpToken {
        /// The token's id (`jti`).
        id: String,
        /// The key that minted it.
        api_key_id: String,
        /// That key's policy as it is now.
        key: Arc<Policy>,
        /// What the token was narrowed to at minting.
        narrowed: Arc<Policy>,
    },
    /// An access token of the tenant's authorization server.
    OAuth {
        /// Its subject.
        sub: String,
        /// Its client (`client_id`, else `azp`), when it names one.
        client_id: Option<String>,
        /// The tenant's `mcpOAuth.policy`, read-only when the token's scope holds
        /// `toolmark:read`.
        policy: Arc<Policy>,
    },
}

impl Caller {
    /// An API key with every right (a page's dev tools, a test).
    pub fn unrestricted(id: &str) -> Self {
        Caller::ApiKey {
            id: id.to_owned(),
            policy: Arc::default(),
        }
    }

    fn with_policies<T>(&self, f: impl FnOnce(AllOf<'_>) -> T) -> T {
        match self {
            Caller::ApiKey { policy, .. } | Caller::OAuth { policy, .. } => f(AllOf(&[policy])),
            Caller::McpToken { key, narrowed, .. } => f(AllOf(&[key, narrowed])),
        }
    }

    /// `Ok` when the policy covers `scope`, else 403 `scope_denied` (counted).
    pub fn require(&self, scope: Scope, metrics: &Metrics) -> Result<(), Problem> {
        if self.with_policies(|p| p.allows_scope(scope)) {
            Ok(())
        } else {
            metrics.call_refused("scope_denied");
            let name = serde_json::to_value(scope).unwrap_or_default();
            Err(Problem::scope_denied(name.as_str().unwrap_or_default()))
        }
    }

    /// What the hosted MCP endpoint asks of every credential, on every request, and of a key
    /// that mints an MCP token: the `calls` scope (the endpoint lists and calls tools). Else 403
    /// `scope_denied` (counted).
    pub fn require_mcp(&self, metrics: &Metrics) -> Result<(), Problem> {
        self.require(Scope::Calls, metrics)
    }

    /// Whether the policy narrows calls by tool (a call then needs the tool's manifest entry).
    pub fn limits_tools(&self) -> bool {
        self.with_policies(|p| p.limits_tools())
    }

    /// Whether the policy allows the tool `name`, whose entry in the page's current manifest
    /// is `entry` (none: a tool the page does not list, which no hint can allow).
    pub fn allows_tool(&self, name: &str, entry: Option<&ToolManifestSummary>) -> bool {
        self.allows(
            name,
            entry.map_or_else(ToolFacts::default, |t| facts_of(&t.hints)),
        )
    }

    /// Whether the policy allows the tool `name`, of which the page's manifest says `facts`.
    pub fn allows(&self, name: &str, facts: ToolFacts) -> bool {
        self.with_policies(|p| p.allows_tool(name, facts))
    }

    /// The tools of a manifest this caller may see.
    pub fn visible(&self, tools: Vec<ToolManifestSummary>) -> Vec<ToolManifestSummary> {
        if !self.limits_tools() {
            return tools;
        }
        tools
            .into_iter()
            .filter(|t| self.allows_tool(&t.name, Some(t)))
            .collect()
    }

    /// The caller's own call rate, when its policy sets one.
    pub fn calls_per_second(&self) -> Option<u32> {
        self.with_policies(|p| p.calls_per_second())
    }

    /// The bucket of its own rate within the tenant: an API key's (its MCP tokens share it, so
    /// that minting more tokens never widens the key's rate), an OAuth subject's.
    pub fn rate_bucket(&self) -> String {
        match self {
            Caller::ApiKey { id, .. } => format!("k:{id}"),
            Caller::McpToken { api_key_id, .. } => format!("k:{api_key_id}"),
            Caller::OAuth { sub, .. } => format!("o:{sub}"),
        }
    }

    /// How records and events name it (`caller`).
    pub fn reference(&self) -> CallerRef {
        match self {
            Caller::ApiKey { id, .. } => CallerRef::ApiKey { id: id.clone() },
            Caller::McpToken { id, api_key_id, .. } => CallerRef::McpToken {
                id: id.clone(),
                api_key_id: api_key_id.clone(),
            },
            Caller::OAuth { sub, client_id, .. } => CallerRef::OAuth {
                sub: sub.clone(),
                client_id: client_id.clone(),
            },
        }
    }

    /// The credential's id for logs (never its secret).
    pub fn log_id(&self) -> String {
        let (kind, id) = match self {
            Caller::ApiKey { id, .. } => ("apiKey:", id),
            Caller::McpToken { id, .. } => ("mcpToken:", id),
            Caller::OAuth { sub, .. } => ("oauth:", sub),
        };
        // Made for every request's access line: pushed, not formatted (the formatting
        // machinery was 0.9 % of the agent's node in a profile, issue 58).
        let mut s = String::with_capacity(kind.len() + id.len());
        s.push_str(kind);
        s.push_str(id);
        s
    }
}
