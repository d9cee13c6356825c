//! What travels through Redis as text, encoded and decoded in one place: pub/sub messages,
//! index values and sorted-set members. Fields are joined with `\n`, which no id, JSON frame
//! (serialized without raw newlines) or event id contains. The Lua scripts never build these:
//! they store and publish what Rust encoded here, and protocol frames come from `proto`.

use toolmark_proto::{AgentMessage, Cancel};

use crate::{CallBinding, ConvKey, Outcome};

const SEP: char = '\n';

/// Agent → page, on a conversation's channel: the addressed clientId and the frame.
pub fn page_message(client_id: &str, frame: &str) -> String {
    format!("{client_id}{SEP}{frame}")
}

/// The clientId and frame of a [`page_message`].
pub fn parse_page_message(m: &str) -> Option<(&str, &str)> {
    m.split_once(SEP)
}

/// The `cancel` of a call as the page gets it (built by `proto`), ready to publish.
pub fn cancel_message(binding: &CallBinding) -> String {
    let frame = AgentMessage::Cancel(Cancel {
        client_id: binding.client_id.clone(),
        id: binding.id.clone(),
    })
    .to_json();
    page_message(&binding.client_id, &frame)
}

/// What arrives on a node's own channel.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeMessage {
    /// The outcome of call `id`, for the request waiting on this node.
    Outcome {
        /// The call id.
        id: String,
        /// Its outcome.
        outcome: Outcome,
    },
    /// The node's own readiness probe came back.
    Probe,
}

/// The readiness probe a node publishes to itself.
pub const PROBE: &str = "p";

/// A call's outcome for the node that waits for it.
pub fn outcome_message(id: &str, outcome: &Outcome) -> String {
    let json = serde_json::to_string(outcome).unwrap_or_default();
    format!("r{SEP}{id}{SEP}{json}")
}

/// Decodes a node-channel message (`None` for anything else, logged by the caller).
pub fn parse_node_message(m: &str) -> Option<NodeMessage> {
    if m == PROBE {
        return Some(NodeMessage::Probe);
    }
    let mut parts = m.splitn(3, SEP);
    let (Some("r"), Some(id), Some(outcome)) = (parts.next(), parts.next(), parts.next()) else {
        return None;
    };
    Some(NodeMessage::Outcome {
        id: id.to_owned(),
        outcome: serde_json::from_str(outcome).ok()?,
    })
}

/// An event on a tenant's live channel: its stream id and body (the one message a script
/// composes, since the id comes from its `XADD`).
pub fn parse_event_message(m: &str) -> Option<(&str, &str)> {
    m.split_once(SEP)
}

/// A conversation as one value (the call index).
pub fn conv_ref(c: &ConvKey) -> String {
    format!("{}{SEP}{}{SEP}{}", c.tenant, c.user, c.conversation)
}

/// The conversation of a [`conv_ref`].
pub fn parse_conv_ref(v: &str) -> Option<ConvKey> {
    let mut p = v.splitn(3, SEP);
    Some(ConvKey::new(p.next()?, p.next()?, p.next()?))
}

/// A member of the deadline set: the call's conversation and id.
pub fn deadline_member(c: &ConvKey, id: &str) -> String {
    format!("{}{SEP}{id}", conv_ref(c))
}

/// The conversation and call id of a [`deadline_member`].
pub fn parse_deadline_member(m: &str) -> Option<(ConvKey, String)> {
    let (conv, id) = m.rsplit_once(SEP)?;
    Some((parse_conv_ref(conv)?, id.to_owned()))
}

/// A member of the pending-confirmation set: conversation, confirmId, clientId.
pub fn confirm_member(c: &ConvKey, confirm_id: &str, client_id: &str) -> String {
    format!("{}{SEP}{confirm_id}{SEP}{client_id}", conv_ref(c))
}

/// The parts of a [`confirm_member`].
pub fn parse_confirm_member(m: &str) -> Option<(ConvKey, String, String)> {
    let (rest, client) = m.rsplit_once(SEP)?;
    let (conv, confirm_id) = rest.rsplit_once(SEP)?;
    Some((
        parse_conv_ref(conv)?,
        confirm_id.to_owned(),
        client.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolmark_proto::ToolResult;

    #[test]
    fn every_encoding_round_trips() {
        let c = ConvKey::new("acme", "u_1", "c-2");
        assert_eq!(parse_conv_ref(&conv_ref(&c)), Some(c.clone()));
        assert_eq!(
            parse_deadline_member(&deadline_member(&c, "id-1")),
            Some((c.clone(), "id-1".into()))
        );
        assert_eq!(
            parse_confirm_member(&confirm_member(&c, "k", "p1")),
            Some((c, "k".into(), "p1".into()))
        );
        assert_eq!(
            parse_page_message(&page_message("p1", "{\"a\":1}")),
            Some(("p1", "{\"a\":1}"))
        );
        let o = Outcome::Result(ToolResult::Ok { data: None });
        assert_eq!(
            parse_node_message(&outcome_message("id", &o)),
            Some(NodeMessage::Outcome {
                id: "id".into(),
                outcome: o
            })
        );
        assert_eq!(parse_node_message(PROBE), Some(NodeMessage::Probe));
        assert_eq!(parse_node_message("r\nid\nnot json"), None);
    }
}
