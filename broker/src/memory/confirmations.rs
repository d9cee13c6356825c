//! Confirmations of the memory broker: per conversation, single use, expired by
//! `model::sweep_confirm`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use toolmark_proto::ToolResult;

use super::call_table::{CallEntry, CallKey};
use super::{MemoryBroker, lock};
use crate::model::{self, ConfirmSweep, Found, Present};
use crate::prelude::*;
use crate::{BrokerError, ConfirmBinding, ConvKey, PageIdentity, Rejection, SubmitError, now_ms};

#[async_trait]
impl Confirmations for MemoryBroker {
    async fn submit_confirmed(
        &self,
        from: &PageIdentity,
        confirm_id: &str,
        outcome: &ToolResult,
    ) -> Result<ConfirmBinding, SubmitError> {
        let mut confirms = lock(&self.confirms);
        let convs = confirms.get_mut(confirm_id);
        let known_elsewhere = convs.as_ref().is_some_and(|c| !c.is_empty());
        let entry = convs.and_then(|c| c.get_mut(&from.conv));
        let found = match &entry {
            Some(e) => Found::Here(model::ConfirmFacts {
                client_id: &e.binding.client_id,
                used: e.used,
            }),
            None if known_elsewhere => Found::Elsewhere,
            None => Found::Nowhere,
        };
        model::check_confirm(found, &from.client_id).map_err(SubmitError::Rejected)?;
        let Some(entry) = entry else {
            return Err(SubmitError::Rejected(Rejection::UnknownConfirm));
        };
        entry.used = true;
        entry.confirmed = true;
        self.resolve(&entry.binding, outcome.clone());
        Ok(entry.binding.clone())
    }

    async fn submit_confirmed_again(
        &self,
        from: &PageIdentity,
        confirm_id: &str,
        outcome: &ToolResult,
    ) -> Result<ConfirmBinding, SubmitError> {
        {
            let confirms = lock(&self.confirms);
            let convs = confirms.get(confirm_id);
            let known_elsewhere = convs.is_some_and(|c| !c.is_empty());
            let entry = convs.and_then(|c| c.get(&from.conv));
            let found = match entry {
                Some(e) => Found::Here(model::ConfirmFacts {
                    client_id: &e.binding.client_id,
                    used: e.used,
                }),
                None if known_elsewhere => Found::Elsewhere,
                None => Found::Nowhere,
            };
            let confirmed = entry.is_some_and(|e| e.confirmed);
            model::check_confirm_again(found, &from.client_id, confirmed)
                .map_err(SubmitError::Rejected)?;
            if let Some(e) = entry
                && e.used
            {
                return Ok(e.binding.clone());
            }
        }
        self.submit_confirmed(from, confirm_id, outcome).await
    }

    async fn expire_abandoned_confirmations(
        &self,
        grace: Duration,
    ) -> Result<Vec<ConfirmBinding>, BrokerError> {
        let mut confirms = lock(&self.confirms);
        let st = lock(&self.pages);
        let now = now_ms();
        let mut expired = Vec::new();
        for entry in confirms.values_mut().flat_map(HashMap::values_mut) {
            if entry.used {
                continue;
            }
            let b = &entry.binding;
            // A forgotten conversation has nobody there.
            let present = st
                .convs
                .get(&b.conv)
                .is_some_and(|c| c.possibly(&b.client_id));
            match model::sweep_confirm(present, entry.absent_since, now, grace) {
                ConfirmSweep::Keep { absent_since } => entry.absent_since = absent_since,
                ConfirmSweep::Expire => {
                    entry.used = true;
                    self.resolve(b, crate::expired_confirmation());
                    expired.push(b.clone());
                }
            }
        }
        Ok(expired)
    }
}

impl MemoryBroker {
    /// A confirmation ended with `outcome`: written to its call (kept
    /// `retention.finished_calls` from now) and announced as `confirmation.resolved`, in one
    /// step under the call's shard (the caller holds the confirmations, taken first).
    fn resolve(&self, binding: &ConfirmBinding, outcome: ToolResult) {
        let id = &binding.call_id;
        let mut calls = self.calls.shard(id);
        if let Some(entry) = calls.get_mut(&CallKey::of(id))
            && !entry.is_pending()
            && let Some(mut record) = entry.record(id, &self.node)
        {
            record.resolution = Some(crate::Resolution {
                outcome: outcome.clone(),
                at_ms: now_ms(),
            });
            let kept_until = Instant::now() + self.retention.finished_calls;
            *entry = CallEntry::finished(&record, kept_until, &self.node);
        }
        self.announce_now(&crate::Change::Confirmation {
            binding: binding.clone(),
            outcome,
        });
    }
}

pub(super) struct ConfirmEntry {
    pub(super) binding: ConfirmBinding,
    pub(super) used: bool,
    /// Used by its page's `confirmed` (not expired by the sweep).
    pub(super) confirmed: bool,
    pub(super) expires: Instant,
    /// When the sweep first saw its page certainly gone (ms), `None` while it may be present.
    pub(super) absent_since: Option<u64>,
}

/// ConfirmIds are minted by pages: bindings are kept per conversation (confirmId, then the
/// conversations that used it), so one conversation's page cannot squat another's id.
pub(super) type Confirms = HashMap<String, HashMap<ConvKey, ConfirmEntry>>;
