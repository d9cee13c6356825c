//! What only a shared Redis has: several nodes, a server that stops, pub/sub connections that
//! die, keys that must all expire.

use std::time::Duration;
use toolmark_broker::prelude::*;
use toolmark_config::redis_url;

use serde_json::json;
use toolmark_broker::redis::{RedisBroker, RedisOptions};
use toolmark_broker::{EventType, Retention, TakeError};

use crate::support::{
    Backend, LIMITS, Nodes, Sink, call, cluster, connected_page, conv, eventually, needs, ok, page,
    request, short, until_refused,
};
use toolmark_testkit::redis::RedisProc;

/// A node of its own on `redis` (a test that stops or inspects its server).
async fn on_own_redis(
    redis: &RedisProc,
    opts: RedisOptions,
) -> (std::sync::Arc<RedisBroker>, std::sync::Arc<Sink>) {
    node_on_own_redis(redis, "n1", opts).await
}

/// Options for a test's node: a heartbeat of 200 ms (a node's peers counted live within a
/// test's waits) and keys under `prefix`.
fn quick(prefix: &str) -> RedisOptions {
    RedisOptions {
        heartbeat: Duration::from_millis(200),
        prefix: prefix.into(),
        ..RedisOptions::default()
    }
}

/// [`on_own_redis`], the node named `id` (a second node on the same server).
async fn node_on_own_redis(
    redis: &RedisProc,
    id: &str,
    opts: RedisOptions,
) -> (std::sync::Arc<RedisBroker>, std::sync::Arc<Sink>) {
    let sink = std::sync::Arc::new(Sink::default());
    let b = RedisBroker::connect(
        redis_url::parse(&redis.url()).unwrap(),
        id,
        sink.clone(),
        opts,
    )
    .await
    .unwrap();
    (b, sink)
}

/// A node on `redis` of its own, under `prefix`, with no heartbeat during the test: every
/// command Redis sees is the test's own.
async fn quiet_node(
    redis: &RedisProc,
    prefix: &str,
) -> (toolmark_broker::SharedBroker, std::sync::Arc<Sink>) {
    let opts = RedisOptions {
        heartbeat: Duration::from_secs(3600),
        prefix: prefix.into(),
        ..RedisOptions::default()
    };
    let (b, sink) = on_own_redis(redis, opts).await;
    (b, sink)
}

/// [`quiet_node`], once its start-up (its first probes) is over and it says it is ready.
async fn ready_quiet_node(
    redis: &RedisProc,
    prefix: &str,
) -> (toolmark_broker::SharedBroker, std::sync::Arc<Sink>) {
    let (b, sink) = quiet_node(redis, prefix).await;
    eventually(Duration::from_secs(5), "the node is ready", || {
        let b = b.clone();
        async move { b.ready().await.ok() }
    })
    .await;
    (b, sink)
}

/// The key of the one conversation's hash under `prefix` on `redis`.
fn conv_hash(redis: &RedisProc, prefix: &str) -> String {
    redis
        .cli(&["--scan", "--pattern", &format!("{prefix}:*:conv")])
        .lines()
        .next()
        .expect("the conversation's hash")
        .to_owned()
}

/// A UUID's 16 bytes in URL-safe base64: the compact form Redis keeps ids and clientIds in.
fn compact(u: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(uuid::Uuid::parse_str(u).unwrap().as_bytes())
}

/// The key of call `id` of conversation `c` under `prefix`: in the conversation's partition.
fn call_key(prefix: &str, c: &toolmark_broker::ConvKey, id: &str) -> String {
    format!(
        "{prefix}:{{p{}}}:c:{}",
        toolmark_broker::partition::of_conv(c),
        compact(id)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_moving_to_a_node_that_just_started_is_not_reported_gone() {
    let mut nodes = Nodes::new(Backend::Redis, short());
    // Node 1 reads the live-node set rarely: it has not seen node 2 start.
    let (n1, _) = nodes.node_with("n1", Duration::from_secs(30)).await;
    let c = conv();
    connected_page(&n1, &c, "p1").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (n2, _) = nodes.node("n2").await;
    // The page reconnects to node 2 and has not spoken yet; its old socket on node 1 goes.
    n2.admit_page(&c, &LIMITS).await.unwrap();
    n1.release_page(&c, Some("p1"), &crate::support::release())
        .await
        .unwrap();
    let s = n1.conversation(&c).await.unwrap();
    assert_eq!(s.client_id.as_deref(), Some("p1"));
    assert_eq!(s.sockets, 1, "node 2's silent socket counts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_rate_does_not_fail_open_when_redis_is_away() {
    let mut redis = RedisProc::start(&[]);
    let opts = RedisOptions {
        command_timeout: Duration::from_millis(300),
        prefix: "rate".into(),
        ..RedisOptions::default()
    };
    let (b, _) = on_own_redis(&redis, opts).await;
    assert!(b.take_call("t", 10).await.is_ok());
    redis.kill();
    let r = b.take_call("t", 10).await;
    assert!(matches!(r, Err(TakeError::Broker(_))), "{r:?}");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_a_webhook_consumer_has_not_read_are_never_trimmed() {
    let retention = Retention {
        events_per_tenant: 5,
        ..short()
    };
    let redis = RedisProc::start(&[]);
    let opts = RedisOptions {
        prefix: "ev".into(),
        retention,
        ..RedisOptions::default()
    };
    let (b, _) = on_own_redis(&redis, opts).await;
    let stream_len = || {
        redis
            .cli(&["xlen", "ev:{t}:events"])
            .trim()
            .parse::<u32>()
            .unwrap()
    };
    b.webhook_group("t").await.unwrap();
    // Nothing new: a blocking read that times out answers nil, which is "no events", not an
    // error (it used to fail as an unreadable reply, and the reader then paused).
    let none = b.webhook_read("t", "w1", 10, 100, 60_000).await;
    assert_eq!(none.map(|v| v.len()), Ok(0));
    let c = conv();
    for i in 0..12 {
        let e = b
            .emit("t", EventType::CallTimeout, &c, json!({"i": i}))
            .await
            .unwrap();
        assert_eq!(
            e.held_for_webhooks,
            i >= 5,
            "held past the bound, and said so"
        );
    }
    assert_eq!(stream_len(), 12, "unread: all kept");
    let read = b.webhook_read("t", "w1", 100, 100, 60_000).await.unwrap();
    assert_eq!(read.len(), 12);
    // Read but not acknowledged: still kept.
    b.emit("t", EventType::CallTimeout, &c, json!({"i": 12}))
        .await
        .unwrap();
    assert_eq!(stream_len(), 13);
    for p in &read {
        b.webhook_ack("t", &p.id).await.unwrap();
    }
    b.emit("t", EventType::CallTimeout, &c, json!({"i": 13}))
        .await
        .unwrap();
    assert!(stream_len() <= 6, "{} kept after delivery", stream_len());
    let kept = b.retained("t", "0-0").await.unwrap();
    assert_eq!(kept.last().unwrap().data["i"], 13);
    b.close().await;
}

/// Keys that are indexes or logs with their own bound, listed in docs/architecture.md.
fn without_ttl_allowed(key: &str) -> bool {
    key.ends_with(":nodes")
        || key.ends_with(":nodes:any-id")
        || key.ends_with(":nodes:release")
        || key.ends_with(":deadlines")
        || key.ends_with(":dueconvs")
        || key.ends_with(":due")
        || key.ends_with(":pendingconfirms")
        || key.ends_with(":events")
        || key.ends_with(":events:bytes")
        || key.contains(":events:wh:")
        || key.ends_with(":outbox")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_has_a_ttl_except_the_documented_ones() {
    let mut redis = RedisProc::start(&[]);
    let opts = RedisOptions {
        retention: short(),
        ..quick("tm")
    };
    let (b, _) = on_own_redis(&redis, opts.clone()).await;
    let b: toolmark_broker::SharedBroker = b;
    let c = conv();
    // A page's whole life: admitted, identified, manifests, calls answered and timed out, a
    // confirmation, events, a drain, a reconnect, a release, a restart of Redis.
    connected_page(&b, &c, "p1").await;
    let (id, _w) = call(&b, &c, "p1", Duration::from_secs(5)).await;
    b.submit_result(&page(&c, "p1"), &id, &needs("k1"))
        .await
        .unwrap();
    let (id, _w) = call(&b, &c, "p1", Duration::from_secs(5)).await;
    b.submit_result(&page(&c, "p1"), &id, &ok()).await.unwrap();
    let (id, _w) = call(&b, &c, "p1", Duration::from_secs(5)).await;
    b.time_out(&c, &id).await.unwrap();
    let _ = b.take_call("t", 10).await;
    b.emit("t", EventType::PageManifest, &c, json!({}))
        .await
        .unwrap();
    let _ = b.expire_abandoned_confirmations(Duration::ZERO).await;
    b.mark_drained(&c).await.unwrap();
    b.release_page(&c, Some("p1"), &crate::support::release())
        .await
        .unwrap();
    let _ = b.conversation(&c).await.unwrap();
    b.admit_page(&c, &LIMITS).await.unwrap();
    redis.restart();
    eventually(Duration::from_secs(10), "the node is back", || {
        let b = b.clone();
        async move { b.ready().await.ok() }
    })
    .await;
    eventually(
        Duration::from_secs(10),
        "the node re-published its page",
        || {
            let b = b.clone();
            let c = c.clone();
            async move { (b.conversation(&c).await.ok()?.sockets == 1).then_some(()) }
        },
    )
    .await;
    b.release_page(&c, None, &crate::support::release())
        .await
        .unwrap();
    b.mark_drained(&c).await.unwrap();
    let mut without = Vec::new();
    for key in redis.cli(&["--scan", "--pattern", "tm:*"]).lines() {
        let ttl: i64 = redis.cli(&["pttl", key]).trim().parse().unwrap_or(-3);
        if ttl == -1 && !without_ttl_allowed(key) {
            without.push(key.to_owned());
        }
    }
    assert!(without.is_empty(), "keys without a TTL: {without:?}");
    b.close().await;
}

/// A conversation's calls by deadline have no expiry, not even from the node holding its page
/// (the deadline sweep is their bound: an expiry could end them before a call due later, whose
/// node died, is swept), and the set goes with the last call that ends. The partition's
/// conversations by deadline keep the conversation from its first call on, no later than its
/// earliest deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversations_calls_by_deadline_have_no_expiry_and_go_with_their_calls() {
    let redis = RedisProc::start(&[]);
    let opts = RedisOptions {
        retention: short(),
        ..quick("tm")
    };
    let (b, _) = on_own_redis(&redis, opts).await;
    let b: toolmark_broker::SharedBroker = b;
    let c = conv();
    connected_page(&b, &c, "p1").await;
    let (first, _w1) = call(&b, &c, "p1", Duration::from_secs(60)).await;
    let (second, _w2) = call(&b, &c, "p1", Duration::from_secs(60)).await;
    let scan = |pattern: &str| -> Vec<String> {
        redis
            .cli(&["--scan", "--pattern", pattern])
            .lines()
            .map(str::to_owned)
            .collect()
    };
    assert!(
        scan("tm:*:pending").is_empty(),
        "no pending set: {:?}",
        scan("tm:*")
    );
    let key = scan("tm:*:due")
        .pop()
        .expect("the conversation's calls by deadline");
    assert_eq!(redis.cli(&["zcard", &key]).trim(), "2");
    let convs = scan("tm:*:dueconvs")
        .pop()
        .expect("the partition's conversations");
    let entry = redis.cli(&["zrange", &convs, "0", "-1", "withscores"]);
    let earliest = redis.cli(&["zrange", &key, "0", "0", "withscores"]);
    assert_eq!(
        entry.lines().last(),
        earliest.lines().last(),
        "the conversation is held at its earliest deadline: {entry:?}, {earliest:?}"
    );
    // The conversation's retention is 1.5 s: the node refreshes what it holds every 0.5 s,
    // the conversation's hash among it, and the calls by deadline not.
    eventually(
        Duration::from_secs(10),
        "the node refreshed the conversation",
        || {
            let ttl: i64 = scan("tm:*:conv").pop().map_or(-3, |c| {
                redis.cli(&["pttl", &c]).trim().parse().unwrap_or(-3)
            });
            async move { (ttl > 0 && ttl <= 1500).then_some(()) }
        },
    )
    .await;
    // Past the conversation's retention, refreshed all along: still no expiry.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(redis.cli(&["pttl", &key]).trim(), "-1", "no expiry");
    b.submit_result(&page(&c, "p1"), &first, &ok())
        .await
        .unwrap();
    assert_eq!(redis.cli(&["zcard", &key]).trim(), "1");
    b.time_out(&c, &second).await.unwrap();
    assert!(scan("tm:*:due").is_empty(), "the set outlived its calls");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_comes_back_after_the_subscriber_connection_is_killed_and_readiness_follows_it() {
    let redis = RedisProc::start(&[]);
    let opts = RedisOptions {
        command_timeout: Duration::from_millis(500),
        ..quick("probe")
    };
    let (b, sink) = on_own_redis(&redis, opts).await;
    let b: toolmark_broker::SharedBroker = b;
    let c = conv();
    b.admit_page(&c, &LIMITS).await.unwrap();
    eventually(Duration::from_secs(5), "ready", || {
        let b = b.clone();
        async move { b.ready().await.ok() }
    })
    .await;
    let killed = redis.cli(&["client", "kill", "type", "pubsub"]);
    assert!(
        killed.trim().parse::<u32>().unwrap_or(0) >= 1,
        "a subscriber was killed: {killed}"
    );
    // Calls reach the page again, and readiness says so. Any call placed since the kill counts
    // when it arrives, however late (a busy machine may take longer than a poll's 200 ms).
    let placed = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    eventually(
        Duration::from_secs(10),
        "a call reaches the page again",
        || {
            let (b, sink, c, placed) = (b.clone(), sink.clone(), c.clone(), placed.clone());
            async move {
                let (id, _w) = call(&b, &c, "p1", Duration::from_secs(5)).await;
                placed.lock().unwrap().push(id);
                tokio::time::sleep(Duration::from_millis(200)).await;
                let frames = sink.frames();
                let placed = placed.lock().unwrap();
                frames
                    .iter()
                    .any(|f| placed.iter().any(|id| f.contains(id.as_str())))
                    .then_some(())
            }
        },
    )
    .await;
    eventually(Duration::from_secs(5), "ready again", || {
        let b = b.clone();
        async move { b.ready().await.ok() }
    })
    .await;
    // Redis paused: probes stop coming back and the node is not ready.
    redis.cli(&["client", "pause", "3000", "all"]);
    eventually(
        Duration::from_secs(5),
        "not ready while Redis is paused",
        || {
            let b = b.clone();
            async move { b.ready().await.is_err().then_some(()) }
        },
    )
    .await;
    eventually(Duration::from_secs(15), "ready after the pause", || {
        let b = b.clone();
        async move { b.ready().await.ok() }
    })
    .await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_holds_one_subscription_per_partition_and_a_call_costs_two_round_trips() {
    let redis = RedisProc::start(&[]);
    // The connection's own start-up (its heartbeat, its first probes) is over before counting.
    let (b, sink) = ready_quiet_node(&redis, "sub").await;
    let channels = || {
        redis
            .cli(&["pubsub", "shardchannels", "sub:*"])
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count()
    };
    // One channel per partition, and the tenant catalog's.
    let partitions = usize::from(toolmark_broker::partition::PARTITIONS) + 1;
    assert_eq!(channels(), partitions);
    let convs: Vec<_> = (0..90)
        .map(|i| toolmark_broker::ConvKey::new("t", "u", &format!("c{i}")))
        .collect();
    for c in &convs {
        connected_page(&b, c, "p1").await;
    }
    assert_eq!(channels(), partitions, "90 pages cost no subscription");
    // The first call of a conversation reads it; every later one is a single script, and
    // answering it another: a call is two round trips.
    // (The first use of each script also loads it into Redis: done before counting.)
    let c = &convs[7];
    let first = b.place_call(request(c, 1000)).await.unwrap();
    b.submit_result(&page(c, "p1"), &first.binding.id, &ok())
        .await
        .unwrap();
    let monitor = redis.monitor();
    // What the node's clock sends meanwhile is not a call's: its subscription probes (a
    // `SPUBLISH` on each partition's channel, every second: a busy machine can take longer
    // than that over the 50 calls). A call's own messages are published inside its scripts.
    let probe = |l: &String| !l.contains(" lua]") && l.contains("\"SPUBLISH\"");
    let calls_only = |from: &str, to: &str| {
        monitor
            .client_commands(from, to)
            .into_iter()
            .filter(|c| c != "spublish")
            .collect::<Vec<_>>()
    };
    let lines = |from: &str, to: &str| {
        monitor
            .all_lines(from, to)
            .into_iter()
            .filter(|l| !probe(l))
            .collect::<Vec<_>>()
    };
    monitor.mark("calls");
    let mut ids = Vec::new();
    for _ in 0..50 {
        let placed = b.place_call(request(c, 1000)).await.unwrap();
        ids.push(placed.binding.id);
    }
    monitor.mark("results");
    for id in &ids {
        b.submit_result(&page(c, "p1"), id, &ok()).await.unwrap();
    }
    monitor.mark("done");
    assert_eq!(
        calls_only("calls", "results"),
        vec!["evalsha"; 50],
        "one round trip per call placed"
    );
    assert_eq!(
        calls_only("results", "done"),
        vec!["evalsha"; 50],
        "one round trip per result"
    );
    // A conversation the node has not read yet: its first call reads it first, in one script
    // of two commands (the conversation with its sockets' summary, then its page's manifest,
    // its text with its seq), and is then placed as every later call is.
    let fresh = &convs[8];
    monitor.mark("fresh");
    ids.push(b.place_call(request(fresh, 1000)).await.unwrap().binding.id);
    monitor.mark("fresh placed");
    ids.push(b.place_call(request(fresh, 1000)).await.unwrap().binding.id);
    monitor.mark("again");
    assert_eq!(
        calls_only("fresh", "fresh placed"),
        vec!["evalsha"; 2],
        "the read, then the call"
    );
    let first = lines("fresh", "fresh placed");
    let later = lines("fresh placed", "again");
    // The read: its EVALSHA and what it runs, up to the call's EVALSHA.
    let read = 1 + first
        .iter()
        .skip(1)
        .position(|l| !l.contains(" lua]"))
        .expect("the call after the read");
    assert_eq!(read, 3, "the conversation's read is 3 commands: {first:#?}");
    assert!(
        !first.iter().any(|l| l.contains("\"HGETALL\"")),
        "the sockets came from the conversation's summary: {first:#?}"
    );
    // Then the call, as a later call is: but for the tenant's rate, whose bucket a call reads
    // and writes when the node's reserve of tokens runs low or its lease has passed (time a
    // busy machine may take between two calls, `rate::Reserves`), and for the conversation's
    // entry among its partition's conversations by deadline, which its first call writes (in
    // the partition's set and in the conversation's `due`) and a later one due no earlier
    // does not.
    let entry = |l: &String| {
        l.contains(" lua]")
            && (l.contains(":dueconvs\"") || (l.contains("\"HSET\"") && l.contains("\"due\"")))
    };
    let beside_rate = |lines: &[String]| {
        lines
            .iter()
            .filter(|l| {
                !(l.contains(" lua]") && (l.contains(":rate\"") || l.contains("] \"TIME\"")))
                    && !entry(l)
            })
            .count()
    };
    assert_eq!(
        first.iter().filter(|l| entry(l)).count(),
        2,
        "the first call enters its conversation among those by deadline: {first:#?}"
    );
    assert!(
        !later.iter().any(entry),
        "a later call does not: {later:#?}"
    );
    assert_eq!(
        beside_rate(&first[read..]),
        beside_rate(&later),
        "the first call is placed as a later one: {first:#?}\nwhere a later call is {later:#?}"
    );
    eventually(
        Duration::from_secs(5),
        "every call reached the page",
        || {
            let frames = sink.frames();
            let ids = ids.clone();
            async move {
                ids.iter()
                    .all(|id| frames.iter().any(|f| f.contains(id.as_str())))
                    .then_some(())
            }
        },
    )
    .await;
    // A page leaving reads whether its page has sockets left from the conversation's summary
    // of them, with its current page, in the command that moves the summary (issue 58).
    monitor.mark("leave");
    let gone = b
        .release_page(&convs[0], Some("p1"), &crate::support::release())
        .await
        .unwrap();
    monitor.mark("left");
    assert!(
        gone.page_gone,
        "the page's only socket closed: the page is gone"
    );
    let leave = lines("leave", "left");
    assert!(
        !leave.iter().any(
            |l| (l.contains("\"HGETALL\"") && l.contains(":socks\"")) || l.contains("\"HGET\"")
        ),
        "the leave read neither the sockets hash nor the current page apart: {leave:#?}"
    );
    for c in &convs[1..] {
        b.release_page(c, Some("p1"), &crate::support::release())
            .await
            .unwrap();
    }
    assert_eq!(channels(), partitions, "pages leaving cost no unsubscribe");
    b.close().await;
}

/// Under load, a node's own calls prove the channels they come through, and its clock sends
/// no probe there (issue 58: 64 probes a second the calls had already proven); a channel that
/// falls silent is probed again, every round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_carrying_calls_is_not_probed_and_one_fallen_silent_is_every_round() {
    let redis = RedisProc::start(&[]);
    let (b, _sink) = ready_quiet_node(&redis, "heard").await;
    let c = conv();
    connected_page(&b, &c, "p1").await;
    let k = toolmark_broker::partition::of_conv(&c);
    let other = (k + 1) % toolmark_broker::partition::PARTITIONS;
    // Calls on the conversation's partition, placed and answered, every 20 ms.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let traffic = {
        let (b, c, stop, answered) = (b.clone(), c.clone(), stop.clone(), answered.clone());
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let placed = b.place_call(request(&c, 1000)).await.unwrap();
                b.submit_result(&page(&c, "p1"), &placed.binding.id, &ok())
                    .await
                    .unwrap();
                answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    eventually(Duration::from_secs(10), "calls flow", || {
        let n = answered.load(std::sync::atomic::Ordering::Relaxed);
        async move { (n >= 5).then_some(()) }
    })
    .await;
    let monitor = redis.monitor();
    // The probes this node's clock sent on partition `p`'s channel between two marks.
    let probes = |from: &str, to: &str, p: u16| {
        let tail = format!(":{{p{p}}}\" \"p\\n{p}\"");
        monitor
            .client_lines(from, to)
            .iter()
            .filter(|l| l.contains("\"SPUBLISH\"") && l.ends_with(&tail))
            .count()
    };
    // Marks every 100 ms until `until` holds of the last mark; that mark.
    let mut marks = 0;
    let mut mark_until = |until: &dyn Fn(&str) -> bool| -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            marks += 1;
            let m = format!("m{marks}");
            monitor.mark(&m);
            if until(&m) {
                return m;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no round of probes came"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    monitor.mark("flowing");
    // One whole round of the clock with calls flowing, then four more counted.
    let start = mark_until(&|m| probes("flowing", m, other) >= 1);
    let end = mark_until(&|m| probes(&start, m, other) >= 4);
    let carried = probes(&start, &end, k);
    assert!(
        carried <= 1,
        "partition {k} carried calls and was probed in {carried} of 4 rounds"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    traffic.await.unwrap();
    // Silent now: probed again, and then every second (a probe's own return does not spare its
    // channel the next round): at least 5 probes in the 6.5 s after the first (7 on time; a
    // probe a round at most 4), read on `MONITOR`'s clock.
    let at = |l: &String| -> f64 { l.split(' ').next().unwrap().parse().unwrap() };
    let probed_at = |from: &str, to: &str| -> Vec<f64> {
        let tail = format!(":{{p{k}}}\" \"p\\n{k}\"");
        monitor
            .client_lines(from, to)
            .iter()
            .filter(|l| l.contains("\"SPUBLISH\"") && l.ends_with(&tail))
            .map(at)
            .collect()
    };
    let last = mark_until(&|m| {
        let t = probed_at(&end, m);
        t.last().is_some_and(|l| l - t[0] > 6.5)
    });
    let times = probed_at(&end, &last);
    let idle = times.iter().filter(|t| **t - times[0] <= 6.5).count();
    assert!(
        idle >= 5,
        "partition {k}, silent, was probed {idle} times in 6.5 s: {times:?}"
    );
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_call_keeps_only_its_binding_state_and_outcome() {
    let redis = RedisProc::start(&[]);
    let (b, _) = quiet_node(&redis, "fin").await;
    let c = conv();
    // A clientId as the page bridge mints it (crypto.randomUUID()).
    let client = uuid::Uuid::new_v4().hyphenated().to_string();
    connected_page(&b, &c, &client).await;
    let placed = b.place_call(request(&c, 1000)).await.unwrap();
    let id = placed.binding.id.clone();
    b.submit_result(&page(&c, &client), &id, &ok())
        .await
        .unwrap();
    // The call id and the clientId are kept as their 16 bytes in URL-safe base64, not as
    // their 36-character text.
    let key = call_key("fin", &c, &id);
    // Finished, the call is one string (no hash, no field names): its state, the binding's
    // fields and the outcome, one a line.
    assert_eq!(redis.cli(&["type", &key]).trim(), "string", "{key}");
    let packed = redis.cli(&["get", &key]);
    let lines: Vec<&str> = packed.lines().collect();
    assert_eq!(lines.first(), Some(&"a"), "answered: {packed}");
    assert!(
        lines.contains(&compact(&client).as_str()),
        "the compact clientId: {packed}"
    );
    assert!(
        lines.last().is_some_and(|o| o.contains(r#""status":"ok""#)),
        "the outcome: {packed}"
    );
    let ttl: i64 = redis.cli(&["pttl", &key]).trim().parse().unwrap();
    assert!(ttl > 0, "kept for its retention, not for ever: {ttl}");
    assert_eq!(
        redis.cli(&["exists", &format!("{key}:p")]).trim(),
        "0",
        "the page message and the cancel went with the call"
    );
    let deadlines = redis.cli(&[
        "zcard",
        &format!(
            "fin:{{p{}}}:deadlines",
            toolmark_broker::partition::of_conv(&c)
        ),
    ]);
    assert_eq!(
        deadlines.trim(),
        "0",
        "a finished call leaves the deadline set"
    );
    let record = b.call("t", &id).await.unwrap().unwrap();
    assert_eq!(record.binding.client_id, client);
    assert_eq!(record.binding.deadline_ms, placed.binding.deadline_ms);
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_moving_from_a_node_of_the_previous_key_layout_keeps_its_manifest() {
    let redis = RedisProc::start(&[]);
    let opts = quick("up");
    let (b, _) = on_own_redis(&redis, opts).await;
    let b: toolmark_broker::SharedBroker = b;
    let c = conv();
    // What a node of the build before the partitioned layout stored for the page.
    let m = toolmark_proto::Manifest {
        client_id: "p1".into(),
        rev: 7,
        tools: vec![],
    };
    let json = serde_json::to_string(&m).unwrap();
    redis.cli(&[
        "hset",
        "up:{t/u/c}:manifest:p1",
        "m",
        &json,
        "s",
        "3",
        "r",
        "7",
    ]);
    // The page reconnects here, silent, then speaks.
    b.admit_page(&c, &LIMITS).await.unwrap();
    assert_eq!(b.conversation(&c).await.unwrap().client_id, None);
    b.page_identified(&c, "p1").await.unwrap();
    let s = b.conversation(&c).await.unwrap();
    assert_eq!((s.client_id.as_deref(), s.rev), (Some("p1"), Some(7)));
    b.close().await;
}

/// On Redis Cluster a tenant's rate lives on another shard than the conversation: a node takes
/// its calls' tokens in batches that grow while it spends them (up to 10 ms of the rate), so
/// that most calls cost no round trip of their own to the rate; tokens held past the lease go
/// back with the next call's batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_node_takes_the_tenants_rate_in_batches_held_for_a_lease() {
    use toolmark_broker::rate::{RESERVE_LEASE, reserve_cap};
    let mut nodes = Nodes::new(Backend::Cluster, short());
    let (b, _) = nodes.node("n1").await;
    let tenant = format!("r{}", uuid::Uuid::new_v4().simple());
    let c = toolmark_broker::ConvKey::new(&tenant, "u", "c");
    connected_page(&b, &c, "p1").await;
    let per_second = 10_000;
    assert_eq!(reserve_cap(per_second), 100);
    // The first call reads the conversation (and takes a batch).
    b.place_call(request(&c, per_second)).await.unwrap();
    let monitors: Vec<_> = cluster().nodes.iter().map(|n| n.monitor()).collect();
    let mark = |label: &str| monitors.iter().for_each(|m| m.mark(label));
    // The tenant's rate scripts the nodes ran between two marks (MONITOR shows a script under
    // `EVALSHA` with its keys; those of the place script name the conversation, not the rate).
    let rate_scripts = |from: &str, to: &str| -> usize {
        monitors
            .iter()
            .flat_map(|m| m.client_lines(from, to))
            .filter(|l| {
                l.to_ascii_lowercase().contains("\"evalsha\"")
                    && l.contains(&tenant)
                    && l.contains(":rate\"")
            })
            .count()
    };
    mark("calls");
    let started = std::time::Instant::now();
    for _ in 0..121 {
        b.place_call(request(&c, per_second)).await.unwrap();
    }
    let elapsed = started.elapsed();
    mark("held");
    // Batches of 2, 4, 8, 16, 32, 64 and 100 cover 121 calls: seven rate scripts, and at most
    // one more for each lease the calls took on a slow machine (tokens held past it halve the
    // next batch); one rate script per call would be 121.
    let batches = rate_scripts("calls", "held");
    let leases = (elapsed.as_secs_f64() / RESERVE_LEASE.as_secs_f64()).ceil() as usize;
    assert!(
        (1..=8 + leases).contains(&batches),
        "{batches} rate scripts for 121 calls in {elapsed:?}"
    );
    // Past the lease the next call spends one of the tokens still held and gives the others
    // back with a new batch, beside its place script: one rate script.
    tokio::time::sleep(RESERVE_LEASE + Duration::from_millis(50)).await;
    mark("lease");
    b.place_call(request(&c, per_second)).await.unwrap();
    mark("done");
    assert_eq!(
        rate_scripts("lease", "done"),
        1,
        "the held tokens outlived their lease"
    );
    b.close().await;
}

/// Tokens a node held past the lease go back to the tenant's bucket with its next batch (but the
/// one its next call spends): the bucket's theoretical arrival time moves by the new batch less
/// what came back, not by the new batch alone (a drained bucket, so that nothing is clamped to
/// now).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_tokens_held_past_the_lease_go_back_to_the_tenants_bucket() {
    use toolmark_broker::rate::RESERVE_LEASE;
    let mut nodes = Nodes::new(Backend::Cluster, short());
    let (n1, _) = nodes.node("n1").await;
    let (n2, _) = nodes.node("n2").await;
    let c = conv();
    connected_page(&n1, &c, "p1").await;
    // 1,000 calls/s: 1 ms a token, batches up to 10.
    for _ in 0..30 {
        n1.place_call(request(&c, 1000)).await.unwrap();
    }
    // n1 now holds at least 4 (a refill is asked for below half a batch of 10). n2 drains
    // the bucket one token at a time.
    until_refused(1, move |_| {
        let n2 = n2.clone();
        async move { n2.take_call("t", 1000).await.is_ok() }
    })
    .await;
    let key = toolmark_broker::redis::keys::Keys::new(nodes.prefix()).rate("t");
    let tat = || -> i64 {
        let out = cluster().nodes[0].cli(&["-c", "get", &key]);
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("the rate key: {out:?}"))
    };
    tokio::time::sleep(RESERVE_LEASE + Duration::from_millis(50)).await;
    let before = tat();
    // The next call spends one of what n1 held (4 to 15 tokens), gives back the others and
    // takes a batch of 5 (halved).
    n1.place_call(request(&c, 1000)).await.unwrap();
    let moved = tat() - before;
    assert!(
        moved <= 2_000,
        "the bucket moved by {moved} µs: a batch of 5 is 5,000, less at least 3,000 given back"
    );
    assert!(moved >= -9_000, "at most 14 given back: moved {moved} µs");
}

/// During a rolling upgrade a node meets pending calls an older node stored: the binding in a
/// hash and the page message and cancel in `<call>:p` beside it. They are re-sent to a page
/// that comes back, cancelled with their stored cancel, answered, and leave no `:p` behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_an_older_node_stored_are_resent_cancelled_and_answered() {
    let redis = RedisProc::start(&[]);
    let (b, sink) = quiet_node(&redis, "old").await;
    let c = conv();
    connected_page(&b, &c, "p1").await;
    let key = |id: &str| call_key("old", &c, id);
    // Two calls, each rewritten into the older layout.
    let mut ids = Vec::new();
    for _ in 0..2 {
        let placed = b.place_call(request(&c, 1000)).await.unwrap();
        let k = key(&placed.binding.id);
        // This node stores a pending call as one string: `p`, the binding's lines, the
        // waiting node, the watchers, the cancel's length, then the cancel and the message.
        let stored = redis.cli(&["get", &k]);
        let stored = stored.strip_suffix('\n').unwrap_or(&stored);
        let lines: Vec<&str> = stored.splitn(13, '\n').collect();
        assert_eq!(lines[0], "p", "a pending call: {stored:?}");
        let cancel_len: usize = lines[11].parse().unwrap();
        let (cancel, frame) = lines[12].split_at(cancel_len);
        assert!(
            frame.contains(&placed.binding.id),
            "the page message is in the call's string"
        );
        redis.cli(&["del", &k]);
        redis.cli(&[
            "hset",
            &k,
            "v",
            &lines[1..4].join("\n"),
            "c",
            lines[4],
            "d",
            lines[5],
            "t",
            &lines[6..9].join("\n"),
            "n",
            lines[9],
            "s",
            "p",
        ]);
        redis.cli(&["pexpire", &k, "60000"]);
        redis.cli(&["hset", &format!("{k}:p"), "f", frame, "x", cancel]);
        redis.cli(&["pexpire", &format!("{k}:p"), "60000"]);
        ids.push(placed.binding.id);
    }
    let frames = b.pending_frames(&c).await.unwrap();
    for id in &ids {
        assert!(
            frames.iter().any(|f| f.contains(id.as_str())),
            "{id} re-sent from its :p: {frames:?}"
        );
    }
    let before = sink.frames().len();
    let cancelled = b.cancel("t", &ids[0]).await.unwrap();
    assert!(cancelled.is_some());
    eventually(
        Duration::from_secs(5),
        "the stored cancel reaches the page",
        || {
            let frames = sink.frames();
            let id = ids[0].clone();
            async move {
                frames[before..]
                    .iter()
                    .any(|f| f.contains("cancel") && f.contains(id.as_str()))
                    .then_some(())
            }
        },
    )
    .await;
    b.submit_result(&page(&c, "p1"), &ids[1], &ok())
        .await
        .unwrap();
    let record = b.call("t", &ids[1]).await.unwrap().unwrap();
    assert_eq!(record.outcome, Some(toolmark_broker::Outcome::Result(ok())));
    assert_eq!(
        redis
            .cli(&["exists", &format!("{}:p", key(&ids[1]))])
            .trim(),
        "0",
        "the older layout's page message and cancel went with the call"
    );
    b.close().await;
}

/// A node that made a change and never emitted its events (here: the change's reply lost with
/// its connection, as when the node dies or stalls right after it): the deadline sweep, on
/// another node, emits them from the partition's outbox once they waited `RELAY_AFTER`; the
/// node asking again afterwards emits nothing more. A confirmation, a timeout and an async
/// call's result, each across a lost reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_whose_node_never_emitted_its_events_is_announced_once_by_the_sweep() {
    let redis = RedisProc::start(&[]);
    let proxy = toolmark_testkit::fault::FaultProxy::to(&redis);
    let opts = RedisOptions {
        retention: short(),
        command_timeout: Duration::from_millis(500),
        ..quick("tm")
    };
    let sink = std::sync::Arc::new(Sink::default());
    let lossy: toolmark_broker::SharedBroker = RedisBroker::connect(
        redis_url::parse(&proxy.url()).unwrap(),
        "n1",
        sink.clone(),
        opts.clone(),
    )
    .await
    .unwrap();
    let (sweeper, _) = on_own_redis(&redis, opts).await;
    let sweeper: toolmark_broker::SharedBroker = sweeper;
    let c = conv();
    connected_page(&lossy, &c, "p1").await;
    let from = page(&c, "p1");
    let kinds = || {
        let b = sweeper.clone();
        async move {
            let events = b.retained("t", "0-0").await.unwrap();
            events
                .iter()
                .map(|e| e.kind.as_str())
                .filter(|k| *k != "page.manifest")
                .collect::<Vec<_>>()
        }
    };
    let swept_until = |n: usize| {
        let b = sweeper.clone();
        async move {
            eventually(
                Duration::from_secs(15),
                "the sweep emits the change's events",
                || {
                    let b = b.clone();
                    async move {
                        let _ = b.sweep_deadlines().await;
                        let events = b.retained("t", "0-0").await.ok()?;
                        (events
                            .iter()
                            .filter(|e| e.kind.as_str() != "page.manifest")
                            .count()
                            >= n)
                            .then_some(())
                    }
                },
            )
            .await;
        }
    };

    // A confirmation: applied, its reply lost.
    let (id, _w) = call(&lossy, &c, "p1", Duration::from_secs(30)).await;
    lossy.submit_result(&from, &id, &needs("k1")).await.unwrap();
    proxy.drop_reply_and_cut(":confirm:k1", 1);
    assert!(
        lossy
            .submit_confirmed(&from, "k1", &crate::support::confirmed_ok())
            .await
            .is_err()
    );
    assert!(kinds().await.is_empty(), "the node emitted nothing");
    swept_until(1).await;
    let again = eventually(Duration::from_secs(10), "the node answers again", || {
        let (b, from) = (lossy.clone(), from.clone());
        async move {
            b.submit_confirmed_again(&from, "k1", &crate::support::confirmed_ok())
                .await
                .ok()
        }
    })
    .await;
    assert_eq!(again.call_id, id);
    assert_eq!(kinds().await, ["confirmation.resolved"]);
    let resolved = sweeper.retained("t", "0-0").await.unwrap();
    let resolved = resolved.last().unwrap();
    assert_eq!(resolved.data["tool"], "todo.add");
    assert_eq!(resolved.data["outcome"]["data"], "done");

    // An async call timed out: the timeout applied, its reply lost.
    let (late, _w) = crate::support::call_as(&lossy, &c, "p1", Duration::from_secs(30), true).await;
    proxy.drop_reply_and_cut(&late, 1);
    // The client may send the script again on its new connection: that run finds the call
    // timed out already. Either way this node never learns that its timeout won.
    assert!(!matches!(lossy.time_out(&c, &late).await, Ok(Some(_))));
    swept_until(3).await;
    assert_eq!(
        kinds().await,
        ["confirmation.resolved", "call.timeout", "call.result"]
    );

    // An async call answered: the result applied, its reply lost.
    let (answered, _w) =
        crate::support::call_as(&lossy, &c, "p1", Duration::from_secs(30), true).await;
    proxy.drop_reply_and_cut(&answered, 1);
    assert!(lossy.submit_result(&from, &answered, &ok()).await.is_err());
    swept_until(4).await;
    eventually(Duration::from_secs(10), "the node answers again", || {
        let (b, from, id) = (lossy.clone(), from.clone(), answered.clone());
        async move {
            b.submit_result_again(&from, &id, &ok(), toolmark_broker::now_ms())
                .await
                .ok()
        }
    })
    .await;
    // Swept again: nothing is emitted twice, and the outboxes are empty.
    let _ = sweeper.sweep_deadlines().await;
    assert_eq!(
        kinds().await,
        [
            "confirmation.resolved",
            "call.timeout",
            "call.result",
            "call.result"
        ]
    );
    assert_eq!(
        redis.cli(&["--scan", "--pattern", "tm:*:outbox"]).trim(),
        ""
    );
    lossy.close().await;
    sweeper.close().await;
}

/// What a change's events cost in round trips to Redis, as the node sends them: the change's
/// script (which writes the outbox entry with the state), the emit script on the tenant's slot,
/// and the outbox entry taken out. A call answered in time and not async writes no entry: one
/// round trip, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_with_events_costs_two_round_trips_more_and_a_plain_result_none() {
    let redis = RedisProc::start(&[]);
    let (b, _) = ready_quiet_node(&redis, "ev").await;
    let c = conv();
    let from = page(&c, "p1");
    connected_page(&b, &c, "p1").await;
    // Each script's first use loads it: done before counting.
    let (id, _w) = call(&b, &c, "p1", Duration::from_secs(30)).await;
    b.submit_result(&from, &id, &needs("k0")).await.unwrap();
    b.submit_confirmed(&from, "k0", &crate::support::confirmed_ok())
        .await
        .unwrap();
    let (sync, _w) = call(&b, &c, "p1", Duration::from_secs(30)).await;
    let (answered, _w) = crate::support::call_as(&b, &c, "p1", Duration::from_secs(30), true).await;
    let (timed_out, _w) = call(&b, &c, "p1", Duration::from_secs(30)).await;
    let (confirmed, _w) = call(&b, &c, "p1", Duration::from_secs(30)).await;
    b.submit_result(&from, &confirmed, &needs("k1"))
        .await
        .unwrap();
    let monitor = redis.monitor();
    let steps: [(&str, Vec<&str>); 5] = [
        ("sync result", vec!["evalsha"]),
        ("async result", vec!["evalsha", "evalsha", "hdel"]),
        ("timeout", vec!["evalsha", "evalsha", "hdel"]),
        ("confirmed", vec!["evalsha", "evalsha", "hdel"]),
        ("manifest", vec!["evalsha", "evalsha", "hdel"]),
    ];
    monitor.mark(steps[0].0);
    b.submit_result(&from, &sync, &ok()).await.unwrap();
    monitor.mark(steps[1].0);
    b.submit_result(&from, &answered, &ok()).await.unwrap();
    monitor.mark(steps[2].0);
    b.time_out(&c, &timed_out).await.unwrap().unwrap();
    monitor.mark(steps[3].0);
    b.submit_confirmed(&from, "k1", &crate::support::confirmed_ok())
        .await
        .unwrap();
    monitor.mark(steps[4].0);
    let m = toolmark_proto::Manifest {
        client_id: "p1".into(),
        rev: 2,
        tools: vec![],
    };
    b.put_manifest(&c, &m, "manifest-2").await.unwrap();
    monitor.mark("done");
    let ends: Vec<&str> = steps.iter().skip(1).map(|s| s.0).chain(["done"]).collect();
    for ((step, want), end) in steps.iter().zip(ends) {
        // Less the node's subscription probes (its clock's, every second).
        let sent: Vec<String> = monitor
            .client_commands(step, end)
            .into_iter()
            .filter(|c| c != "spublish")
            .collect();
        assert_eq!(&sent, want, "{step}");
    }
    b.close().await;
}

/// While a node of a release up to 0.4.0 is live on the same Redis (it heartbeats into the
/// live set but does not announce that it finds a call by any id), call ids are minted in the
/// form it reads (the conversation's partition in their last six bits), and such a call is
/// found by id as any other; once that node is gone, ids keep all 122 random bits again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_a_node_of_an_older_release_call_ids_name_their_partition_until_it_is_gone() {
    use toolmark_broker::partition::{of_conv, of_legacy_call};
    let redis = RedisProc::start(&[]);
    let opts = RedisOptions {
        heartbeat: Duration::from_millis(100),
        prefix: "mix".into(),
        ..RedisOptions::default()
    };
    let (b, _sink) = on_own_redis(&redis, opts).await;
    let b: toolmark_broker::SharedBroker = b;
    let c = conv();
    let names_partition = |ids: &[String]| ids.iter().all(|id| of_legacy_call(id) == of_conv(&c));
    let mint = |n: usize| (0..n).map(|_| b.mint_call_id(&c)).collect::<Vec<_>>();
    assert_eq!(
        crate::support::varying_bits(&mint(400)),
        122,
        "alone: all random"
    );
    // The older node's heartbeat, as it writes it (its score far ahead: live until it leaves).
    let ahead = (toolmark_broker::now_ms() + 3_600_000).to_string();
    redis.cli(&["zadd", "mix:nodes", &ahead, "node-of-0.4.0"]);
    eventually(Duration::from_secs(10), "ids naming the partition", || {
        let ids = mint(64);
        async move { names_partition(&ids).then_some(()) }
    })
    .await;
    let (id, _waiter) = call(&b, &c, "p1", Duration::from_secs(30)).await;
    assert_eq!(of_legacy_call(&id), of_conv(&c), "placed beside it: {id}");
    assert!(b.call("t", &id).await.unwrap().is_some(), "found by id");
    // Beside it, a pending call is stored as a hash, the form it reads.
    let old_form = call_key("mix", &c, &id);
    assert_eq!(redis.cli(&["type", &old_form]).trim(), "hash");
    // It leaves: random again, and the call placed meanwhile is still found.
    redis.cli(&["zrem", "mix:nodes", "node-of-0.4.0"]);
    eventually(Duration::from_secs(10), "all-random ids again", || {
        let ids = mint(400);
        async move { (crate::support::varying_bits(&ids) == 122).then_some(()) }
    })
    .await;
    assert!(
        b.call("t", &id).await.unwrap().is_some(),
        "still found by id"
    );
    // Once it is gone, one string with its expiry; the call stored as a hash beside it is
    // still answered.
    let (new_id, _new_waiter) = call(&b, &c, "p1", Duration::from_secs(30)).await;
    let new_form = call_key("mix", &c, &new_id);
    assert_eq!(redis.cli(&["type", &new_form]).trim(), "string");
    assert!(
        redis
            .cli(&["pttl", &new_form])
            .trim()
            .parse::<i64>()
            .unwrap()
            > 0
    );
    for answered in [&id, &new_id] {
        b.submit_result(&page(&c, "p1"), answered, &ok())
            .await
            .unwrap();
        let record = b.call("t", answered).await.unwrap().expect("kept");
        assert_eq!(record.state, toolmark_broker::CallState::Answered);
    }
}

/// A call's placement takes the current page's manifest order from the conversation's hash
/// (`cm`, issue 58: one read less per call) only while it still holds: a manifest written
/// since by a node that does not write `cm` (a node of 0.4.0 moves the conversation's counter
/// and leaves `cm` as it was) sends the placement back to the manifest itself, and a call is
/// checked against the new manifest, not the one `cm` names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_an_older_node_wrote_is_what_a_call_is_checked_against() {
    use toolmark_broker::PlaceError;
    use toolmark_proto::{Manifest, ToolManifestSummary};
    let redis = RedisProc::start(&[]);
    let opts = RedisOptions {
        heartbeat: Duration::from_millis(100),
        prefix: "cm".into(),
        ..RedisOptions::default()
    };
    let (n1, _) = on_own_redis(&redis, opts.clone()).await;
    let n1: toolmark_broker::SharedBroker = n1;
    let (n2, _) = node_on_own_redis(&redis, "n2", opts).await;
    let n2: toolmark_broker::SharedBroker = n2;
    let c = conv();
    let manifest = |names: &[&str]| Manifest {
        client_id: "p1".into(),
        rev: 1,
        tools: names
            .iter()
            .map(|n| {
                ToolManifestSummary::from_value(json!({
                    "name": n, "llmName": n.replace('.', "__"), "description": "d", "hints": {},
                }))
                .unwrap()
            })
            .collect(),
    };
    let by_llm_name = |llm: &str| {
        let mut req = request(&c, 1000);
        req.tool = llm.into();
        req.llm_name = Some(llm.into());
        req
    };
    n1.admit_page(&c, &LIMITS).await.unwrap();
    n1.page_identified(&c, "p1").await.unwrap();
    n1.put_manifest(
        &c,
        &manifest(&["todo.add", "todo.list"]),
        &crate::support::frame_name(),
    )
    .await
    .unwrap();
    // Node 2 reads the first manifest (order 1) and places a call against it.
    let placed = eventually(Duration::from_secs(10), "node 2 places a call", || {
        let (n2, req) = (n2.clone(), by_llm_name("todo__list"));
        async move { n2.place_call(req).await.ok() }
    })
    .await;
    assert_eq!(placed.binding.tool, "todo.list");
    let conv_key = conv_hash(&redis, "cm");
    let noted = redis.cli(&["hget", &conv_key, "cm"]);
    assert_eq!(
        noted.trim_end(),
        "p1\n1",
        "put_manifest notes the current page's order"
    );
    // The page's next manifest drops todo.list; `cm` is left naming order 1, as a node that
    // does not write it leaves it.
    n1.put_manifest(&c, &manifest(&["todo.add"]), &crate::support::frame_name())
        .await
        .unwrap();
    redis.cli(&["hset", &conv_key, "cm", "p1\n1"]);
    let refused = n2.place_call(by_llm_name("todo__list")).await;
    assert!(
        matches!(refused, Err(PlaceError::UnknownTool)),
        "checked against the manifest of order 2: {refused:?}"
    );
    let placed = n2
        .place_call(by_llm_name("todo__add"))
        .await
        .expect("a tool of the new manifest");
    assert_eq!(placed.binding.tool, "todo.add");
    n1.close().await;
    n2.close().await;
}

/// The counts of a conversation's sockets hash and of the summary of it in the conversation's
/// hash (`@`), as two maps (field → sockets), read with `redis-cli`.
fn sockets_and_summary(
    redis: &RedisProc,
    prefix: &str,
) -> (
    std::collections::BTreeMap<String, i64>,
    std::collections::BTreeMap<String, i64>,
) {
    let key = |suffix: &str| {
        redis
            .cli(&["--scan", "--pattern", &format!("{prefix}:*:{suffix}")])
            .lines()
            .next()
            .map(str::to_owned)
    };
    let mut socks = std::collections::BTreeMap::new();
    if let Some(k) = key("socks") {
        let flat = redis.cli(&["hgetall", &k]);
        let flat: Vec<&str> = flat.lines().collect();
        for pair in flat.chunks(2) {
            let n: i64 = pair[1].parse().unwrap();
            if n > 0 {
                socks.insert(pair[0].to_owned(), n);
            }
        }
    }
    let mut summary = std::collections::BTreeMap::new();
    if let Some(k) = key("conv") {
        for line in redis.cli(&["hget", &k, "@"]).lines() {
            if let Some((field, n)) = line.rsplit_once(' ') {
                summary.insert(field.to_owned(), n.parse().unwrap());
            }
        }
    }
    (socks, summary)
}

/// Both the sockets hash and its summary hold `expected` (field, sockets).
fn same(redis: &RedisProc, what: &str, expected: &[(&str, i64)]) {
    let (socks, summary) = sockets_and_summary(redis, "sum");
    let expected: std::collections::BTreeMap<String, i64> = expected
        .iter()
        .map(|(f, n)| ((*f).to_owned(), *n))
        .collect();
    assert_eq!(socks, expected, "{what}: the sockets hash");
    assert_eq!(summary, expected, "{what}: the conversation's summary");
}

/// A page's leaving reads whether its page has sockets left from the conversation's summary
/// (issue 58), and believes it only while the summary holds the leaving socket's lines: a
/// summary that lost them (here its field deleted, as an expiry of the conversation's hash
/// alone would) is not the whole truth, and the sockets hash is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_leaving_believes_the_summary_only_while_it_holds_the_leaving_socket() {
    let redis = RedisProc::start(&[]);
    let opts = quick("lv");
    let (n1, _) = node_on_own_redis(&redis, "n1", opts.clone()).await;
    let n1: toolmark_broker::SharedBroker = n1;
    let (n2, _) = node_on_own_redis(&redis, "n2", opts).await;
    let n2: toolmark_broker::SharedBroker = n2;
    let c = conv();
    // One page load with a socket on each node, each node counting the other live.
    connected_page(&n1, &c, "p1").await;
    connected_page(&n2, &c, "p1").await;
    for n in [&n1, &n2] {
        eventually(Duration::from_secs(10), "both sockets seen live", || {
            let n = n.clone();
            let c = c.clone();
            async move { (n.conversation(&c).await.ok()?.sockets == 2).then_some(()) }
        })
        .await;
    }
    let left = n1
        .release_page(&c, Some("p1"), &crate::support::release())
        .await
        .unwrap();
    assert!(!left.page_gone, "the page keeps its socket on node 2");
    connected_page(&n1, &c, "p1").await;
    // The summary loses its lines: the leaving is judged on the sockets hash.
    let conv_key = conv_hash(&redis, "lv");
    redis.cli(&["hdel", &conv_key, "@"]);
    let left = n1
        .release_page(&c, Some("p1"), &crate::support::release())
        .await
        .unwrap();
    assert!(
        !left.page_gone,
        "a summary without the leaving socket's lines is not believed: the page keeps its socket on node 2"
    );
    let left = n2
        .release_page(&c, Some("p1"), &crate::support::release())
        .await
        .unwrap();
    assert!(left.page_gone, "the page's last socket left");
    n1.close().await;
    n2.close().await;
}

/// A call's placement reads a conversation's sockets from the summary in its hash (issue 58:
/// one read per call), so every count a node moves in the sockets hash is moved there too:
/// a socket admitted, identified, released, refused past a limit, written again after Redis
/// lost its data, and cleared by a node restarted under its fixed id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_socket_count_a_node_moves_is_in_its_conversations_summary_too() {
    let mut redis = RedisProc::start(&[]);
    let opts = quick("sum");
    let (n1, _) = on_own_redis(&redis, opts.clone()).await;
    let n1: toolmark_broker::SharedBroker = n1;
    let (n2, _) = node_on_own_redis(&redis, "n2", opts.clone()).await;
    let n2: toolmark_broker::SharedBroker = n2;
    let c = conv();
    connected_page(&n1, &c, "p1").await;
    same(&redis, "one page", &[("n1", 1), ("n1|p1", 1)]);
    connected_page(&n2, &c, "p2").await;
    n1.admit_page(&c, &LIMITS).await.unwrap();
    same(
        &redis,
        "a page on each node, a socket not yet identified",
        &[("n1", 2), ("n1|p1", 1), ("n2", 1), ("n2|p2", 1)],
    );
    let one_page = toolmark_broker::AdmitLimits {
        max_connections: 100,
        max_pages_per_conversation: 1,
    };
    assert!(
        n1.admit_page(&c, &one_page).await.is_err(),
        "past the limit"
    );
    same(
        &redis,
        "a socket refused past the limit",
        &[("n1", 2), ("n1|p1", 1), ("n2", 1), ("n2|p2", 1)],
    );
    n1.release_page(&c, None, &crate::support::release())
        .await
        .unwrap();
    n2.release_page(&c, Some("p2"), &crate::support::release())
        .await
        .unwrap();
    same(&redis, "two sockets released", &[("n1", 1), ("n1|p1", 1)]);
    connected_page(&n2, &c, "p2").await;
    // Redis loses its data: each node writes its pages again, summary and all.
    redis.restart();
    eventually(
        Duration::from_secs(10),
        "both nodes wrote their pages again",
        || {
            let (socks, summary) = sockets_and_summary(&redis, "sum");
            async move { (socks.len() == 4 && summary == socks).then_some(()) }
        },
    )
    .await;
    same(
        &redis,
        "after Redis lost its data",
        &[("n1", 1), ("n1|p1", 1), ("n2", 1), ("n2|p2", 1)],
    );
    // Node 2 stops without releasing its page; started again under its id, it clears the
    // counts of its previous life from both.
    n2.close().await;
    drop(n2);
    let (n2, _) = node_on_own_redis(&redis, "n2", opts).await;
    same(&redis, "node 2 started again", &[("n1", 1), ("n1|p1", 1)]);
    // A call still reaches the page on node 1 from node 2.
    let (id, _w) = call(
        &(n2.clone() as toolmark_broker::SharedBroker),
        &c,
        "p1",
        Duration::from_secs(5),
    )
    .await;
    n1.submit_result(&page(&c, "p1"), &id, &ok()).await.unwrap();
    n1.close().await;
    n2.close().await;
}

/// A page's `needs_confirmation` is accepted only with what its confirmation needs beside the
/// result script's keys (in other slots of a Cluster): the index of its confirmId and its watch
/// in the confirmation sweep's set, without which an abandoned confirmation would never expire.
/// Redis lost right after the script answered: the submission is not reported accepted (the
/// node holds the page's frame and submits it again); submitted again, it is, with both written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_needs_confirmation_is_accepted_only_once_its_confirmation_is_watched() {
    let redis = RedisProc::start(&[]);
    let proxy = toolmark_testkit::fault::FaultProxy::to(&redis);
    let opts = RedisOptions {
        command_timeout: Duration::from_millis(500),
        ..quick("tm")
    };
    let b: toolmark_broker::SharedBroker = RedisBroker::connect(
        redis_url::parse(&proxy.url()).unwrap(),
        "n1",
        std::sync::Arc::new(Sink::default()),
        opts,
    )
    .await
    .unwrap();
    let c = conv();
    connected_page(&b, &c, "p1").await;
    let from = page(&c, "p1");
    let (id, _w) = call(&b, &c, "p1", Duration::from_secs(30)).await;
    let received = toolmark_broker::now_ms();
    // The result script's reply (its command names the call) comes back; then Redis is lost.
    proxy.stall_after_reply(&id, 1);
    let first = b.submit_result(&from, &id, &needs("k1")).await;
    assert!(
        matches!(first, Err(toolmark_broker::SubmitError::Broker(_))),
        "a result whose confirmation is not watched was reported accepted: {first:?}"
    );
    proxy.resume();
    eventually(
        Duration::from_secs(10),
        "submitted again, it is accepted",
        || {
            let (b, from, id) = (b.clone(), from.clone(), id.clone());
            async move {
                b.submit_result_again(&from, &id, &needs("k1"), received)
                    .await
                    .ok()
            }
        },
    )
    .await;
    let watched = redis.cli(&["--scan", "--pattern", "tm*pendingconfirms"]);
    let watched = watched.trim();
    assert!(!watched.is_empty(), "no confirmation sweep's set");
    assert_eq!(redis.cli(&["ZCARD", watched]).trim(), "1");
    assert_eq!(
        redis
            .cli(&["--scan", "--pattern", "tm*confirmidx:k1"])
            .lines()
            .count(),
        1,
        "the confirmId's index"
    );
    b.close().await;
}
