//! One page session, whichever transport carries it (a page WebSocket, or an authorized
//! subscription of a Laravel Echo socket): admission against the tenant's limits, a slot in
//! this node's registry, the calls it may have missed, identification by clientId, and the
//! release that tells the broker and, for a page whose last socket this was,
//! `page.disconnected`.

use std::sync::Arc;

use toolmark_broker::{AdmitError, AdmitLimits, ConvKey, EventType, Release};

use crate::page::state::PageState;
use crate::registry::Outbox;
use crate::tenants::{Grant, Tenant};

/// Which transport carries a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `/v1/tenants/{tenant}/page`: the page names its clientId in its frames.
    WebSocket,
    /// A `private-toolmark.*` subscription of `/app/{key}`: the page answers over HTTP
    /// (`/inbound`), so the socket never learns its clientId and announces no disconnect.
    Echo,
}

impl Transport {
    /// The `transport` label of `toolmark_page_connections`.
    pub fn label(self) -> &'static str {
        match self {
            Transport::WebSocket => "websocket",
            Transport::Echo => "echo",
        }
    }
}

/// An admitted page session.
#[derive(Debug)]
pub struct Session {
    /// The conversation.
    pub conv: ConvKey,
    /// Its slot in this node's registry.
    pub slot: u64,
    /// Frames for the page.
    pub outbox: Arc<Outbox>,
    /// The clientId the page named, once it did.
    pub client_id: Option<String>,
    transport: Transport,
    /// The tenant it was admitted to (`Tenant::incarnation`).
    incarnation: u64,
}

/// Why a page was not admitted, as the close reason both transports send.
pub fn refusal_reason(e: &AdmitError) -> &'static str {
    match e {
        AdmitError::TenantConnections => "tenant connection limit",
        AdmitError::ConversationPages => "conversation page limit",
        AdmitError::Broker(_) => "unavailable",
    }
}

impl Session {
    /// Admits a page of `conv` (cluster-wide limits), gives it a registry slot and queues the
    /// calls it may have missed while it was away.
    pub async fn open(
        pages: &PageState,
        tenant: &Tenant,
        conv: ConvKey,
        transport: Transport,
        grant: Grant,
    ) -> Result<Session, AdmitError> {
        let limits = AdmitLimits {
            max_connections: tenant.limits.max_connections,
            max_pages_per_conversation: tenant.limits.max_pages_per_conversation,
        };
        pages.broker.admit_page(&conv, &limits).await?;
        pages.metrics.sockets(transport.label()).inc();
        let (slot, outbox) = pages.registry.join(&conv, grant.clone());
        // A revocation applied while this page was being admitted did not see its slot: check
        // against the tenant as it is now.
        let current = pages.tenants.get(&conv.tenant);
        if !current.is_some_and(|t| t.admits(&conv.user, &conv.conversation, &grant)) {
            outbox.revoke();
        }
        for frame in pages.broker.pending_frames(&conv).await.unwrap_or_default() {
            outbox.push(frame);
        }
        Ok(Session {
            conv,
            slot,
            outbox,
            client_id: None,
            transport,
            incarnation: tenant.incarnation,
        })
    }

    /// Records the clientId the page named in its first frame, here and in the broker.
    pub async fn identify(&mut self, pages: &PageState, client_id: &str) {
        pages.registry.identify(&self.conv, self.slot, client_id);
        if let Err(e) = pages.broker.page_identified(&self.conv, client_id).await {
            let conv = &self.conv;
            tracing::warn!(tenant = %conv.tenant, user = %conv.user, conversation = %conv.conversation, error = %e, "page not recorded");
        }
        self.client_id = Some(client_id.to_owned());
    }

    /// Ends the session: its slot, its admission, and `page.disconnected` when the page is gone
    /// (recorded by the broker with the release). A page of a deleted tenant announces nothing:
    /// the tenant's log is gone, and another tenant may hold its id by now; nor does a Pusher
    /// socket, whose pages speak through the tenant's bridge.
    pub async fn close(self, pages: &PageState) {
        self.outbox.close();
        pages.registry.leave(&self.conv, self.slot);
        pages.metrics.sockets(self.transport.label()).dec();
        let announce = self.transport == Transport::WebSocket
            && pages
                .tenants
                .get(&self.conv.tenant)
                .is_some_and(|t| t.incarnation == self.incarnation);
        // Held like a page's frame: asked again under its name until the broker answers, it
        // is applied once, with its `page.disconnected`.
        let mut held = pages.hold.frame(0);
        let mut release = Release::new(held.name(EventType::PageDisconnected.as_str()), announce);
        let released = held
            .until_known(&pages.metrics, &self.conv, "page.left", |again| {
                release.again = again;
                let release = release.clone();
                let (conv, client) = (&self.conv, self.client_id.as_deref());
                async move { pages.broker.release_page(conv, client, &release).await }
            })
            .await;
        if let Some(Err(e)) = released {
            let conv = &self.conv;
            tracing::warn!(tenant = %conv.tenant, user = %conv.user, conversation = %conv.conversation, error = %e, "page release not recorded");
        }
    }
}
