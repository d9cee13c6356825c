//! Integration tests of `toolmark-proto`: limits under memory accounting, decoding of every
//! message, and agreement between the Rust validator and the shipped JSON Schemas.

mod corpus;
mod decoding;
mod limits;
mod schema_agreement;

/// Counts every allocation so limit tests can prove a refusal stays bounded.
#[global_allocator]
static ALLOC: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;
