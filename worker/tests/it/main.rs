//! Integration tests of `toolmark-worker` against a real `redis-server` and a real webhook
//! receiver: retries with the same id and a valid signature, a killed worker's events taken
//! over, ordered delivery of 10,000 events after an outage, and dead letters.

mod receiver;
mod webhooks;
