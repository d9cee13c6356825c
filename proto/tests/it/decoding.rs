//! Decoding gives typed messages, says why it refused, and serializes back to the same JSON.

use serde_json::{Value, json};
use toolmark_proto::{
    AgentMessage, Call, DecodeError, Direction, Limits, Message, PageMessage, RejectReason,
    ToolResult, decode, decode_to_agent, validate,
};

use crate::corpus::cases;

#[test]
fn corpus_decodes_as_labelled_and_valid_messages_round_trip() {
    for case in cases() {
        let raw = serde_json::to_vec(&case.message).unwrap();
        let got = decode(&raw, case.direction, &Limits::default());
        assert_eq!(got.is_ok(), case.valid, "{}: {:?}", case.name, got);
        if let Ok(message) = got {
            let back = match &message {
                Message::ToAgent(m) => serde_json::to_value(m).unwrap(),
                Message::ToPage(m) => serde_json::to_value(m).unwrap(),
            };
            // Serialization writes protocol as the integer 1 and revs as integers.
            let mut expected = case.message.clone();
            expected["protocol"] = json!(1);
            if expected.get("rev").is_some_and(Value::is_f64) {
                expected["rev"] = json!(expected["rev"].as_f64().unwrap() as u64);
            }
            assert_eq!(back, expected, "{} did not round trip", case.name);
        }
    }
}

#[test]
fn refusals_say_why_with_a_pointer() {
    let check = |v: Value, dir: Direction| validate(v, dir).unwrap_err();
    let e = check(
        json!({"protocol": 1, "type": "changed", "clientId": "c", "rev": 1, "x": 1}),
        Direction::ToAgent,
    );
    assert_eq!(e.pointer(), Some("/x"));
    assert_eq!(e.reason(), RejectReason::Invalid);
    let e = check(
        json!({"protocol": 1, "type": "manifest", "clientId": "c", "rev": 1, "tools": [
            {"name": "a", "llmName": "a", "description": "d", "hints": {}},
            {"name": "b", "llmName": "b.c", "description": "d", "hints": {}}]}),
        Direction::ToAgent,
    );
    assert_eq!(e.pointer(), Some("/tools/1/llmName"));
    let e = check(
        json!({"protocol": 1, "type": "result", "clientId": "c", "id": "i",
        "result": {"status": "invalid", "issues": [{"path": "a", "message": 3}]}}),
        Direction::ToAgent,
    );
    assert_eq!(e.pointer(), Some("/result/issues/0/message"));
    assert!(e.to_string().contains("expected string"), "{e}");
    let e = check(
        json!({"protocol": 2, "type": "changed", "clientId": "c", "rev": 1}),
        Direction::ToAgent,
    );
    assert_eq!(e, DecodeError::UnsupportedProtocol);
    let e = check(
        json!({"protocol": 1, "type": "call", "clientId": "c", "id": "i", "tool": "t", "input": {}}),
        Direction::ToAgent,
    );
    assert_eq!(e.reason(), RejectReason::WrongDirection);
    let e = decode(b"not json", Direction::ToAgent, &Limits::default()).unwrap_err();
    assert_eq!(e.reason(), RejectReason::Malformed);
    let e = decode(&[0xff, 0xfe], Direction::ToAgent, &Limits::default()).unwrap_err();
    assert_eq!(e.reason(), RejectReason::Malformed);
}

#[test]
fn typed_fields_carry_the_message() {
    let raw = br#"{"protocol":1,"type":"result","clientId":"p1","id":"call-9","result":{"status":"needs_confirmation","confirmId":"k9","summary":"Submit"}}"#;
    let PageMessage::Result(r) = decode_to_agent(raw, &Limits::default()).unwrap() else {
        panic!("not a result")
    };
    assert_eq!((r.client_id.as_str(), r.id.as_str()), ("p1", "call-9"));
    assert_eq!(r.result.confirm_id(), Some("k9"));
    assert_eq!(r.result.status(), "needs_confirmation");

    let call = AgentMessage::Call(Call {
        client_id: "p1".into(),
        id: "call-9".into(),
        rev: None,
        tool: "todo.add".into(),
        input: json!({"text": "milk"}),
    });
    let frame = call.to_json();
    let v: Value = serde_json::from_str(&frame).unwrap();
    assert_eq!(
        v,
        json!({"protocol": 1, "type": "call", "clientId": "p1", "id": "call-9", "tool": "todo.add", "input": {"text": "milk"}})
    );
    let back: AgentMessage = serde_json::from_str(&frame).unwrap();
    assert_eq!(back, call);
    // serde's Deserialize goes through the same strict validator.
    assert!(
        serde_json::from_str::<AgentMessage>(
            r#"{"protocol":1,"type":"cancel","clientId":"p","id":"i","x":1}"#
        )
        .is_err()
    );
    assert!(serde_json::from_str::<ToolResult>(r#"{"status":"ok","data":1,"more":2}"#).is_err());
}

/// Found by the fuzzer: numbers with many digits must survive decode → encode → decode
/// unchanged, so that a page's data reaches the agent exactly as sent.
#[test]
fn long_numbers_round_trip_exactly() {
    let digits = format!("{}1", "7".repeat(100));
    let raw = format!(
        r#"{{"protocol":1,"type":"result","clientId":"c","id":"i","result":{{"status":"ok","data":{digits}}}}}"#
    );
    let first = decode_to_agent(raw.as_bytes(), &Limits::default()).unwrap();
    let again = decode_to_agent(first.to_json().as_bytes(), &Limits::default()).unwrap();
    assert_eq!(first, again);
}

/// What the proptest's generated values cannot hold (a key twice, escapes, `1.0`), written as
/// text: `decode_to_agent` answers as `validate` over the parsed value does.
#[test]
fn a_result_frame_written_oddly_reads_as_its_value_does() {
    let long = "x".repeat(129);
    let frames = [
        r#"{"protocol":1,"type":"result","clientId":"c","id":"i","result":{"status":"ok"}}"#.to_owned(),
        r#"{"protocol":1.0,"type":"result","clientId":"c\u00e9\n","id":"\"i\"","result":{"status":"ok","data":null}}"#.to_owned(),
        r#"{"id":"i","result":{"status":"ok"},"clientId":"c","type":"result","protocol":1}"#.to_owned(),
        r#"{"protocol":1,"type":"result","clientId":"a","clientId":"b","id":"i","result":{"status":"ok"}}"#.to_owned(),
        r#"{"protocol":1,"type":"result","clientId":"c","id":"i","result":{"status":"ok"},"x":1}"#.to_owned(),
        r#"{"protocol":2,"type":"result","clientId":"c","id":"i","result":{"status":"ok"}}"#.to_owned(),
        r#"{"protocol":1,"type":"result","clientId":"","id":"i","result":{"status":"ok"}}"#.to_owned(),
        format!(r#"{{"protocol":1,"type":"result","clientId":"c","id":"{long}","result":{{"status":"ok"}}}}"#),
        r#"{"protocol":1,"type":"result","clientId":"c","id":"i","result":{"status":"nope"}}"#.to_owned(),
        r#"{"protocol":1,"type":"result","clientId":"c","id":7,"result":{"status":"ok"}}"#.to_owned(),
        r#"{"protocol":1,"type":"changed","clientId":"c","rev":3}"#.to_owned(),
        r#"{"protocol":1,"type":"call","clientId":"c","id":"i","tool":"t","input":{}}"#.to_owned(),
    ];
    for raw in &frames {
        let direct = decode_to_agent(raw.as_bytes(), &Limits::default());
        let value: Value = serde_json::from_str(raw).unwrap();
        let by_value = match validate(value, Direction::ToAgent) {
            Ok(Message::ToAgent(m)) => Ok(m),
            Ok(Message::ToPage(m)) => Err(DecodeError::WrongDirection {
                kind: m.kind().into(),
            }),
            Err(e) => Err(e),
        };
        assert_eq!(direct, by_value, "{raw}");
    }
    // The first three are results, read whole.
    for raw in &frames[..3] {
        assert!(matches!(
            decode_to_agent(raw.as_bytes(), &Limits::default()),
            Ok(PageMessage::Result(_))
        ));
    }
}
