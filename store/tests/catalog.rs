//! The catalog's contract, one suite on every store a deployment may choose: the memory
//! broker, Redis, a six-node Redis Cluster, a SQLite file and a PostgreSQL database (real
//! servers, started here). Then what only a database does: its schema migrated from empty and
//! from the previous step, by nodes starting at once; the audit log's retention crossed; the
//! server killed under writes and started again; records moved from one store to another.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use toolmark_config::redis_url;

use toolmark_broker::catalog::{Catalog, CatalogError, Expect, Restored};
use toolmark_broker::memory::MemoryBroker;
use toolmark_broker::redis::{RedisBroker, RedisOptions};
use toolmark_broker::{BrokerError, PageSink};
use toolmark_config::StoreSettings;
use toolmark_store::{SqlCatalog, Target, unobserved};
use toolmark_testkit::postgres::PostgresProc;
use toolmark_testkit::redis::{RedisCluster, RedisProc};

const YEAR: Duration = Duration::from_secs(365 * 86_400);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    Memory,
    Redis,
    Cluster,
    Sqlite,
    Postgres,
}

static REDIS: OnceLock<RedisProc> = OnceLock::new();
static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
static POSTGRES: OnceLock<PostgresProc> = OnceLock::new();

fn postgres() -> &'static PostgresProc {
    POSTGRES.get_or_init(PostgresProc::start)
}

#[derive(Debug)]
struct NoPages;

impl PageSink for NoPages {
    fn deliver(&self, _: &toolmark_broker::ConvKey, _: &str, _: Arc<str>) {}
}

/// A broker of its own (memory), or a fresh prefix on the shared Redis or Cluster.
async fn broker(store: Store, prefix: &str, node: &str) -> Arc<dyn Catalog> {
    let url = match store {
        Store::Redis => REDIS.get_or_init(|| RedisProc::start(&[])).url(),
        Store::Cluster => CLUSTER.get_or_init(RedisCluster::start).url(),
        _ => return Arc::new(MemoryBroker::new(node, Arc::new(NoPages))),
    };
    on_redis(&url, prefix, node).await
}

/// A node's catalog on the Redis at `url`, under `prefix`.
async fn on_redis(url: &str, prefix: &str, node: &str) -> Arc<dyn Catalog> {
    let opts = RedisOptions {
        prefix: prefix.to_owned(),
        ..RedisOptions::default()
    };
    RedisBroker::connect(
        redis_url::parse(url).unwrap(),
        node,
        Arc::new(NoPages),
        opts,
    )
    .await
    .expect("the broker connects")
}

/// Opens a database store and waits for its schema.
async fn database(settings: &StoreSettings, retention: Duration) -> Arc<SqlCatalog> {
    let data = Arc::new(MemoryBroker::new("data", Arc::new(NoPages)));
    let c = SqlCatalog::open(settings, retention, data, unobserved()).expect("the URL opens");
    assert!(
        c.migrated(Duration::from_secs(30)).await,
        "the schema is migrated"
    );
    c
}

fn sqlite_file() -> StoreSettings {
    StoreSettings::Sqlite(
        std::env::temp_dir().join(format!("toolmark-store-{}.db", uuid::Uuid::new_v4())),
    )
}

/// Two nodes' handles on one fresh store.
async fn two_nodes(store: Store) -> (Arc<dyn Catalog>, Arc<dyn Catalog>) {
    let prefix = format!("s{}", uuid::Uuid::new_v4().simple());
    match store {
        Store::Memory => {
            let b = broker(store, &prefix, "n1").await;
            (b.clone(), b)
        }
        Store::Redis | Store::Cluster => (
            broker(store, &prefix, "n1").await,
            broker(store, &prefix, "n2").await,
        ),
        Store::Sqlite => {
            // One node by design: one handle, seen twice.
            let c: Arc<dyn Catalog> = database(&sqlite_file(), YEAR).await;
            (c.clone(), c)
        }
        Store::Postgres => {
            let url = StoreSettings::Postgres(postgres().database());
            (database(&url, YEAR).await, database(&url, YEAR).await)
        }
    }
}

/// Waits until `pred` holds, for at most `within`.
async fn until(within: Duration, what: &str, mut pred: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !pred().await {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

macro_rules! every_store {
    ($name:ident) => {
        mod $name {
            use super::Store;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$name(Store::Memory).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$name(Store::Redis).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis_cluster() {
                super::$name(Store::Cluster).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(Store::Sqlite).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(Store::Postgres).await;
            }
        }
    };
}

/// Writes compare and set on versions, the revision moves once per change and never back,
/// and every node hears of every change.
async fn writes_compare_versions_and_every_node_hears_of_them(store: Store) {
    let (n1, n2) = two_nodes(store).await;
    let mut heard = n2.changes();
    assert_eq!(n1.revision().await.unwrap(), 0);
    let v1 = n1.put("acme", r#"{"v":1}"#, Expect::Absent).await.unwrap();
    assert!(matches!(
        n2.put("acme", "{}", Expect::Absent).await,
        Err(CatalogError::Exists)
    ));
    let v2 = n2
        .put("acme", r#"{"v":2}"#, Expect::Version(v1))
        .await
        .unwrap();
    assert!(v2 > v1);
    assert!(matches!(
        n1.put("acme", "{}", Expect::Version(v1)).await,
        Err(CatalogError::Stale)
    ));
    assert!(matches!(
        n1.put("nobody", "{}", Expect::Version(1)).await,
        Err(CatalogError::Missing)
    ));
    assert!(matches!(
        n1.remove("acme", v1).await,
        Err(CatalogError::Stale)
    ));
    n1.put("beta", r#"{"b":1}"#, Expect::Absent).await.unwrap();
    let (revision, records) = n2.records().await.unwrap();
    assert_eq!(revision, n1.revision().await.unwrap());
    assert_eq!(revision, v2 + 1, "one step per change");
    let ids: Vec<_> = records.iter().map(|r| (r.id.as_str(), r.version)).collect();
    assert_eq!(ids, [("acme", v2), ("beta", v2 + 1)]);
    assert_eq!(
        n2.record("acme").await.unwrap().map(|r| r.body),
        Some(r#"{"v":2}"#.to_owned())
    );
    n1.remove("acme", v2).await.unwrap();
    assert_eq!(n2.record("acme").await.unwrap(), None);
    assert_eq!(n1.revision().await.unwrap(), v2 + 2);
    // Every change was told to the other node, in order (a change may be told more than
    // once; none is missed).
    let mut told = Vec::new();
    until(Duration::from_secs(5), "the changes are told", async || {
        while let Ok(id) = heard.try_recv() {
            if told.last() != Some(&id) {
                told.push(id);
            }
        }
        told.len() >= 3
    })
    .await;
    assert_eq!(told, ["acme", "beta", "acme"]);
}
every_store!(writes_compare_versions_and_every_node_hears_of_them);

/// The audit log is read a page at a time after an id, oldest first, on every node.
async fn the_audit_log_pages_in_order(store: Store) {
    let (n1, n2) = two_nodes(store).await;
    let mut ids = Vec::new();
    for i in 0..7 {
        let node = if i % 2 == 0 { &n1 } else { &n2 };
        ids.push(node.audit(&format!(r#"{{"n":{i}}}"#)).await.unwrap());
    }
    let first = n2.audit_log(None, 3).await.unwrap();
    assert_eq!(first.len(), 3);
    let mut all = first.clone();
    let mut after = first.last().map(|(id, _)| id.clone());
    loop {
        let page = n1.audit_log(after.as_deref(), 3).await.unwrap();
        let Some((last, _)) = page.last() else { break };
        after = Some(last.clone());
        all.extend(page);
    }
    let read: Vec<&str> = all.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(read, ids.iter().map(String::as_str).collect::<Vec<_>>());
    let entries: Vec<&str> = all.iter().map(|(_, e)| e.as_str()).collect();
    assert_eq!(entries[6], r#"{"n":6}"#);
    assert!(
        toolmark_broker::is_event_id(&ids[0]),
        "ids look like event ids"
    );
}
every_store!(the_audit_log_pages_in_order);

/// A catalog that lost its data takes back what the nodes held, and nothing they saw deleted:
/// a node that had not seen a deletion writes the record back, a node that had seen it takes
/// it out again; what was written after the loss stays; a catalog not behind takes nothing.
async fn a_catalog_that_lost_its_data_takes_back_what_the_nodes_held_and_nothing_deleted(
    store: Store,
) {
    let (old, _) = two_nodes(store).await;
    let a = old.put("a", r#"{"a":1}"#, Expect::Absent).await.unwrap();
    old.put("b", r#"{"b":1}"#, Expect::Absent).await.unwrap();
    let c = old.put("c", r#"{"c":1}"#, Expect::Absent).await.unwrap();
    // A node that read everything so far (and has not seen the deletion that follows).
    let (stale_seen, stale_held) = old.records().await.unwrap();
    old.remove("c", c).await.unwrap();
    let (seen, held) = old.records().await.unwrap();
    assert!(seen > stale_seen);
    assert_eq!(
        old.restore(&held, &[("c".into(), seen)], seen)
            .await
            .unwrap(),
        Restored::NotBehind,
        "not behind: nothing is taken"
    );

    // The data is lost (a fresh store of the same kind); an admin creates `d` first.
    let (wiped, _) = two_nodes(store).await;
    wiped.put("d", r#"{"d":1}"#, Expect::Absent).await.unwrap();
    assert!(wiped.revision().await.unwrap() < stale_seen);
    assert_eq!(
        wiped.restore(&stale_held, &[], stale_seen).await.unwrap(),
        Restored::Wrote(3),
        "the stale node first: a, b and c come back at their versions"
    );
    assert_eq!(
        wiped
            .restore(&held, &[("c".into(), seen)], seen)
            .await
            .unwrap(),
        Restored::Wrote(0),
        "the node that saw `c` deleted takes it out again"
    );
    let (revision, records) = wiped.records().await.unwrap();
    assert_eq!(revision, seen);
    let ids: Vec<(&str, &str)> = records
        .iter()
        .map(|r| (r.id.as_str(), r.body.as_str()))
        .collect();
    assert_eq!(
        ids,
        [
            ("a", r#"{"a":1}"#),
            ("b", r#"{"b":1}"#),
            ("d", r#"{"d":1}"#)
        ]
    );
    assert_eq!(records[0].version, a, "written back at its version");
    let next = wiped
        .put("a", r#"{"a":2}"#, Expect::Version(a))
        .await
        .unwrap();
    assert!(next > seen, "writes go on from the restored revision");
}
every_store!(a_catalog_that_lost_its_data_takes_back_what_the_nodes_held_and_nothing_deleted);

/// The schema is made from an empty database by nodes starting at once (one migrates, the
/// others wait for its lock and find it done), and a database at the previous step is brought
/// forward with its records kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_is_migrated_from_empty_and_from_the_previous_step() {
    let pg = postgres();
    let url = pg.database();
    let settings = StoreSettings::Postgres(url.clone());
    let (a, b, c) = tokio::join!(
        database(&settings, YEAR),
        database(&settings, YEAR),
        database(&settings, YEAR)
    );
    a.put("acme", "{}", Expect::Absent).await.unwrap();
    assert!(b.record("acme").await.unwrap().is_some());
    assert!(c.audit("{}").await.is_ok());
    let db = url.rsplit('/').next().unwrap();
    assert_eq!(
        pg.sql(db, "SELECT string_agg(version::text, ',' ORDER BY version) FROM toolmark_schema_migrations WHERE success")
            .unwrap(),
        "1,2",
        "each step applied once"
    );

    // A database at the previous step (the records only), with a record in it.
    let old = pg.database();
    let db = old.rsplit('/').next().unwrap().to_owned();
    toolmark_store::migrate_postgres_to(&old, 1).await.unwrap();
    assert!(
        pg.sql(&db, "SELECT 1 FROM toolmark_audit").is_err(),
        "at step 1"
    );
    pg.sql(
        &db,
        "INSERT INTO toolmark_records VALUES ('kept', 1, '{\"k\":1}'); UPDATE toolmark_revision SET revision = 1",
    )
    .unwrap();
    let upgraded = database(&StoreSettings::Postgres(old), YEAR).await;
    assert_eq!(
        upgraded.record("kept").await.unwrap().map(|r| r.body),
        Some(r#"{"k":1}"#.to_owned())
    );
    assert!(
        upgraded.audit("{}").await.is_ok(),
        "the audit step was applied"
    );
    assert_eq!(upgraded.revision().await.unwrap(), 1);
}

/// A SQLite file keeps its records when the process that wrote them is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_keeps_its_records_across_a_restart() {
    let file = sqlite_file();
    {
        let c = database(&file, YEAR).await;
        c.put("acme", r#"{"a":1}"#, Expect::Absent).await.unwrap();
        c.audit(r#"{"type":"tenant.created"}"#).await.unwrap();
    }
    let again = database(&file, YEAR).await;
    assert_eq!(
        again.record("acme").await.unwrap().map(|r| r.body),
        Some(r#"{"a":1}"#.to_owned())
    );
    assert_eq!(again.audit_log(None, 10).await.unwrap().len(), 1);
    assert_eq!(again.revision().await.unwrap(), 1);
}

/// Entries older than the retention are dropped at the next write; younger ones stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_keeps_what_its_retention_says() {
    for settings in [
        sqlite_file(),
        StoreSettings::Postgres(postgres().database()),
    ] {
        let day = Duration::from_secs(86_400);
        let c = database(&settings, day).await;
        let now = toolmark_broker::now_ms();
        c.import_audit(&format!("{}-0", now - 2 * 86_400_000), r#"{"old":true}"#)
            .await
            .unwrap();
        c.import_audit(&format!("{}-0", now - 3_600_000), r#"{"hour":true}"#)
            .await
            .unwrap();
        c.audit(r#"{"now":true}"#).await.unwrap();
        let kept: Vec<String> = c
            .audit_log(None, 10)
            .await
            .unwrap()
            .into_iter()
            .map(|(_, e)| e)
            .collect();
        assert_eq!(
            kept,
            [r#"{"hour":true}"#, r#"{"now":true}"#],
            "{settings:?}"
        );
    }
}

/// PostgreSQL killed under writes: each write either happened whole or answered unavailable
/// within the operation's timeout; none is half done. Started again, writes work, and the
/// other node hears of them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_database_refuses_writes_whole_and_serves_again_once_back() {
    toolmark_testkit::logs();
    let mut pg = PostgresProc::start();
    let settings = StoreSettings::Postgres(pg.database());
    let n1 = database(&settings, YEAR).await;
    let n2 = database(&settings, YEAR).await;
    let version = n1.put("acme", r#"{"n":0}"#, Expect::Absent).await.unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (n1, stop) = (n1.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut version, mut answers) = (version, Vec::new());
            for i in 1.. {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let t = Instant::now();
                let r = n1
                    .put("acme", &format!(r#"{{"n":{i}}}"#), Expect::Version(version))
                    .await;
                if let Ok(v) = r {
                    version = v;
                }
                answers.push((i, r.is_ok(), t.elapsed()));
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            answers
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    pg.kill();
    let down = n1.put("other", "{}", Expect::Absent).await;
    assert!(
        matches!(
            down,
            Err(CatalogError::Broker(BrokerError::Unavailable { .. }))
        ),
        "{down:?}"
    );
    assert!(matches!(
        n2.records().await,
        Err(BrokerError::Unavailable { .. })
    ));
    pg.start_again();
    let mut heard = n2.changes();
    until(Duration::from_secs(20), "writes work again", async || {
        n1.put("after", "{}", Expect::Absent).await.is_ok()
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answers = writer.await.unwrap();
    // The last write that answered ok is what the database holds: none half done.
    let last_ok = answers.iter().rev().find(|(_, ok, _)| *ok).map(|a| a.0);
    let slowest = answers.iter().map(|a| a.2).max().unwrap();
    assert!(
        slowest < Duration::from_secs(8),
        "a write answers within the store's timeout: {slowest:?}"
    );
    assert!(
        answers.iter().any(|a| !a.1),
        "writes were refused while the database was down"
    );
    let held = n2.record("acme").await.unwrap().unwrap();
    assert_eq!(
        held.body,
        format!(r#"{{"n":{}}}"#, last_ok.unwrap_or(0)),
        "the database holds the last write that answered: {answers:?}"
    );
    until(
        Duration::from_secs(10),
        "the other node hears of writes again",
        async || {
            let _ = n1
                .put(
                    &format!("x{}", uuid::Uuid::new_v4().simple()),
                    "{}",
                    Expect::Absent,
                )
                .await;
            std::iter::from_fn(|| heard.try_recv().ok()).any(|id| id.starts_with('x'))
        },
    )
    .await;
}

/// Records move from the broker to SQLite and on to PostgreSQL, bodies (and the sealed
/// secrets inside) as they were, the audit log with them; a second run changes nothing; a
/// record changed at the source since is carried again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_move_between_stores_and_a_second_run_changes_nothing() {
    let from = broker(Store::Memory, "", "n1").await;
    from.put("acme", r#"{"sealed":"v1.abc"}"#, Expect::Absent)
        .await
        .unwrap();
    let beta = from
        .put("beta", r#"{"b":1}"#, Expect::Absent)
        .await
        .unwrap();
    from.audit(r#"{"type":"tenant.created","tenant":"acme"}"#)
        .await
        .unwrap();
    from.audit(r#"{"type":"tenant.created","tenant":"beta"}"#)
        .await
        .unwrap();
    let sqlite = database(&sqlite_file(), YEAR).await;
    let pg = database(&StoreSettings::Postgres(postgres().database()), YEAR).await;

    let first = toolmark_store::copy(from.as_ref(), &Target::Sql(sqlite.clone()))
        .await
        .unwrap();
    assert_eq!((first.written, first.unchanged, first.audit), (2, 0, 2));
    let again = toolmark_store::copy(from.as_ref(), &Target::Sql(sqlite.clone()))
        .await
        .unwrap();
    assert_eq!((again.written, again.unchanged, again.audit), (0, 2, 0));

    from.put("beta", r#"{"b":2}"#, Expect::Version(beta))
        .await
        .unwrap();
    toolmark_store::copy(from.as_ref(), &Target::Sql(sqlite.clone()))
        .await
        .unwrap();
    let on = toolmark_store::copy(sqlite.as_ref(), &Target::Sql(pg.clone()))
        .await
        .unwrap();
    assert_eq!((on.written, on.audit), (2, 2));
    let (_, records) = pg.records().await.unwrap();
    let bodies: Vec<(&str, &str)> = records
        .iter()
        .map(|r| (r.id.as_str(), r.body.as_str()))
        .collect();
    assert_eq!(
        bodies,
        [("acme", r#"{"sealed":"v1.abc"}"#), ("beta", r#"{"b":2}"#)]
    );
    let source_ids: Vec<String> = from
        .audit_log(None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id.split('-').next().unwrap().to_owned())
        .collect();
    let moved_ids: Vec<String> = pg
        .audit_log(None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id.split('-').next().unwrap().to_owned())
        .collect();
    assert_eq!(moved_ids, source_ids, "audit entries keep their times");
}

/// A node that heard of a tenant by its change notification alone (no read of every record
/// since, which happens once a second at most) still takes a wipe that follows for the loss it
/// is: the once-a-second check writes the tenant back, and the node keeps serving it. The
/// revision it compares with is the highest it knows the catalog reached (the record's version),
/// not that of its last read of every record (0 here, as the wiped catalog's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wipe_right_after_a_change_is_healed_by_a_node_that_only_heard_of_the_change() {
    let redis = RedisProc::start(&[]);
    let prefix = format!("s{}", uuid::Uuid::new_v4().simple());
    let (admin, node) = (
        on_redis(&redis.url(), &prefix, "n1").await,
        on_redis(&redis.url(), &prefix, "n2").await,
    );
    let follower =
        toolmark_store::follower::Follower::new(node, toolmark_config::Sealer::generate().0);
    assert!(follower.load_all().await.is_empty(), "an empty catalog");
    let body =
        r#"{"id":"kept","createdMs":1,"allowedOrigins":["https://app.example"],"limits":{}}"#;
    let version = admin.put("kept", body, Expect::Absent).await.unwrap();
    let heard = follower.load_one("kept").await;
    assert!(
        heard.len() == 1 && heard[0].tenant.is_some(),
        "the node takes the tenant it heard of: {heard:?}"
    );

    assert_eq!(redis.cli(&["FLUSHALL"]).trim(), "OK");
    let changed = follower.check().await;
    assert!(
        changed.is_empty(),
        "the node keeps serving the tenant: {changed:?}"
    );
    let back = admin
        .record("kept")
        .await
        .unwrap()
        .expect("the tenant is written back");
    assert_eq!((back.version, back.body.as_str()), (version, body));
    assert!(admin.revision().await.unwrap() >= version);
    assert_eq!(follower.tenants().len(), 1);
    // What is written next goes on from there.
    let next = admin
        .put("kept", body, Expect::Version(version))
        .await
        .unwrap();
    assert!(next > version);
}
