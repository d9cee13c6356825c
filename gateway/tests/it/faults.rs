//! Nodes under faults and at their edges, over one Redis (or Redis Cluster in cluster mode): a
//! Redis restart, a node killed with SIGKILL, Sentinel and TLS URLs, pages coming back after a
//! drain, and a drain that emits every event before the node stops.

use std::time::{Duration, Instant};

use serde_json::json;

use toolmark_testkit::redis::RedisProc;

use crate::harness::{ACME_KEY, Gateway, WAIT, config_with, fresh_prefix, page_at, redis_broker};
use crate::nodes::tools;

#[tokio::test]
async fn a_redis_restart_loses_nothing_pages_stay_and_calls_resume_within_5_seconds() {
    let mut redis = RedisProc::start(&[]);
    let broker = redis_broker(&redis.url(), &fresh_prefix());
    let n1 = Gateway::start_config(&config_with(&broker, ""), Some("node-1".into())).await;
    let n2 = Gateway::start_config(&config_with(&broker, ""), Some("node-2".into())).await;
    let mut page = n1.page("acme", "u1", "c1").await;
    page.manifest(1, tools()).await;
    n2.acme().wait_current("u1", "c1", &page.client_id).await;

    redis.kill();
    // While Redis is away the API answers 503 with Retry-After, quickly.
    let started = Instant::now();
    let down = n2
        .acme()
        .post(
            "/users/u1/conversations/c1/calls",
            json!({"tool": "todo.add"}),
        )
        .await;
    assert_eq!(
        (down.status, down.body["code"].as_str()),
        (503, Some("unavailable")),
        "{}",
        down.body
    );
    assert!(down.headers.contains_key("retry-after"));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(
        n2.http
            .get(n2.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        503
    );

    redis.restart();
    let back = Instant::now();
    // Calls work again without the page reconnecting: the same socket answers. Each attempt
    // is told apart by its input: an earlier attempt's call or cancel may arrive late.
    for attempt in 1.. {
        let acme = n2.acme();
        let pending = tokio::spawn(async move {
            acme.post(
                "/users/u1/conversations/c1/calls",
                json!({"tool": "todo.add", "input": {"attempt": attempt}, "timeoutMs": 1000}),
            )
            .await
        });
        let until = Instant::now() + Duration::from_millis(500);
        let mut mine = None;
        while let Some(frame) = page
            .try_recv(until.saturating_duration_since(Instant::now()))
            .await
        {
            if frame["type"] == "call" && frame["input"]["attempt"] == attempt {
                mine = Some(frame);
                break;
            }
        }
        if let Some(frame) = mine {
            page.answer(
                frame["id"].as_str().unwrap(),
                json!({"status": "ok", "data": "after restart"}),
            )
            .await;
            let a = pending.await.unwrap();
            assert_eq!(a.body["outcome"]["data"], "after restart", "{}", a.body);
            break;
        }
        let _ = pending.await;
        assert!(
            back.elapsed() < Duration::from_secs(5),
            "calls did not resume within 5 s of Redis' return"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        back.elapsed() < Duration::from_secs(5),
        "took {:?}",
        back.elapsed()
    );
    assert_eq!(
        n1.metric("toolmark_page_closes_total{code=\"1001\"}").await,
        0.0
    );
}

/// How many keys of `redis` match `pattern`.
fn keys_matching(redis: &RedisProc, pattern: &str) -> usize {
    redis
        .cli(&["KEYS", pattern])
        .lines()
        .filter(|l| !l.is_empty())
        .count()
}

#[tokio::test]
async fn a_node_loads_its_scripts_before_it_starts_and_before_it_republishes_to_a_restarted_redis()
{
    let mut redis = RedisProc::start(&[]);
    let prefix = fresh_prefix();
    let broker = redis_broker(&redis.url(), &prefix);
    let n1 = Gateway::start_config(&config_with(&broker, ""), Some("node-1".into())).await;
    // Forty conversations, connected at once: without the scripts loaded first, each of their
    // first writes would fail with NOSCRIPT and load its script again.
    let users: Vec<String> = (0..40).map(|i| format!("u{i}")).collect();
    let mut pages =
        futures_util::future::join_all(users.iter().map(|u| n1.page("acme", u, "c1"))).await;
    futures_util::future::join_all(pages.iter_mut().map(|p| p.manifest(1, tools()))).await;
    for (i, p) in pages.iter().enumerate() {
        n1.acme()
            .wait_current(&format!("u{i}"), "c1", &p.client_id)
            .await;
    }
    let noscript = |redis: &RedisProc| {
        redis
            .cli(&["INFO", "errorstats"])
            .lines()
            .find(|l| l.starts_with("errorstat_NOSCRIPT"))
            .map(str::to_owned)
    };
    assert_eq!(noscript(&redis), None, "at start");

    redis.restart();
    // The node writes its conversations again (socket counts, then manifests); waited for on
    // Redis itself, since reading a conversation through the API runs a script too.
    let deadline = Instant::now() + WAIT;
    while keys_matching(&redis, &format!("{prefix}*:manifest:*")) < 40 {
        assert!(
            Instant::now() < deadline,
            "the node did not re-publish its 40 manifests: {} keys",
            keys_matching(&redis, &format!("{prefix}*"))
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(keys_matching(&redis, &format!("{prefix}*:socks")), 40);
    assert_eq!(noscript(&redis), None, "after the restart");
    // And calls work on the scripts loaded, once the node listens on its 64 partition channels
    // again (a frame published before that has no one to reach).
    let deadline = Instant::now() + WAIT;
    while redis
        .cli(&["PUBSUB", "SHARDCHANNELS"])
        .lines()
        .filter(|l| !l.is_empty())
        .count()
        < 64
    {
        assert!(
            Instant::now() < deadline,
            "the node did not subscribe again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let acme = n1.acme();
    let pending = tokio::spawn(async move {
        acme.post(
            "/users/u0/conversations/c1/calls",
            json!({"tool": "todo.add", "input": {}}),
        )
        .await
    });
    let frame = pages[0].recv().await;
    pages[0]
        .answer(
            frame["id"].as_str().unwrap(),
            json!({"status": "ok", "data": 1}),
        )
        .await;
    assert_eq!(pending.await.unwrap().body["outcome"]["data"], 1);
    assert_eq!(noscript(&redis), None, "after a call");
}

/// A gateway node as a separate process, so that it can be killed with SIGKILL.
struct NodeProc {
    child: std::process::Child,
    addr: std::net::SocketAddr,
}

impl NodeProc {
    fn start(config: &std::path::Path, id: &str) -> NodeProc {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_toolmark-gateway"));
        cmd.args(["--config", config.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0", "--node-id", id])
            .env("RUST_LOG", "warn");
        let (child, addr) =
            toolmark_testkit::process::start_listening(toolmark_testkit::process::quiet(cmd));
        NodeProc { child, addr }
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn sigkill_of_a_node_with_100_pages_moves_them_and_orphaned_calls_time_out() {
    let redis = toolmark_testkit::redis::shared_url();
    let config = std::env::temp_dir().join(format!("toolmark-nodes-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(
        &config,
        config_with(&redis_broker(&redis, &fresh_prefix()), ""),
    )
    .unwrap();
    let mut victim = NodeProc::start(&config, "victim");
    let survivors = [
        NodeProc::start(&config, "survivor-1"),
        NodeProc::start(&config, "survivor-2"),
    ];
    let http = crate::harness::http_client();
    let agent = |addr: std::net::SocketAddr| {
        crate::harness::Agent::new(&format!("http://{addr}"), "acme", ACME_KEY, http.clone())
    };

    let mut pages = Vec::new();
    for i in 0..100 {
        let mut p = page_at(victim.addr, "acme", &format!("u{i}"), "c1").await;
        p.manifest(1, tools()).await;
        pages.push(p);
    }
    agent(survivors[0].addr)
        .wait_current("u99", "c1", &pages[99].client_id)
        .await;
    // An agent request waiting on the victim when it dies (the victim must not time it out
    // itself before the kill: 3 s is time enough on a busy machine).
    let mut events = agent(survivors[0].addr).events("?user=u0", None).await;
    let orphan = agent(victim.addr).call_later(
        "u0",
        "c1",
        json!({"tool": "todo.add", "input": {}, "timeoutMs": 3000}),
    );
    let orphan_frame = pages[0].recv().await;
    let orphan_id = orphan_frame["id"].as_str().unwrap().to_owned();

    let _ = std::process::Command::new("kill")
        .args(["-KILL", &victim.child.id().to_string()])
        .status();
    let _ = victim.child.wait();
    // Its agent request fails with the connection (the outcome is read below, from any node).
    let _ = orphan.await;

    // Every page reconnects (same clientId, no manifest resend) to a surviving node.
    for (i, p) in pages.iter_mut().enumerate() {
        let client_id = p.client_id.clone();
        let seen = std::mem::take(&mut p.seen);
        *p = page_at(survivors[i % 2].addr, "acme", &format!("u{i}"), "c1").await;
        // The same page load: same clientId, and it remembers the ids it already has.
        p.client_id = client_id;
        p.seen = seen;
    }
    // The orphaned call is timed out by contract: call.timeout is emitted, the record says so.
    let ev = events.next_of("call.timeout").await;
    assert_eq!(ev.data["data"]["id"], orphan_id.as_str());
    let record = agent(survivors[1].addr)
        .get(&format!("/calls/{orphan_id}"))
        .await
        .body;
    assert_eq!(record["state"], "timed_out");
    // Reported for docs/benchmarks.md (not asserted: timing is measured, never tested).
    let at = |v: &serde_json::Value| humantime::parse_rfc3339(v.as_str().unwrap_or_default()).ok();
    if let (Some(emitted), Some(deadline)) = (at(&ev.data["timestamp"]), at(&record["deadline"])) {
        let late = emitted.duration_since(deadline).unwrap_or_default();
        eprintln!("orphaned call: call.timeout {late:?} after its deadline");
    }
    // And calls flow again to every page (page 0 also gets the orphaned call's cancel).
    let mut orphan_cancelled = false;
    for (i, p) in pages.iter_mut().enumerate() {
        let pending = agent(survivors[(i + 1) % 2].addr).call_later(
            &format!("u{i}"),
            "c1",
            json!({"tool": "todo.add", "input": {"i": i}}),
        );
        // Page 0 may first see the cancel of its orphaned call.
        let frame = loop {
            let f = p.recv().await;
            if f["type"] == "cancel" && f["id"] == orphan_id.as_str() {
                orphan_cancelled = true;
            }
            if f["type"] == "call" {
                break f;
            }
        };
        p.answer(
            frame["id"].as_str().unwrap(),
            json!({"status": "ok", "data": i}),
        )
        .await;
        let a = pending.await.unwrap();
        assert_eq!(a.body["outcome"]["data"], i, "page {i}: {}", a.body);
    }
    assert!(
        orphan_cancelled,
        "the page of the orphaned call got its cancel"
    );
    std::fs::remove_file(config).unwrap();
}

#[tokio::test]
async fn a_sentinel_url_finds_the_master() {
    let master = RedisProc::start(&[]);
    let sentinel = RedisProc::sentinel(master.port, "toolmark");
    let url = format!("redis-sentinel://127.0.0.1:{}/toolmark", sentinel.port);
    let broker = redis_broker(&url, &fresh_prefix());
    let gw = Gateway::start_config(&config_with(&broker, ""), Some("node-s".into())).await;
    let mut page = gw.page("acme", "u1", "c1").await;
    page.manifest(1, tools()).await;
    gw.acme().wait_current("u1", "c1", &page.client_id).await;
    let pending = gw
        .acme()
        .call_later("u1", "c1", json!({"tool": "todo.add", "input": {}}));
    let frame = page.recv().await;
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "ok", "data": "via sentinel"}),
    )
    .await;
    assert_eq!(
        pending.await.unwrap().body["outcome"]["data"],
        "via sentinel"
    );
    // The state is in the master the Sentinel named.
    assert!(master.cli(&["dbsize"]).trim().parse::<u64>().unwrap() > 0);
}

#[tokio::test]
async fn a_rediss_url_speaks_tls_to_redis() {
    use std::io::BufRead;
    let keys = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/keys");
    let tls = RedisProc::start_tls(keys);
    let url = format!("rediss://localhost:{}", tls.port);
    let config = std::env::temp_dir().join(format!("toolmark-tls-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(
        &config,
        config_with(&redis_broker(&url, &fresh_prefix()), ""),
    )
    .unwrap();
    // The gateway trusts the test CA through the standard variable of the system roots.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolmark-gateway"))
        .args([
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .env("SSL_CERT_FILE", format!("{keys}/ca.crt"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    std::fs::remove_file(config).unwrap();
    assert!(
        line.starts_with("toolmark-gateway listening on"),
        "the gateway did not start over TLS Redis: {line:?}"
    );
}

#[tokio::test]
async fn calls_made_while_drained_pages_reconnect_are_accepted_and_delivered() {
    let mut nodes = Gateway::start_nodes(2, "").await;
    let mut page = nodes[0].page("acme", "u1", "c1").await;
    page.manifest(1, tools()).await;
    nodes[1]
        .acme()
        .wait_current("u1", "c1", &page.client_id)
        .await;
    nodes[0].stop();
    assert_eq!(page.closed().await, 1001);
    // The page is away, reconnecting: the call is accepted, not refused with no_page.
    let deadline = Instant::now() + WAIT;
    let pending = loop {
        let s = nodes[1].acme().get("/users/u1/conversations/c1").await;
        if s.body["pages"].as_array().is_some_and(Vec::is_empty) {
            break nodes[1].acme().call_later(
                "u1",
                "c1",
                json!({"tool": "todo.add", "input": {}, "timeoutMs": 10000}),
            );
        }
        assert!(
            Instant::now() < deadline,
            "the drained page was never released"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut back = nodes[1].page("acme", "u1", "c1").await;
    back.client_id = page.client_id.clone();
    crate::harness::answer_ok(&mut back, pending, "after the drain").await;
    nodes.truncate(1);
}

/// Contract: events are never lost while Redis keeps its data. A node stopped while it holds
/// hundreds of pages emits every `page.disconnected` before it closes its Redis connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_node_emits_every_page_disconnected_before_it_stops() {
    const PAGES: usize = 400;
    // Time enough for 400 pages' releases on a busy machine: the suite's 2 s is for one page.
    let mut nodes = Gateway::start_nodes_with(2, |broker| {
        crate::harness::config_with(broker, "")
            .replace("drain_timeout_ms = 2000", "drain_timeout_ms = 30000")
    })
    .await;
    let mut events = nodes[1].acme().events("", None).await;
    let mut pages = Vec::new();
    for i in 0..PAGES {
        let mut page = nodes[0].page("acme", "u1", &format!("drain-{i}")).await;
        page.manifest(1, json!([])).await;
        pages.push(page);
    }
    let last = pages.last().unwrap().client_id.clone();
    nodes[1]
        .acme()
        .wait_current("u1", &format!("drain-{}", PAGES - 1), &last)
        .await;
    nodes[0].stop();
    // The pages close as browsers do once they read the 1001.
    let closing = tokio::spawn(async move {
        for mut p in pages {
            assert_eq!(p.closed().await, 1001);
        }
    });
    let stopped = nodes[0].task.take().unwrap();
    tokio::time::timeout(Duration::from_secs(30), stopped)
        .await
        .expect("the node stops within its drain timeout")
        .unwrap();
    closing.await.unwrap();
    let mut gone = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while gone.len() < PAGES && Instant::now() < deadline {
        match events.next_within(Duration::from_secs(1)).await {
            Some(e) if e.event == "page.disconnected" => {
                gone.insert(e.data["data"]["conversation"].as_str().unwrap().to_owned());
            }
            _ => {}
        }
    }
    assert_eq!(
        gone.len(),
        PAGES,
        "page.disconnected events lost at the drain"
    );
}

/// Waits until both `nodes` answer `GET /admin/v1/tenants/{id}` with `status`: how long it took.
async fn admin_status_on_every_node(
    nodes: &[Gateway],
    id: &str,
    status: u16,
    what: &str,
) -> Duration {
    let started = Instant::now();
    crate::admin::until(what, || async {
        for n in nodes {
            let r = crate::admin::admin(n, "GET", &format!("/admin/v1/tenants/{id}"), None).await;
            if r.status != status {
                return false;
            }
        }
        true
    })
    .await;
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_platforms_records_survive_a_redis_wipe_while_a_node_lives_and_deleted_ones_stay_gone()
{
    // Its own Redis (it is flushed and restarted): once, in the memory suite.
    if toolmark_testkit::redis::mode() != toolmark_testkit::redis::Mode::Memory {
        eprintln!("runs once, in the memory suite (on a Redis of its own)");
        return;
    }
    let mut redis = RedisProc::start(&[]);
    let broker = redis_broker(&redis.url(), &fresh_prefix());
    let nodes = Gateway::start_admin_nodes_on(2, &broker, None, &[]).await;
    let (n1, n2) = (&nodes[0], &nodes[1]);
    let secrets = crate::admin::create(n1, "kept").await;
    let key = secrets["apiKey"].as_str().unwrap().to_owned();
    crate::admin::create(n1, "deleted").await;
    let gone = crate::admin::admin(n1, "DELETE", "/admin/v1/tenants/deleted", None).await;
    assert_eq!(gone.status, 204, "{}", gone.body);
    admin_status_on_every_node(&nodes, "kept", 200, "both nodes hold the tenant").await;
    admin_status_on_every_node(&nodes, "deleted", 404, "both nodes saw the deletion").await;
    let token = crate::admin::minted(n2, "kept", &key, "u1", "c1").await;
    let mut page = crate::admin::live_page(n2, "kept", &key, &token, "u1").await;

    for fault in ["FLUSHALL", "a restart without persistence"] {
        if fault == "FLUSHALL" {
            assert_eq!(redis.cli(&["FLUSHALL"]).trim(), "OK");
        } else {
            redis.restart();
        }
        // Within 5 s every node serves the tenant again from the catalog, which a node wrote
        // back; the deleted one stays deleted.
        let took = admin_status_on_every_node(&nodes, "kept", 200, fault).await;
        eprintln!("after {fault}: the catalog held the tenant again on both nodes after {took:?}");
        assert!(took < Duration::from_secs(5), "{fault}: {took:?}");
        let revision = redis.cli(&["KEYS", "*catalog*"]);
        assert!(!revision.trim().is_empty(), "{fault}: nothing written back");
        admin_status_on_every_node(&nodes, "deleted", 404, fault).await;
        // Its API key works on either node; a new page is admitted.
        for n in [n1, n2] {
            let minted = n
                .agent("kept", &key)
                .post("/tokens", json!({"user": "u2", "conversation": "c1"}))
                .await;
            assert_eq!(minted.status, 201, "{fault}: {}", minted.body);
        }
        let token = crate::admin::minted(n1, "kept", &key, "u3", "c1").await;
        n1.connect("kept", &token, Some(crate::harness::ACME_ORIGIN))
            .await
            .expect("a new page of the tenant is admitted");
        // The open page was never closed for it.
        assert!(
            tokio::time::timeout(Duration::from_millis(500), page.closed())
                .await
                .is_err(),
            "{fault}: the tenant's page was closed"
        );
    }
}
