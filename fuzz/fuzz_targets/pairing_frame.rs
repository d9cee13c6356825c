//! Fuzzes the first frame a page sends to `toolmark-mcp`'s pairing server: the parser never
//! panics, refuses anything over 1 KiB, and accepts only an object of exactly `type` and `code`
//! (pair) or `token` (resume), whose value it returns unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolmark_mcp::close::MAX_FIRST_FRAME_BYTES;
use toolmark_mcp::handshake::{PairingFrame, parse_first_frame};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(frame) = parse_first_frame(text) else {
        return;
    };
    assert!(text.len() <= MAX_FIRST_FRAME_BYTES);
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text) else {
        panic!("accepted a frame that is not an object: {text:?}");
    };
    assert_eq!(map.len(), 2, "{text:?}");
    match frame {
        PairingFrame::Pair(code) => {
            assert_eq!(map["type"], "pair");
            assert_eq!(map["code"], code.as_str());
        }
        PairingFrame::Resume(token) => {
            assert_eq!(map["type"], "resume");
            assert_eq!(map["token"], token.as_str());
        }
    }
});
