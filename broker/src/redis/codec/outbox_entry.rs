//! A partition's outbox entries as text: the change a script recorded and when (its own
//! module of the codec for its size; the same separator and conversation form).

use toolmark_proto::ToolResult;

use super::{SEP, conv_ref};
use crate::{Change, ConvKey};

/// A change waiting in its partition's outbox for its events to be emitted, as a script records
/// it: complete when the node knew all of it beforehand, else what names the stored state that
/// completes it (read when it is relayed).
// One value at a time, between a script's reply and the relay: a change's size is no cost.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Outboxed {
    /// A manifest kept, or a page gone.
    Ready(Change),
    /// A call finished: its stored record (kept for the finished calls' retention) says how.
    Call(String),
    /// A confirmation resolved; what it was bound to is read from its confirm hash.
    Confirmation {
        /// The page's conversation.
        conv: ConvKey,
        /// The page that confirmed (or whose confirmation expired).
        client_id: String,
        /// The confirmId.
        confirm_id: String,
        /// The final outcome.
        outcome: ToolResult,
    },
}

impl Outboxed {
    /// Its field in the outbox: the change's [`Change::name`].
    pub fn name(&self) -> String {
        match self {
            Outboxed::Ready(c) => c.name(),
            Outboxed::Call(id) => crate::change::call_change_name(id),
            Outboxed::Confirmation {
                conv, confirm_id, ..
            } => crate::change::confirmation_event_name(conv, confirm_id),
        }
    }
}

/// An outbox entry: the change and when the node made it (ms; the sweep relays entries older
/// than [`crate::RELAY_AFTER`]). `None` for a change that announces nothing by itself.
pub fn outbox_entry(o: &Outboxed, at_ms: u64) -> Option<String> {
    Some(match o {
        Outboxed::Ready(Change::Manifest { conv, data, name }) => {
            format!("m{SEP}{at_ms}{SEP}{}{SEP}{name}{SEP}{data}", conv_ref(conv))
        }
        Outboxed::Ready(Change::PageLeft {
            conv,
            client_id,
            name,
        }) => format!(
            "l{SEP}{at_ms}{SEP}{}{SEP}{name}{SEP}{client_id}",
            conv_ref(conv)
        ),
        Outboxed::Ready(_) => return None,
        Outboxed::Call(id) => format!("c{SEP}{at_ms}{SEP}{id}"),
        Outboxed::Confirmation {
            conv,
            client_id,
            confirm_id,
            outcome,
        } => format!(
            "f{SEP}{at_ms}{SEP}{}{SEP}{client_id}{SEP}{confirm_id}{SEP}{}",
            conv_ref(conv),
            serde_json::to_string(outcome).ok()?
        ),
    })
}

/// The change and time of an [`outbox_entry`].
pub fn parse_outbox_entry(v: &str) -> Option<(u64, Outboxed)> {
    let (kind, rest) = v.split_once(SEP)?;
    let (at, rest) = rest.split_once(SEP)?;
    let at = at.parse().ok()?;
    let conv_and = |rest: &str, n: usize| -> Option<(ConvKey, Vec<String>)> {
        let p: Vec<&str> = rest.splitn(3 + n, SEP).collect();
        if p.len() != 3 + n {
            return None;
        }
        let conv = ConvKey::new(p[0], p[1], p[2]);
        Some((conv, p[3..].iter().map(|s| (*s).to_owned()).collect()))
    };
    let o = match kind {
        "m" => {
            let (conv, p) = conv_and(rest, 2)?;
            let [name, data] = <[String; 2]>::try_from(p).ok()?;
            Outboxed::Ready(Change::Manifest {
                conv,
                data: serde_json::from_str(&data).ok()?,
                name,
            })
        }
        "l" => {
            let (conv, p) = conv_and(rest, 2)?;
            let [name, client_id] = <[String; 2]>::try_from(p).ok()?;
            Outboxed::Ready(Change::PageLeft {
                conv,
                client_id,
                name,
            })
        }
        "c" => Outboxed::Call(rest.to_owned()),
        "f" => {
            let (conv, p) = conv_and(rest, 3)?;
            let [client_id, confirm_id, outcome] = <[String; 3]>::try_from(p).ok()?;
            Outboxed::Confirmation {
                conv,
                client_id,
                confirm_id,
                outcome: serde_json::from_str(&outcome).ok()?,
            }
        }
        _ => return None,
    };
    Some((at, o))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outbox_entry_round_trips() {
        let conv = ConvKey::new("t", "u", "c");
        let entries = [
            Outboxed::Ready(Change::Manifest {
                conv: conv.clone(),
                data: serde_json::json!({"rev": 2, "tools": [{"name": "a"}]}),
                name: "page.manifest:p:1".into(),
            }),
            Outboxed::Ready(Change::PageLeft {
                conv: conv.clone(),
                client_id: "p1".into(),
                name: "page.disconnected:p:2".into(),
            }),
            Outboxed::Call("c1".into()),
            Outboxed::Confirmation {
                conv,
                client_id: "p1".into(),
                confirm_id: "k1".into(),
                outcome: crate::expired_confirmation(),
            },
        ];
        for o in entries {
            let v = outbox_entry(&o, 42).unwrap();
            assert_eq!(parse_outbox_entry(&v), Some((42, o)));
        }
        assert_eq!(parse_outbox_entry("x\n1\nz"), None);
    }
}
