//! The seven top-level messages of protocol v1. Every message carries `protocol: 1`, a `type`
//! and the page's `clientId`; serialization adds the first two.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::{Direction, Message, ToolManifestSummary, ToolResult, validate};

/// `manifest`: the page's tool list at revision `rev` (replaces any earlier one).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// The page load's id.
    pub client_id: String,
    /// Registry revision.
    pub rev: u64,
    /// Entries visible to caller `inapp`.
    pub tools: Vec<ToolManifestSummary>,
}

/// `changed`: the registry moved to `rev` (onChange: 'changed' mode).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Changed {
    /// The page load's id.
    pub client_id: String,
    /// New revision.
    pub rev: u64,
}

/// `result`: the answer to one call or describe.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultMessage {
    /// The page load's id.
    pub client_id: String,
    /// The request id it answers.
    pub id: String,
    /// The outcome.
    pub result: ToolResult,
}

/// `confirmed`: the final outcome of a deferred confirmation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Confirmed {
    /// The page load's id.
    pub client_id: String,
    /// The confirmId of the `needs_confirmation` it resolves.
    pub confirm_id: String,
    /// The final outcome.
    pub result: ToolResult,
}

/// `call`: run a tool as caller `inapp`. Serialized as [`CallRef`] of its fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The addressed page load.
    pub client_id: String,
    /// Unguessable request id, bound before sending.
    pub id: String,
    /// The manifest revision the agent saw (D18).
    pub rev: Option<u64>,
    /// Full tool name.
    pub tool: String,
    /// Tool input; `{}` when the tool takes none.
    pub input: Value,
}

/// A `call` message's fields, borrowed: the one wire form of [`Call`], and what a node that
/// sends a call it keeps serializes without copying its input ([`CallRef::to_json`]).
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRef<'a> {
    /// The addressed page load.
    pub client_id: &'a str,
    /// Unguessable request id, bound before sending.
    pub id: &'a str,
    /// The manifest revision the agent saw (D18).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rev: Option<u64>,
    /// Full tool name.
    pub tool: &'a str,
    /// Tool input; `{}` when the tool takes none.
    pub input: &'a Value,
}

impl CallRef<'_> {
    /// The `call` message as one JSON text frame: the same text as
    /// `AgentMessage::Call(..).to_json()` of the same fields.
    pub fn to_json(&self) -> String {
        envelope_json("call", self)
    }
}

impl From<CallRef<'_>> for Call {
    fn from(c: CallRef<'_>) -> Self {
        Call {
            client_id: c.client_id.to_owned(),
            id: c.id.to_owned(),
            rev: c.rev,
            tool: c.tool.to_owned(),
            input: c.input.clone(),
        }
    }
}

impl<'a> From<&'a Call> for CallRef<'a> {
    fn from(c: &'a Call) -> Self {
        CallRef {
            client_id: &c.client_id,
            id: &c.id,
            rev: c.rev,
            tool: &c.tool,
            input: &c.input,
        }
    }
}

impl Serialize for Call {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        CallRef::from(self).serialize(s)
    }
}

/// `describe`: fetch a full manifest entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Describe {
    /// The addressed page load.
    pub client_id: String,
    /// Unguessable request id, bound before sending.
    pub id: String,
    /// Full tool name.
    pub tool: String,
}

/// `cancel`: abort the in-flight call `id`; never answered. Serialized as [`CancelRef`] of its
/// fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Cancel {
    /// The addressed page load.
    pub client_id: String,
    /// The call to abort.
    pub id: String,
}

/// A `cancel` message's fields, borrowed: the one wire form of [`Cancel`], and what a node
/// that stores a call's cancel beside it serializes without copying its ids
/// ([`CancelRef::to_json`]).
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelRef<'a> {
    /// The addressed page load.
    pub client_id: &'a str,
    /// The call to abort.
    pub id: &'a str,
}

impl CancelRef<'_> {
    /// The `cancel` message as one JSON text frame: the same text as
    /// `AgentMessage::Cancel(..).to_json()` of the same fields.
    pub fn to_json(&self) -> String {
        envelope_json("cancel", self)
    }
}

impl Serialize for Cancel {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        CancelRef {
            client_id: &self.client_id,
            id: &self.id,
        }
        .serialize(s)
    }
}

/// A page → agent message.
#[derive(Debug, Clone, PartialEq)]
pub enum PageMessage {
    /// `manifest`
    Manifest(Manifest),
    /// `changed`
    Changed(Changed),
    /// `result`
    Result(ResultMessage),
    /// `confirmed`
    Confirmed(Confirmed),
}

/// An agent → page message.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentMessage {
    /// `call`
    Call(Call),
    /// `describe`
    Describe(Describe),
    /// `cancel`
    Cancel(Cancel),
}

impl PageMessage {
    /// The `type` string.
    pub fn kind(&self) -> &'static str {
        match self {
            PageMessage::Manifest(_) => "manifest",
            PageMessage::Changed(_) => "changed",
            PageMessage::Result(_) => "result",
            PageMessage::Confirmed(_) => "confirmed",
        }
    }

    /// The sending page's clientId.
    pub fn client_id(&self) -> &str {
        match self {
            PageMessage::Manifest(m) => &m.client_id,
            PageMessage::Changed(m) => &m.client_id,
            PageMessage::Result(m) => &m.client_id,
            PageMessage::Confirmed(m) => &m.client_id,
        }
    }
}

impl AgentMessage {
    /// The `type` string.
    pub fn kind(&self) -> &'static str {
        match self {
            AgentMessage::Call(_) => "call",
            AgentMessage::Describe(_) => "describe",
            AgentMessage::Cancel(_) => "cancel",
        }
    }

    /// The addressed page's clientId.
    pub fn client_id(&self) -> &str {
        match self {
            AgentMessage::Call(m) => &m.client_id,
            AgentMessage::Describe(m) => &m.client_id,
            AgentMessage::Cancel(m) => &m.client_id,
        }
    }

    /// The request id.
    pub fn id(&self) -> &str {
        match self {
            AgentMessage::Call(m) => &m.id,
            AgentMessage::Describe(m) => &m.id,
            AgentMessage::Cancel(m) => &m.id,
        }
    }

    /// The message as one JSON text frame.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| unreachable_serialization())
    }
}

impl PageMessage {
    /// The message as one JSON text frame.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| unreachable_serialization())
    }
}

/// Every field is a string, integer, bool or `Value` with string keys: serializing to JSON
/// cannot fail. Kept out of line so the hot path carries no formatting code.
#[cold]
fn unreachable_serialization() -> String {
    String::from("{}")
}

#[derive(Serialize)]
struct Envelope<'a, T> {
    protocol: u64,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    body: &'a T,
}

/// `body` in its envelope as one JSON text frame (the borrowed forms' `to_json`).
fn envelope_json<T: Serialize>(kind: &'static str, body: &T) -> String {
    serde_json::to_string(&Envelope {
        protocol: crate::PROTOCOL_VERSION,
        kind,
        body,
    })
    .unwrap_or_else(|_| unreachable_serialization())
}

fn envelope<S: Serializer, T: Serialize>(
    s: S,
    kind: &'static str,
    body: &T,
) -> Result<S::Ok, S::Error> {
    Envelope {
        protocol: crate::PROTOCOL_VERSION,
        kind,
        body,
    }
    .serialize(s)
}

impl Serialize for PageMessage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            PageMessage::Manifest(m) => envelope(s, self.kind(), m),
            PageMessage::Changed(m) => envelope(s, self.kind(), m),
            PageMessage::Result(m) => envelope(s, self.kind(), m),
            PageMessage::Confirmed(m) => envelope(s, self.kind(), m),
        }
    }
}

impl Serialize for AgentMessage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            AgentMessage::Call(m) => envelope(s, self.kind(), m),
            AgentMessage::Describe(m) => envelope(s, self.kind(), m),
            AgentMessage::Cancel(m) => envelope(s, self.kind(), m),
        }
    }
}

impl<'de> Deserialize<'de> for PageMessage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match validate(Value::deserialize(d)?, Direction::ToAgent) {
            Ok(Message::ToAgent(m)) => Ok(m),
            Ok(Message::ToPage(_)) => Err(serde::de::Error::custom("wrong direction")),
            Err(e) => Err(serde::de::Error::custom(e)),
        }
    }
}

impl<'de> Deserialize<'de> for AgentMessage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match validate(Value::deserialize(d)?, Direction::ToPage) {
            Ok(Message::ToPage(m)) => Ok(m),
            Ok(Message::ToAgent(_)) => Err(serde::de::Error::custom("wrong direction")),
            Err(e) => Err(serde::de::Error::custom(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_borrowed_call_is_the_same_frame_as_a_call() {
        for rev in [None, Some(7)] {
            let call = Call {
                client_id: "c-1".into(),
                id: "r-1".into(),
                rev,
                tool: "todo.add".into(),
                input: json!({"text": "milk \"2\"", "n": [1, 2]}),
            };
            let owned = AgentMessage::Call(call.clone()).to_json();
            assert_eq!(CallRef::from(&call).to_json(), owned);
            let mut want = json!({"protocol": 1, "type": "call", "clientId": "c-1", "id": "r-1",
                "tool": "todo.add", "input": {"text": "milk \"2\"", "n": [1, 2]}});
            if let Some(r) = rev {
                want["rev"] = json!(r);
            }
            assert_eq!(serde_json::from_str::<Value>(&owned).unwrap(), want);
        }
    }

    #[test]
    fn a_borrowed_cancel_is_the_same_frame_as_a_cancel() {
        let cancel = Cancel {
            client_id: "c-\"1\"".into(),
            id: "r-1".into(),
        };
        let owned = AgentMessage::Cancel(cancel.clone()).to_json();
        let borrowed = CancelRef {
            client_id: &cancel.client_id,
            id: &cancel.id,
        }
        .to_json();
        assert_eq!(borrowed, owned);
        assert_eq!(
            serde_json::from_str::<Value>(&owned).unwrap(),
            json!({"protocol": 1, "type": "cancel", "clientId": "c-\"1\"", "id": "r-1"})
        );
    }
}
