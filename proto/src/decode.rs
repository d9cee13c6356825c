//! The one entry point for untrusted messages: limits on the raw bytes, then parsing, then
//! validation for a direction with the seed's strictness, producing typed messages.

use serde::Deserialize;
use serde_json::{Number, Value};

use crate::manifest::parse_summary_value;
use crate::result::parse_result;
use crate::strict::{Obj, ROOT, is_id, is_one, number_is_one};
use crate::{
    AgentMessage, Call, Cancel, Changed, Confirmed, DecodeError, Describe, Limits, Manifest,
    PageMessage, ResultMessage, check_limits, is_valid_tool_name,
};

/// Which way a message travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Agent → page: `call`, `describe`, `cancel`.
    ToPage,
    /// Page → agent: `manifest`, `changed`, `result`, `confirmed`.
    ToAgent,
}

/// A validated message of either direction.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// Page → agent.
    ToAgent(PageMessage),
    /// Agent → page.
    ToPage(AgentMessage),
}

/// Checks the limits on `raw`, parses it and validates it for `direction`.
pub fn decode(raw: &[u8], direction: Direction, limits: &Limits) -> Result<Message, DecodeError> {
    check_limits(raw, limits)?;
    parse(raw, direction)
}

/// [`decode`] after the limits.
fn parse(raw: &[u8], direction: Direction) -> Result<Message, DecodeError> {
    let value: Value =
        serde_json::from_slice(raw).map_err(|e| DecodeError::Malformed(e.to_string()))?;
    validate(value, direction)
}

/// [`decode`] for a frame a page sent.
pub fn decode_to_agent(raw: &[u8], limits: &Limits) -> Result<PageMessage, DecodeError> {
    check_limits(raw, limits)?;
    if let Some(result) = result_frame(raw) {
        return Ok(result);
    }
    match parse(raw, Direction::ToAgent)? {
        Message::ToAgent(m) => Ok(m),
        Message::ToPage(m) => Err(DecodeError::WrongDirection {
            kind: m.kind().into(),
        }),
    }
}

/// A page's `result` frame (one a call) as [`validate`] takes it, read straight into its
/// fields rather than through a JSON object first; `None` for anything else, a frame this does
/// not take as it is (a duplicate or unknown property, a wrong type, a bad id or result, …),
/// which [`decode`] then reads the general way, and refuses with its pointer. The property
/// test `a_result_frame_reads_the_same_either_way` holds the two to the same answer.
fn result_frame(raw: &[u8]) -> Option<PageMessage> {
    #[derive(Deserialize)]
    enum Kind {
        #[serde(rename = "result")]
        Result,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Frame {
        protocol: Number,
        #[serde(rename = "type")]
        _kind: Kind,
        #[serde(rename = "clientId")]
        client_id: String,
        id: String,
        result: Value,
    }
    let f: Frame = serde_json::from_slice(raw).ok()?;
    if !number_is_one(&f.protocol) || !is_id(&f.client_id) || !is_id(&f.id) {
        return None;
    }
    let result = parse_result(f.result, &ROOT.key("result")).ok()?;
    Some(PageMessage::Result(ResultMessage {
        client_id: f.client_id,
        id: f.id,
        result,
    }))
}

/// [`decode`] for a frame sent to a page (used by page-side code and tests).
pub fn decode_to_page(raw: &[u8], limits: &Limits) -> Result<AgentMessage, DecodeError> {
    match decode(raw, Direction::ToPage, limits)? {
        Message::ToPage(m) => Ok(m),
        Message::ToAgent(m) => Err(DecodeError::WrongDirection {
            kind: m.kind().into(),
        }),
    }
}

/// Validates an already parsed message for `direction`. Top-level objects are strict;
/// manifest entries and hints keep unknown properties; `input` and `ok.data` are any JSON.
/// The caller must have applied the size and depth limits when the value came from outside.
pub fn validate(value: Value, direction: Direction) -> Result<Message, DecodeError> {
    let mut o = Obj::new(value, &ROOT)?;
    match o.take("protocol") {
        Some(p) if is_one(&p) => {}
        _ => return Err(DecodeError::UnsupportedProtocol),
    }
    let kind = o.string("type")?;
    let message = match (direction, kind.as_str()) {
        (Direction::ToAgent, "manifest") => {
            let client_id = o.id("clientId")?;
            let rev = o.rev("rev")?;
            let at = ROOT.key("tools");
            let tools = o
                .array("tools")?
                .into_iter()
                .enumerate()
                .map(|(i, v)| parse_summary_value(v, &at.index(i)))
                .collect::<Result<_, _>>()?;
            Message::ToAgent(PageMessage::Manifest(Manifest {
                client_id,
                rev,
                tools,
            }))
        }
        (Direction::ToAgent, "changed") => Message::ToAgent(PageMessage::Changed(Changed {
            client_id: o.id("clientId")?,
            rev: o.rev("rev")?,
        })),
        (Direction::ToAgent, "result") => {
            let client_id = o.id("clientId")?;
            let id = o.id("id")?;
            let result = parse_result(o.required("result")?, &ROOT.key("result"))?;
            Message::ToAgent(PageMessage::Result(ResultMessage {
                client_id,
                id,
                result,
            }))
        }
        (Direction::ToAgent, "confirmed") => {
            let client_id = o.id("clientId")?;
            let confirm_id = o.id("confirmId")?;
            let result = parse_result(o.required("result")?, &ROOT.key("result"))?;
            Message::ToAgent(PageMessage::Confirmed(Confirmed {
                client_id,
                confirm_id,
                result,
            }))
        }
        (Direction::ToPage, "call") => {
            let client_id = o.id("clientId")?;
            let id = o.id("id")?;
            let rev = o.opt_rev("rev")?;
            let tool = tool_name(&mut o)?;
            let input = o.required("input")?;
            Message::ToPage(AgentMessage::Call(Call {
                client_id,
                id,
                rev,
                tool,
                input,
            }))
        }
        (Direction::ToPage, "describe") => Message::ToPage(AgentMessage::Describe(Describe {
            client_id: o.id("clientId")?,
            id: o.id("id")?,
            tool: tool_name(&mut o)?,
        })),
        (Direction::ToPage, "cancel") => Message::ToPage(AgentMessage::Cancel(Cancel {
            client_id: o.id("clientId")?,
            id: o.id("id")?,
        })),
        (Direction::ToPage, "manifest" | "changed" | "result" | "confirmed")
        | (Direction::ToAgent, "call" | "describe" | "cancel") => {
            return Err(DecodeError::WrongDirection { kind });
        }
        (_, other) => {
            return Err(ROOT
                .key("type")
                .err(format!("unknown message type {other:?}")));
        }
    };
    o.finish()?;
    Ok(message)
}

fn tool_name(o: &mut Obj<'_>) -> Result<String, DecodeError> {
    let tool = o.string("tool")?;
    if is_valid_tool_name(&tool) {
        Ok(tool)
    } else {
        Err(ROOT
            .key("tool")
            .err("tool name must match ^[A-Za-z0-9_.-]{1,128}$"))
    }
}
