//! `toolmark-gateway --copy-records-to STORE`: moves the platform's records from the store the
//! configuration names (`admin.store`) to another, for a move to a database with no downtime
//! (`docs/deploy.md`). Sealed secrets are copied as they are: both stores need the same
//! `admin.encryption_key`.

use std::sync::Arc;

use toolmark_broker::catalog::Catalog;
use toolmark_broker::redis::{RedisBroker, RedisOptions};
use toolmark_config::{BrokerSettings, ConfigError, Settings, StoreSettings};
use toolmark_store::{Copied, SqlCatalog, Target};

/// Why a copy did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The command is not one that can work (exit 2).
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// A store could not be reached or written.
    #[error("{0}")]
    Store(String),
}

/// How long a database store may take to answer at first.
const REACH: std::time::Duration = std::time::Duration::from_secs(30);

/// Copies every record of `settings`' store into `to`.
pub async fn copy_records(settings: &Settings, to: &str) -> Result<Copied, CopyError> {
    let Some(admin) = &settings.admin else {
        return Err(ConfigError::new(
            "admin",
            "copying records needs [admin] (its store and encryption key)",
        )
        .into());
    };
    let target = StoreSettings::parse("--copy-records-to", to)?;
    if target == admin.store {
        return Err(
            ConfigError::new("--copy-records-to", "names the store the records are in").into(),
        );
    }
    let open = |store: &StoreSettings| {
        let store = store.clone();
        async move {
            match &store {
                StoreSettings::Broker => broker(settings).await.map(Target::Other),
                _ => {
                    let c = SqlCatalog::open(
                        &store,
                        admin.audit_retention,
                        empty_broker(),
                        toolmark_store::unobserved(),
                    )
                    .map_err(|e| CopyError::Store(e.to_string()))?;
                    if !c.migrated(REACH).await {
                        return Err(CopyError::Store(format!(
                            "the {} store did not answer within {REACH:?}",
                            store.kind()
                        )));
                    }
                    Ok(Target::Sql(c))
                }
            }
        }
    };
    let from: Arc<dyn Catalog> = match open(&admin.store).await? {
        Target::Sql(s) => s,
        Target::Other(c) => c,
    };
    let to = open(&target).await?;
    toolmark_store::copy(from.as_ref(), &to)
        .await
        .map_err(|e| CopyError::Store(e.to_string()))
}

/// The broker's catalog of `settings` (Redis: the memory broker keeps nothing across
/// processes).
async fn broker(settings: &Settings) -> Result<Arc<dyn Catalog>, CopyError> {
    match &settings.broker {
        BrokerSettings::Redis { server, prefix } => {
            let opts = RedisOptions {
                prefix: prefix.clone(),
                ..RedisOptions::default()
            };
            let node = format!("copy-{}", crate::ids::random_hex(6));
            let b = RedisBroker::connect(
                server.client_config(),
                &node,
                Arc::new(crate::registry::Registry::default()),
                opts,
            )
            .await
            .map_err(|e| CopyError::Store(format!("redis: {e}")))?;
            Ok(b)
        }
        BrokerSettings::Memory => Err(ConfigError::new(
            "broker.kind",
            "the memory broker keeps no records outside its process: nothing to copy from or to",
        )
        .into()),
    }
}

/// A database store's companion broker for a copy: nothing is dropped through it.
fn empty_broker() -> Arc<dyn Catalog> {
    Arc::new(toolmark_broker::memory::MemoryBroker::new(
        "copy",
        Arc::new(crate::registry::Registry::default()),
    ))
}
