//! Redis Cluster's ordinary life under call load: a planned failover of each master, a master
//! killed, a reshard of the slots of live conversations and of a tenant's event stream, and
//! the pub/sub connections killed, each done for real to a six-node cluster of the test's own
//! (`toolmark_testkit::cluster`), with two gateway nodes and pages on both, every page called
//! through the other node. What each asserts is what an agent and a page would notice: no
//! page closed, no `timeout` for a call whose frame never reached its page (a `503` instead),
//! every page answering again within the bound, and events neither lost nor doubled. And a
//! master that stalls while a page speaks: what the page said is applied and announced once.
//!
//! A target of its own, run once by `make unit` (each test starts its own cluster, whatever
//! `TOOLMARK_TEST_BROKER` says).

#[allow(dead_code)]
#[path = "../it/agent.rs"]
mod agent;
#[allow(dead_code)]
#[path = "../it/harness.rs"]
mod harness;

mod faults;
mod load;
mod stall;
