//! The protocol's JSON Schemas (draft 2020-12), one per direction, as shipped in
//! `proto/schemas/v1/`. They state the same rules as [`crate::validate`]; a test holds the two
//! to agreement.

/// `$id` of the page → agent schema.
pub const PAGE_TO_AGENT_ID: &str = "urn:toolmark:protocol:v1:page-to-agent";
/// `$id` of the agent → page schema.
pub const AGENT_TO_PAGE_ID: &str = "urn:toolmark:protocol:v1:agent-to-page";

/// The page → agent schema (`manifest`, `changed`, `result`, `confirmed`).
pub const PAGE_TO_AGENT: &str = include_str!("../schemas/v1/page-to-agent.json");
/// The agent → page schema (`call`, `describe`, `cancel`).
pub const AGENT_TO_PAGE: &str = include_str!("../schemas/v1/agent-to-page.json");

/// The schema text for a direction.
pub fn for_direction(direction: crate::Direction) -> &'static str {
    match direction {
        crate::Direction::ToAgent => PAGE_TO_AGENT,
        crate::Direction::ToPage => AGENT_TO_PAGE,
    }
}
