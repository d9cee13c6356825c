//! The catalog in a database: PostgreSQL (many nodes; a change is told to every node by
//! `NOTIFY`) or SQLite (one node; told within the process). One implementation through sqlx's
//! `any` pool; where the two dialects differ (locking a write, the schema's types), the
//! [`Dialect`] says.
//!
//! Every write is one transaction that first locks the revision row (PostgreSQL: `SELECT …
//! FOR UPDATE`; SQLite: `BEGIN IMMEDIATE`), so writers of every node take turns and the
//! revision moves exactly once per change. A database that does not answer within
//! [`OPERATION_TIMEOUT`] is unavailable, as a broker that cannot be reached: the admin API
//! answers 503 and nothing is half written (the transaction rolls back).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::{AnyPool, Row as _};
use tokio::sync::{broadcast, watch};
use toolmark_broker::BrokerError;
use toolmark_broker::catalog::{
    self, Catalog, CatalogError, Expect, Record, RestoreStep, Restored,
};
use toolmark_config::StoreSettings;

use crate::migrations::{self, Dialect};
use crate::{Observer, StoreError};

/// How long one operation may take before the database counts as not answering.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a caller waits for a connection of the pool.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// How soon a failed migration or a lost `LISTEN` is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// The channel PostgreSQL tells changed tenant ids on.
const CHANNEL: &str = "toolmark_catalog";

/// The catalog in a database.
pub struct SqlCatalog {
    pool: AnyPool,
    dialect: Dialect,
    /// Whether the schema is migrated (operations wait for it no longer than they would for
    /// the database).
    migrated: watch::Receiver<bool>,
    changes: broadcast::Sender<String>,
    /// The broker's catalog: what it keeps per tenant in flight is dropped there.
    broker: Arc<dyn Catalog>,
    retention: Duration,
    observer: Observer,
}

impl std::fmt::Debug for SqlCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlCatalog")
            .field("dialect", &self.dialect)
            .field("migrated", &*self.migrated.borrow())
            .finish_non_exhaustive()
    }
}

fn unavailable() -> BrokerError {
    BrokerError::Unavailable { retry_after: RETRY }
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn now_ms() -> i64 {
    to_i64(toolmark_broker::now_ms())
}

/// An audit id, `<ms>-<seq>` like an event id: its parts.
fn audit_position(id: &str) -> Option<(i64, i64)> {
    let (ms, seq) = id.split_once('-')?;
    let ms = ms.parse::<u64>().ok()?;
    let seq = seq.parse::<u64>().ok()?;
    Some((to_i64(ms), to_i64(seq)))
}

impl SqlCatalog {
    /// Opens the database `settings` names (a `postgres://` URL or a SQLite file, created when
    /// missing) without waiting for it: the schema is migrated in the background, retried
    /// every second until it answers, and PostgreSQL's change notices are listened to from
    /// then on.
    pub fn open(
        settings: &StoreSettings,
        retention: Duration,
        broker: Arc<dyn Catalog>,
        observer: Observer,
    ) -> Result<Arc<SqlCatalog>, StoreError> {
        install_default_drivers();
        let (dialect, url, connections) = match settings {
            StoreSettings::Postgres(url) => (Dialect::Postgres, url.clone(), 8),
            // One writer at a time in a file: one connection.
            StoreSettings::Sqlite(path) => (
                Dialect::Sqlite,
                format!("sqlite://{}?mode=rwc", path.display()),
                1,
            ),
            StoreSettings::Broker => {
                return Err(StoreError::Url("the broker is not a database".into()));
            }
        };
        let pool = AnyPoolOptions::new()
            .max_connections(connections)
            .min_connections(0)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy(&url)
            .map_err(|e| StoreError::Url(e.to_string()))?;
        let (migrated_tx, migrated) = watch::channel(false);
        let this = Arc::new(SqlCatalog {
            pool,
            dialect,
            migrated,
            changes: broadcast::channel(1024).0,
            broker,
            retention,
            observer,
        });
        let pool = this.pool.clone();
        let changes = this.changes.clone();
        tokio::spawn(async move {
            migrate_until_done(&pool, dialect).await;
            if dialect == Dialect::Postgres {
                // Served once this node hears every change from then on.
                listen(&url, &changes, &migrated_tx).await;
            } else {
                let _ = migrated_tx.send(true);
            }
        });
        Ok(this)
    }

    /// Waits until the schema is migrated (at most `within`); whether it is.
    pub async fn migrated(&self, within: Duration) -> bool {
        let mut m = self.migrated.clone();
        tokio::time::timeout(within, m.wait_for(|done| *done))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Runs `op` (named `name` for the metrics) under [`OPERATION_TIMEOUT`]; a database error
    /// or no answer is [`BrokerError::Unavailable`].
    async fn run<T>(
        &self,
        name: &'static str,
        op: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, CatalogError> {
        let started = Instant::now();
        let out = if *self.migrated.borrow() {
            match tokio::time::timeout(OPERATION_TIMEOUT, op).await {
                Ok(r) => r,
                Err(_) => Err(Failure::Unavailable("no answer in time".into())),
            }
        } else {
            Err(Failure::Unavailable("schema not migrated yet".into()))
        };
        let answered = !matches!(out, Err(Failure::Unavailable(_)));
        (self.observer)(name, started.elapsed(), answered);
        out.map_err(|f| match f {
            Failure::Unavailable(why) => {
                tracing::warn!(op = name, error = %why, "admin store did not answer");
                CatalogError::Broker(unavailable())
            }
            Failure::Refused(e) => e,
        })
    }

    /// [`SqlCatalog::run`] for an operation that cannot be refused.
    async fn read<T>(
        &self,
        name: &'static str,
        op: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, BrokerError> {
        self.run(name, op).await.map_err(|e| match e {
            CatalogError::Broker(b) => b,
            _ => unavailable(),
        })
    }

    /// Begins a write: a transaction holding the revision row; the revision.
    async fn begin(&self) -> Result<(sqlx::Transaction<'static, sqlx::Any>, i64), Failure> {
        let mut tx = match self.dialect {
            Dialect::Postgres => self.pool.begin().await?,
            Dialect::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
        };
        let lock = match self.dialect {
            Dialect::Postgres => "SELECT revision FROM toolmark_revision WHERE one = 1 FOR UPDATE",
            Dialect::Sqlite => "SELECT revision FROM toolmark_revision WHERE one = 1",
        };
        let revision: i64 = sqlx::query_scalar(lock).fetch_one(&mut *tx).await?;
        Ok((tx, revision))
    }

    /// Moves the revision on by one inside `tx`; the new revision.
    async fn bump(tx: &mut sqlx::Transaction<'static, sqlx::Any>) -> Result<i64, Failure> {
        Ok(sqlx::query_scalar(
            "UPDATE toolmark_revision SET revision = revision + 1 WHERE one = 1 RETURNING revision",
        )
        .fetch_one(&mut **tx)
        .await?)
    }

    /// Tells every node that `id` changed: PostgreSQL's `NOTIFY` (sent at commit, heard by
    /// every node's listener, this one's too); SQLite's one node is told after the commit.
    async fn notify(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        id: &str,
    ) -> Result<(), Failure> {
        if self.dialect == Dialect::Postgres {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(id)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    fn told(&self, id: &str) {
        if self.dialect == Dialect::Sqlite {
            let _ = self.changes.send(id.to_owned());
        }
    }

    async fn version_of(
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        id: &str,
    ) -> Result<Option<u64>, Failure> {
        let v: Option<i64> =
            sqlx::query_scalar("SELECT version FROM toolmark_records WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut **tx)
                .await?;
        Ok(v.map(to_u64))
    }

    async fn write(
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        id: &str,
        version: i64,
        body: &str,
    ) -> Result<(), Failure> {
        sqlx::query(
            "INSERT INTO toolmark_records (id, version, body) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET version = excluded.version, body = excluded.body",
        )
        .bind(id)
        .bind(version)
        .bind(body)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Writes an audit entry at `at_ms` (never before the newest entry: ids stay ordered as
    /// written), dropping entries past the retention; its id.
    async fn append_audit(&self, at_ms: i64, entry: &str) -> Result<String, Failure> {
        let (mut tx, _) = self.begin().await?;
        let newest: Option<i64> = sqlx::query_scalar("SELECT MAX(at_ms) FROM toolmark_audit")
            .fetch_one(&mut *tx)
            .await?;
        let at = at_ms.max(newest.unwrap_or(0));
        let seq: i64 = sqlx::query_scalar(
            "INSERT INTO toolmark_audit (at_ms, entry) VALUES ($1, $2) RETURNING seq",
        )
        .bind(at)
        .bind(entry)
        .fetch_one(&mut *tx)
        .await?;
        let keep_from = now_ms().saturating_sub(to_i64(
            u64::try_from(self.retention.as_millis()).unwrap_or(u64::MAX),
        ));
        sqlx::query("DELETE FROM toolmark_audit WHERE at_ms < $1")
            .bind(keep_from)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(format!("{at}-{seq}"))
    }

    /// Copies an audit entry of another store, at the time its id `id` names (a move of
    /// records: [`crate::copy`]).
    pub async fn import_audit(&self, id: &str, entry: &str) -> Result<(), BrokerError> {
        let at = audit_position(id).map_or_else(now_ms, |(ms, _)| ms);
        self.read("audit", self.append_audit(at, entry)).await?;
        Ok(())
    }
}

/// Why an operation failed.
#[derive(Debug)]
enum Failure {
    /// The database did not answer, or answered with an error.
    Unavailable(String),
    /// The write was refused (a version other than expected).
    Refused(CatalogError),
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Self {
        Failure::Unavailable(e.to_string())
    }
}

impl From<CatalogError> for Failure {
    fn from(e: CatalogError) -> Self {
        Failure::Refused(e)
    }
}

/// Migrates the schema, trying again every second until the database answers.
async fn migrate_until_done(pool: &AnyPool, dialect: Dialect) {
    let mut told = false;
    loop {
        let done = match migrations::migrator(dialect).await {
            Ok(m) => m.run(pool).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match done {
            Ok(()) => {
                tracing::info!(store = ?dialect, schema = migrations::LATEST, "admin store ready");
                return;
            }
            Err(e) if !told => {
                tracing::warn!(store = ?dialect, error = %e, "admin store not reachable: the admin API's records are not served until it answers");
                told = true;
            }
            Err(e) => tracing::debug!(error = %e, "admin store still not reachable"),
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Hands every id PostgreSQL notifies on [`CHANNEL`] to `changes`, listening again after a
/// lost connection (a notice missed meanwhile is healed by the followers' revision check).
async fn listen(url: &str, changes: &broadcast::Sender<String>, ready: &watch::Sender<bool>) {
    let Ok(pool) = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy(url)
    else {
        return;
    };
    loop {
        let heard = async {
            let mut l = sqlx::postgres::PgListener::connect_with(&pool).await?;
            l.listen(CHANNEL).await?;
            let _ = ready.send(true);
            tracing::debug!("admin store notices heard");
            loop {
                // `None`: the connection was lost and is made again; a notice sent meanwhile
                // is missed (the followers' revision check heals it).
                if let Some(n) = l.try_recv().await? {
                    let _ = changes.send(n.payload().to_owned());
                }
            }
        };
        let lost: Result<(), sqlx::Error> = heard.await;
        if let Err(e) = lost {
            tracing::debug!(error = %e, "admin store notices lost");
        }
        tokio::time::sleep(RETRY).await;
    }
}

#[async_trait]
impl Catalog for SqlCatalog {
    async fn revision(&self) -> Result<u64, BrokerError> {
        self.read("revision", async {
            let r: i64 = sqlx::query_scalar("SELECT revision FROM toolmark_revision WHERE one = 1")
                .fetch_one(&self.pool)
                .await?;
            Ok(to_u64(r))
        })
        .await
    }

    async fn records(&self) -> Result<(u64, Vec<Record>), BrokerError> {
        self.read("records", async {
            // The revision first: a change between the two reads shows as a revision behind
            // the records, which the follower reads again, never as one ahead of them.
            let r: i64 = sqlx::query_scalar("SELECT revision FROM toolmark_revision WHERE one = 1")
                .fetch_one(&self.pool)
                .await?;
            let rows = sqlx::query("SELECT id, version, body FROM toolmark_records ORDER BY id")
                .fetch_all(&self.pool)
                .await?;
            let records = rows
                .iter()
                .map(|row| {
                    Ok(Record {
                        id: row.try_get(0)?,
                        version: to_u64(row.try_get(1)?),
                        body: row.try_get(2)?,
                    })
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()?;
            Ok((to_u64(r), records))
        })
        .await
    }

    async fn record(&self, id: &str) -> Result<Option<Record>, BrokerError> {
        self.read("record", async {
            let row = sqlx::query("SELECT version, body FROM toolmark_records WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
            Ok(match row {
                Some(row) => Some(Record {
                    id: id.to_owned(),
                    version: to_u64(row.try_get(0)?),
                    body: row.try_get(1)?,
                }),
                None => None,
            })
        })
        .await
    }

    async fn put(&self, id: &str, body: &str, expect: Expect) -> Result<u64, CatalogError> {
        let version = self
            .run("put", async {
                let (mut tx, _) = self.begin().await?;
                catalog::check(expect, Self::version_of(&mut tx, id).await?)?;
                let version = Self::bump(&mut tx).await?;
                Self::write(&mut tx, id, version, body).await?;
                self.notify(&mut tx, id).await?;
                tx.commit().await?;
                Ok(to_u64(version))
            })
            .await?;
        self.told(id);
        Ok(version)
    }

    async fn remove(&self, id: &str, version: u64) -> Result<(), CatalogError> {
        self.run("remove", async {
            let (mut tx, _) = self.begin().await?;
            catalog::check(
                Expect::Version(version),
                Self::version_of(&mut tx, id).await?,
            )?;
            Self::bump(&mut tx).await?;
            sqlx::query("DELETE FROM toolmark_records WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            self.notify(&mut tx, id).await?;
            tx.commit().await?;
            Ok(())
        })
        .await?;
        self.told(id);
        Ok(())
    }

    async fn restore(
        &self,
        held: &[Record],
        gone: &[(String, u64)],
        seen: u64,
    ) -> Result<Restored, BrokerError> {
        self.read("restore", async {
            let (mut tx, revision) = self.begin().await?;
            if to_u64(revision) >= seen {
                return Ok(Restored::NotBehind);
            }
            for (id, deleted) in gone {
                let current = Self::version_of(&mut tx, id).await?;
                if catalog::restore_one(current, None, Some(*deleted)) == RestoreStep::Remove {
                    sqlx::query("DELETE FROM toolmark_records WHERE id = $1")
                        .bind(id.as_str())
                        .execute(&mut *tx)
                        .await?;
                }
            }
            let mut wrote = 0;
            for r in held {
                let current = Self::version_of(&mut tx, &r.id).await?;
                if catalog::restore_one(current, Some(r.version), None) == RestoreStep::Put {
                    Self::write(&mut tx, &r.id, to_i64(r.version), &r.body).await?;
                    wrote += 1;
                }
            }
            sqlx::query("UPDATE toolmark_revision SET revision = $1 WHERE one = 1")
                .bind(to_i64(seen))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Restored::Wrote(wrote))
        })
        .await
    }

    fn changes(&self) -> broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    async fn drop_tenant(&self, tenant: &str) -> Result<(), BrokerError> {
        self.broker.drop_tenant(tenant).await
    }

    async fn audit(&self, entry: &str) -> Result<String, BrokerError> {
        self.read("audit", self.append_audit(now_ms(), entry)).await
    }

    async fn audit_log(
        &self,
        after: Option<&str>,
        count: usize,
    ) -> Result<Vec<(String, String)>, BrokerError> {
        let (ms, seq) = after.and_then(audit_position).unwrap_or((-1, -1));
        self.read("audit_log", async {
            let rows = sqlx::query(
                "SELECT at_ms, seq, entry FROM toolmark_audit \
                 WHERE at_ms > $1 OR (at_ms = $1 AND seq > $2) \
                 ORDER BY at_ms, seq LIMIT $3",
            )
            .bind(ms)
            .bind(seq)
            .bind(i64::try_from(count).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
            rows.iter()
                .map(|row| {
                    let at: i64 = row.try_get(0)?;
                    let seq: i64 = row.try_get(1)?;
                    Ok((format!("{at}-{seq}"), row.try_get(2)?))
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()
                .map_err(Failure::from)
        })
        .await
    }
}
