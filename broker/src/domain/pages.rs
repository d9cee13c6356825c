//! Page sockets, their presence and manifests, and the conversation they make up.

use async_trait::async_trait;
use toolmark_proto::Manifest;

use crate::{AdmitError, AdmitLimits, BrokerError, ConvKey, ConversationState, PageLeft};

/// Page sockets, their presence and manifests, and the conversation they make up.
#[async_trait]
pub trait Pages: Send + Sync + std::fmt::Debug {
    /// Counts a new page socket against the tenant's and the conversation's limits.
    async fn admit_page(&self, conv: &ConvKey, limits: &AdmitLimits) -> Result<(), AdmitError>;

    /// Counts a socket of `tenant` that belongs to no conversation (a Pusher connection without
    /// a subscription) against `max_connections` alone.
    async fn admit_socket(&self, tenant: &str, max_connections: u64) -> Result<(), AdmitError>;

    /// Releases a socket admitted by [`Pages::admit_socket`].
    async fn release_socket(&self, tenant: &str) -> Result<(), BrokerError>;

    /// The tenant's sockets counted against `max_connections` on every live node (page
    /// sockets and sockets without a conversation): one read, no scan over pages.
    async fn tenant_connections(&self, tenant: &str) -> Result<u64, BrokerError>;

    /// Records that a socket of `conv` is the page load `client_id`.
    async fn page_identified(&self, conv: &ConvKey, client_id: &str) -> Result<(), BrokerError>;

    /// Releases a socket admitted by [`Pages::admit_page`], once per `release` however many
    /// times it is asked ([`Release::again`]: the answer of the first is returned). When it was
    /// the last socket of its page and the release is announced, `page.disconnected` is recorded
    /// with it ([`crate::Change::PageLeft`]).
    async fn release_page(
        &self,
        conv: &ConvKey,
        client_id: Option<&str>,
        release: &Release,
    ) -> Result<PageLeft, BrokerError>;

    /// Keeps `manifest` as the latest of its page and makes that page the conversation's
    /// current one (new calls go there; D23); its `page.manifest` is recorded with it under
    /// the frame's `name` ([`crate::Change::Manifest`]: stored again under the same name, a manifest
    /// is announced once).
    async fn put_manifest(
        &self,
        conv: &ConvKey,
        manifest: &Manifest,
        name: &str,
    ) -> Result<(), BrokerError>;

    /// The conversation's current page ([`crate::model::current_page`]), its latest manifest and the
    /// connected pages.
    async fn conversation(&self, conv: &ConvKey) -> Result<ConversationState, BrokerError>;

    /// A draining node closed this conversation's sockets (with 1001): its pages are expected
    /// back on another node, so calls stay accepted for [`RECONNECT_GRACE`](crate::RECONNECT_GRACE).
    async fn mark_drained(&self, conv: &ConvKey) -> Result<(), BrokerError>;

    /// Marks each of `names` announced in `conv` for the conversation's whole life (kept with
    /// it, refreshed and gone with it) by the announcement `by` (a name of it, unique among
    /// every node's: its frame's), answering per name whether it is `by`'s to announce: not
    /// marked before, or marked by `by` itself (asked again after an attempt whose reply was
    /// lost, it is answered as the first time). With `mark` false, takes back `by`'s marks (an
    /// announcement that could not be emitted), answering whether each was `by`'s; another's
    /// mark stays. A conversation keeps at most [`crate::model::ANNOUNCED_PER_CONVERSATION`]
    /// names: past them, and for a conversation the broker no longer holds, a name is answered
    /// new without being kept.
    async fn announce_once(
        &self,
        conv: &ConvKey,
        names: &[String],
        mark: bool,
        by: &str,
    ) -> Result<Vec<bool>, BrokerError>;
}

/// The release of a page socket ([`Pages::release_page`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// Its name, unique among every node's releases: asked again under it, it is applied once.
    pub name: String,
    /// Announce `page.disconnected` when it was its page's last socket.
    pub announce: bool,
    /// Asked again after an attempt whose outcome the node does not know.
    pub again: bool,
}

impl Release {
    /// A first attempt of the release `name`.
    pub fn new(name: impl Into<String>, announce: bool) -> Self {
        Release {
            name: name.into(),
            announce,
            again: false,
        }
    }
}
