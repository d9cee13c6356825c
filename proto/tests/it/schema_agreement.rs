//! The shipped JSON Schemas (checked with the `jsonschema` crate) and the Rust validator agree
//! on the hand-written corpus and on property-generated messages near the valid shapes.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use toolmark_proto::{DecodeError, Direction, Limits, Message, decode_to_agent, schema, validate};

use crate::corpus::cases;

fn validator(direction: Direction) -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(schema::for_direction(direction)).unwrap();
    jsonschema::validator_for(&schema).expect("shipped schema compiles")
}

fn schema_ids(direction: Direction) -> String {
    let schema: Value = serde_json::from_str(schema::for_direction(direction)).unwrap();
    schema["$id"].as_str().unwrap().to_owned()
}

#[test]
fn schemas_have_their_ids_and_draft() {
    assert_eq!(schema_ids(Direction::ToAgent), schema::PAGE_TO_AGENT_ID);
    assert_eq!(schema_ids(Direction::ToPage), schema::AGENT_TO_PAGE_ID);
    for d in [Direction::ToAgent, Direction::ToPage] {
        let s: Value = serde_json::from_str(schema::for_direction(d)).unwrap();
        assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
    }
}

#[test]
fn schemas_and_validator_agree_on_the_corpus() {
    let to_agent = validator(Direction::ToAgent);
    let to_page = validator(Direction::ToPage);
    for case in cases() {
        let v = match case.direction {
            Direction::ToAgent => &to_agent,
            Direction::ToPage => &to_page,
        };
        assert_eq!(
            v.is_valid(&case.message),
            case.valid,
            "schema disagrees on {}",
            case.name
        );
        let rust = validate(case.message.clone(), case.direction).is_ok();
        assert_eq!(rust, case.valid, "validator disagrees on {}", case.name);
    }
}

// ---- generators: valid shapes, then random damage ----

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        "[a-z]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn id() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => "[a-z0-9-]{1,40}".prop_map(Value::String),
        1 => Just(json!("")),
        1 => Just(json!("x".repeat(129))),
        1 => any::<i32>().prop_map(|n| json!(n)),
    ]
}

fn rev() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => (0u64..1000).prop_map(|n| json!(n)),
        1 => Just(json!(-1)),
        1 => Just(json!(2.5)),
        1 => Just(json!(3.0)),
        1 => Just(json!(9_007_199_254_740_992_u64)),
        1 => Just(json!("7")),
    ]
}

fn tool_name() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => "[A-Za-z0-9_.-]{1,20}".prop_map(Value::String),
        1 => "[a-z]{1,5} [a-z]{1,5}".prop_map(Value::String),
        1 => Just(json!("")),
        1 => Just(json!("a".repeat(129))),
    ]
}

fn hints() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("readOnly"),
        Just("consequential"),
        Just("destructive"),
        Just("untrustedContent"),
        Just("future")
    ];
    let val = prop_oneof![4 => any::<bool>().prop_map(Value::Bool), 1 => Just(json!("yes"))];
    prop::collection::btree_map(key, val, 0..4)
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
}

fn entry() -> impl Strategy<Value = Value> {
    (
        tool_name(),
        prop_oneof![6 => "[a-zA-Z0-9_-]{1,20}".prop_map(Value::String), 1 => Just(json!("a.b"))],
        prop::option::of(
            prop_oneof![4 => "[a-z ]{0,10}".prop_map(Value::String), 1 => Just(json!(1))],
        ),
        "[a-z ]{0,20}",
        hints(),
        prop::option::of(prop_oneof![Just(json!("stepwise")), Just(json!("other"))]),
        prop::option::of(any_json()),
    )
        .prop_map(|(name, llm, title, description, hints, mode, extra)| {
            let mut m = Map::new();
            m.insert("name".into(), name);
            m.insert("llmName".into(), llm);
            if let Some(t) = title {
                m.insert("title".into(), t);
            }
            m.insert("description".into(), Value::String(description));
            m.insert("hints".into(), hints);
            if let Some(mode) = mode {
                m.insert("mode".into(), mode);
            }
            if let Some(x) = extra {
                m.insert("futureProp".into(), x);
            }
            Value::Object(m)
        })
}

fn change() -> impl Strategy<Value = Value> {
    (
        prop::option::of("[a-z.]{1,8}"),
        prop::option::of(any_json()),
        prop::option::of(any_json()),
        any::<bool>(),
    )
        .prop_map(|(path, before, after, extra)| {
            let mut m = Map::new();
            if let Some(p) = path {
                m.insert("path".into(), Value::String(p));
            }
            if let Some(b) = before {
                m.insert("before".into(), b);
            }
            if let Some(a) = after {
                m.insert("after".into(), a);
            }
            if extra {
                m.insert("note".into(), json!(1));
            }
            Value::Object(m)
        })
}

fn tool_result() -> impl Strategy<Value = Value> {
    let code = prop_oneof![
        Just("unknown_tool"),
        Just("stale"),
        Just("not_allowed"),
        Just("busy"),
        Just("undo_unavailable"),
        Just("confirmation_expired"),
        Just("nope")
    ];
    prop_oneof![
        prop::option::of(any_json()).prop_map(|d| match d {
            Some(d) => json!({"status": "ok", "data": d}),
            None => json!({"status": "ok"}),
        }),
        prop::collection::vec(("[a-z]{0,5}", prop_oneof![3 => "[a-z]{0,5}".prop_map(Value::String), 1 => Just(json!(2))]), 0..3)
            .prop_map(|issues| json!({"status": "invalid", "issues":
                issues.into_iter().map(|(p, m)| json!({"path": p, "message": m})).collect::<Vec<_>>()})),
        (code, prop::option::of(rev())).prop_map(|(code, rev)| {
            let mut v = json!({"status": "refused", "code": code, "message": "m"});
            if let Some(r) = rev {
                v["rev"] = r;
            }
            v
        }),
        (id(), prop::option::of(prop::collection::vec(change(), 0..3))).prop_map(|(cid, changes)| {
            let mut v = json!({"status": "needs_confirmation", "confirmId": cid, "summary": "s"});
            if let Some(c) = changes {
                v["changes"] = Value::Array(c);
            }
            v
        }),
        prop_oneof![Just("operator"), Just("signal"), Just("policy"), Just("human")]
            .prop_map(|by| json!({"status": "cancelled", "by": by})),
        Just(json!({"status": "error", "message": "Tool failed"})),
        Just(json!({"status": "pending"})),
    ]
}

fn message() -> impl Strategy<Value = Value> {
    let kind = prop_oneof![
        Just("manifest"),
        Just("changed"),
        Just("result"),
        Just("confirmed"),
        Just("call"),
        Just("describe"),
        Just("cancel"),
        Just("other")
    ];
    (
        kind,
        id(),
        id(),
        rev(),
        prop::collection::vec(entry(), 0..3),
        tool_result(),
        tool_name(),
        any_json(),
        any::<bool>(),
    )
        .prop_map(
            |(kind, client_id, rid, rev, tools, result, tool, input, flag)| {
                let mut m = Map::new();
                m.insert("protocol".into(), json!(1));
                m.insert("type".into(), json!(kind));
                m.insert("clientId".into(), client_id);
                match kind {
                    "manifest" => {
                        m.insert("rev".into(), rev);
                        m.insert("tools".into(), Value::Array(tools));
                    }
                    "changed" => {
                        m.insert("rev".into(), rev);
                    }
                    "result" => {
                        m.insert("id".into(), rid);
                        m.insert("result".into(), result);
                    }
                    "confirmed" => {
                        m.insert("confirmId".into(), rid);
                        m.insert("result".into(), result);
                    }
                    "call" => {
                        m.insert("id".into(), rid);
                        m.insert("tool".into(), tool);
                        m.insert("input".into(), input);
                        if flag {
                            m.insert("rev".into(), rev);
                        }
                    }
                    "describe" | "cancel" => {
                        m.insert("id".into(), rid);
                        if kind == "describe" {
                            m.insert("tool".into(), tool);
                        }
                    }
                    _ => {}
                }
                Value::Object(m)
            },
        )
}

/// Damage applied to an otherwise generated message: none, drop a key, add a key, or change
/// `protocol`.
fn damaged() -> impl Strategy<Value = Value> {
    (message(), 0u8..6, any::<prop::sample::Index>()).prop_map(|(mut v, how, pick)| {
        let obj = v.as_object_mut().unwrap();
        match how {
            1 => {
                let keys: Vec<String> = obj.keys().cloned().collect();
                obj.remove(&keys[pick.index(keys.len())]);
            }
            2 => {
                obj.insert("unexpected".into(), json!(true));
            }
            3 => {
                obj.insert("protocol".into(), json!(2));
            }
            _ => {}
        }
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn schemas_and_validator_agree_on_generated_messages(v in damaged()) {
        for direction in [Direction::ToAgent, Direction::ToPage] {
            let by_schema = validator(direction).is_valid(&v);
            let by_rust = validate(v.clone(), direction);
            prop_assert_eq!(by_schema, by_rust.is_ok(), "{:?} on {}: {:?}", direction, v, by_rust);
        }
    }

    /// A page's frame gets the same answer from `decode_to_agent`, which reads a `result`
    /// straight into its fields, as from `validate` over its JSON value: the same message, or
    /// the same refusal with the same pointer.
    #[test]
    fn a_result_frame_reads_the_same_either_way(v in damaged()) {
        let raw = serde_json::to_vec(&v).unwrap();
        let direct = decode_to_agent(&raw, &Limits::default());
        let by_value = match validate(v.clone(), Direction::ToAgent) {
            Ok(Message::ToAgent(m)) => Ok(m),
            Ok(Message::ToPage(m)) => Err(DecodeError::WrongDirection { kind: m.kind().into() }),
            Err(e) => Err(e),
        };
        prop_assert_eq!(direct, by_value, "{}", v);
    }
}
