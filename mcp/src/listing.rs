//! What the CLI lists while no page is paired: `toolmark_pairing` alone. The page's own tools
//! are listed by the shared [`toolmark_mcp_tools::listing`].

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

pub use toolmark_mcp_tools::listing::*;

/// The one tool listed while unpaired.
pub const PAIRING_TOOL: &str = "toolmark_pairing";

/// The `toolmark_pairing` tool.
pub fn pairing_tool() -> Tool {
    let schema = match json!({"type": "object", "properties": {}, "additionalProperties": false}) {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    Tool::new(
        PAIRING_TOOL,
        "Pair this MCP server with the app page open in the user's browser. Returns the pairing code and what the user must do with it; once a page is paired, its tools replace this one.",
        Arc::new(schema),
    )
    .with_title("Pair with the app page")
    .with_annotations(ToolAnnotations::new().read_only(true).destructive(false))
}

/// The listing while unpaired.
pub fn unpaired() -> Vec<Tool> {
    vec![pairing_tool()]
}

/// The text of `toolmark_pairing`'s result.
pub fn pairing_text(code: &str, minutes: u64) -> String {
    format!(
        "Open the app, choose \"Pair with desktop MCP\", and enter code {code} (expires in {minutes} minutes)."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairing_text_is_the_seeds() {
        assert_eq!(
            pairing_text("7K2Q-M9XD", 5),
            "Open the app, choose \"Pair with desktop MCP\", and enter code 7K2Q-M9XD (expires in 5 minutes)."
        );
    }

    #[test]
    fn the_pairing_tool_is_read_only() {
        let t = serde_json::to_value(pairing_tool()).unwrap();
        assert_eq!(t["name"], "toolmark_pairing");
        assert_eq!(t["annotations"]["readOnlyHint"], true);
    }
}
