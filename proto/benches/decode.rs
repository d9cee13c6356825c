//! Decode + validate throughput of page frames: a small call result (the hot path of every
//! call) and a 64 KiB manifest (a large page re-publishing its tools); and what pinned tools add
//! to a manifest of 50 tools (each entry's digest, made once per manifest: RFC 8785 form and
//! SHA-256), beside decoding the same manifest alone.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use std::hint::black_box;
use toolmark_proto::{Limits, PageMessage, decode_to_agent};

fn small_result() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "protocol": 1, "type": "result", "clientId": "5b0c1f4e-8a51-4c0e-9d6f-2f3a8b7c6d5e",
        "id": "0d9c8e52-1f7b-4a8e-9a33-6f5f0f2b9a10",
        "result": {"status": "ok", "data": {"id": 3, "text": "buy milk", "count": 3}}
    }))
    .unwrap()
}

/// A manifest of realistic entries grown to at least 64 KiB.
fn manifest_64k() -> Vec<u8> {
    let mut tools = Vec::new();
    let mut i = 0;
    loop {
        tools.push(json!({
            "name": format!("orders.line{i}.edit"), "llmName": format!("orders__line{i}__edit"),
            "title": format!("Edit order line {i}"),
            "description": "Change the quantity or the product of one order line. Refuses when the order is already shipped.",
            "hints": {"consequential": i % 3 == 0, "readOnly": false}
        }));
        i += 1;
        let v = json!({"protocol": 1, "type": "manifest", "clientId": "5b0c1f4e-8a51-4c0e-9d6f-2f3a8b7c6d5e", "rev": 42, "tools": tools});
        let bytes = serde_json::to_vec(&v).unwrap();
        if bytes.len() >= 64 * 1024 {
            return bytes;
        }
    }
}

fn bench(c: &mut Criterion) {
    let limits = Limits::default();
    let mut group = c.benchmark_group("decode_to_agent");
    for (name, raw) in [
        ("small_result", small_result()),
        ("manifest_64k", manifest_64k()),
    ] {
        group.throughput(Throughput::Bytes(raw.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| decode_to_agent(black_box(&raw), &limits).expect("valid"))
        });
    }
    group.finish();
}

/// A manifest of 50 realistic tools, as an app with pinned tools presents it.
fn manifest_50() -> Vec<u8> {
    let tools: Vec<_> = (0..50)
        .map(|i| {
            json!({
                "name": format!("shop.tool{i}"), "llmName": format!("shop__tool{i}"),
                "title": format!("Shop tool {i}"),
                "description": "Change the quantity or the product of one order line. Refuses when the order is already shipped.",
                "hints": {"consequential": i % 3 == 0, "readOnly": i % 2 == 0}
            })
        })
        .collect();
    serde_json::to_vec(&json!({"protocol": 1, "type": "manifest", "clientId": "5b0c1f4e-8a51-4c0e-9d6f-2f3a8b7c6d5e", "rev": 7, "tools": tools})).unwrap()
}

fn pins(c: &mut Criterion) {
    let limits = Limits::default();
    let raw = manifest_50();
    let mut group = c.benchmark_group("manifest_50_tools");
    group.throughput(Throughput::Elements(50));
    group.bench_function("decode", |b| {
        b.iter(|| decode_to_agent(black_box(&raw), &limits).expect("valid"))
    });
    group.bench_function("decode_and_digest_each", |b| {
        b.iter(|| {
            let PageMessage::Manifest(m) =
                decode_to_agent(black_box(&raw), &limits).expect("valid")
            else {
                unreachable!("a manifest")
            };
            for t in &m.tools {
                black_box(t.digest());
            }
            m
        })
    });
    group.finish();
}

criterion_group!(benches, bench, pins);
criterion_main!(benches);
