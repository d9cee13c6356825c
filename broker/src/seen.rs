//! The tool definitions a tenant's pages presented, cluster-wide (`GET
//! /admin/v1/tenants/{id}/tools/seen`): each `(name, digest)` with when it was first and last
//! presented, for the operator to pin. Bounded per tenant: at most [`SEEN_KEPT`] definitions,
//! each kept [`SEEN_FOR`] after it was last presented; past the bound the definitions presented
//! longest ago go first.

use std::time::Duration;

use async_trait::async_trait;

use crate::BrokerError;

/// At most this many definitions per tenant.
pub const SEEN_KEPT: usize = 1_000;

/// How long a definition no page presents any more is kept.
pub const SEEN_FOR: Duration = Duration::from_secs(30 * 86_400);

/// One definition presented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenTool {
    /// The tool's name.
    pub name: String,
    /// Its definition's pin digest.
    pub digest: String,
    /// When a page of the tenant first presented it (ms since the epoch).
    pub first_ms: u64,
    /// When one last did.
    pub last_ms: u64,
}

/// Which of a tenant's entries go when `seen` holds more than `kept` or some older than
/// `oldest_ms`: the rule both brokers follow (the Redis script writes it in Lua). Returns the
/// indexes of `seen` to remove.
pub fn to_drop(seen: &[SeenTool], kept: usize, oldest_ms: u64) -> Vec<usize> {
    let mut live: Vec<usize> = Vec::new();
    let mut gone = Vec::new();
    for (i, s) in seen.iter().enumerate() {
        if s.last_ms < oldest_ms {
            gone.push(i);
        } else {
            live.push(i);
        }
    }
    if live.len() > kept {
        live.sort_by_key(|i| (seen[*i].last_ms, seen[*i].first_ms));
        let over = live.len() - kept;
        gone.extend(live.drain(..over));
    }
    gone.sort_unstable();
    gone
}

/// Where the definitions presented are kept.
#[async_trait]
pub trait ToolsSeen: Send + Sync + std::fmt::Debug {
    /// Records that a page of `tenant` presented each `(name, digest)` now; the number of
    /// definitions dropped to stay within the bounds.
    async fn saw_tools(
        &self,
        tenant: &str,
        tools: &[(String, String)],
    ) -> Result<usize, BrokerError>;

    /// Every definition kept for `tenant`, by name then first presented.
    async fn tools_seen(&self, tenant: &str) -> Result<Vec<SeenTool>, BrokerError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(name: &str, last_ms: u64) -> SeenTool {
        SeenTool {
            name: name.into(),
            digest: "d".into(),
            first_ms: 0,
            last_ms,
        }
    }

    #[test]
    fn the_oldest_and_the_expired_go_first() {
        let all = [seen("a", 5), seen("b", 1), seen("c", 9), seen("d", 3)];
        assert_eq!(to_drop(&all, 10, 0), Vec::<usize>::new());
        assert_eq!(to_drop(&all, 2, 0), [1, 3]);
        assert_eq!(to_drop(&all, 10, 4), [1, 3]);
        assert_eq!(to_drop(&all, 1, 4), [0, 1, 3]);
    }
}
