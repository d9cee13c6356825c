//! Fuzzes inbound decoding in both directions: it must never panic, a refusal must name a
//! reason, and an accepted message must serialize back into a message that decodes the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolmark_proto::{Direction, Limits, Message, decode};

fuzz_target!(|data: &[u8]| {
    let limits = Limits::with_max_bytes(64 * 1024);
    for direction in [Direction::ToAgent, Direction::ToPage] {
        match decode(data, direction, &limits) {
            Err(e) => {
                let _ = e.reason().as_str();
            }
            Ok(message) => {
                let frame = match &message {
                    Message::ToAgent(m) => m.to_json(),
                    Message::ToPage(m) => m.to_json(),
                };
                let again = decode(frame.as_bytes(), direction, &Limits::with_max_bytes(usize::MAX))
                    .expect("a re-serialized message decodes");
                assert_eq!(again, message);
            }
        }
    }
});
