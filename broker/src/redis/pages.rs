//! Pages on Redis: per-node socket counts (presence), manifests per page load, the conversation
//! read implementing `model::current_page`.

use super::*;
use crate::prelude::*;

#[async_trait]
impl Pages for RedisBroker {
    async fn admit_page(&self, conv: &ConvKey, limits: &AdmitLimits) -> Result<(), AdmitError> {
        let socks = self.keys.sockets(conv);
        let tenant_key = self.keys.tenant_sockets(&conv.tenant);
        let (c, t) = tokio::join!(self.count_up(&socks), self.count_up(&tenant_key));
        let undo = || async {
            let _ = tokio::join!(self.count_down(&socks), self.count_down(&tenant_key));
        };
        let (c, t) = match (c, t) {
            (Ok(c), Ok(t)) => (c, t),
            (Err(e), _) | (_, Err(e)) => {
                undo().await;
                return Err(AdmitError::Broker(e));
            }
        };
        if u64::try_from(self.live_total(&t)).unwrap_or(0) > limits.max_connections {
            undo().await;
            return Err(AdmitError::TenantConnections);
        }
        if self.live_total(&c) > i64::from(limits.max_pages_per_conversation) {
            undo().await;
            return Err(AdmitError::ConversationPages);
        }
        lock(&self.held).entry(conv.clone()).or_default().sockets += 1;
        // `drained` stays: a reader that does not count this node yet still sees the grace.
        self.counted_for_tenant(&conv.tenant, &[&socks, &tenant_key])
            .await;
        Ok(())
    }

    async fn admit_socket(&self, tenant: &str, max_connections: u64) -> Result<(), AdmitError> {
        let tenant_key = self.keys.tenant_sockets(tenant);
        let t = match self.count_up(&tenant_key).await {
            Ok(t) => t,
            Err(e) => {
                let _ = self.count_down(&tenant_key).await;
                return Err(AdmitError::Broker(e));
            }
        };
        if u64::try_from(self.live_total(&t)).unwrap_or(0) > max_connections {
            let _ = self.count_down(&tenant_key).await;
            return Err(AdmitError::TenantConnections);
        }
        self.counted_for_tenant(tenant, &[&tenant_key]).await;
        Ok(())
    }

    async fn release_socket(&self, tenant: &str) -> Result<(), BrokerError> {
        if let Some(n) = lock(&self.tenant_sockets).get_mut(tenant) {
            *n = n.saturating_sub(1);
        }
        self.count_down(&self.keys.tenant_sockets(tenant)).await
    }

    async fn page_identified(&self, conv: &ConvKey, client_id: &str) -> Result<(), BrokerError> {
        let known = {
            let mut held = lock(&self.held);
            held.get_mut(conv).is_some_and(|h| {
                *h.clients.entry(client_id.to_owned()).or_default() += 1;
                h.manifests.contains_key(client_id)
            })
        };
        let counted = self
            .client
            .hincrby::<i64, _, _>(
                self.keys.sockets(conv),
                format!("{}|{client_id}", self.node),
                1,
            )
            .await
            .map(|_| ())
            .map_err(|e| unavailable(&e));
        // A page that moved here does not send its manifest again: keep a copy of the stored
        // one, so that this node can write it again after Redis lost its data.
        if !known {
            let stored: Option<String> = self
                .client
                .hget(
                    format!("{}{client_id}", self.keys.manifest_prefix(conv)),
                    "m",
                )
                .await
                .unwrap_or(None);
            let stored = match stored {
                Some(m) => Some(m),
                None => self.legacy_manifest(conv, client_id).await,
            };
            if let Some(m) = stored.as_deref().and_then(parse_manifest) {
                let seq = self
                    .manifest_seq
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if let Some(h) = lock(&self.held).get_mut(conv) {
                    h.manifests.entry(client_id.to_owned()).or_insert((seq, m));
                }
            }
        }
        counted
    }

    async fn release_page(
        &self,
        conv: &ConvKey,
        client_id: Option<&str>,
        release: &crate::Release,
    ) -> Result<PageLeft, BrokerError> {
        if !release.again {
            self.forget_socket(conv, client_id);
        }
        let change = client_id
            .filter(|_| release.announce)
            .map(|client| crate::Change::PageLeft {
                conv: conv.clone(),
                client_id: client.to_owned(),
                name: release.name.clone(),
            });
        let mut keys = vec![
            self.keys.sockets(conv),
            self.keys.released(conv, &release.name),
        ];
        let mut args = vec![
            self.node.clone(),
            client_id.unwrap_or_default().to_owned(),
            millis(crate::ONCE_TTL).to_string(),
        ];
        match &change {
            Some(change) => {
                keys.push(self.keys.outbox(partition::of_conv(conv)));
                args.extend(Self::outbox_args(&codec::Outboxed::Ready(change.clone())));
            }
            None => args.extend([String::new(), String::new()]),
        }
        args.extend(self.live_nodes().iter().cloned());
        let leave = self.script(&self.scripts.leave, keys, args);
        // The tenant's count is on another slot: taken down by the first attempt only.
        let gone = if release.again {
            leave.await
        } else {
            let tenant_key = self.keys.tenant_sockets(&conv.tenant);
            tokio::join!(leave, self.count_down(&tenant_key)).0
        };
        let page_gone = matches!(gone?, Value::Integer(1));
        if page_gone && let Some(change) = &change {
            self.relay(change).await;
        }
        Ok(PageLeft { page_gone })
    }

    async fn put_manifest(
        &self,
        conv: &ConvKey,
        manifest: &Manifest,
        name: &str,
    ) -> Result<(), BrokerError> {
        let seq = self
            .manifest_seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(h) = lock(&self.held).get_mut(conv) {
            h.manifests
                .insert(manifest.client_id.clone(), (seq, manifest.clone()));
        }
        let ttl = model::millis(self.opts.retention.conversations).to_string();
        let change = crate::Change::manifest(conv, manifest, name);
        self.put_manifest_script(conv, manifest, &ttl, false, Some(&change))
            .await?;
        self.relay(&change).await;
        Ok(())
    }

    async fn conversation(&self, conv: &ConvKey) -> Result<ConversationState, BrokerError> {
        Ok(self.conversation_with_seq(conv).await?.0)
    }

    async fn mark_drained(&self, conv: &ConvKey) -> Result<(), BrokerError> {
        self.script(
            &self.scripts.drained,
            vec![self.keys.conv(conv)],
            vec![
                now_ms().to_string(),
                model::millis(self.opts.retention.conversations).to_string(),
            ],
        )
        .await
        .map(|_| ())
    }
}

impl RedisBroker {
    /// What this node holds forgets one socket of `conv` (the page load `client_id`).
    fn forget_socket(&self, conv: &ConvKey, client_id: Option<&str>) {
        {
            let mut held = lock(&self.held);
            if let Some(h) = held.get_mut(conv) {
                h.sockets = h.sockets.saturating_sub(1);
                if let Some(c) = client_id
                    && let Some(n) = h.clients.get_mut(c)
                {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        h.clients.remove(c);
                        h.manifests.remove(c);
                    }
                }
                if h.sockets == 0 {
                    held.remove(conv);
                }
            }
        }
        if let Some(n) = lock(&self.tenant_sockets).get_mut(&conv.tenant) {
            *n = n.saturating_sub(1);
        }
    }

    /// The manifest a build before the partitioned layout stored for a page, written again in
    /// this layout (without taking `current` from a page that has it).
    async fn legacy_manifest(&self, conv: &ConvKey, client_id: &str) -> Option<String> {
        let old: Option<String> = self
            .client
            .hget(self.keys.legacy_manifest(conv, client_id), "m")
            .await
            .unwrap_or(None);
        let m = parse_manifest(old.as_deref()?)?;
        let ttl = model::millis(self.opts.retention.conversations).to_string();
        let _ = self.put_manifest_script(conv, &m, &ttl, true, None).await;
        old
    }

    /// The conversation as [`Pages::conversation`] reads it, with the `seq` of its current
    /// page's manifest ('' without one): what [`scripts::PLACE`] checks a call against.
    pub(super) async fn conversation_with_seq(
        &self,
        conv: &ConvKey,
    ) -> Result<(ConversationState, String), BrokerError> {
        let mut reply = self.conv_read(conv).await?;
        // Sockets on a node this node does not count as live (it may have just started): read
        // the live set again and ask once more, rather than report its pages missing. A node
        // still missing after that is dead: it is not asked about again for a heartbeat.
        let unknown = |reply: &[String]| -> Vec<String> {
            reply
                .get(4)
                .map(|u| {
                    u.split(' ')
                        .filter(|n| !n.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let missing = unknown(&reply);
        if !missing.is_empty() && self.any_not_known_dead(&missing) {
            self.refresh_live().await;
            reply = self.conv_read(conv).await?;
            self.known_dead(&unknown(&reply));
        }
        let [
            effective,
            manifest,
            sockets,
            drained_at,
            _unknown,
            seq,
            rest @ ..,
        ] = &reply[..]
        else {
            return Ok((ConversationState::default(), String::new()));
        };
        let manifest = parse_manifest(manifest);
        let mut pages: Vec<PageInfo> = rest
            .chunks(3)
            .filter(|c| c.len() == 3)
            .map(|c| PageInfo {
                client_id: c[0].clone(),
                sockets: c[1].parse().unwrap_or(0),
                rev: c[2].parse().ok(),
            })
            .collect();
        pages.sort_by(|a, b| a.client_id.cmp(&b.client_id));
        let state = ConversationState {
            client_id: (!effective.is_empty()).then(|| effective.clone()),
            rev: manifest.as_ref().map(|m| m.rev),
            tools: manifest.map(|m| m.tools).unwrap_or_default(),
            pages,
            sockets: sockets.parse().unwrap_or(0),
            reconnecting_for_ms: drained_at
                .parse::<u64>()
                .ok()
                .filter(|_| sockets.parse::<u32>().unwrap_or(0) == 0)
                .map(|since| now_ms().saturating_sub(since)),
        };
        Ok((state, seq.clone()))
    }
}

impl RedisBroker {
    /// Counts one more socket of this node in the count hash `key`; every node's counts.
    async fn count_up(&self, key: &str) -> Result<Vec<(String, i64)>, BrokerError> {
        let ttl = millis(self.opts.retention.conversations).to_string();
        self.script(
            &self.scripts.count_up,
            vec![key.to_owned()],
            vec![self.node.clone(), ttl],
        )
        .await
        .map(pairs)
    }

    /// Counts one socket of this node less in the count hash `key`.
    async fn count_down(&self, key: &str) -> Result<(), BrokerError> {
        self.script(
            &self.scripts.count_down,
            vec![key.to_owned()],
            vec![self.node.clone()],
        )
        .await
        .map(|_| ())
    }

    /// After an admission of a socket of `tenant`: this node's count of the tenant's sockets
    /// (written again after Redis lost its data) and the count hashes it holds fields in.
    async fn counted_for_tenant(&self, tenant: &str, keys: &[&str]) {
        *lock(&self.tenant_sockets)
            .entry(tenant.to_owned())
            .or_default() += 1;
        let node_keys = self.keys.node_keys(&self.node);
        let _: Result<i64, _> = self.client.sadd(&node_keys, keys.to_vec()).await;
        let _: Result<i64, _> = self
            .client
            .pexpire(&node_keys, millis(Duration::from_secs(86_400)), None)
            .await;
    }
}
