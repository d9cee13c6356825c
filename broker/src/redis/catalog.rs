//! The tenant catalog on Redis: one hash on the `{catalog}` slot (id → `<version>\n<record>`),
//! a revision counter beside it, and a sharded channel on the same slot that every node
//! subscribes to. Writes are compare-and-set scripts (`catalog_put.lua`).

use std::collections::HashMap;

use async_trait::async_trait;
use fred::interfaces::{HashesInterface, KeysInterface, SortedSetsInterface, StreamsInterface};
use tokio::sync::broadcast;

use super::RedisBroker;
use super::reply::{RETRY, strings, unavailable};
use super::scripts::{CatalogPut, CatalogRemove, CatalogRestore};
use crate::BrokerError;
use crate::catalog::{AUDIT_KEPT, Catalog, CatalogError, Expect, Record, Restored};

fn parse_record(id: String, stored: &str) -> Option<Record> {
    let (version, body) = stored.split_once('\n')?;
    Some(Record {
        id,
        version: version.parse().ok()?,
        body: body.to_owned(),
    })
}

fn catalog_error(code: &str) -> CatalogError {
    match code {
        "exists" => CatalogError::Exists,
        "missing" => CatalogError::Missing,
        "stale" => CatalogError::Stale,
        _ => CatalogError::Broker(BrokerError::Unavailable { retry_after: RETRY }),
    }
}

#[async_trait]
impl Catalog for RedisBroker {
    async fn revision(&self) -> Result<u64, BrokerError> {
        let v: Option<u64> = self
            .conn
            .client
            .get(self.conn.keys.catalog_revision())
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(v.unwrap_or(0))
    }

    async fn records(&self) -> Result<(u64, Vec<Record>), BrokerError> {
        // The revision first: records read after it are at least as new, so a change in
        // between is only seen twice, never missed.
        let rev = self.revision().await?;
        let all: HashMap<String, String> = self
            .conn
            .client
            .hgetall(self.conn.keys.catalog())
            .await
            .map_err(|e| unavailable(&e))?;
        let mut records: Vec<Record> = all
            .into_iter()
            .filter_map(|(id, stored)| parse_record(id, &stored))
            .collect();
        records.sort_by(|a, b| a.id.cmp(&b.id));
        Ok((rev, records))
    }

    async fn record(&self, id: &str) -> Result<Option<Record>, BrokerError> {
        let stored: Option<String> = self
            .conn
            .client
            .hget(self.conn.keys.catalog(), id)
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(stored.and_then(|s| parse_record(id.to_owned(), &s)))
    }

    async fn put(&self, id: &str, body: &str, expect: Expect) -> Result<u64, CatalogError> {
        let expected = match expect {
            Expect::Absent => "absent".to_owned(),
            Expect::Version(v) => v.to_string(),
        };
        let reply = strings(
            self.run(CatalogPut {
                catalog: self.conn.keys.catalog(),
                revision: self.conn.keys.catalog_revision(),
                id: id.to_owned(),
                record: body.to_owned(),
                expected,
                channel: self.conn.keys.catalog_channel(),
            })
            .await?,
        );
        match &reply[..] {
            [ok, v] if ok == "ok" => v.parse().map_err(|_| catalog_error("")),
            [code, ..] => Err(catalog_error(code)),
            [] => Err(catalog_error("")),
        }
    }

    async fn remove(&self, id: &str, version: u64) -> Result<(), CatalogError> {
        let reply = strings(
            self.run(CatalogRemove {
                catalog: self.conn.keys.catalog(),
                revision: self.conn.keys.catalog_revision(),
                id: id.to_owned(),
                version,
                channel: self.conn.keys.catalog_channel(),
            })
            .await?,
        );
        match reply.first().map(String::as_str) {
            Some("ok") => Ok(()),
            Some(code) => Err(catalog_error(code)),
            None => Err(catalog_error("")),
        }
    }

    async fn restore(
        &self,
        held: &[Record],
        gone: &[(String, u64)],
        seen: u64,
    ) -> Result<Restored, BrokerError> {
        let reply = self
            .run(CatalogRestore {
                catalog: self.conn.keys.catalog(),
                revision: self.conn.keys.catalog_revision(),
                seen,
                gone: gone.to_vec(),
                held: held
                    .iter()
                    .map(|r| (r.id.clone(), format!("{}\n{}", r.version, r.body)))
                    .collect(),
            })
            .await?;
        let wrote = reply.as_i64().unwrap_or(-1);
        Ok(usize::try_from(wrote).map_or(Restored::NotBehind, Restored::Wrote))
    }

    fn changes(&self) -> broadcast::Receiver<String> {
        self.events.catalog_changes.subscribe()
    }

    async fn drop_tenant(&self, tenant: &str) -> Result<(), BrokerError> {
        // Every key here carries the tenant's tag: one slot, so one DEL.
        let queued: Vec<String> = self
            .conn
            .client
            .zrange(self.wh_due(tenant), 0, -1, None, false, None, false)
            .await
            .map_err(|e| unavailable(&e))?;
        let mut keys: Vec<String> = queued.iter().map(|c| self.wh_queue(tenant, c)).collect();
        keys.extend([
            self.conn.keys.events(tenant),
            self.conn.keys.event_bytes(tenant),
            self.conn.keys.rate(tenant),
            self.wh_due(tenant),
            self.wh_dead(tenant),
        ]);
        let _: i64 = self
            .conn
            .client
            .del(keys)
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(())
    }

    async fn audit(&self, entry: &str) -> Result<String, BrokerError> {
        self.conn
            .client
            .xadd(
                self.conn.keys.catalog_audit(),
                false,
                ("MAXLEN", "~", AUDIT_KEPT as i64),
                "*",
                vec![("e", entry)],
            )
            .await
            .map_err(|e| unavailable(&e))
    }

    async fn audit_log(
        &self,
        after: Option<&str>,
        count: usize,
    ) -> Result<Vec<(String, String)>, BrokerError> {
        let start = after.map_or_else(|| "-".to_owned(), |a| format!("({a}"));
        let entries: Vec<(String, HashMap<String, String>)> = self
            .conn
            .client
            .xrange(
                self.conn.keys.catalog_audit(),
                start,
                "+",
                Some(count as u64),
            )
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(entries
            .into_iter()
            .filter_map(|(id, mut f)| Some((id, f.remove("e")?)))
            .collect())
    }
}
