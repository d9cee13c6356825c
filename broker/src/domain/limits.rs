//! Cluster-wide rates: a tenant's calls and a credential's.

use async_trait::async_trait;

use crate::TakeError;

/// Cluster-wide rates.
#[async_trait]
pub trait Limits: Send + Sync + std::fmt::Debug {
    /// Takes one call from the tenant's rate (`per_second`, burst [`crate::model::burst`]). An
    /// unreachable broker refuses the call (the limit never fails open).
    async fn take_call(&self, tenant: &str, per_second: u32) -> Result<(), TakeError>;

    /// Takes one call from the rate of one credential of the tenant (`bucket`: an API key's
    /// id, or an OAuth subject's), shared by every node, burst [`crate::model::burst`]; taken before
    /// the tenant's own. Refuses when the broker is unreachable, as the tenant's does.
    async fn take_caller_call(
        &self,
        tenant: &str,
        bucket: &str,
        per_second: u32,
    ) -> Result<(), TakeError>;
}
