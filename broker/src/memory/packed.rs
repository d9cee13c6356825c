//! A finished call as the memory broker keeps it for the rest of its retention: its record in
//! one boxed byte string, decoded on read. A finished call is kept for minutes and read rarely
//! (`GET /calls/{id}`, a late or repeated result, its confirmation), so it pays for no field's
//! capacity, no `String` header and no JSON tree: lengths as varints, canonical UUIDs as their
//! 16 bytes, the outcome as its JSON text (the Redis broker keeps a packed string likewise).

use toolmark_proto::ToolResult;
use uuid::Uuid;

use crate::{
    CallBinding, CallKind, CallRecord, CallState, CallerRef, ConvKey, Outcome, Resolution,
};

/// The flags byte: state in the low two bits, then the binding's booleans.
const ANSWERED: u8 = 1;
const TIMED_OUT: u8 = 2;
const DESCRIBE: u8 = 1 << 2;
const UNTRUSTED: u8 = 1 << 3;
const RESPOND_ASYNC: u8 = 1 << 4;
/// The binding's node is the broker's own (always, in one process): not stored.
const OWN_NODE: u8 = 1 << 5;
const HAS_OUTCOME: u8 = 1 << 6;
const HAS_RESOLUTION: u8 = 1 << 7;

/// A record packed for keeping. `own_node` is the broker's node id, left out of the bytes when
/// the binding names it. The call id is the table's key, not part of the bytes.
#[cfg(test)]
pub(super) fn pack(record: &CallRecord, own_node: &str) -> Box<[u8]> {
    let mut out = Vec::new();
    pack_into(&mut out, record, own_node);
    out.into_boxed_slice()
}

/// [`pack`], appended to `out`.
pub(super) fn pack_into(out: &mut Vec<u8>, record: &CallRecord, own_node: &str) {
    let b = &record.binding;
    let mut flags = match record.state {
        CallState::Pending => 0,
        CallState::Answered => ANSWERED,
        CallState::TimedOut => TIMED_OUT,
    };
    if b.kind == CallKind::Describe {
        flags |= DESCRIBE;
    }
    if b.untrusted {
        flags |= UNTRUSTED;
    }
    if b.respond_async {
        flags |= RESPOND_ASYNC;
    }
    if b.node == own_node {
        flags |= OWN_NODE;
    }
    if record.outcome.is_some() {
        flags |= HAS_OUTCOME;
    }
    if record.resolution.is_some() {
        flags |= HAS_RESOLUTION;
    }
    out.push(flags);
    put_str(out, &b.conv.tenant);
    put_str(out, &b.conv.user);
    put_str(out, &b.conv.conversation);
    put_str(out, &b.client_id);
    put_str(out, &b.tool);
    put_varint(out, b.deadline_ms);
    if b.node != own_node {
        put_str(out, &b.node);
    }
    put_caller(out, b.caller.as_ref());
    if let Some(o) = &record.outcome {
        put_outcome(out, o);
    }
    if let Some(r) = &record.resolution {
        put_varint(out, r.at_ms);
        put_json(out, &r.outcome);
    }
}

/// The record `packed` stands for, call `id`; `None` only for bytes [`pack`] did not write.
pub(super) fn unpack(id: &str, packed: &[u8], own_node: &str) -> Option<CallRecord> {
    let mut r = Reader(packed);
    let flags = r.byte()?;
    let state = match flags & 3 {
        0 => CallState::Pending,
        ANSWERED => CallState::Answered,
        _ => CallState::TimedOut,
    };
    let conv = ConvKey {
        tenant: r.str()?,
        user: r.str()?,
        conversation: r.str()?,
    };
    let client_id = r.str()?;
    let tool = r.str()?;
    let deadline_ms = r.varint()?;
    let node = if flags & OWN_NODE != 0 {
        own_node.to_owned()
    } else {
        r.str()?
    };
    let caller = r.caller()?;
    let outcome = if flags & HAS_OUTCOME != 0 {
        Some(r.outcome()?)
    } else {
        None
    };
    let resolution = if flags & HAS_RESOLUTION != 0 {
        let at_ms = r.varint()?;
        Some(Resolution {
            outcome: r.result()?,
            at_ms,
        })
    } else {
        None
    };
    Some(CallRecord {
        binding: CallBinding {
            id: id.to_owned(),
            conv,
            client_id,
            tool,
            kind: if flags & DESCRIBE != 0 {
                CallKind::Describe
            } else {
                CallKind::Call
            },
            deadline_ms,
            node,
            untrusted: flags & UNTRUSTED != 0,
            respond_async: flags & RESPOND_ASYNC != 0,
            caller,
        },
        state,
        outcome,
        resolution,
    })
}

/// The 16 bytes of `s` when it is a UUID in its canonical form (lowercase, hyphenated), the
/// form the gateway mints call ids and the page bridge mints clientIds in.
pub(super) fn canonical_uuid(s: &str) -> Option<[u8; 16]> {
    if s.len() != 36 || s.bytes().any(|c| c.is_ascii_uppercase()) {
        return None;
    }
    // 36 characters without uppercase parse only from the hyphenated lowercase form.
    Uuid::try_parse(s).ok().map(|u| *u.as_bytes())
}

/// The canonical text of a UUID's bytes.
pub(super) fn uuid_text(bytes: [u8; 16]) -> String {
    Uuid::from_bytes(bytes).hyphenated().to_string()
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        // The low seven bits, with the continuation bit.
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A string: a canonical UUID as a header of 1 and its 16 bytes, anything else as a header of
/// twice its length and its bytes.
fn put_str(out: &mut Vec<u8>, s: &str) {
    if let Some(bytes) = canonical_uuid(s) {
        out.push(1);
        out.extend_from_slice(&bytes);
    } else {
        put_varint(out, (s.len() as u64) << 1);
        out.extend_from_slice(s.as_bytes());
    }
}

/// An absent caller as 0, else its kind (1 an API key, 2 an MCP token, 3 an OAuth subject
/// without a client, 4 with one), then its ids.
fn put_caller(out: &mut Vec<u8>, c: Option<&CallerRef>) {
    match c {
        None => out.push(0),
        Some(CallerRef::ApiKey { id }) => {
            out.push(1);
            put_str(out, id);
        }
        Some(CallerRef::McpToken { id, api_key_id }) => {
            out.push(2);
            put_str(out, id);
            put_str(out, api_key_id);
        }
        Some(CallerRef::OAuth { sub, client_id }) => {
            out.push(if client_id.is_some() { 4 } else { 3 });
            put_str(out, sub);
            if let Some(client) = client_id {
                put_str(out, client);
            }
        }
    }
}

/// A timeout as an empty string (its JSON is known), a result as its JSON.
fn put_outcome(out: &mut Vec<u8>, o: &Outcome) {
    match o {
        Outcome::Timeout => put_varint(out, 0),
        Outcome::Result(r) => put_json(out, r),
    }
}

fn put_json(out: &mut Vec<u8>, r: &ToolResult) {
    let json = serde_json::to_string(r).unwrap_or_default();
    put_varint(out, json.len() as u64);
    out.extend_from_slice(json.as_bytes());
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn bytes(&mut self, n: usize) -> Option<&[u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn str(&mut self) -> Option<String> {
        let header = self.varint()?;
        if header == 1 {
            let bytes: [u8; 16] = self.bytes(16)?.try_into().ok()?;
            return Some(uuid_text(bytes));
        }
        let len = usize::try_from(header >> 1).ok()?;
        String::from_utf8(self.bytes(len)?.to_vec()).ok()
    }

    fn caller(&mut self) -> Option<Option<CallerRef>> {
        Some(match self.byte()? {
            0 => None,
            1 => Some(CallerRef::ApiKey { id: self.str()? }),
            2 => Some(CallerRef::McpToken {
                id: self.str()?,
                api_key_id: self.str()?,
            }),
            3 => Some(CallerRef::OAuth {
                sub: self.str()?,
                client_id: None,
            }),
            4 => Some(CallerRef::OAuth {
                sub: self.str()?,
                client_id: Some(self.str()?),
            }),
            _ => return None,
        })
    }

    fn json(&mut self) -> Option<&str> {
        let len = usize::try_from(self.varint()?).ok()?;
        std::str::from_utf8(self.bytes(len)?).ok()
    }

    fn outcome(&mut self) -> Option<Outcome> {
        let json = self.json()?;
        if json.is_empty() {
            return Some(Outcome::Timeout);
        }
        serde_json::from_str(json).ok().map(Outcome::Result)
    }

    fn result(&mut self) -> Option<ToolResult> {
        serde_json::from_str(self.json()?).ok()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use toolmark_proto::codes::{CancelledBy, RefusedCode};
    use toolmark_proto::{FieldChange, Issue};

    use super::*;

    fn record(id_like: &str, state: CallState, outcome: Option<Outcome>) -> CallRecord {
        CallRecord {
            binding: CallBinding {
                id: id_like.into(),
                conv: ConvKey::new("acme", "user-7", "5b1f6c1e-8a43-4c55-9d0e-0e3f7a1c2b44"),
                client_id: "0f8fad5b-d9cb-469f-a165-70867728950e".into(),
                tool: "todo.add".into(),
                kind: CallKind::Call,
                deadline_ms: 1_764_000_123_456,
                node: "node-a".into(),
                untrusted: false,
                respond_async: false,
                caller: None,
            },
            state,
            outcome,
            resolution: None,
        }
    }

    /// Every outcome a finished call can hold.
    fn outcomes() -> Vec<(CallState, Outcome)> {
        let answered = |r| (CallState::Answered, Outcome::Result(r));
        vec![
            answered(ToolResult::Ok { data: None }),
            answered(ToolResult::Ok {
                data: Some(serde_json::Value::Null),
            }),
            answered(ToolResult::Ok {
                data: Some(json!({"n": 3, "text": "line\nbreak", "deep": [1.5, {"x": null}]})),
            }),
            answered(ToolResult::Invalid {
                issues: vec![Issue {
                    path: "email".into(),
                    message: "must be an email".into(),
                }],
            }),
            answered(ToolResult::Refused {
                code: RefusedCode::Stale,
                message: "the form changed".into(),
                rev: Some(4),
            }),
            answered(ToolResult::Refused {
                code: RefusedCode::NotAllowed,
                message: "no".into(),
                rev: None,
            }),
            answered(ToolResult::NeedsConfirmation {
                confirm_id: "c-1".into(),
                summary: "Delete 3 items".into(),
                changes: Some(vec![FieldChange {
                    path: "title".into(),
                    before: None,
                    after: Some(json!("new")),
                }]),
            }),
            answered(ToolResult::Cancelled {
                by: CancelledBy::Operator,
            }),
            answered(ToolResult::Error {
                message: "Tool failed".into(),
            }),
            (CallState::TimedOut, Outcome::Timeout),
        ]
    }

    fn round_trip(r: &CallRecord, own_node: &str) -> Option<CallRecord> {
        unpack(&r.binding.id, &pack(r, own_node), own_node)
    }

    #[test]
    fn a_packed_call_reads_back_as_it_was_for_every_outcome() {
        for (state, outcome) in outcomes() {
            let r = record("5a2c8b71-3d0e-4f5a-8b6c-7d8e9f0a1b2c", state, Some(outcome));
            assert_eq!(round_trip(&r, "node-a").as_ref(), Some(&r), "own node");
            assert_eq!(round_trip(&r, "node-b").as_ref(), Some(&r), "another node");
        }
    }

    #[test]
    fn every_binding_field_and_a_resolution_read_back() {
        let callers = [
            None,
            Some(CallerRef::ApiKey { id: "key-1".into() }),
            Some(CallerRef::McpToken {
                id: "tok".into(),
                api_key_id: "key-2".into(),
            }),
            Some(CallerRef::OAuth {
                sub: "alice".into(),
                client_id: None,
            }),
            Some(CallerRef::OAuth {
                sub: "alice".into(),
                client_id: Some("app".into()),
            }),
        ];
        for caller in callers {
            let mut r = record("not-a-uuid", CallState::Answered, None);
            r.binding.caller = caller;
            r.binding.kind = CallKind::Describe;
            r.binding.untrusted = true;
            r.binding.respond_async = true;
            // Text that only looks like a UUID, and empty and non-ASCII text, stay as they were.
            r.binding.client_id = "0F8FAD5B-D9CB-469F-A165-70867728950E".into();
            r.binding.conv = ConvKey::new("", "ünïcode", "{0f8fad5b-d9cb-469f-a165-70867728950e}");
            r.binding.node = String::new();
            r.outcome = Some(Outcome::Result(ToolResult::NeedsConfirmation {
                confirm_id: "c-2".into(),
                summary: "Send".into(),
                changes: None,
            }));
            r.resolution = Some(Resolution {
                outcome: crate::expired_confirmation(),
                at_ms: 1_764_000_200_000,
            });
            assert_eq!(round_trip(&r, "node-a").as_ref(), Some(&r));
        }
    }

    #[test]
    fn a_typical_finished_call_packs_small() {
        let r = record(
            "5a2c8b71-3d0e-4f5a-8b6c-7d8e9f0a1b2c",
            CallState::Answered,
            Some(Outcome::Result(ToolResult::Ok {
                data: Some(json!({"n": 3})),
            })),
        );
        // Flags, tenant, user, two UUIDs, tool, deadline, caller, and `{"status":"ok",…}`.
        assert!(
            pack(&r, "node-a").len() <= 100,
            "{}",
            pack(&r, "node-a").len()
        );
    }
}
