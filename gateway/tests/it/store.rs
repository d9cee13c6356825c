//! The platform's records in a database (`admin.store`): what an operator sees with real
//! PostgreSQL, SQLite and Redis servers when Redis loses its data, every node restarts, the
//! database goes down and comes back, a node starts without it, and records move stores.
//! Each test runs once, in the memory suite, on servers of its own.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::json;
use toolmark_testkit::postgres::PostgresProc;
use toolmark_testkit::redis::{Mode, RedisProc, mode};

use crate::admin::{admin, call_ok, create, live_page, minted, until};
use crate::harness::{Gateway, admin_section, config_with, fresh_prefix, redis_broker};

static POSTGRES: OnceLock<PostgresProc> = OnceLock::new();

fn once() -> bool {
    if mode() != Mode::Memory {
        eprintln!("runs once, in the memory suite (on servers of its own)");
        return false;
    }
    true
}

async fn stop_all(nodes: Vec<Gateway>) {
    for mut n in nodes {
        n.stop();
        if let Some(t) = n.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(20), t).await;
        }
    }
}

/// Waits until every node answers `GET /admin/v1/tenants/{id}` with `status`; how long it took.
async fn on_every_node(nodes: &[Gateway], id: &str, status: u16, what: &str) -> Duration {
    let started = Instant::now();
    until(what, || async {
        for n in nodes {
            if admin(n, "GET", &format!("/admin/v1/tenants/{id}"), None)
                .await
                .status
                != status
            {
                return false;
            }
        }
        true
    })
    .await;
    started.elapsed()
}

async fn readyz(n: &Gateway) -> u16 {
    n.http
        .get(n.url("/readyz"))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// With PostgreSQL, a Redis wipe and every node restarting lose no record: tenants, their API
/// keys and the audit log are all there, and a tenant deleted before stays deleted. A change
/// on one node holds on the other within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_in_postgres_survive_a_redis_wipe_and_every_node_restarting() {
    if !once() {
        return;
    }
    let pg = POSTGRES.get_or_init(PostgresProc::start);
    let store = pg.database();
    let redis = RedisProc::start(&[]);
    let broker = redis_broker(&redis.url(), &fresh_prefix());
    let env = [("TOOLMARK_ADMIN__STORE", store.as_str())];
    let nodes = Gateway::start_admin_nodes_on(2, &broker, None, &env).await;
    let secrets = create(&nodes[0], "kept").await;
    let key = secrets["apiKey"].as_str().unwrap().to_owned();
    let took = on_every_node(&nodes, "kept", 200, "the other node holds the new tenant").await;
    eprintln!("a tenant created on one node held on the other after {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    create(&nodes[1], "deleted").await;
    let gone = admin(&nodes[0], "DELETE", "/admin/v1/tenants/deleted", None).await;
    assert_eq!(gone.status, 204, "{}", gone.body);
    on_every_node(&nodes, "deleted", 404, "both nodes saw the deletion").await;
    let db = store.rsplit('/').next().unwrap();
    assert_eq!(
        pg.sql(db, "SELECT string_agg(id, ',') FROM toolmark_records")
            .unwrap(),
        "kept",
        "the records are in the database"
    );

    assert_eq!(redis.cli(&["FLUSHALL"]).trim(), "OK");
    stop_all(nodes).await;
    let nodes = Gateway::start_admin_nodes_on(2, &broker, None, &env).await;
    on_every_node(&nodes, "kept", 200, "the tenant is back on every node").await;
    on_every_node(&nodes, "deleted", 404, "the deleted tenant stays deleted").await;
    for n in &nodes {
        let token = n
            .agent("kept", &key)
            .post("/tokens", json!({"user": "u1", "conversation": "c1"}))
            .await;
        assert_eq!(token.status, 201, "its API key works: {}", token.body);
    }
    let audit = admin(&nodes[1], "GET", "/admin/v1/audit", None).await;
    let kinds: Vec<&str> = audit.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["tenant.created", "tenant.created", "tenant.deleted"],
        "the audit log survived too"
    );
    stop_all(nodes).await;
}

/// While PostgreSQL does not answer, pages and calls go on, `/readyz` stays ready, and an
/// admin write answers 503 `unavailable` having changed nothing; once it answers again,
/// writes work and every node holds them within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_database_is_down_calls_go_on_and_admin_writes_answer_503() {
    if !once() {
        return;
    }
    let mut pg = PostgresProc::start();
    let store = pg.database();
    let redis = RedisProc::start(&[]);
    let broker = redis_broker(&redis.url(), &fresh_prefix());
    let env = [("TOOLMARK_ADMIN__STORE", store.as_str())];
    let nodes = Gateway::start_admin_nodes_on(2, &broker, None, &env).await;
    let secrets = create(&nodes[0], "acme2").await;
    let key = secrets["apiKey"].as_str().unwrap().to_owned();
    let token = minted(&nodes[1], "acme2", &key, "u1", "c1").await;
    let mut page = live_page(&nodes[1], "acme2", &key, &token, "u1").await;

    pg.kill();
    let refused = admin(
        &nodes[0],
        "POST",
        "/admin/v1/tenants",
        Some(json!({"id": "during", "allowedOrigins": ["https://a.example"]})),
    )
    .await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.body["code"], "unavailable", "{}", refused.body);
    let patched = admin(
        &nodes[1],
        "PATCH",
        "/admin/v1/tenants/acme2",
        Some(json!({"allowedOrigins": ["https://b.example"]})),
    )
    .await;
    assert_eq!(patched.status, 503, "{}", patched.body);
    // Calls go on from the nodes' snapshots, across nodes, and both nodes stay ready.
    for n in &nodes {
        call_ok(&n.agent("acme2", &key), &mut page, "u1").await;
        assert_eq!(readyz(n).await, 200);
    }
    let fresh = minted(&nodes[0], "acme2", &key, "u2", "c1").await;
    nodes[0]
        .connect("acme2", &fresh, Some(crate::harness::ACME_ORIGIN))
        .await
        .expect("a new page is admitted while the database is down");

    pg.start_again();
    until("admin writes work again", || async {
        admin(
            &nodes[0],
            "POST",
            "/admin/v1/tenants",
            Some(json!({"id": "after", "allowedOrigins": ["https://a.example"]})),
        )
        .await
        .status
            == 201
    })
    .await;
    let took = on_every_node(&nodes, "after", 200, "the other node holds it").await;
    assert!(took < Duration::from_secs(1), "{took:?}");
    on_every_node(&nodes, "during", 404, "the refused write changed nothing").await;
    let acme = admin(&nodes[1], "GET", "/admin/v1/tenants/acme2", None).await;
    assert_eq!(
        acme.body["allowedOrigins"],
        json!([crate::harness::ACME_ORIGIN]),
        "the refused PATCH changed nothing"
    );
    stop_all(nodes).await;
}

/// A node that starts while its database does not answer says so and is not ready; it
/// becomes ready, with the records, once the database answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_never_reached_its_database_is_not_ready_until_it_does() {
    if !once() {
        return;
    }
    let mut pg = PostgresProc::start();
    let store = pg.database();
    let redis = RedisProc::start(&[]);
    let broker = redis_broker(&redis.url(), &fresh_prefix());
    let env = [("TOOLMARK_ADMIN__STORE", store.as_str())];
    let first = Gateway::start_admin_nodes_on(1, &broker, None, &env).await;
    create(&first[0], "early").await;
    stop_all(first).await;

    pg.kill();
    let nodes = Gateway::start_admin_nodes_on(1, &broker, None, &env).await;
    let n = &nodes[0];
    let r = n.http.get(n.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.text().await.unwrap().contains("admin store"));
    assert!(
        n.metrics()
            .await
            .contains("toolmark_admin_snapshot_age_seconds -1"),
        "the metric says it never read the store"
    );
    pg.start_again();
    until("ready once the database answers", || async {
        readyz(n).await == 200
    })
    .await;
    on_every_node(&nodes, "early", 200, "the records are served").await;
    assert!(
        n.metrics()
            .await
            .contains("toolmark_admin_store_duration_seconds_count{op=\"records\"}"),
        "store latency is measured"
    );
    stop_all(nodes).await;
}

/// One node on the memory broker with a SQLite file keeps its tenants across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_with_sqlite_keeps_its_tenants_across_a_restart() {
    if !once() {
        return;
    }
    let file = std::env::temp_dir().join(format!("toolmark-gw-{}.db", uuid::Uuid::new_v4()));
    let store = format!("sqlite://{}", file.display());
    let env = [("TOOLMARK_ADMIN__STORE", store.as_str())];
    let memory = "[broker]\nkind = \"memory\"\n";
    let nodes = Gateway::start_admin_nodes_on(1, memory, None, &env).await;
    let key = create(&nodes[0], "local")
        .await
        .get("apiKey")
        .and_then(|k| k.as_str())
        .unwrap()
        .to_owned();
    stop_all(nodes).await;
    let nodes = Gateway::start_admin_nodes_on(1, memory, None, &env).await;
    on_every_node(&nodes, "local", 200, "the tenant is back after the restart").await;
    let token = nodes[0]
        .agent("local", &key)
        .post("/tokens", json!({"user": "u1", "conversation": "c1"}))
        .await;
    assert_eq!(token.status, 201, "{}", token.body);
    stop_all(nodes).await;
    let _ = std::fs::remove_file(file);
}

/// `toolmark-gateway --copy-records-to` moves the records from the broker to PostgreSQL,
/// twice without harm; nodes on the database then serve the tenants, their sealed secrets
/// opening as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_move_from_the_broker_to_postgres_with_one_command() {
    if !once() {
        return;
    }
    let pg = POSTGRES.get_or_init(PostgresProc::start);
    let store = pg.database();
    let redis = RedisProc::start(&[]);
    let broker = redis_broker(&redis.url(), &fresh_prefix());
    let nodes = Gateway::start_admin_nodes_on(1, &broker, None, &[]).await;
    let key = create(&nodes[0], "moved")
        .await
        .get("apiKey")
        .and_then(|k| k.as_str())
        .unwrap()
        .to_owned();
    stop_all(nodes).await;

    let dir = std::env::temp_dir().join(format!("toolmark-move-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    std::fs::write(&config, config_with(&broker, &admin_section())).unwrap();
    let run = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_toolmark-gateway"))
            .arg("--config")
            .arg(&config)
            .args(["--copy-records-to", &store])
            .output()
            .expect("the binary runs")
    };
    let first = run();
    let said = String::from_utf8_lossy(&first.stdout);
    assert!(
        first.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(said.contains("copied 1 records (0 already there"), "{said}");
    let again = run();
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success());
    assert!(said.contains("copied 0 records (1 already there"), "{said}");
    let same = std::process::Command::new(env!("CARGO_BIN_EXE_toolmark-gateway"))
        .arg("--config")
        .arg(&config)
        .args(["--copy-records-to", "broker"])
        .output()
        .unwrap();
    assert_eq!(
        same.status.code(),
        Some(2),
        "copying a store onto itself is refused"
    );
    assert!(String::from_utf8_lossy(&same.stderr).contains("--copy-records-to"));

    // The nodes move to the database (another Redis prefix: nothing of the broker's records).
    let env = [("TOOLMARK_ADMIN__STORE", store.as_str())];
    let moved_broker = redis_broker(&redis.url(), &fresh_prefix());
    let nodes = Gateway::start_admin_nodes_on(1, &moved_broker, None, &env).await;
    on_every_node(&nodes, "moved", 200, "the moved tenant is served").await;
    let token = nodes[0]
        .agent("moved", &key)
        .post("/tokens", json!({"user": "u1", "conversation": "c1"}))
        .await;
    assert_eq!(token.status, 201, "its key works: {}", token.body);
    let page = nodes[0]
        .connect(
            "moved",
            token.body["token"].as_str().unwrap(),
            Some(crate::harness::ACME_ORIGIN),
        )
        .await;
    assert!(
        page.is_ok(),
        "its sealed token key opens: a page is admitted"
    );
    stop_all(nodes).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The restore drill of `docs/deploy.md`: a `pg_dump` of the store, restored into a new
/// database, serves the tenants with their keys and sealed secrets, the audit log with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_dump_of_the_store_restores_every_record() {
    if !once() {
        return;
    }
    let pg = POSTGRES.get_or_init(PostgresProc::start);
    let store = pg.database();
    let redis = RedisProc::start(&[]);
    let broker = redis_broker(&redis.url(), &fresh_prefix());
    let env = [("TOOLMARK_ADMIN__STORE", store.as_str())];
    let nodes = Gateway::start_admin_nodes_on(1, &broker, None, &env).await;
    let key = create(&nodes[0], "backed")
        .await
        .get("apiKey")
        .and_then(|k| k.as_str())
        .unwrap()
        .to_owned();
    stop_all(nodes).await;

    let backup = pg.dump(store.rsplit('/').next().unwrap());
    let restored = pg.restore(&backup);
    let env = [("TOOLMARK_ADMIN__STORE", restored.as_str())];
    let nodes = Gateway::start_admin_nodes_on(1, &broker, None, &env).await;
    on_every_node(
        &nodes,
        "backed",
        200,
        "the restored database serves the tenant",
    )
    .await;
    let token = minted(&nodes[0], "backed", &key, "u1", "c1").await;
    nodes[0]
        .connect("backed", &token, Some(crate::harness::ACME_ORIGIN))
        .await
        .expect("its sealed token key opens: a page is admitted");
    let audit = admin(&nodes[0], "GET", "/admin/v1/audit", None).await;
    assert_eq!(audit.body["entries"][0]["kind"], "tenant.created");
    // Writes go on in the restored database (its revision and sequences came with it).
    create(&nodes[0], "after-restore").await;
    stop_all(nodes).await;
}
