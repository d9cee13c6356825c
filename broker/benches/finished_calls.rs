//! What the memory broker keeps per finished call, counted by the allocator: CALLS calls
//! (default 40,000) placed and answered `ok` through one `MemoryBroker`, as the load generator's
//! echo tool answers them, swept (as the gateway does each second) every 2,000 calls.
//! Prints the heap bytes still allocated per call (the table's share and each call's own),
//! which the allocator's chunk headers and the table's free slots come on top of in RSS
//! (`make bench`'s `finished-calls` stage reads that). Run with
//! `cargo bench -p toolmark-broker --bench finished_calls`.

use std::alloc::System;
use std::sync::Arc;

use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use toolmark_broker::memory::MemoryBroker;
use toolmark_broker::prelude::*;
use toolmark_broker::{CallBinding, CallKind, CallerRef, ConvKey, PageIdentity, PageSink, now_ms};
use toolmark_proto::{AgentMessage, Call, ToolResult};

#[global_allocator]
static ALLOC: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

struct Nowhere;
impl PageSink for Nowhere {
    fn deliver(&self, _: &ConvKey, _: &str, _: Arc<str>) {}
}

#[allow(clippy::print_stdout)]
fn main() {
    let calls: u32 = std::env::var("CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("a runtime: {e}"));
    let broker = MemoryBroker::new("node-1", Arc::new(Nowhere));
    // 1,000 conversations, one page each, as the load generator's `calls` scenario.
    let pages: Vec<PageIdentity> = (0..1000)
        .map(|i| PageIdentity {
            conv: ConvKey::new(
                "bench",
                &format!("user-{i}"),
                &uuid::Uuid::new_v4().to_string(),
            ),
            client_id: uuid::Uuid::new_v4().to_string(),
        })
        .collect();
    let region = Region::new(ALLOC);
    rt.block_on(async {
        for i in 0..calls {
            let page = &pages[i as usize % pages.len()];
            let id = uuid::Uuid::new_v4().to_string();
            let input = json!({"n": i});
            let binding = CallBinding {
                id: id.clone(),
                conv: page.conv.clone(),
                client_id: page.client_id.clone(),
                tool: "echo".into(),
                kind: CallKind::Call,
                deadline_ms: now_ms() + 30_000,
                node: "node-1".into(),
                untrusted: false,
                respond_async: false,
                caller: Some(CallerRef::ApiKey {
                    id: "key_01".into(),
                }),
            };
            let frame = AgentMessage::Call(Call {
                client_id: page.client_id.clone(),
                id: id.clone(),
                rev: None,
                tool: "echo".into(),
                input: input.clone(),
            });
            let waiter = broker
                .send_call(binding, frame)
                .await
                .unwrap_or_else(|e| panic!("placed: {e}"));
            let result = ToolResult::Ok { data: Some(input) };
            broker
                .submit_result(page, &id, &result)
                .await
                .unwrap_or_else(|e| panic!("answered: {e:?}"));
            drop(waiter.await);
            // The gateway sweeps every second: at 2,000 calls a second, every 2,000 calls.
            if i % 2000 == 1999 {
                broker.sweep();
            }
        }
    });
    broker.sweep();
    let stats = region.change();
    // A reallocation counts its growth as allocated and its shrinking as deallocated.
    let held = stats.bytes_allocated as i64 - stats.bytes_deallocated as i64;
    let blocks = stats.allocations as i64 - stats.deallocations as i64;
    println!(
        "finished calls: {calls} held {}; {:.0} B of heap per call in {:.2} blocks per call",
        broker.calls_held(),
        held as f64 / f64::from(calls),
        blocks as f64 / f64::from(calls),
    );
}
