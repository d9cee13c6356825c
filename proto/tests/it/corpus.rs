//! Hand-written messages, valid and invalid, one or more per rule of the seed. Used by the
//! decoding tests and by the schema agreement test.

use serde_json::{Value, json};
use toolmark_proto::Direction::{self, ToAgent, ToPage};

pub struct Case {
    pub name: &'static str,
    pub direction: Direction,
    pub message: Value,
    pub valid: bool,
}

fn case(name: &'static str, direction: Direction, message: Value, valid: bool) -> Case {
    Case {
        name,
        direction,
        message,
        valid,
    }
}

const CID: &str = "5b0c1f4e-8a51-4c0e-9d6f-2f3a8b7c6d5e";

fn entry() -> Value {
    json!({"name": "signup.fill", "llmName": "signup__fill", "title": "Fill", "description": "Fill the sign-up form", "hints": {}})
}

fn result(r: Value) -> Value {
    json!({"protocol": 1, "type": "result", "clientId": CID, "id": "call-1", "result": r})
}

fn with(mut v: Value, key: &str, val: Value) -> Value {
    v[key] = val;
    v
}

fn without(mut v: Value, key: &str) -> Value {
    v.as_object_mut().unwrap().remove(key);
    v
}

pub fn cases() -> Vec<Case> {
    let manifest =
        json!({"protocol": 1, "type": "manifest", "clientId": CID, "rev": 7, "tools": [entry()]});
    let changed = json!({"protocol": 1, "type": "changed", "clientId": CID, "rev": 8});
    let confirmed = json!({"protocol": 1, "type": "confirmed", "clientId": CID, "confirmId": "k1", "result": {"status": "ok"}});
    let call = json!({"protocol": 1, "type": "call", "clientId": CID, "id": "call-1", "rev": 7, "tool": "signup.fill", "input": {}});
    let describe = json!({"protocol": 1, "type": "describe", "clientId": CID, "id": "d-1", "tool": "signup.fill"});
    let cancel = json!({"protocol": 1, "type": "cancel", "clientId": CID, "id": "call-1"});
    let mut extra_entry = entry();
    extra_entry["icon"] = json!("star");
    extra_entry["hints"] = json!({"readOnly": true, "futureHint": {"x": 1}});
    extra_entry["mode"] = json!("stepwise");

    vec![
        // Valid messages of each type.
        case("manifest", ToAgent, manifest.clone(), true),
        case(
            "manifest, empty tools",
            ToAgent,
            with(manifest.clone(), "tools", json!([])),
            true,
        ),
        case(
            "manifest, entry keeps unknown props",
            ToAgent,
            with(manifest.clone(), "tools", json!([extra_entry])),
            true,
        ),
        case("changed", ToAgent, changed.clone(), true),
        case(
            "changed, rev 0",
            ToAgent,
            with(changed.clone(), "rev", json!(0)),
            true,
        ),
        case(
            "result ok no data",
            ToAgent,
            result(json!({"status": "ok"})),
            true,
        ),
        case(
            "result ok null data",
            ToAgent,
            result(json!({"status": "ok", "data": null})),
            true,
        ),
        case(
            "result ok any data",
            ToAgent,
            result(json!({"status": "ok", "data": [1, "a", {"b": false}]})),
            true,
        ),
        case(
            "result invalid",
            ToAgent,
            result(
                json!({"status": "invalid", "issues": [{"path": "email", "message": "Invalid email"}]}),
            ),
            true,
        ),
        case(
            "result refused",
            ToAgent,
            result(json!({"status": "refused", "code": "not_allowed", "message": "no"})),
            true,
        ),
        case(
            "result refused unknown_tool rev",
            ToAgent,
            result(json!({"status": "refused", "code": "unknown_tool", "message": "m", "rev": 8})),
            true,
        ),
        case(
            "result refused stale rev",
            ToAgent,
            result(json!({"status": "refused", "code": "stale", "message": "m", "rev": 8})),
            true,
        ),
        case(
            "result refused stale no rev",
            ToAgent,
            result(
                json!({"status": "refused", "code": "stale", "message": "Form changed since confirmation was requested"}),
            ),
            true,
        ),
        case(
            "result needs_confirmation",
            ToAgent,
            result(
                json!({"status": "needs_confirmation", "confirmId": "k1", "summary": "Submit", "changes": [{"path": "email", "after": "a@b.c"}, {"path": "password", "before": "[redacted]", "after": "[redacted]"}]}),
            ),
            true,
        ),
        case(
            "result needs_confirmation no changes",
            ToAgent,
            result(json!({"status": "needs_confirmation", "confirmId": "k1", "summary": "Submit"})),
            true,
        ),
        case(
            "result cancelled",
            ToAgent,
            result(json!({"status": "cancelled", "by": "signal"})),
            true,
        ),
        case(
            "result error",
            ToAgent,
            result(json!({"status": "error", "message": "Tool failed"})),
            true,
        ),
        case("confirmed", ToAgent, confirmed.clone(), true),
        case(
            "confirmed expired",
            ToAgent,
            with(
                confirmed.clone(),
                "result",
                json!({"status": "refused", "code": "confirmation_expired", "message": "The confirmation expired or was already used"}),
            ),
            true,
        ),
        case("call", ToPage, call.clone(), true),
        case(
            "call without rev",
            ToPage,
            without(call.clone(), "rev"),
            true,
        ),
        case(
            "call null input",
            ToPage,
            with(call.clone(), "input", Value::Null),
            true,
        ),
        case("describe", ToPage, describe.clone(), true),
        case("cancel", ToPage, cancel.clone(), true),
        case(
            "protocol 1.0 equals 1",
            ToAgent,
            with(changed.clone(), "protocol", json!(1.0)),
            true,
        ),
        case(
            "rev 7.0 is an integer",
            ToAgent,
            with(changed.clone(), "rev", json!(7.0)),
            true,
        ),
        case(
            "128-char clientId",
            ToAgent,
            with(changed.clone(), "clientId", json!("c".repeat(128))),
            true,
        ),
        case(
            "128-char non-ascii clientId",
            ToAgent,
            with(changed.clone(), "clientId", json!("é".repeat(128))),
            true,
        ),
        // Top level is strict.
        case(
            "unknown top-level property",
            ToAgent,
            with(changed.clone(), "extra", json!(1)),
            false,
        ),
        case(
            "unknown call property",
            ToPage,
            with(call.clone(), "caller", json!("inapp")),
            false,
        ),
        case(
            "describe with input",
            ToPage,
            with(describe.clone(), "input", json!({})),
            false,
        ),
        // protocol must be 1.
        case(
            "protocol 2",
            ToAgent,
            with(changed.clone(), "protocol", json!(2)),
            false,
        ),
        case(
            "protocol \"1\"",
            ToAgent,
            with(changed.clone(), "protocol", json!("1")),
            false,
        ),
        case(
            "no protocol",
            ToAgent,
            without(changed.clone(), "protocol"),
            false,
        ),
        // Types and direction.
        case(
            "unknown type",
            ToAgent,
            with(changed.clone(), "type", json!("hello")),
            false,
        ),
        case("call sent by a page", ToAgent, call.clone(), false),
        case(
            "result sent to a page",
            ToPage,
            result(json!({"status": "ok"})),
            false,
        ),
        case("not an object", ToAgent, json!([changed.clone()]), false),
        case("a string", ToAgent, json!("manifest"), false),
        // Required fields and their types.
        case(
            "no clientId",
            ToAgent,
            without(changed.clone(), "clientId"),
            false,
        ),
        case(
            "empty clientId",
            ToAgent,
            with(changed.clone(), "clientId", json!("")),
            false,
        ),
        case(
            "129-char clientId",
            ToAgent,
            with(changed.clone(), "clientId", json!("c".repeat(129))),
            false,
        ),
        case(
            "numeric clientId",
            ToAgent,
            with(changed.clone(), "clientId", json!(5)),
            false,
        ),
        case(
            "negative rev",
            ToAgent,
            with(changed.clone(), "rev", json!(-1)),
            false,
        ),
        case(
            "fractional rev",
            ToAgent,
            with(changed.clone(), "rev", json!(1.5)),
            false,
        ),
        case(
            "rev 2^53",
            ToAgent,
            with(changed.clone(), "rev", json!(9_007_199_254_740_992_u64)),
            false,
        ),
        case(
            "string rev",
            ToAgent,
            with(changed.clone(), "rev", json!("7")),
            false,
        ),
        case(
            "manifest without tools",
            ToAgent,
            without(manifest.clone(), "tools"),
            false,
        ),
        case(
            "manifest tools not array",
            ToAgent,
            with(manifest.clone(), "tools", json!({})),
            false,
        ),
        case(
            "call without input",
            ToPage,
            without(call.clone(), "input"),
            false,
        ),
        case(
            "call without id",
            ToPage,
            without(call.clone(), "id"),
            false,
        ),
        case(
            "call empty id",
            ToPage,
            with(call.clone(), "id", json!("")),
            false,
        ),
        case(
            "call bad tool name",
            ToPage,
            with(call.clone(), "tool", json!("sign up")),
            false,
        ),
        case(
            "call 129-char tool name",
            ToPage,
            with(call.clone(), "tool", json!("a".repeat(129))),
            false,
        ),
        case(
            "call tool with newline",
            ToPage,
            with(call.clone(), "tool", json!("ab\n")),
            false,
        ),
        case(
            "cancel without id",
            ToPage,
            without(cancel.clone(), "id"),
            false,
        ),
        case(
            "confirmed without confirmId",
            ToAgent,
            without(confirmed.clone(), "confirmId"),
            false,
        ),
        case(
            "result without result",
            ToAgent,
            without(result(json!({"status": "ok"})), "result"),
            false,
        ),
        // Manifest entries.
        case(
            "entry bad name",
            ToAgent,
            with(
                manifest.clone(),
                "tools",
                json!([with(entry(), "name", json!("a b"))]),
            ),
            false,
        ),
        case(
            "entry dotted llmName",
            ToAgent,
            with(
                manifest.clone(),
                "tools",
                json!([with(entry(), "llmName", json!("signup.fill"))]),
            ),
            false,
        ),
        case(
            "entry 65-char llmName",
            ToAgent,
            with(
                manifest.clone(),
                "tools",
                json!([with(entry(), "llmName", json!("a".repeat(65)))]),
            ),
            false,
        ),
        case(
            "entry without hints",
            ToAgent,
            with(
                manifest.clone(),
                "tools",
                json!([without(entry(), "hints")]),
            ),
            false,
        ),
        case(
            "entry without description",
            ToAgent,
            with(
                manifest.clone(),
                "tools",
                json!([without(entry(), "description")]),
            ),
            false,
        ),
        case(
            "entry numeric title",
            ToAgent,
            with(
                manifest.clone(),
                "tools",
                json!([with(entry(), "title", json!(1))]),
            ),
            false,
        ),
        case(
            "entry non-boolean hint",
            ToAgent,
            with(
                manifest.clone(),
                "tools",
                json!([with(entry(), "hints", json!({"destructive": "yes"}))]),
            ),
            false,
        ),
        case(
            "entry unknown mode",
            ToAgent,
            with(
                manifest.clone(),
                "tools",
                json!([with(entry(), "mode", json!("wizard"))]),
            ),
            false,
        ),
        // Tool results are strict.
        case(
            "ok with extra",
            ToAgent,
            result(json!({"status": "ok", "extra": 1})),
            false,
        ),
        case(
            "unknown status",
            ToAgent,
            result(json!({"status": "timeout"})),
            false,
        ),
        case(
            "refused rev with not_allowed",
            ToAgent,
            result(json!({"status": "refused", "code": "not_allowed", "message": "m", "rev": 8})),
            false,
        ),
        case(
            "refused unknown code",
            ToAgent,
            result(json!({"status": "refused", "code": "forbidden", "message": "m"})),
            false,
        ),
        case(
            "refused no message",
            ToAgent,
            result(json!({"status": "refused", "code": "busy"})),
            false,
        ),
        case(
            "invalid without issues",
            ToAgent,
            result(json!({"status": "invalid"})),
            false,
        ),
        case(
            "issue without message",
            ToAgent,
            result(json!({"status": "invalid", "issues": [{"path": "a"}]})),
            false,
        ),
        case(
            "needs_confirmation empty confirmId",
            ToAgent,
            result(json!({"status": "needs_confirmation", "confirmId": "", "summary": "s"})),
            false,
        ),
        case(
            "needs_confirmation no summary",
            ToAgent,
            result(json!({"status": "needs_confirmation", "confirmId": "k"})),
            false,
        ),
        case(
            "change without path",
            ToAgent,
            result(
                json!({"status": "needs_confirmation", "confirmId": "k", "summary": "s", "changes": [{"after": 1}]}),
            ),
            false,
        ),
        case(
            "change with extra",
            ToAgent,
            result(
                json!({"status": "needs_confirmation", "confirmId": "k", "summary": "s", "changes": [{"path": "a", "note": 1}]}),
            ),
            false,
        ),
        case(
            "cancelled by human",
            ToAgent,
            result(json!({"status": "cancelled", "by": "human"})),
            false,
        ),
        case(
            "error without message",
            ToAgent,
            result(json!({"status": "error"})),
            false,
        ),
        case("result not an object", ToAgent, result(json!("ok")), false),
    ]
}
