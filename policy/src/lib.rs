//! Least privilege for agent credentials: the policy an API key carries (its scopes, the tools
//! it may reach, the hints those tools must have, its own call rate), inherited and narrowed by
//! the MCP tokens it mints; the tenant's policy for OAuth access tokens. One shape in the
//! config file, the admin API and a token; the rules that apply it are here, once. Absent
//! fields allow everything.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// What a credential may do. `Policy::default()` allows everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// The groups of endpoints it may use; absent: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<BTreeSet<Scope>>,
    /// The tools it may call, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolRules>,
    /// The hints a tool must have to be called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hints: Option<HintLevel>,
    /// Its own call rate, inside the tenant's, cluster-wide (at least 1).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "calls_per_second"
    )]
    pub calls_per_second: Option<std::num::NonZeroU32>,
}

/// A group of endpoints.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum Scope {
    /// Calls, describes, `llm-tools`, invoke, `GET /calls/{id}`, cancel, the conversation state.
    Calls,
    /// `/events` and `webhooks/failed`.
    Events,
    /// `POST /tokens`.
    Tokens,
    /// The webhook retry.
    Webhooks,
}

/// Tools by name: a glob's `*` matches any run of characters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolRules {
    /// A tool is allowed when a name matches one of these; absent: any name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// …and none of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

/// The hints a tool must have.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum HintLevel {
    /// Any tool.
    Any,
    /// Tools not marked `destructive`.
    NonDestructive,
    /// Tools marked `readOnly` only.
    ReadOnly,
}

/// What a tool says of itself in the page's current manifest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolFacts {
    /// `hints.readOnly` is true.
    pub read_only: bool,
    /// `hints.destructive` is true.
    pub destructive: bool,
}

/// Whether `name` matches `pattern`, whose `*` matches any run of characters (none included),
/// regardless of case: `*.delete*` holds `notes.DeleteAll` too, in `deny` as in `allow`.
pub fn glob(pattern: &str, name: &str) -> bool {
    glob_folded(&folded(pattern), &folded(name))
}

/// `s` in lower case (borrowed when it already is).
fn folded(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().any(char::is_uppercase) {
        std::borrow::Cow::Owned(s.to_lowercase())
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

fn glob_folded(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = parts.split_first().expect("split yields one part at least");
    let Some(mut left) = name.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return left.is_empty();
    };
    for part in middle {
        match left.find(part) {
            Some(at) => left = &left[at + part.len()..],
            None => return false,
        }
    }
    left.len() >= last.len() && left.ends_with(last)
}

impl HintLevel {
    fn allows(self, facts: ToolFacts) -> bool {
        match self {
            HintLevel::Any => true,
            HintLevel::NonDestructive => !facts.destructive,
            HintLevel::ReadOnly => facts.read_only,
        }
    }
}

impl Policy {
    /// A policy that allows only read-only tools, everything else as `self`.
    pub fn read_only(mut self) -> Self {
        self.hints = Some(HintLevel::ReadOnly);
        self
    }

    /// Whether the policy allows the endpoints of `scope`.
    pub fn allows_scope(&self, scope: Scope) -> bool {
        self.scopes.as_ref().is_none_or(|s| s.contains(&scope))
    }

    /// Whether the policy allows calling the tool `name` that says `facts` of itself.
    pub fn allows_tool(&self, name: &str, facts: ToolFacts) -> bool {
        let named = self.tools.as_ref().is_none_or(|t| {
            t.allow
                .as_ref()
                .is_none_or(|allow| allow.iter().any(|p| glob(p, name)))
                && !t.deny.iter().any(|p| glob(p, name))
        });
        named && self.hints.is_none_or(|h| h.allows(facts))
    }

    /// Whether the policy may narrow calls at all by tool (so a caller needs the tool's facts).
    pub fn limits_tools(&self) -> bool {
        self.tools.is_some() || self.hints.is_some_and(|h| h != HintLevel::Any)
    }
}

/// Policies that all apply (an API key's, and what a token minted by it was narrowed to): a
/// request passes when each allows it, so a token can never be wider than its key, whatever
/// either says, and follows its key when the key is narrowed.
#[derive(Debug, Clone, Copy)]
pub struct AllOf<'a>(pub &'a [&'a Policy]);

impl AllOf<'_> {
    /// Whether every policy allows `scope`.
    pub fn allows_scope(&self, scope: Scope) -> bool {
        self.0.iter().all(|p| p.allows_scope(scope))
    }

    /// Whether every policy allows the tool.
    pub fn allows_tool(&self, name: &str, facts: ToolFacts) -> bool {
        self.0.iter().all(|p| p.allows_tool(name, facts))
    }

    /// Whether any policy narrows by tool.
    pub fn limits_tools(&self) -> bool {
        self.0.iter().any(|p| p.limits_tools())
    }

    /// The lowest call rate of them, if any sets one.
    pub fn calls_per_second(&self) -> Option<u32> {
        self.0
            .iter()
            .filter_map(|p| p.calls_per_second.map(std::num::NonZeroU32::get))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(read_only: bool, destructive: bool) -> ToolFacts {
        ToolFacts {
            read_only,
            destructive,
        }
    }

    #[test]
    fn globs_match_any_run_of_characters() {
        assert!(glob("todo.*", "todo.add"));
        assert!(glob("todo.*", "todo."));
        assert!(!glob("todo.*", "todos.add"));
        assert!(glob("*.delete*", "todo.deleteAll"));
        assert!(glob("*", "x"));
        // Regardless of case, both ways.
        assert!(glob("*.delete*", "notes.DeleteAll"));
        assert!(glob("*.DELETE*", "notes.deleteAll"));
        assert!(glob("Todo.*", "todo.add"));
        assert!(!glob("todo.*", "TODOS.add"));
        assert!(glob("a*b*c", "abc"));
        assert!(glob("a*b*c", "a-b-b-c"));
        assert!(!glob("a*b*c", "a-c"));
        assert!(glob("signup.fill", "signup.fill"));
        assert!(!glob("signup.fill", "signup.fills"));
    }

    #[test]
    fn a_deny_glob_beats_an_allow_glob_and_hints_narrow_further() {
        let p: Policy = serde_json::from_value(serde_json::json!({
            "tools": {"allow": ["todo.*", "signup.fill"], "deny": ["*.delete*"]},
            "hints": "nonDestructive"
        }))
        .unwrap();
        assert!(p.allows_tool("todo.add", facts(false, false)));
        assert!(!p.allows_tool("todo.deleteAll", facts(false, false)));
        assert!(!p.allows_tool("todo.add", facts(false, true)));
        assert!(!p.allows_tool("order.submit", facts(true, false)));
        let ro = Policy::default().read_only();
        assert!(ro.allows_tool("x", facts(true, false)));
        assert!(!ro.allows_tool("x", facts(false, false)));
        assert!(Policy::default().allows_tool("anything", facts(false, true)));
    }

    #[test]
    fn policies_that_all_apply_never_widen() {
        let key: Policy = serde_json::from_value(serde_json::json!({
            "scopes": ["calls", "tokens"],
            "tools": {"allow": ["todo.*"]},
            "hints": "nonDestructive",
            "callsPerSecond": 5
        }))
        .unwrap();
        let asked: Policy = serde_json::from_value(serde_json::json!({
            "scopes": ["calls", "events"],
            "tools": {"allow": ["*"]},
            "hints": "any",
            "callsPerSecond": 50
        }))
        .unwrap();
        let both = AllOf(&[&key, &asked]);
        assert!(both.allows_scope(Scope::Calls));
        assert!(!both.allows_scope(Scope::Events));
        assert!(!both.allows_scope(Scope::Tokens));
        assert!(both.allows_tool("todo.add", facts(false, false)));
        assert!(!both.allows_tool("order.submit", facts(false, false)));
        assert!(!both.allows_tool("todo.add", facts(false, true)));
        assert_eq!(both.calls_per_second(), Some(5));
        assert!(both.limits_tools());
        assert!(!AllOf(&[&Policy::default()]).limits_tools());
    }

    #[test]
    fn unknown_fields_and_values_are_refused() {
        assert!(serde_json::from_value::<Policy>(serde_json::json!({"scope": ["calls"]})).is_err());
        assert!(serde_json::from_value::<Policy>(serde_json::json!({"hints": "some"})).is_err());
        assert!(
            serde_json::from_value::<Policy>(serde_json::json!({"scopes": ["admin"]})).is_err()
        );
    }
}
