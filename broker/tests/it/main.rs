//! The broker contract suite: every rule of the state model (`toolmark_broker::model`) tried on
//! the memory broker, on a real `redis-server` and on a real six-node Redis Cluster, with the
//! retention compressed so that every TTL and grace period is crossed within the test.

mod contract;
mod manifests;
mod model;
mod model_limits;
mod policy;
mod redis_only;
mod support;
mod traffic;
