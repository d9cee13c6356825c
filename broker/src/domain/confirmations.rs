//! Deferred confirmations, as every broker keeps them: single use, bound to their page.

use async_trait::async_trait;
use toolmark_proto::ToolResult;

use crate::{BrokerError, ConfirmBinding, PageIdentity, SubmitError};

/// Deferred confirmations: single use, bound to their page, expired only when their page is
/// gone (D23).
#[async_trait]
pub trait Confirmations: Send + Sync + std::fmt::Debug {
    /// Accepts a page's `confirmed` once per confirmId, only from the page that sent the
    /// `needs_confirmation` ([`crate::model::check_confirm`]); returns what it was bound to. Its
    /// `confirmation.resolved`, with the page's final `outcome`, is recorded with it.
    async fn submit_confirmed(
        &self,
        from: &PageIdentity,
        confirm_id: &str,
        outcome: &ToolResult,
    ) -> Result<ConfirmBinding, SubmitError>;

    /// [`Confirmations::submit_confirmed`] again, after a submission whose outcome the node does
    /// not know (a stall, a lost reply): a confirmId already confirmed by this page (the earlier
    /// submission, applied) answers its binding, not [`crate::Rejection::Duplicate`]; one expired by
    /// the sweep stays a duplicate.
    async fn submit_confirmed_again(
        &self,
        from: &PageIdentity,
        confirm_id: &str,
        outcome: &ToolResult,
    ) -> Result<ConfirmBinding, SubmitError>;

    /// Confirmations still pending from pages that have been gone (no socket anywhere that may
    /// be them, [`crate::model::Present::possibly`]) for at least `grace` without a break
    /// ([`crate::model::sweep_confirm`]): marked used (a late `confirmed` is rejected), each with its
    /// `confirmation.resolved` ([`expired_confirmation`](crate::expired_confirmation)), and returned. Safe on every node;
    /// each is returned once.
    async fn expire_abandoned_confirmations(
        &self,
        grace: std::time::Duration,
    ) -> Result<Vec<ConfirmBinding>, BrokerError>;
}
