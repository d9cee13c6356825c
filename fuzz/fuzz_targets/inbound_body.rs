//! Fuzzes the body of `POST …/inbound` (a page message an app forwards for an Echo page): the
//! decoder under a tenant's limit never panics, and every refusal becomes a 4xx problem with a
//! listed code, a reason for the metrics and, when it points into the body, a JSON pointer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolmark_gateway::api::inbound::problem;
use toolmark_gateway::page::frames::Refused;
use toolmark_gateway::http::problem::CODES;
use toolmark_proto::{Limits, decode_to_agent};

fuzz_target!(|data: &[u8]| {
    for limit in [1024, 64 * 1024] {
        match decode_to_agent(data, &Limits::with_max_bytes(limit)) {
            Ok(message) => assert!(!message.client_id().is_empty()),
            Err(e) => {
                let p = problem(Refused::Decode(e));
                assert!(p.status.is_client_error(), "{p:?}");
                assert!(CODES.iter().any(|(c, _)| *c == p.code), "{p:?}");
                assert!(p.reason.is_some(), "{p:?}");
                if let Some(pointer) = &p.pointer {
                    assert!(pointer.is_empty() || pointer.starts_with('/'), "{p:?}");
                }
            }
        }
    }
});
