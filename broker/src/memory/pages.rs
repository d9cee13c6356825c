//! Pages of the memory broker: admission, presence (`model::Presence`), manifests and D23's current
//! page.

use super::*;
use crate::prelude::*;

#[async_trait]
impl Pages for MemoryBroker {
    async fn admit_page(&self, conv: &ConvKey, limits: &AdmitLimits) -> Result<(), AdmitError> {
        let mut st = lock(&self.state);
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
        let mut st = lock(&self.state);
        let n = st.tenant_sockets.entry(tenant.to_owned()).or_default();
        if *n >= max_connections {
            return Err(AdmitError::TenantConnections);
        }
        *n += 1;
        Ok(())
    }

    async fn release_socket(&self, tenant: &str) -> Result<(), BrokerError> {
        if let Some(n) = lock(&self.state).tenant_sockets.get_mut(tenant) {
            *n = n.saturating_sub(1);
        }
        Ok(())
    }

    async fn tenant_connections(&self, tenant: &str) -> Result<u64, BrokerError> {
        Ok(lock(&self.state)
            .tenant_sockets
            .get(tenant)
            .copied()
            .unwrap_or(0))
    }

    async fn page_identified(&self, conv: &ConvKey, client_id: &str) -> Result<(), BrokerError> {
        let mut st = lock(&self.state);
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
        let mut st = lock(&self.state);
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
        let mut st = lock(&self.state);
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
        let st = lock(&self.state);
        let Some(c) = st.convs.get(conv) else {
            return Ok(ConversationState::default());
        };
        let current = effective_current(c)
            .and_then(|id| c.manifests.get(&id))
            .map(|(_, m)| m);
        Ok(ConversationState {
            client_id: current.map(|m| m.client_id.clone()),
            rev: current.map(|m| m.rev),
            tools: current.map(|m| m.tools.clone()).unwrap_or_default(),
            pages: c
                .pages
                .iter()
                .map(|(id, n)| PageInfo {
                    client_id: id.clone(),
                    rev: c.manifests.get(id).map(|(_, m)| m.rev),
                    sockets: *n,
                })
                .collect(),
            sockets: c.sockets,
            reconnecting_for_ms: (c.sockets == 0)
                .then(|| {
                    c.drained_at
                        .map(|t| u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX))
                })
                .flatten(),
        })
    }

    async fn mark_drained(&self, conv: &ConvKey) -> Result<(), BrokerError> {
        if let Some(c) = lock(&self.state).convs.get_mut(conv) {
            c.drained_at = Some(Instant::now());
        }
        Ok(())
    }

    async fn announce_once(
        &self,
        conv: &ConvKey,
        names: &[String],
        mark: bool,
    ) -> Result<Vec<bool>, BrokerError> {
        let mut st = lock(&self.state);
        let Some(c) = st.convs.get_mut(conv) else {
            return Ok(vec![mark; names.len()]);
        };
        let kept = &mut c.announced;
        Ok(names
            .iter()
            .map(|name| {
                let at = kept.iter().position(|k| k == name);
                if !mark {
                    return at.map(|i| kept.swap_remove(i)).is_some();
                }
                if at.is_some() {
                    return false;
                }
                if kept.len() < crate::model::ANNOUNCED_PER_CONVERSATION {
                    kept.push(name.clone());
                }
                true
            })
            .collect())
    }
}
