//! The records the broker keeps and hands out.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};
use std::sync::Arc;

use toolmark_policy::ToolFacts;
use toolmark_proto::{AgentMessage, Call, Describe, Hints, ToolManifestSummary, ToolResult};

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

impl ConversationState {
    /// The `(llmName, name)` of each tool of the current page's manifest.
    pub fn llm_names(&self) -> impl Iterator<Item = (&str, &str)> {
        self.tools
            .iter()
            .map(|t| (t.llm_name.as_str(), t.name.as_str()))
    }
}

/// An agent's call before it is bound: what the gateway asks the broker to place.
#[derive(Debug, Clone)]
pub struct CallRequest {
    /// The call id, from [`crate::Calls::mint_call_id`] for this conversation.
    pub id: String,
    /// Where the call goes.
    pub conv: ConvKey,
    /// Call or describe.
    pub kind: CallKind,
    /// Full tool name; for a request named by [`CallRequest::llm_name`], that name until
    /// [`CallRequest::resolve`] finds the tool.
    pub tool: String,
    /// The tool's LLM name (`llmName` of the page's manifest, as the hosted MCP endpoint lists
    /// tools), when the request names its tool so: resolved against the manifest of the page
    /// the call would be bound to, in the step that binds it, so that a manifest that changes
    /// in between is read again.
    pub llm_name: Option<String>,
    /// The tool's input (`null` for a describe).
    pub input: Value,
    /// The manifest revision the agent named; the current page's when `None`.
    pub rev: Option<u64>,
    /// Absolute deadline, ms since the epoch.
    pub deadline_ms: u64,
    /// The agent asked for `Prefer: respond-async`.
    pub respond_async: bool,
    /// The tenant's call rate.
    pub calls_per_second: u32,
    /// Who makes it.
    pub caller: Option<CallerRef>,
    /// The caller's tool policy, when it narrows tools, and the tenant's pins, when it enforces
    /// them: a tool it does not allow is refused ([`crate::PlaceError::NotAllowed`], or
    /// [`crate::PlaceError::NotPinned`]) before anything is taken, bound or sent.
    pub gate: Option<ToolGate>,
    /// The caller's own rate, when its policy sets one: taken after the gate, before the
    /// tenant's.
    pub caller_rate: Option<CallerRate>,
    /// The call's W3C `traceparent` when it is traced: the page's node continues the trace.
    pub trace: Option<String>,
}

/// A credential's own call rate ([`crate::Limits::take_caller_call`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerRate {
    /// Its bucket within the tenant: an API key's id (its MCP tokens share it), an OAuth
    /// subject's.
    pub bucket: String,
    /// Calls per second.
    pub per_second: u32,
}

impl CallRequest {
    /// For a request named by its tool's LLM name: the tool that `tools` (the `(llmName, name)`
    /// entries of the manifest of the page the call would be bound to) names so becomes
    /// [`CallRequest::tool`]; [`PlaceError::UnknownTool`] when none does, before anything is
    /// taken. Without a page (`None`) there is nothing to resolve against: the placement
    /// answers [`PlaceError::NoPage`].
    pub fn resolve<'a>(
        &mut self,
        tools: Option<impl IntoIterator<Item = (&'a str, &'a str)>>,
    ) -> Result<(), crate::PlaceError> {
        let (Some(wanted), Some(tools)) = (&self.llm_name, tools) else {
            return Ok(());
        };
        let name = tools
            .into_iter()
            .find(|(llm, _)| llm == wanted)
            .map(|(_, name)| name)
            .ok_or(crate::PlaceError::UnknownTool)?;
        name.clone_into(&mut self.tool);
        Ok(())
    }

    /// Whether the caller may call this tool on `target`: the tenant's pins first (a tool not
    /// pinned is not there for any caller), then the caller's policy.
    pub fn permitted(&self, target: Option<&CallTarget>) -> Result<(), crate::PlaceError> {
        match &self.gate {
            None => Ok(()),
            Some(g) => g.check(&self.tool, target),
        }
    }
}

/// What a placed call is bound to, and where its outcome arrives.
#[derive(Debug)]
pub struct Placed {
    /// The stored binding.
    pub binding: CallBinding,
    /// Gets the call's outcome.
    pub waiter: tokio::sync::oneshot::Receiver<Outcome>,
}

/// What the page that `current` names needs to know of a conversation to be sent a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallTarget {
    /// The page load the call goes to.
    pub client_id: String,
    /// Its manifest revision.
    pub rev: Option<u64>,
    /// Its tools marked `hints.untrustedContent`.
    pub untrusted: Vec<String>,
    /// Its tools marked `hints.readOnly` or `hints.destructive`, with those two hints (any other
    /// tool, listed or not, has neither, as [`ToolFacts::default`]).
    pub hinted: Vec<(String, ToolFacts)>,
    /// Each tool's pin digest, as its manifest defines it (made once per manifest entry).
    pub digests: Vec<(String, String)>,
}

impl CallTarget {
    /// The target of a conversation read, when [`crate::model::accepts_calls`] says it takes
    /// calls: what binding the call needs (no pin digests: a gate asks [`CallTarget::current`]).
    pub fn of(state: &ConversationState) -> Option<Self> {
        let accepted = crate::model::accepts_calls(
            state.client_id.as_deref(),
            state.sockets,
            state
                .reconnecting_for_ms
                .map(std::time::Duration::from_millis),
        );
        Self::made(state, false).filter(|_| accepted)
    }

    /// The conversation's current page, whether or not it takes calls now, with each tool's
    /// pin digest (what a [`ToolGate`] asks).
    pub fn current(state: &ConversationState) -> Option<Self> {
        Self::made(state, true)
    }

    fn made(state: &ConversationState, with_digests: bool) -> Option<Self> {
        Some(CallTarget {
            client_id: state.client_id.clone()?,
            rev: state.rev,
            untrusted: state
                .tools
                .iter()
                .filter(|t| t.hints.is_untrusted())
                .map(|t| t.name.clone())
                .collect(),
            hinted: state
                .tools
                .iter()
                .map(|t| (&t.name, facts_of(&t.hints)))
                .filter(|(_, f)| *f != ToolFacts::default())
                .map(|(name, f)| (name.clone(), f))
                .collect(),
            digests: if with_digests {
                state
                    .tools
                    .iter()
                    .map(|t| (t.name.clone(), t.digest().to_owned()))
                    .collect()
            } else {
                Vec::new()
            },
        })
    }

    /// The pin digest of `tool` as the page's manifest defines it (none: not listed).
    pub fn digest(&self, tool: &str) -> Option<&str> {
        self.digests
            .iter()
            .find(|(name, _)| name == tool)
            .map(|(_, d)| d.as_str())
    }

    /// What the page's manifest says of `tool` (nothing for a tool it does not list).
    pub fn facts(&self, tool: &str) -> ToolFacts {
        self.hinted
            .iter()
            .find(|(name, _)| name == tool)
            .map_or_else(ToolFacts::default, |(_, f)| *f)
    }
}

/// The hints of a manifest entry that a policy reads.
pub fn facts_of(hints: &Hints) -> ToolFacts {
    ToolFacts {
        read_only: hints.read_only == Some(true),
        destructive: hints.destructive == Some(true),
    }
}

/// Whether a caller may call or describe a tool, from its name and what the page's current
/// manifest says of it: the caller's policy, as the gateway applies it. The broker asks it
/// against the manifest of the page the call is bound to, in the step that binds it, so a
/// manifest that changes in between is read again and asked again.
#[derive(Clone, Default)]
pub struct ToolGate {
    allows: Option<Arc<Allows>>,
    pinned: Option<Arc<Pinned>>,
}

/// What a [`ToolGate`] asks of the caller's policy: whether the tool of this name, of which
/// the manifest says this, may be called.
type Allows = dyn Fn(&str, ToolFacts) -> bool + Send + Sync;

/// What a [`ToolGate`] asks of the tenant's pins: whether the tool of this name, whose
/// definition has this digest (none: not listed), is pinned.
type Pinned = dyn Fn(&str, Option<&str>) -> bool + Send + Sync;

impl ToolGate {
    /// A gate that lets through what `allows` does.
    pub fn new(allows: impl Fn(&str, ToolFacts) -> bool + Send + Sync + 'static) -> Self {
        ToolGate {
            allows: Some(Arc::new(allows)),
            pinned: None,
        }
    }

    /// This gate, letting through besides only the tools `pinned` holds.
    #[must_use]
    pub fn with_pins(
        mut self,
        pinned: impl Fn(&str, Option<&str>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.pinned = Some(Arc::new(pinned));
        self
    }

    /// Whether `tool` may be called on `target` (none: no page, whose manifest lists nothing).
    pub fn allows(&self, tool: &str, target: Option<&CallTarget>) -> bool {
        self.check(tool, target).is_ok()
    }

    /// [`ToolGate::allows`], saying why not: not pinned, or not allowed.
    pub fn check(&self, tool: &str, target: Option<&CallTarget>) -> Result<(), crate::PlaceError> {
        if let Some(pinned) = &self.pinned
            && !pinned(tool, target.and_then(|t| t.digest(tool)))
        {
            return Err(crate::PlaceError::NotPinned);
        }
        if let Some(allows) = &self.allows
            && !allows(
                tool,
                target.map_or_else(ToolFacts::default, |t| t.facts(tool)),
            )
        {
            return Err(crate::PlaceError::NotAllowed);
        }
        Ok(())
    }
}

impl std::fmt::Debug for ToolGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ToolGate")
    }
}

impl CallRequest {
    /// The binding and the protocol frame of this call sent to `target`, waited for on `node`.
    pub fn bind_to(&self, target: &CallTarget, node: &str) -> (CallBinding, AgentMessage) {
        let binding = CallBinding {
            id: self.id.clone(),
            conv: self.conv.clone(),
            client_id: target.client_id.clone(),
            tool: self.tool.clone(),
            kind: self.kind,
            deadline_ms: self.deadline_ms,
            node: node.to_owned(),
            untrusted: target.untrusted.contains(&self.tool),
            respond_async: self.respond_async,
            caller: self.caller.clone(),
        };
        let frame = match self.kind {
            CallKind::Call => AgentMessage::Call(Call {
                client_id: target.client_id.clone(),
                id: self.id.clone(),
                rev: self.rev.or(target.rev),
                tool: self.tool.clone(),
                input: self.input.clone(),
            }),
            CallKind::Describe => AgentMessage::Describe(Describe {
                client_id: target.client_id.clone(),
                id: self.id.clone(),
                tool: self.tool.clone(),
            }),
        };
        (binding, frame)
    }
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
