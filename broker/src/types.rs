//! The records the broker keeps and hands out.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};
use toolmark_proto::{ToolManifestSummary, ToolResult};

/// Milliseconds since the Unix epoch (deadlines are absolute so every node agrees).
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| {
        // Milliseconds since 1970 fit in u64 for the next 500 million years.
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
    })
}

/// One conversation of one user of one tenant: the unit of page channels and bindings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ConvKey {
    /// Tenant id.
    pub tenant: String,
    /// User id (token `sub`).
    pub user: String,
    /// Conversation id (token `cnv`).
    pub conversation: String,
}

impl ConvKey {
    /// A key from its three parts.
    pub fn new(tenant: &str, user: &str, conversation: &str) -> Self {
        ConvKey {
            tenant: tenant.into(),
            user: user.into(),
            conversation: conversation.into(),
        }
    }
}

/// Who sent a page frame: the socket's authenticated conversation and its bound clientId.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PageIdentity {
    /// From the socket's token.
    pub conv: ConvKey,
    /// The clientId the socket bound with its first message.
    pub client_id: String,
}

/// Who made a call, as its record and its events name it (`caller`): an API key, an MCP token
/// minted by one, or an access token of the tenant's authorization server. Never a secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum CallerRef {
    /// An API key of the tenant, by its id.
    #[serde(rename = "apiKey")]
    ApiKey {
        /// The key's id.
        id: String,
    },
    /// An MCP token, by its id (`jti`), and the key that minted it.
    #[serde(rename = "mcpToken")]
    McpToken {
        /// The token's id.
        id: String,
        /// The id of the key that minted it.
        #[serde(rename = "apiKeyId")]
        api_key_id: String,
    },
    /// An access token of the tenant's authorization server.
    #[serde(rename = "oauth")]
    OAuth {
        /// Its subject.
        sub: String,
        /// Its client, when it names one.
        #[serde(rename = "clientId")]
        client_id: Option<String>,
    },
}

impl CallerRef {
    /// Who answers for the credential: an API key (an MCP token is the key that minted it), or
    /// an OAuth subject with its client. What a credential makes (an idempotent call, a task)
    /// belongs to its principal: another key's request never finds it.
    pub fn principal(&self) -> String {
        match self {
            CallerRef::ApiKey { id } | CallerRef::McpToken { api_key_id: id, .. } => {
                format!("k:{id}")
            }
            CallerRef::OAuth { sub, client_id } => {
                let client = client_id.as_deref().unwrap_or_default();
                // The client's length first: no subject can pass for another client's.
                format!("o:{}:{client}{sub}", client.len())
            }
        }
    }
}

/// Whether a request is a `call` or a `describe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallKind {
    /// A protocol `call`.
    Call,
    /// A protocol `describe`.
    Describe,
}

/// What a call id is bound to, stored before the call is sent (Security MUST 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallBinding {
    /// UUID v4 minted by the gateway.
    pub id: String,
    /// Tenant, user and conversation.
    pub conv: ConvKey,
    /// The page load the call was sent to.
    pub client_id: String,
    /// Full tool name.
    pub tool: String,
    /// Call or describe.
    pub kind: CallKind,
    /// Absolute deadline, ms since the epoch.
    pub deadline_ms: u64,
    /// Node whose agent request waits for the outcome.
    pub node: String,
    /// The tool's manifest entry had `hints.untrustedContent`.
    pub untrusted: bool,
    /// The agent asked for `Prefer: respond-async`: the outcome is emitted as `call.result`.
    pub respond_async: bool,
    /// Who made it (none for a call stored by a version that did not record it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<CallerRef>,
}

/// Where a call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallState {
    /// Sent, no outcome yet.
    Pending,
    /// The page's result won.
    Answered,
    /// The deadline won.
    TimedOut,
}

/// The outcome an agent sees: the page's result, or a server-side timeout.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The page's tool result.
    Result(ToolResult),
    /// The deadline passed first (`{"status":"timeout"}`).
    Timeout,
}

impl Serialize for Outcome {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Outcome::Result(r) => r.serialize(s),
            Outcome::Timeout => json!({"status": "timeout"}).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Outcome {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        if v == json!({"status": "timeout"}) {
            return Ok(Outcome::Timeout);
        }
        ToolResult::from_value(v)
            .map(Outcome::Result)
            .map_err(serde::de::Error::custom)
    }
}

/// A call as the broker holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// What it is bound to.
    pub binding: CallBinding,
    /// Where it stands.
    pub state: CallState,
    /// Set once `state` is not pending.
    pub outcome: Option<Outcome>,
    /// For a call answered `needs_confirmation`: how its confirmation ended, once it did (the
    /// same atomic step records it and its `confirmation.resolved`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Resolution>,
}

/// How a call's deferred confirmation ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resolution {
    /// The page's final result (`refused confirmation_expired` when the sweep expired it).
    pub outcome: ToolResult,
    /// When (ms since the epoch).
    pub at_ms: u64,
}

/// What a confirmId is bound to, stored when its `needs_confirmation` result is accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfirmBinding {
    /// Minted by the page.
    pub confirm_id: String,
    /// The call whose result carried it.
    pub call_id: String,
    /// That call's tool.
    pub tool: String,
    /// Tenant, user and conversation.
    pub conv: ConvKey,
    /// The page that must send the `confirmed`.
    pub client_id: String,
    /// The tool is marked `untrustedContent`.
    pub untrusted: bool,
    /// Who made the call.
    pub caller: Option<CallerRef>,
}

/// Limits checked when a page socket is admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmitLimits {
    /// Page sockets of the tenant, cluster-wide.
    pub max_connections: u64,
    /// Page sockets of one conversation.
    pub max_pages_per_conversation: u32,
}

/// What releasing a socket meant for its page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLeft {
    /// It was the last socket of its clientId: the page is gone (`page.disconnected`).
    pub page_gone: bool,
}

/// One connected page of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PageInfo {
    /// The page load's id.
    pub client_id: String,
    /// Revision of its latest manifest, if one arrived.
    pub rev: Option<u64>,
    /// Sockets of this page (a reconnect may briefly overlap).
    pub sockets: u32,
}

/// A conversation as the agent API shows it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConversationState {
    /// The page new calls go to (the latest that sent a manifest).
    pub client_id: Option<String>,
    /// Its manifest revision.
    pub rev: Option<u64>,
    /// Its tools.
    pub tools: Vec<ToolManifestSummary>,
    /// Connected pages whose clientId is known.
    pub pages: Vec<PageInfo>,
    /// Open sockets of the conversation, including those whose clientId is not known yet
    /// (a reconnected page is silent until it has something to say).
    pub sockets: u32,
    /// Set while the conversation has no socket because a draining node closed its pages
    /// (they reconnect to another node): how long ago that was.
    pub reconnecting_for_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_timeout_round_trips_and_results_stay_strict() {
        let t: Outcome = serde_json::from_value(json!({"status": "timeout"})).unwrap();
        assert_eq!(t, Outcome::Timeout);
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            json!({"status": "timeout"})
        );
        let r: Outcome = serde_json::from_value(json!({"status": "ok", "data": 1})).unwrap();
        assert!(matches!(r, Outcome::Result(ToolResult::Ok { .. })));
        assert!(serde_json::from_value::<Outcome>(json!({"status": "timeout", "x": 1})).is_err());
    }
}
