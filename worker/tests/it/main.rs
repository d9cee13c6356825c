//! Integration tests of `toolmark-worker` against a real `redis-server` and a real webhook
//! receiver: retries with the same id and a valid signature, a killed worker's events taken
//! over, ordered delivery of 10,000 events after an outage, dead letters, and the sweeps (a dead
//! node's call timed out, a gone page's confirmation expired after the real 60 s grace).

mod receiver;
mod sweeps;
mod webhooks;
