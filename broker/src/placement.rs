//! An agent's call on its way to a page: the request the gateway asks the broker to place
//! ([`CallRequest`]), what it is checked against (the caller's policy and the tenant's pins,
//! [`ToolGate`]; the conversation's current page, [`CallTarget`]) and what placing it gives
//! ([`Placed`]). The order of the steps is [`crate::Broker::place_call`]'s.

use std::sync::Arc;

use serde_json::Value;
use toolmark_policy::ToolFacts;
use toolmark_proto::pin::Digest;
use toolmark_proto::{AgentMessage, Call, CallRef, Describe, Hints, ToolManifestSummary};

use crate::{CallBinding, CallKind, CallerRef, ConvKey, ConversationState, Outcome};

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

    /// The request read against its conversation, `view`: resolved ([`CallRequest::resolve`])
    /// and asked of its gate ([`CallRequest::permitted`]) against the current page's manifest,
    /// then the page it goes to when one takes calls now ([`CallTarget::of`]).
    pub fn target_in(
        &mut self,
        view: CallView<'_>,
    ) -> Result<Option<CallTarget>, crate::PlaceError> {
        self.resolve(view.client_id.map(|_| view.llm_names()))?;
        if self.gate.is_some() {
            self.permitted(CallTarget::current(view).as_ref())?;
        }
        Ok(CallTarget::of(view))
    }
}

/// What placing a call reads of its conversation: a [`ConversationState`] without its pages,
/// borrowed from wherever the broker holds it (the memory broker reads it in place, under its
/// lock, rather than copying the manifest per call).
#[derive(Debug, Clone, Copy, Default)]
pub struct CallView<'a> {
    /// The current page, when it has a manifest.
    pub client_id: Option<&'a str>,
    /// Its manifest revision.
    pub rev: Option<u64>,
    /// Its manifest's tools.
    pub tools: &'a [ToolManifestSummary],
    /// Open sockets of the conversation.
    pub sockets: u32,
    /// How long ago a draining node closed the conversation's last sockets, while none is open.
    pub reconnecting_for_ms: Option<u64>,
}

impl CallView<'_> {
    /// The `(llmName, name)` of each tool of the current page's manifest.
    pub fn llm_names(&self) -> impl Iterator<Item = (&str, &str)> {
        self.tools
            .iter()
            .map(|t| (t.llm_name.as_str(), t.name.as_str()))
    }
}

impl ConversationState {
    /// What placing a call reads of this conversation.
    pub fn call_view(&self) -> CallView<'_> {
        CallView {
            client_id: self.client_id.as_deref(),
            rev: self.rev,
            tools: &self.tools,
            sockets: self.sockets,
            reconnecting_for_ms: self.reconnecting_for_ms,
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
    pub digests: Vec<(String, Digest)>,
}

impl CallTarget {
    /// The target of a conversation read, when [`crate::model::accepts_calls`] says it takes
    /// calls: what binding the call needs (no pin digests: a gate asks [`CallTarget::current`]).
    pub fn of(state: CallView<'_>) -> Option<Self> {
        let accepted = crate::model::accepts_calls(
            state.client_id,
            state.sockets,
            state
                .reconnecting_for_ms
                .map(std::time::Duration::from_millis),
        );
        if !accepted {
            return None;
        }
        Self::made(state, false)
    }

    /// The conversation's current page, whether or not it takes calls now, with each tool's
    /// pin digest (what a [`ToolGate`] asks).
    pub fn current(state: CallView<'_>) -> Option<Self> {
        Self::made(state, true)
    }

    fn made(state: CallView<'_>, with_digests: bool) -> Option<Self> {
        Some(CallTarget {
            client_id: state.client_id?.to_owned(),
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
                    .map(|t| (t.name.clone(), t.digest()))
                    .collect()
            } else {
                Vec::new()
            },
        })
    }

    /// The pin digest of `tool` as the page's manifest defines it (none: not listed).
    pub fn digest(&self, tool: &str) -> Option<Digest> {
        self.digests
            .iter()
            .find(|(name, _)| name == tool)
            .map(|(_, d)| *d)
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
type Pinned = dyn Fn(&str, Option<Digest>) -> bool + Send + Sync;

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
        pinned: impl Fn(&str, Option<Digest>) -> bool + Send + Sync + 'static,
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
        (self.binding_for(target, node), self.frame(target))
    }

    /// The protocol frame of this call sent to `target`.
    fn frame(&self, target: &CallTarget) -> AgentMessage {
        match self.kind {
            CallKind::Call => AgentMessage::Call(Call::from(self.call_to(target))),
            CallKind::Describe => AgentMessage::Describe(Describe {
                client_id: target.client_id.clone(),
                id: self.id.clone(),
                tool: self.tool.clone(),
            }),
        }
    }

    /// A `call` frame's fields for `target`, borrowed from the request: the revision is the
    /// agent's, else the target page's.
    fn call_to<'a>(&'a self, target: &'a CallTarget) -> CallRef<'a> {
        CallRef {
            client_id: &target.client_id,
            id: &self.id,
            rev: self.rev.or(target.rev),
            tool: &self.tool,
            input: &self.input,
        }
    }

    /// The binding of this call sent to `target`, waited for on `node`.
    pub fn binding_for(&self, target: &CallTarget, node: &str) -> CallBinding {
        CallBinding {
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
        }
    }

    /// The protocol frame of this call sent to `target`, as JSON text: [`Self::bind_to`]'s
    /// frame, a `call` written from the request's own fields (its input is not copied).
    pub fn frame_json(&self, target: &CallTarget) -> String {
        match self.kind {
            CallKind::Call => self.call_to(target).to_json(),
            CallKind::Describe => self.frame(target).to_json(),
        }
    }
}
