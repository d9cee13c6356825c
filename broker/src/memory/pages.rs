//! Pages of the memory broker: admission, presence (`model::Present`), manifests and D23's current
//! page.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use litemap::LiteMap;
use toolmark_proto::Manifest;

use super::recent::Recent;
use super::{MemoryBroker, lock};
use crate::model::{self, Present};
use crate::prelude::*;
use crate::{
    AdmitError, AdmitLimits, BrokerError, CallView, ConvKey, ConversationState, PageInfo, PageLeft,
};

#[async_trait]
impl Pages for MemoryBroker {
    async fn admit_page(&self, conv: &ConvKey, limits: &AdmitLimits) -> Result<(), AdmitError> {
        let mut st = lock(&self.pages);
        let tenant_count = st.tenant_sockets.get(&conv.tenant).copied().unwrap_or(0);
        if tenant_count >= limits.max_connections {
            return Err(AdmitError::TenantConnections);
        }
        let c = st.convs.entry(conv.clone()).or_default();
        if c.sockets >= limits.max_pages_per_conversation {
            return Err(AdmitError::ConversationPages);
        }
        c.sockets += 1;
        c.idle_since = None;
        c.drained_at = None;
        *st.tenant_sockets.entry(conv.tenant.clone()).or_default() += 1;
        Ok(())
    }

    async fn admit_socket(&self, tenant: &str, max_connections: u64) -> Result<(), AdmitError> {
        let mut st = lock(&self.pages);
        let n = st.tenant_sockets.entry(tenant.to_owned()).or_default();
        if *n >= max_connections {
            return Err(AdmitError::TenantConnections);
        }
        *n += 1;
        Ok(())
    }

    async fn release_socket(&self, tenant: &str) -> Result<(), BrokerError> {
        if let Some(n) = lock(&self.pages).tenant_sockets.get_mut(tenant) {
            *n = n.saturating_sub(1);
        }
        Ok(())
    }

    async fn tenant_connections(&self, tenant: &str) -> Result<u64, BrokerError> {
        Ok(lock(&self.pages)
            .tenant_sockets
            .get(tenant)
            .copied()
            .unwrap_or(0))
    }

    async fn page_identified(&self, conv: &ConvKey, client_id: &str) -> Result<(), BrokerError> {
        let mut st = lock(&self.pages);
        let c = st.convs.entry(conv.clone()).or_default();
        match c.pages.get_mut(client_id) {
            Some(n) => *n += 1,
            None => super::insert_small(&mut c.pages, client_id.to_owned(), 1),
        }
        c.left.remove(client_id);
        Ok(())
    }

    async fn release_page(
        &self,
        conv: &ConvKey,
        client_id: Option<&str>,
        release: &crate::Release,
    ) -> Result<PageLeft, BrokerError> {
        let mut st = lock(&self.pages);
        if let Some(left) = st.released.get(&release.name, Instant::now()) {
            return Ok(left);
        }
        if let Some(n) = st.tenant_sockets.get_mut(&conv.tenant) {
            *n = n.saturating_sub(1);
        }
        let mut page_gone = false;
        if let Some(c) = st.convs.get_mut(conv) {
            c.sockets = c.sockets.saturating_sub(1);
            if c.sockets == 0 {
                c.idle_since = Some(Instant::now());
            }
            if let Some((id, n)) = client_id.and_then(|id| c.pages.get_mut(id).map(|n| (id, n))) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    c.pages.remove(id);
                    c.left.insert(id.to_owned(), Instant::now());
                    super::bound_gone(c, self.retention.gone_manifests, Instant::now());
                    page_gone = true;
                }
            }
        }
        if page_gone
            && release.announce
            && let Some(client_id) = client_id
        {
            self.announce_now(&crate::Change::PageLeft {
                conv: conv.clone(),
                client_id: client_id.to_owned(),
                name: release.name.clone(),
            });
        }
        let left = PageLeft { page_gone };
        st.released
            .insert(release.name.clone(), left, Instant::now());
        drop(st);
        Ok(left)
    }

    async fn put_manifest(
        &self,
        conv: &ConvKey,
        manifest: &Manifest,
        name: &str,
    ) -> Result<(), BrokerError> {
        // Each entry's pin digest is made once here, and travels with every copy read.
        let manifest = manifest.clone();
        for t in &manifest.tools {
            t.digest();
        }
        let mut st = lock(&self.pages);
        let c = st.convs.entry(conv.clone()).or_default();
        c.next_seq += 1;
        super::insert_small(
            &mut c.manifests,
            manifest.client_id.clone(),
            (c.next_seq, manifest.clone()),
        );
        c.current = Some(manifest.client_id.clone());
        // A page that sends a manifest is not gone.
        c.left.remove(&manifest.client_id);
        self.announce_now(&crate::Change::manifest(conv, &manifest, name));
        drop(st);
        Ok(())
    }

    async fn conversation(&self, conv: &ConvKey) -> Result<ConversationState, BrokerError> {
        let st = lock(&self.pages);
        let Some(c) = st.convs.get(conv) else {
            return Ok(ConversationState::default());
        };
        let v = c.call_view();
        Ok(ConversationState {
            client_id: v.client_id.map(str::to_owned),
            rev: v.rev,
            tools: v.tools.to_vec(),
            pages: c
                .pages
                .iter()
                .map(|(id, n)| PageInfo {
                    client_id: id.clone(),
                    rev: c.manifests.get(id).map(|(_, m)| m.rev),
                    sockets: *n,
                })
                .collect(),
            sockets: v.sockets,
            reconnecting_for_ms: v.reconnecting_for_ms,
        })
    }

    async fn mark_drained(&self, conv: &ConvKey) -> Result<(), BrokerError> {
        if let Some(c) = lock(&self.pages).convs.get_mut(conv) {
            c.drained_at = Some(Instant::now());
        }
        Ok(())
    }

    async fn announce_once(
        &self,
        conv: &ConvKey,
        names: &[String],
        mark: bool,
        by: &str,
    ) -> Result<Vec<bool>, BrokerError> {
        let mut st = lock(&self.pages);
        let Some(c) = st.convs.get_mut(conv) else {
            return Ok(vec![mark; names.len()]);
        };
        let kept = c.announced.get_or_insert_default();
        Ok(names
            .iter()
            .map(|name| {
                let at = kept.iter().position(|(k, _)| k == name);
                let ours = at.is_some_and(|i| kept[i].1 == by);
                if !mark {
                    return ours && at.map(|i| kept.swap_remove(i)).is_some();
                }
                if at.is_some() {
                    return ours;
                }
                if kept.len() < crate::model::ANNOUNCED_PER_CONVERSATION {
                    kept.push((name.clone(), by.to_owned()));
                }
                true
            })
            .collect())
    }
}

#[derive(Default)]
pub(super) struct Conv {
    pub(super) current: Option<String>,
    /// Latest manifest of each page, with the order in which it arrived. A conversation
    /// holds one page or a few, so a sorted vector (sized on first use for one) rather than a
    /// hash table, which allocates room for four.
    pub(super) manifests: LiteMap<String, (u64, Manifest)>,
    pub(super) next_seq: u64,
    pub(super) sockets: u32,
    /// Identified sockets of each page load (a sorted vector, as `manifests`).
    pub(super) pages: LiteMap<String, u32>,
    pub(super) idle_since: Option<Instant>,
    /// When a draining node closed this conversation's sockets.
    pub(super) drained_at: Option<Instant>,
    /// Calls sent to this conversation that may still be pending (pruned lazily).
    pub(super) pending: std::collections::HashSet<String>,
    /// Page loads whose last socket closed, and when: their manifest stays for a silent
    /// reconnect (the seed: a reconnect does not re-send it) and, unless it is the current
    /// page's, goes `retention.gone_manifests` later, at most [`model::GONE_MANIFESTS_KEPT`] at
    /// once ([`bound_gone`]), as on Redis.
    pub(super) left: HashMap<String, Instant>,
    /// Names announced once for the conversation's life, each with the announcement that
    /// marked it ([`crate::Pages::announce_once`]): boxed, one word in the table of
    /// conversations (for the many that announce nothing) where a vector takes three.
    #[allow(clippy::box_collection)]
    pub(super) announced: Option<Box<Vec<(String, String)>>>,
}

/// The gone page loads of `c` other than its current page keep their manifests for `grace`
/// after they left, and at most [`model::GONE_MANIFESTS_KEPT`] of them at once, the oldest to
/// leave going first (`bound_gone` of the Redis scripts).
pub(super) fn bound_gone(c: &mut Conv, grace: Duration, now: Instant) {
    let current = c.current.clone();
    let mut others: Vec<(Instant, String)> = c
        .left
        .iter()
        .filter(|(id, _)| current.as_deref() != Some(id.as_str()))
        .map(|(id, at)| (*at, id.clone()))
        .collect();
    others.sort();
    let over = others.len().saturating_sub(model::GONE_MANIFESTS_KEPT);
    for (i, (at, id)) in others.into_iter().enumerate() {
        if i < over || now.duration_since(at) >= grace {
            c.left.remove(&id);
            c.manifests.remove(&id);
        }
    }
}

#[derive(Default)]
pub(super) struct Conversations {
    pub(super) convs: HashMap<ConvKey, Conv>,
    pub(super) tenant_sockets: HashMap<String, u64>,
    /// Releases of page sockets by name, with what each meant: a release asked again is
    /// applied once. This broker always answers, so nothing asks again in practice: the last
    /// [`RECENT_KEPT`] are kept, for [`crate::ONCE_TTL`] at most.
    pub(super) released: Recent<PageLeft>,
}

/// The conversation's open sockets as the model counts them.
impl Present for Conv {
    fn identified(&self) -> impl Iterator<Item = (&str, u32)> {
        self.pages.iter().map(|(id, n)| (id.as_str(), *n))
    }

    fn unidentified(&self) -> u32 {
        self.sockets
            .saturating_sub(self.pages.values().sum::<u32>())
    }
}

/// Inserts into a small per-conversation map, allocating room for exactly one entry when it
/// is empty (a vector's first push makes room for four).
pub(super) fn insert_small<V>(map: &mut LiteMap<String, V>, key: String, value: V) {
    if map.is_empty() {
        *map = LiteMap::with_capacity(1);
    }
    map.insert(key, value);
}

/// D23's choice of the page new calls go to ([`model::current_page`]).
pub(super) fn effective_current(c: &Conv) -> Option<&str> {
    model::current_page(c.current.as_deref(), c, |id| {
        c.manifests.get(id).map(|(seq, _)| *seq)
    })
}

impl Conv {
    /// What placing a call reads of this conversation, in place: the manifest of its current
    /// page ([`effective_current`]) and its sockets.
    pub(super) fn call_view(&self) -> CallView<'_> {
        let current = effective_current(self)
            .and_then(|id| self.manifests.get(id))
            .map(|(_, m)| m);
        CallView {
            client_id: current.map(|m| m.client_id.as_str()),
            rev: current.map(|m| m.rev),
            tools: current.map_or(&[], |m| &m.tools),
            sockets: self.sockets,
            reconnecting_for_ms: (self.sockets == 0)
                .then(|| self.drained_at.map(|t| model::millis(t.elapsed())))
                .flatten(),
        }
    }
}
