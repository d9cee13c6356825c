//! Fuzzes what a Pusher client sends on `/app/{key}`: the client event parser and the channel
//! name parser must never panic, and a channel accepted as a toolmark channel is exactly
//! `private-toolmark.{user}.{conversation}` with both ids valid.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolmark_gateway::pusher::protocol::{ClientEvent, toolmark_channel};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = ClientEvent::parse(text);
    for name in [text, text.trim()] {
        if let Some((user, conversation)) = toolmark_channel(name) {
            assert_eq!(format!("private-toolmark.{user}.{conversation}"), name);
            assert!(toolmark_gateway::ids::is_valid_id(user));
            assert!(toolmark_gateway::ids::is_valid_id(conversation));
        }
    }
});
