//! The tool definitions a tenant's pages presented, in this process.

use async_trait::async_trait;

use super::{MemoryBroker, lock};
use crate::seen::{SEEN_FOR, SEEN_KEPT, SeenTool, ToolsSeen, to_drop};
use crate::{BrokerError, now_ms};

#[async_trait]
impl ToolsSeen for MemoryBroker {
    async fn saw_tools(
        &self,
        tenant: &str,
        tools: &[(String, String)],
    ) -> Result<usize, BrokerError> {
        let now = now_ms();
        let mut all = lock(&self.seen);
        let seen = all.entry(tenant.to_owned()).or_default();
        for (name, digest) in tools {
            match seen
                .iter_mut()
                .find(|s| &s.name == name && &s.digest == digest)
            {
                Some(s) => s.last_ms = s.last_ms.max(now),
                None => seen.push(SeenTool {
                    name: name.clone(),
                    digest: digest.clone(),
                    first_ms: now,
                    last_ms: now,
                }),
            }
        }
        let oldest = now.saturating_sub(u64::try_from(SEEN_FOR.as_millis()).unwrap_or(u64::MAX));
        let gone = to_drop(seen, SEEN_KEPT, oldest);
        for i in gone.iter().rev() {
            seen.remove(*i);
        }
        Ok(gone.len())
    }

    async fn tools_seen(&self, tenant: &str) -> Result<Vec<SeenTool>, BrokerError> {
        let mut out = lock(&self.seen).get(tenant).cloned().unwrap_or_default();
        out.sort_by(|a, b| (&a.name, a.first_ms).cmp(&(&b.name, b.first_ms)));
        Ok(out)
    }
}
