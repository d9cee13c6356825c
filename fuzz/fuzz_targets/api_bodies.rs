//! Fuzzes the agent API's JSON bodies (calls, describes, tool uses, tokens) through the strict
//! parser the routes use: it never panics, and every refusal is a 4xx problem with a listed
//! code and a JSON pointer (empty for the whole body).
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolmark_gateway::api::{CallBody, DescribeBody, InvokeBody, TokenRequest};
use toolmark_gateway::http::parse_json;
use toolmark_gateway::http::problem::{CODES, Problem};

fn check<T>(result: Result<T, Problem>) {
    if let Err(p) = result {
        assert!(p.status.is_client_error(), "{p:?}");
        assert!(CODES.iter().any(|(c, _)| *c == p.code), "{p:?}");
        let pointer = p.pointer.as_deref().unwrap_or_default();
        assert!(pointer.is_empty() || pointer.starts_with('/'), "{p:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let limit = 64 * 1024;
    check(parse_json::<CallBody>(data, limit));
    check(parse_json::<DescribeBody>(data, limit));
    check(parse_json::<InvokeBody>(data, limit));
    check(parse_json::<TokenRequest>(data, limit));
});
