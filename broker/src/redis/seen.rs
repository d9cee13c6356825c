//! The tool definitions a tenant's pages presented, on Redis: one hash per tenant
//! (`{tenant}:seen`, in the tenant's slot), written by a script that stamps Redis's own time
//! and keeps the bounds (`tools_seen.lua`), read whole.

use std::collections::HashMap;

use async_trait::async_trait;
use fred::interfaces::HashesInterface as _;

use super::RedisBroker;
use super::reply::millis;
use super::scripts::ToolsSeenPut;
use crate::BrokerError;
use crate::seen::{SEEN_FOR, SEEN_KEPT, SeenTool, ToolsSeen};

/// Between a definition's name and digest in its field.
const SEP: char = '\u{1f}';

#[async_trait]
impl ToolsSeen for RedisBroker {
    async fn saw_tools(
        &self,
        tenant: &str,
        tools: &[(String, String)],
    ) -> Result<usize, BrokerError> {
        let gone = self
            .run(ToolsSeenPut {
                seen: self.conn.keys.tools_seen(tenant),
                kept: SEEN_KEPT,
                age: millis(SEEN_FOR),
                fields: tools
                    .iter()
                    .map(|(name, digest)| format!("{name}{SEP}{digest}"))
                    .collect(),
            })
            .await?;
        Ok(gone
            .as_i64()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0))
    }

    async fn tools_seen(&self, tenant: &str) -> Result<Vec<SeenTool>, BrokerError> {
        let all: HashMap<String, String> = self
            .conn
            .client
            .hgetall(self.conn.keys.tools_seen(tenant))
            .await
            .map_err(|e| super::unavailable(&e))?;
        let mut out: Vec<SeenTool> = all
            .into_iter()
            .filter_map(|(field, value)| {
                let (name, digest) = field.split_once(SEP)?;
                let (first, last) = value.split_once('|')?;
                Some(SeenTool {
                    name: name.to_owned(),
                    digest: digest.to_owned(),
                    first_ms: first.parse().ok()?,
                    last_ms: last.parse().ok()?,
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.name, a.first_ms).cmp(&(&b.name, b.first_ms)));
        Ok(out)
    }
}
