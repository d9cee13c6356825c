//! Tool results (`result.result`, `confirmed.result`): plain JSON, never an exception.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::DecodeError;
use crate::codes::{CancelledBy, RefusedCode};
use crate::strict::{At, Obj, ROOT, into_string, present};

/// One problem of an `invalid` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Issue {
    /// Path of the offending input field, e.g. `email`.
    pub path: String,
    /// Human-readable problem.
    pub message: String,
}

/// One field changed by a tool, reported in `needs_confirmation`. An absent `before`/`after`
/// means "no value" (e.g. a field that was empty before a fill), which differs from `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldChange {
    /// Path of the field.
    pub path: String,
    /// Value before the change; `None` when there was none.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub before: Option<Value>,
    /// Value after the change; `None` when there is none.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub after: Option<Value>,
}

/// The outcome of one call or describe, or of a deferred confirmation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ToolResult {
    /// Success; `data` absent means "no value" (`Some(Value::Null)` is an explicit `null`).
    Ok {
        /// The tool's output.
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<Value>,
    },
    /// The input failed validation.
    Invalid {
        /// What was wrong.
        issues: Vec<Issue>,
    },
    /// The page refused to run the tool.
    Refused {
        /// Why.
        code: RefusedCode,
        /// Human-readable reason.
        message: String,
        /// The page's current revision; only with `unknown_tool` and `stale`.
        #[serde(skip_serializing_if = "Option::is_none")]
        rev: Option<u64>,
    },
    /// A human must approve in the page; the outcome follows as a `confirmed`.
    NeedsConfirmation {
        /// Single-use id of the pending confirmation, minted by the page.
        #[serde(rename = "confirmId")]
        confirm_id: String,
        /// What the human is asked to approve.
        summary: String,
        /// The fields the tool would change.
        #[serde(skip_serializing_if = "Option::is_none")]
        changes: Option<Vec<FieldChange>>,
    },
    /// The call was cancelled.
    Cancelled {
        /// Who cancelled it.
        by: CancelledBy,
    },
    /// The tool failed; the message is deliberately generic.
    Error {
        /// E.g. "Tool failed".
        message: String,
    },
}

impl ToolResult {
    /// Validates an untrusted tool result with the seed's strictness.
    pub fn from_value(v: Value) -> Result<Self, DecodeError> {
        parse_result(v, &ROOT)
    }

    /// The `status` string.
    pub fn status(&self) -> &'static str {
        match self {
            ToolResult::Ok { .. } => "ok",
            ToolResult::Invalid { .. } => "invalid",
            ToolResult::Refused { .. } => "refused",
            ToolResult::NeedsConfirmation { .. } => "needs_confirmation",
            ToolResult::Cancelled { .. } => "cancelled",
            ToolResult::Error { .. } => "error",
        }
    }

    /// The confirmId of a `needs_confirmation` result.
    pub fn confirm_id(&self) -> Option<&str> {
        match self {
            ToolResult::NeedsConfirmation { confirm_id, .. } => Some(confirm_id),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for ToolResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        ToolResult::from_value(v).map_err(serde::de::Error::custom)
    }
}

pub(crate) fn parse_result(v: Value, at: &At<'_>) -> Result<ToolResult, DecodeError> {
    let mut o = Obj::new(v, at)?;
    let status = o.string("status")?;
    let result = match status.as_str() {
        "ok" => ToolResult::Ok {
            data: o.take("data"),
        },
        "invalid" => {
            let key = at.key("issues");
            let issues = o
                .array("issues")?
                .into_iter()
                .enumerate()
                .map(|(i, item)| parse_issue(item, &key.index(i)))
                .collect::<Result<_, _>>()?;
            ToolResult::Invalid { issues }
        }
        "refused" => {
            let code_at = at.key("code");
            let code_str = o.string("code")?;
            let code: RefusedCode = code_str
                .parse()
                .map_err(|_| code_at.err(format!("unknown refused code {code_str:?}")))?;
            let message = o.string("message")?;
            let rev = o.opt_rev("rev")?;
            if rev.is_some() && !code.carries_rev() {
                return Err(at
                    .key("rev")
                    .err("rev is only allowed with unknown_tool and stale"));
            }
            ToolResult::Refused { code, message, rev }
        }
        "needs_confirmation" => {
            let confirm_id = o.id("confirmId")?;
            let summary = o.string("summary")?;
            let key = at.key("changes");
            let changes = o
                .opt_array("changes")?
                .map(|items| {
                    items
                        .into_iter()
                        .enumerate()
                        .map(|(i, item)| parse_change(item, &key.index(i)))
                        .collect::<Result<Vec<_>, _>>()
                })
                .transpose()?;
            ToolResult::NeedsConfirmation {
                confirm_id,
                summary,
                changes,
            }
        }
        "cancelled" => {
            let by_str = o.string("by")?;
            let by = by_str
                .parse()
                .map_err(|_| at.key("by").err(format!("unknown cancelled.by {by_str:?}")))?;
            ToolResult::Cancelled { by }
        }
        "error" => ToolResult::Error {
            message: o.string("message")?,
        },
        other => return Err(at.key("status").err(format!("unknown status {other:?}"))),
    };
    o.finish()?;
    Ok(result)
}

fn parse_issue(v: Value, at: &At<'_>) -> Result<Issue, DecodeError> {
    let mut o = Obj::new(v, at)?;
    let issue = Issue {
        path: o.string("path")?,
        message: o.string("message")?,
    };
    o.finish()?;
    Ok(issue)
}

fn parse_change(v: Value, at: &At<'_>) -> Result<FieldChange, DecodeError> {
    let mut o = Obj::new(v, at)?;
    let path = into_string(o.required("path")?, &at.key("path"))?;
    let change = FieldChange {
        path,
        before: o.take("before"),
        after: o.take("after"),
    };
    o.finish()?;
    Ok(change)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ok_keeps_absent_and_null_data_apart() {
        let absent = ToolResult::from_value(json!({"status": "ok"})).unwrap();
        let null = ToolResult::from_value(json!({"status": "ok", "data": null})).unwrap();
        assert_eq!(absent, ToolResult::Ok { data: None });
        assert_eq!(
            null,
            ToolResult::Ok {
                data: Some(Value::Null)
            }
        );
        assert_eq!(
            serde_json::to_value(&absent).unwrap(),
            json!({"status": "ok"})
        );
        assert_eq!(
            serde_json::to_value(&null).unwrap(),
            json!({"status": "ok", "data": null})
        );
    }

    #[test]
    fn field_change_absent_before_round_trips() {
        let v = json!({"status": "needs_confirmation", "confirmId": "c1", "summary": "Submit",
            "changes": [{"path": "email", "after": "a@b.c"}, {"path": "pw", "before": null, "after": "[redacted]"}]});
        let r = ToolResult::from_value(v.clone()).unwrap();
        let ToolResult::NeedsConfirmation {
            changes: Some(changes),
            ..
        } = &r
        else {
            panic!("{r:?}")
        };
        assert_eq!(changes[0].before, None);
        assert_eq!(changes[1].before, Some(Value::Null));
        assert_eq!(serde_json::to_value(&r).unwrap(), v);
        let again: ToolResult = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(again, r);
    }

    #[test]
    fn rev_only_with_unknown_tool_and_stale() {
        for code in ["unknown_tool", "stale"] {
            let v = json!({"status": "refused", "code": code, "message": "m", "rev": 8});
            assert!(ToolResult::from_value(v).is_ok(), "{code}");
        }
        let v = json!({"status": "refused", "code": "not_allowed", "message": "m", "rev": 8});
        let err = ToolResult::from_value(v).unwrap_err();
        assert_eq!(err.pointer(), Some("/rev"));
    }

    #[test]
    fn strict_results_refuse_unknown_properties_and_values() {
        let cases = [
            json!({"status": "ok", "extra": 1}),
            json!({"status": "timeout"}),
            json!({"status": "cancelled", "by": "human"}),
            json!({"status": "invalid", "issues": [{"path": "a"}]}),
            json!({"status": "invalid", "issues": [{"path": "a", "message": "m", "x": 1}]}),
            json!({"status": "needs_confirmation", "confirmId": "", "summary": "s"}),
            json!({"status": "needs_confirmation", "confirmId": "c", "summary": "s", "changes": [{"before": 1}]}),
            json!({"status": "error"}),
            json!({"status": "refused", "code": "nope", "message": "m"}),
            json!("ok"),
        ];
        for c in cases {
            assert!(ToolResult::from_value(c.clone()).is_err(), "accepted {c}");
        }
    }
}
