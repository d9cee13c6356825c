//! Who an MCP request acts for: the credential the endpoint admitted (an MCP token, or an
//! access token of the tenant's authorization server), its tenant, user and conversation.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use toolmark_broker::ConvKey;

use crate::caller::Caller;
use crate::tenants::{Grant, Tenant};

/// What an MCP request may reach: one conversation of one user of one tenant.
#[derive(Debug, Clone)]
pub struct McpGrant {
    /// The tenant.
    pub tenant: Arc<Tenant>,
    /// The user (`sub`).
    pub user: String,
    /// The conversation (`cnv`).
    pub conversation: String,
    /// The key that signed the token (none for an access token) and when it was issued.
    pub grant: Grant,
    /// Whether it is an access token of the tenant's authorization server.
    pub oauth: bool,
    /// The credential as a caller, with its policies as the tenant snapshot has them now.
    pub caller: Caller,
}

impl McpGrant {
    /// Whether `tenant` (the grant's tenant as it is now) still admits this credential: the
    /// same tenant (not one re-created under its id), its key still the tenant's (or, for an
    /// access token, its authorization server still configured), no revocation covering it.
    pub fn admitted_by(&self, tenant: &Tenant) -> bool {
        let key_kept = match &self.caller {
            Caller::McpToken { api_key_id, .. } => tenant.key_by_id(api_key_id).is_some(),
            _ => true,
        };
        tenant.incarnation == self.tenant.incarnation
            && (!self.oauth || tenant.mcp_oauth.is_some())
            && key_kept
            && tenant.admits(&self.user, &self.conversation, &self.grant)
    }

    /// Who acts, for the call engine.
    pub fn caller(&self) -> Caller {
        self.caller.clone()
    }

    /// The conversation's broker key.
    pub fn conv(&self) -> ConvKey {
        ConvKey::new(&self.tenant.id, &self.user, &self.conversation)
    }

    pub(super) fn owner(&self) -> Owner {
        Owner {
            tenant: self.tenant.id.clone(),
            incarnation: self.tenant.incarnation,
            user: self.user.clone(),
            conversation: self.conversation.clone(),
        }
    }
}

/// Who began a session, kept beside it in the broker: a tenant re-created under the same id
/// (another incarnation) does not own it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Owner {
    tenant: String,
    #[serde(default)]
    incarnation: u64,
    user: String,
    conversation: String,
}
