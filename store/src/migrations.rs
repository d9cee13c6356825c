//! The schema of a database store, embedded in the binary: numbered steps, forward only,
//! applied at start by sqlx's migrator (one node at a time on PostgreSQL: it holds an
//! advisory lock while it migrates; a step once applied is never changed, its checksum is
//! checked at every start).

use std::borrow::Cow;

use sqlx::SqlSafeStr as _;
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

/// The database a schema is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Postgres,
    Sqlite,
}

/// PostgreSQL's steps: (version, description, SQL).
const POSTGRES: &[(i64, &str, &str)] = &[
    (
        1,
        "records",
        include_str!("../migrations/postgres/0001_records.sql"),
    ),
    (
        2,
        "audit",
        include_str!("../migrations/postgres/0002_audit.sql"),
    ),
];

/// SQLite's steps, the same tables in its types.
const SQLITE: &[(i64, &str, &str)] = &[
    (
        1,
        "records",
        include_str!("../migrations/sqlite/0001_records.sql"),
    ),
    (
        2,
        "audit",
        include_str!("../migrations/sqlite/0002_audit.sql"),
    ),
];

/// The steps of `dialect`, as sqlx's migrator reads them.
#[derive(Debug, Clone, Copy)]
struct Embedded(&'static [(i64, &'static str, &'static str)]);

impl MigrationSource<'static> for Embedded {
    fn resolve(
        self,
    ) -> futures_util::future::BoxFuture<'static, Result<Vec<Migration>, BoxDynError>> {
        Box::pin(async move {
            Ok(self
                .0
                .iter()
                .map(|(version, description, sql)| {
                    Migration::new(
                        *version,
                        Cow::Borrowed(*description),
                        MigrationType::Simple,
                        sql.into_sql_str(),
                        false,
                    )
                })
                .collect())
        })
    }
}

/// The migrator of `dialect`'s schema.
pub(crate) async fn migrator(dialect: Dialect) -> Result<Migrator, sqlx::migrate::MigrateError> {
    let mut m = Migrator::new(Embedded(match dialect {
        Dialect::Postgres => POSTGRES,
        Dialect::Sqlite => SQLITE,
    }))
    .await?;
    m.dangerous_set_table_name("toolmark_schema_migrations");
    Ok(m)
}

/// The newest step.
pub(crate) const LATEST: i64 = 2;
