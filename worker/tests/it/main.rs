//! Integration tests of `toolmark-worker` against a real `redis-server` and a real webhook
//! receiver: retries with the same id and a valid signature, a killed worker's events taken
//! over, ordered delivery of 10,000 events after an outage, and dead letters.

mod receiver;
#[path = "../../../gateway/tests/it/redis_support.rs"]
#[allow(dead_code)]
mod redis_support;
mod webhooks;
