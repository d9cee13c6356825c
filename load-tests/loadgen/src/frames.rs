//! The protocol v1 frames a simulated page sends: its manifest with one echo tool, and the
//! immediate `ok` result of every call addressed to it, echoing the call's input.

use serde::Deserialize;
use serde_json::{Value, json};

/// The tool every simulated page registers.
pub const TOOL: &str = "bench.echo";
/// [`TOOL`]'s name for a model, as the page publishes it and the hosted MCP endpoint lists it.
pub const LLM_NAME: &str = "bench__echo";

/// The page's first frame: a manifest binding the socket to `client_id`.
pub fn manifest(client_id: &str) -> String {
    manifest_described(client_id, "Echo")
}

/// [`manifest`] with the echo tool described by `description` (a reload's manifest is padded
/// to a size with it).
pub fn manifest_described(client_id: &str, description: &str) -> String {
    json!({
        "protocol": 1,
        "type": "manifest",
        "clientId": client_id,
        "rev": 1,
        "tools": [{
            "name": TOOL,
            "llmName": LLM_NAME,
            "description": description,
            "hints": {"readOnly": true},
        }],
    })
    .to_string()
}

/// The fields of an agent → page frame a page acts on.
#[derive(Debug, Deserialize)]
struct Inbound {
    #[serde(rename = "type")]
    kind: String,
    #[serde(rename = "clientId")]
    client_id: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    input: Value,
}

/// The reply to `frame` when it is a `call` addressed to `client_id`; `None` for anything else
/// (cancels, other pages' calls, frames this page does not understand).
pub fn answer(frame: &str, client_id: &str) -> Option<String> {
    let inbound: Inbound = serde_json::from_str(frame).ok()?;
    if inbound.kind != "call" || inbound.client_id != client_id {
        return None;
    }
    let reply = json!({
        "protocol": 1,
        "type": "result",
        "clientId": client_id,
        "id": inbound.id,
        "result": {"status": "ok", "data": inbound.input},
    });
    Some(reply.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_lists_the_echo_tool() {
        let m: Value = serde_json::from_str(&manifest("p-1")).unwrap();
        assert_eq!(m["type"], "manifest");
        assert_eq!(m["clientId"], "p-1");
        assert_eq!(m["tools"][0]["name"], TOOL);
        assert_eq!(m["tools"][0]["llmName"], "bench__echo");
    }

    #[test]
    fn calls_to_this_page_are_echoed() {
        let call = r#"{"protocol":1,"type":"call","clientId":"p-1","id":"c-9","rev":1,"tool":"bench.echo","input":{"n":3}}"#;
        let r: Value = serde_json::from_str(&answer(call, "p-1").unwrap()).unwrap();
        assert_eq!(r["type"], "result");
        assert_eq!(r["id"], "c-9");
        assert_eq!(r["clientId"], "p-1");
        assert_eq!(r["result"], json!({"status": "ok", "data": {"n": 3}}));
    }

    #[test]
    fn other_frames_get_no_answer() {
        let other = r#"{"protocol":1,"type":"call","clientId":"p-2","id":"c-9","tool":"bench.echo","input":{}}"#;
        assert_eq!(answer(other, "p-1"), None);
        let cancel = r#"{"protocol":1,"type":"cancel","clientId":"p-1","id":"c-9"}"#;
        assert_eq!(answer(cancel, "p-1"), None);
        assert_eq!(answer("not json", "p-1"), None);
    }
}
