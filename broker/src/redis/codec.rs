//! What travels through Redis as text, encoded and decoded in one place: pub/sub messages,
//! index values and sorted-set members. Fields are joined with `\n`, which no id, JSON frame
//! (serialized without raw newlines) or event id contains. The Lua scripts never build these:
//! they store and publish what Rust encoded here, and protocol frames come from `proto`.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use toolmark_proto::CancelRef;
use uuid::Uuid;

use crate::{CallBinding, CallKind, CallerRef, ConvKey, Outcome};

mod outbox_entry;

pub use outbox_entry::{Outboxed, outbox_entry, parse_outbox_entry};

const SEP: char = '\n';

/// Agent → page, on the channels of the nodes holding the conversation's sockets: the
/// conversation, the addressed clientId and the frame.
pub fn page_message(conv: &ConvKey, client_id: &str, frame: &str) -> String {
    lines(&[
        "c",
        &conv.tenant,
        &conv.user,
        &conv.conversation,
        client_id,
        frame,
    ])
}

/// [`page_message`] of a traced call: its W3C `traceparent` rides with the frame, so that the
/// page's node continues the call's trace. Releases up to 0.4.0 do not read this form: it is
/// sent only once no node of theirs is live (as the all-random call ids).
pub fn traced_page_message(conv: &ConvKey, client_id: &str, frame: &str, trace: &str) -> String {
    lines(&[
        "t",
        trace,
        &conv.tenant,
        &conv.user,
        &conv.conversation,
        client_id,
        frame,
    ])
}

/// The `cancel` of a call as the page gets it (built by `proto`), ready to publish.
pub fn cancel_message(binding: &CallBinding) -> String {
    let frame = CancelRef {
        client_id: &binding.client_id,
        id: &binding.id,
    }
    .to_json();
    page_message(&binding.conv, &binding.client_id, &frame)
}

/// What arrives on a node's channels.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeMessage {
    /// A frame for this node's sockets of a conversation whose clientId is `client_id` or not
    /// yet known.
    Page {
        /// The conversation.
        conv: ConvKey,
        /// The addressed page load.
        client_id: String,
        /// The protocol frame.
        frame: String,
        /// The call's W3C `traceparent`, when it is traced.
        trace: Option<String>,
    },
    /// The outcome of call `id`, for the request waiting on this node.
    Outcome {
        /// The call id.
        id: String,
        /// Its outcome.
        outcome: Outcome,
    },
    /// The node's own readiness probe came back on the channel of partition `k`.
    Probe(u16),
}

/// The readiness probe a node publishes to itself on its channel of partition `k`.
pub fn probe(k: u16) -> String {
    format!("p{SEP}{k}")
}

/// An id as the call hashes store it: a UUID in its canonical form (lowercase, hyphenated, as
/// the gateway mints call ids and the page bridge mints clientIds) as its 16 bytes in
/// URL-safe base64 (22 characters where the text takes 36: a finished call is kept for
/// minutes, and Redis pays for every byte of its key and fields); anything else as itself
/// behind a `~`, which base64 never starts with, so that two ids never share a form.
pub fn compact_id(id: &str) -> String {
    match Uuid::try_parse(id) {
        Ok(u) if u.hyphenated().encode_lower(&mut Uuid::encode_buffer()) == id => {
            let mut s = String::with_capacity(22);
            URL_SAFE_NO_PAD.encode_string(u.as_bytes(), &mut s);
            s
        }
        // Built on every call for a clientId of another form: pushed, not formatted.
        _ => {
            let mut s = String::with_capacity(1 + id.len());
            s.push('~');
            s.push_str(id);
            s
        }
    }
}

/// The id a [`compact_id`] stands for.
pub fn expand_id(stored: &str) -> String {
    if let Some(text) = stored.strip_prefix('~') {
        return text.to_owned();
    }
    URL_SAFE_NO_PAD
        .decode(stored)
        .ok()
        .and_then(|b| Uuid::from_slice(&b).ok())
        .map_or_else(|| stored.to_owned(), |u| u.hyphenated().to_string())
}

/// A call's tool, kind, flags (`u` untrusted, `a` respond-async) and caller as one value of
/// three lines, beside the binding's other fields that the scripts read one by one. The caller
/// ends the flags' line, as [`caller_code`] writes it (a `[`, which no flag is; nothing for
/// none, and in what an older version stored), so a finished call's packed string keeps its
/// lines.
pub fn call_summary(b: &CallBinding) -> String {
    let kind = match b.kind {
        CallKind::Call => "c",
        CallKind::Describe => "d",
    };
    let mut flags = String::new();
    if b.untrusted {
        flags.push('u');
    }
    if b.respond_async {
        flags.push('a');
    }
    if let Some(c) = &b.caller {
        flags.push_str(&caller_code(c));
    }
    lines(&[&b.tool, kind, &flags])
}

/// A caller as a call's summary keeps it: a JSON array, its kind's letter first (`a` an API
/// key, `m` an MCP token, `o` an OAuth subject), then its ids. JSON has no raw newline, and
/// the array is about half the size of the record's form (a finished call is kept for
/// minutes).
pub fn caller_code(c: &CallerRef) -> String {
    let parts: Vec<&str> = match c {
        CallerRef::ApiKey { id } => vec!["a", id],
        CallerRef::McpToken { id, api_key_id } => vec!["m", id, api_key_id],
        CallerRef::OAuth { sub, client_id } => match client_id {
            Some(client) => vec!["o", sub, client],
            None => vec!["o", sub],
        },
    };
    serde_json::to_string(&parts).unwrap_or_default()
}

/// The caller a [`caller_code`] stands for.
pub fn parse_caller_code(code: &str) -> Option<CallerRef> {
    let parts: Vec<String> = serde_json::from_str(code).ok()?;
    let mut p = parts.into_iter();
    let kind = p.next()?;
    let id = p.next()?;
    Some(match kind.as_str() {
        "a" => CallerRef::ApiKey { id },
        "m" => CallerRef::McpToken {
            id,
            api_key_id: p.next()?,
        },
        "o" => CallerRef::OAuth {
            sub: id,
            client_id: p.next(),
        },
        _ => return None,
    })
}

/// A call's binding from its stored fields (the node is empty once the call finished).
pub fn binding(
    id: &str,
    conv: &str,
    client_id: &str,
    deadline: &str,
    node: &str,
    summary: &str,
) -> Option<CallBinding> {
    let mut s = summary.splitn(3, SEP);
    let (tool, kind, flags) = (s.next()?, s.next()?, s.next()?);
    let (flags, caller) = match flags.find('[') {
        Some(at) => (&flags[..at], parse_caller_code(&flags[at..])),
        None => (flags, None),
    };
    Some(CallBinding {
        id: id.to_owned(),
        conv: parse_conv_ref(conv)?,
        client_id: client_id.to_owned(),
        tool: tool.to_owned(),
        kind: if kind == "d" {
            CallKind::Describe
        } else {
            CallKind::Call
        },
        deadline_ms: deadline.parse().ok()?,
        node: node.to_owned(),
        untrusted: flags.contains('u'),
        respond_async: flags.contains('a'),
        caller,
    })
}

/// A call's outcome for the node that waits for it.
pub fn outcome_message(id: &str, outcome: &Outcome) -> String {
    outcome_message_of(id, &serde_json::to_string(outcome).unwrap_or_default())
}

/// [`outcome_message`] of an outcome serialized already.
pub fn outcome_message_of(id: &str, outcome: &str) -> String {
    let mut m = String::with_capacity(2 + id.len() + SEP.len_utf8() + outcome.len());
    m.push('r');
    m.push(SEP);
    m.push_str(id);
    m.push(SEP);
    m.push_str(outcome);
    m
}

/// Whether a call's stored summary (`tool`, kind, flags, [`binding`]'s) is an async call's.
pub fn summary_is_async(summary: &str) -> bool {
    let flags = summary.splitn(3, SEP).nth(2).unwrap_or_default();
    let flags = flags.find('[').map_or(flags, |at| &flags[..at]);
    flags.contains('a')
}

/// Decodes a node-channel message (`None` for anything else, logged by the caller).
pub fn parse_node_message(m: &str) -> Option<NodeMessage> {
    let (kind, rest) = m.split_once(SEP)?;
    match kind {
        "p" => Some(NodeMessage::Probe(rest.parse().ok()?)),
        "r" => {
            let (id, outcome) = rest.split_once(SEP)?;
            Some(NodeMessage::Outcome {
                id: id.to_owned(),
                outcome: serde_json::from_str(outcome).ok()?,
            })
        }
        "c" => {
            let mut p = rest.splitn(5, SEP);
            let conv = ConvKey::new(p.next()?, p.next()?, p.next()?);
            Some(NodeMessage::Page {
                conv,
                client_id: p.next()?.to_owned(),
                frame: p.next()?.to_owned(),
                trace: None,
            })
        }
        "t" => {
            let mut p = rest.splitn(6, SEP);
            let trace = p.next()?.to_owned();
            let conv = ConvKey::new(p.next()?, p.next()?, p.next()?);
            Some(NodeMessage::Page {
                conv,
                client_id: p.next()?.to_owned(),
                frame: p.next()?.to_owned(),
                trace: Some(trace),
            })
        }
        _ => None,
    }
}

/// An event on a tenant's live channel: its stream id and body (the one message a script
/// composes, since the id comes from its `XADD`).
pub fn parse_event_message(m: &str) -> Option<(&str, &str)> {
    m.split_once(SEP)
}

/// A conversation as one value (stored with its calls, and in set members).
pub fn conv_ref(c: &ConvKey) -> String {
    lines(&[&c.tenant, &c.user, &c.conversation])
}

/// `parts` joined by [`SEP`] in a string of their length: what a call stores and sends is
/// built on every call, and `format!` cost the agent's node 5 % of its time (issue 58).
fn lines(parts: &[&str]) -> String {
    let len = parts.iter().map(|p| p.len() + 1).sum::<usize>();
    let mut s = String::with_capacity(len);
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            s.push(SEP);
        }
        s.push_str(p);
    }
    s
}

/// The conversation of a [`conv_ref`].
pub fn parse_conv_ref(v: &str) -> Option<ConvKey> {
    let mut p = v.splitn(3, SEP);
    Some(ConvKey::new(p.next()?, p.next()?, p.next()?))
}

/// A member of the deadline set: the call's conversation and id.
pub fn deadline_member(c: &ConvKey, id: &str) -> String {
    lines(&[&c.tenant, &c.user, &c.conversation, id])
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

/// How a call's confirmation ended, as the confirm and expiry scripts store it beside the call
/// (`<at ms>\n<final outcome>`); `None` for '' (not ended) or a value that does not parse.
pub fn parse_resolution(stored: &str) -> Option<crate::Resolution> {
    let (at, outcome) = stored.split_once('\n')?;
    Some(crate::Resolution {
        outcome: serde_json::from_str(outcome).ok()?,
        at_ms: at.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolmark_proto::ToolResult;

    #[test]
    fn a_compact_id_is_short_for_a_canonical_uuid_and_never_shared_by_two_ids() {
        let u = uuid::Uuid::new_v4().hyphenated().to_string();
        let upper = u.to_uppercase();
        let b64_lookalike = compact_id(&u);
        assert_eq!(b64_lookalike.len(), 22);
        let mut seen = std::collections::HashSet::new();
        for id in [u.as_str(), &upper, &b64_lookalike, "p1", "~p1", "", "~"] {
            let c = compact_id(id);
            assert_eq!(expand_id(&c), id, "{id}");
            assert!(seen.insert(c), "{id}");
        }
    }

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
            Some((c.clone(), "k".into(), "p1".into()))
        );
        assert_eq!(
            parse_node_message(&page_message(&c, "p1", "{\"a\":1}")),
            Some(NodeMessage::Page {
                conv: c.clone(),
                client_id: "p1".into(),
                frame: "{\"a\":1}".into(),
                trace: None,
            })
        );
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            parse_node_message(&traced_page_message(&c, "p1", "{\"a\":\"x\\u001fy\"}", tp)),
            Some(NodeMessage::Page {
                conv: c.clone(),
                client_id: "p1".into(),
                frame: "{\"a\":\"x\\u001fy\"}".into(),
                trace: Some(tp.into()),
            })
        );
        let b = CallBinding {
            id: "id-1".into(),
            conv: c.clone(),
            client_id: "p1".into(),
            tool: "todo.add".into(),
            kind: CallKind::Describe,
            deadline_ms: 12,
            node: "n1".into(),
            untrusted: true,
            respond_async: false,
            caller: None,
        };
        assert_eq!(
            binding("id-1", &conv_ref(&c), "p1", "12", "n1", &call_summary(&b)),
            Some(b.clone())
        );
        assert!(
            !summary_is_async(&call_summary(&b)),
            "a sync call's summary"
        );
        // Each kind of caller, ids holding what the encoding uses as separators.
        for caller in [
            CallerRef::ApiKey { id: "k\n1".into() },
            CallerRef::McpToken {
                id: "t1".into(),
                api_key_id: "k\"1".into(),
            },
            CallerRef::OAuth {
                sub: "user@example.com".into(),
                client_id: Some("cli,ent".into()),
            },
            CallerRef::OAuth {
                sub: "s".into(),
                client_id: None,
            },
        ] {
            let with = CallBinding {
                caller: Some(caller),
                respond_async: true,
                ..b.clone()
            };
            let summary = call_summary(&with);
            assert_eq!(summary.lines().count(), 3, "{summary}");
            assert!(summary_is_async(&summary), "{summary}");
            let sync = call_summary(&CallBinding {
                respond_async: false,
                ..with.clone()
            });
            assert!(
                !summary_is_async(&sync),
                "a caller's id is not a flag: {sync}"
            );
            assert_eq!(
                binding("id-1", &conv_ref(&c), "p1", "12", "n1", &summary),
                Some(with)
            );
        }
        let o = Outcome::Result(ToolResult::Ok { data: None });
        assert_eq!(
            parse_node_message(&outcome_message("id", &o)),
            Some(NodeMessage::Outcome {
                id: "id".into(),
                outcome: o
            })
        );
        assert_eq!(parse_node_message(&probe(7)), Some(NodeMessage::Probe(7)));
        assert_eq!(parse_node_message("r\nid\nnot json"), None);
    }
}
