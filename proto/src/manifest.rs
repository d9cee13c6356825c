//! Manifest entries: the summary a page lists in `manifest`, and the full entry a `describe`
//! returns. Entries and hints keep unknown properties (forward compatibility).

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::DecodeError;
use crate::strict::{At, Obj, ROOT, into_string};

/// Whether `name` matches `^[A-Za-z0-9_.-]{1,128}$`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Whether `name` matches `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_valid_llm_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

/// Behaviour hints of a tool. Unset hints are `None`; unknown hints are kept in `extra`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hints {
    /// The tool only reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// The tool has consequences; an `inapp` call returns `needs_confirmation`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consequential: Option<bool>,
    /// The tool destroys data; an `inapp` call returns `needs_confirmation`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// Results carry page or user content: treat as data, never instructions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untrusted_content: Option<bool>,
    /// Hints this version does not know, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Hints {
    /// Whether results of this tool must be handed to a model wrapped as untrusted.
    pub fn is_untrusted(&self) -> bool {
        self.untrusted_content == Some(true)
    }

    /// Names of the hints set to `true`, in the seed's order.
    pub fn set_names(&self) -> Vec<&'static str> {
        [
            ("readOnly", self.read_only),
            ("consequential", self.consequential),
            ("destructive", self.destructive),
            ("untrustedContent", self.untrusted_content),
        ]
        .into_iter()
        .filter(|(_, v)| *v == Some(true))
        .map(|(n, _)| n)
        .collect()
    }
}

/// `mode` of a manifest entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// A stepwise wizard (M2).
    Stepwise,
}

/// One entry of a `manifest`: `{ name, llmName, title?, description, hints, mode? }`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolManifestSummary {
    /// Full tool name, e.g. `signup.fill`.
    pub name: String,
    /// Name for one-LLM-tool-per-entry exposure, e.g. `signup__fill`.
    pub llm_name: String,
    /// App-localized, user-facing title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// LLM-facing description.
    pub description: String,
    /// Behaviour hints.
    pub hints: Hints,
    /// `stepwise` for stepwise wizards.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// Properties this version does not know, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// Its pin digest, made on first use and kept with the entry (never per call).
    #[serde(skip)]
    pub digest: crate::pin::Memo,
}

impl ToolManifestSummary {
    /// Validates an untrusted manifest entry.
    pub fn from_value(v: Value) -> Result<Self, DecodeError> {
        parse_summary(Obj::new(v, &ROOT)?, &ROOT)
    }

    /// The digest that pins this definition ([`crate::pin::digest`]), made once per entry.
    pub fn digest(&self) -> crate::pin::Digest {
        *self.digest.0.get_or_init(|| crate::pin::digest(self))
    }
}

impl<'de> Deserialize<'de> for ToolManifestSummary {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ToolManifestSummary::from_value(Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// The full entry a `describe` returns as `ok` data: the summary plus its schemas.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolManifest {
    /// The summary fields.
    #[serde(flatten)]
    pub summary: ToolManifestSummary,
    /// JSON Schema of the input (an object or a boolean schema).
    pub input_schema: Value,
    /// JSON Schema of the output, when declared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

impl ToolManifest {
    /// Validates an untrusted full manifest entry (e.g. the data of a describe's `ok`).
    pub fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut o = Obj::new(v, &ROOT)?;
        let input_schema = o.required("inputSchema")?;
        let schema_at = ROOT.key("inputSchema");
        if !(input_schema.is_object() || input_schema.is_boolean()) {
            return Err(schema_at.err("expected a JSON Schema (object or boolean)"));
        }
        let output_schema = o.take("outputSchema");
        if output_schema
            .as_ref()
            .is_some_and(|s| !(s.is_object() || s.is_boolean()))
        {
            return Err(ROOT
                .key("outputSchema")
                .err("expected a JSON Schema (object or boolean)"));
        }
        let summary = parse_summary(o, &ROOT)?;
        Ok(ToolManifest {
            summary,
            input_schema,
            output_schema,
        })
    }
}

impl<'de> Deserialize<'de> for ToolManifest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ToolManifest::from_value(Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

pub(crate) fn parse_summary_value(
    v: Value,
    at: &At<'_>,
) -> Result<ToolManifestSummary, DecodeError> {
    parse_summary(Obj::new(v, at)?, at)
}

fn parse_summary(mut o: Obj<'_>, at: &At<'_>) -> Result<ToolManifestSummary, DecodeError> {
    let name = o.string("name")?;
    if !is_valid_tool_name(&name) {
        return Err(at
            .key("name")
            .err("tool name must match ^[A-Za-z0-9_.-]{1,128}$"));
    }
    let llm_name = o.string("llmName")?;
    if !is_valid_llm_name(&llm_name) {
        return Err(at
            .key("llmName")
            .err("llmName must match ^[a-zA-Z0-9_-]{1,64}$"));
    }
    let title = o.opt_string("title")?;
    let description = o.string("description")?;
    let hints_at = at.key("hints");
    let hints = parse_hints(o.required("hints")?, &hints_at)?;
    let mode = match o.take("mode") {
        None => None,
        Some(v) => match into_string(v, &at.key("mode"))?.as_str() {
            "stepwise" => Some(Mode::Stepwise),
            other => return Err(at.key("mode").err(format!("unknown mode {other:?}"))),
        },
    };
    Ok(ToolManifestSummary {
        name,
        llm_name,
        title,
        description,
        hints,
        mode,
        extra: o.rest(),
        digest: crate::pin::Memo::default(),
    })
}

fn parse_hints(v: Value, at: &At<'_>) -> Result<Hints, DecodeError> {
    let mut o = Obj::new(v, at)?;
    Ok(Hints {
        read_only: o.opt_bool("readOnly")?,
        consequential: o.opt_bool("consequential")?,
        destructive: o.opt_bool("destructive")?,
        untrusted_content: o.opt_bool("untrustedContent")?,
        extra: o.rest(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_follow_the_seed_patterns() {
        assert!(is_valid_tool_name("signup.fill"));
        assert!(is_valid_tool_name(&"a".repeat(128)));
        assert!(!is_valid_tool_name(&"a".repeat(129)));
        assert!(!is_valid_tool_name(""));
        assert!(!is_valid_tool_name("sign up"));
        assert!(!is_valid_tool_name("é"));
        assert!(is_valid_llm_name("signup__fill"));
        assert!(!is_valid_llm_name("signup.fill"));
        assert!(!is_valid_llm_name(&"a".repeat(65)));
    }

    #[test]
    fn entries_and_hints_keep_unknown_properties() {
        let v = json!({"name": "a.b", "llmName": "a__b", "description": "d",
            "hints": {"readOnly": true, "future": "x"}, "icon": "star"});
        let s = ToolManifestSummary::from_value(v.clone()).unwrap();
        assert_eq!(s.extra.get("icon"), Some(&json!("star")));
        assert_eq!(s.hints.extra.get("future"), Some(&json!("x")));
        assert_eq!(serde_json::to_value(&s).unwrap(), v);
    }

    #[test]
    fn full_manifest_needs_an_input_schema() {
        let base = json!({"name": "a", "llmName": "a", "description": "d", "hints": {}});
        assert!(ToolManifest::from_value(base.clone()).is_err());
        let mut with = base.clone();
        with["inputSchema"] = json!({"type": "object"});
        let m = ToolManifest::from_value(with.clone()).unwrap();
        assert_eq!(m.summary.name, "a");
        assert!(m.summary.extra.is_empty());
        assert_eq!(serde_json::to_value(&m).unwrap(), with);
        with["inputSchema"] = json!("x");
        assert!(ToolManifest::from_value(with).is_err());
    }

    #[test]
    fn hint_values_must_be_booleans() {
        let v = json!({"name": "a", "llmName": "a", "description": "d", "hints": {"readOnly": 1}});
        assert_eq!(
            ToolManifestSummary::from_value(v).unwrap_err().pointer(),
            Some("/hints/readOnly")
        );
    }
}
