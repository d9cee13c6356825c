//! Pages on Redis: per-node socket counts (presence), manifests per page load, the conversation
//! read implementing `model::current_page`.

use std::time::Duration;

use async_trait::async_trait;
use fred::interfaces::{HashesInterface, KeysInterface, SetsInterface};
use fred::types::Value;
use toolmark_proto::Manifest;

use super::reply::{millis, pairs, parse_manifest, strings, unavailable};
use super::scripts::{Announced, ConvRead, CountDown, CountUp, Drained, Leave, Outbox};
use super::{RedisBroker, codec};
use crate::prelude::*;
use crate::{
    AdmitError, AdmitLimits, BrokerError, Change, ConvKey, ConversationState, PageInfo, PageLeft,
    Release, model, now_ms, partition,
};

#[async_trait]
impl Pages for RedisBroker {
    async fn admit_page(&self, conv: &ConvKey, limits: &AdmitLimits) -> Result<(), AdmitError> {
        let socks = self.conn.keys.sockets(conv);
        let conv_key = self.conn.keys.conv(conv);
        let tenant_key = self.conn.keys.tenant_sockets(&conv.tenant);
        let (c, t) = tokio::join!(
            self.count_up(&socks, Some(&conv_key), None),
            self.count_up(&tenant_key, None, None)
        );
        let undo = || async {
            let _ = tokio::join!(
                self.count_down(&socks, Some(&conv_key)),
                self.count_down(&tenant_key, None)
            );
        };
        let (c, t) = match (c, t) {
            (Ok(c), Ok(t)) => (c, t),
            (Err(e), _) | (_, Err(e)) => {
                undo().await;
                return Err(AdmitError::Broker(e));
            }
        };
        if u64::try_from(self.node.live.total(&t)).unwrap_or(0) > limits.max_connections {
            undo().await;
            return Err(AdmitError::TenantConnections);
        }
        if self.node.live.total(&c) > i64::from(limits.max_pages_per_conversation) {
            undo().await;
            return Err(AdmitError::ConversationPages);
        }
        self.held.admitted(conv);
        // `drained` stays: a reader that does not count this node yet still sees the grace.
        self.counted_for_tenant(&conv.tenant, &[&socks, &tenant_key])
            .await;
        Ok(())
    }

    async fn admit_socket(&self, tenant: &str, max_connections: u64) -> Result<(), AdmitError> {
        let tenant_key = self.conn.keys.tenant_sockets(tenant);
        let t = match self.count_up(&tenant_key, None, None).await {
            Ok(t) => t,
            Err(e) => {
                let _ = self.count_down(&tenant_key, None).await;
                return Err(AdmitError::Broker(e));
            }
        };
        if u64::try_from(self.node.live.total(&t)).unwrap_or(0) > max_connections {
            let _ = self.count_down(&tenant_key, None).await;
            return Err(AdmitError::TenantConnections);
        }
        self.counted_for_tenant(tenant, &[&tenant_key]).await;
        Ok(())
    }

    async fn release_socket(&self, tenant: &str) -> Result<(), BrokerError> {
        self.held.tenant_released(tenant);
        self.count_down(&self.conn.keys.tenant_sockets(tenant), None)
            .await
    }

    async fn tenant_connections(&self, tenant: &str) -> Result<u64, BrokerError> {
        let counts: std::collections::HashMap<String, i64> = self
            .conn
            .client
            .hgetall(self.conn.keys.tenant_sockets(tenant))
            .await
            .map_err(|e| unavailable(&e))?;
        let counts: Vec<(String, i64)> = counts.into_iter().collect();
        Ok(u64::try_from(self.node.live.total(&counts)).unwrap_or(0))
    }

    async fn page_identified(&self, conv: &ConvKey, client_id: &str) -> Result<(), BrokerError> {
        let known = self.held.identified(conv, client_id);
        let counted = self
            .count_up(
                &self.conn.keys.sockets(conv),
                Some(&self.conn.keys.conv(conv)),
                Some(client_id),
            )
            .await
            .map(|_| ());
        // A page that moved here does not send its manifest again: keep a copy of the stored
        // one, so that this node can write it again after Redis lost its data.
        if !known {
            let stored: Option<String> = self
                .conn
                .client
                .hget(
                    format!("{}{client_id}", self.conn.keys.manifest_prefix(conv)),
                    "m",
                )
                .await
                .unwrap_or(None);
            let stored = match stored {
                Some(m) => Some(m),
                None => self.legacy_manifest(conv, client_id).await,
            };
            if let Some(m) = stored.as_deref().and_then(parse_manifest) {
                self.held.keep_stored(conv, client_id, m);
                // Back before its manifest's grace ran out: kept as a live page's again.
                let _: Result<i64, _> = self
                    .conn
                    .client
                    .pexpire(
                        format!("{}{client_id}", self.conn.keys.manifest_prefix(conv)),
                        millis(self.conn.opts.retention.conversations),
                        None,
                    )
                    .await;
            }
        }
        counted
    }

    async fn release_page(
        &self,
        conv: &ConvKey,
        client_id: Option<&str>,
        release: &Release,
    ) -> Result<PageLeft, BrokerError> {
        if !release.again {
            self.held.forget_socket(conv, client_id);
        }
        let change = client_id
            .filter(|_| release.announce)
            .map(|client| Change::PageLeft {
                conv: conv.clone(),
                client_id: client.to_owned(),
                name: release.name.clone(),
            });
        let leave = self.run(Leave {
            sockets: self.conn.keys.sockets(conv),
            marker: self.conn.keys.released(conv, &release.name),
            outbox: change.as_ref().map(|change| {
                Outbox::new(
                    self.conn.keys.outbox(partition::of_conv(conv)),
                    &codec::Outboxed::Ready(change.clone()),
                )
            }),
            node: self.node.id.clone(),
            client: client_id.unwrap_or_default().to_owned(),
            marker_ttl: millis(crate::ONCE_TTL),
            conv: self.conn.keys.conv(conv),
            gone: self.conn.keys.gone(conv),
            manifest_prefix: self.conn.keys.manifest_prefix(conv),
            grace: millis(self.conn.opts.retention.gone_manifests),
            kept: model::GONE_MANIFESTS_KEPT,
            ttl: millis(self.conn.opts.retention.conversations),
            one_string: !self.node.live.legacy_ids(),
            live: self.node.live.ids(),
        });
        // The tenant's count is on another slot: taken down by the first attempt only.
        let gone = if release.again {
            leave.await
        } else {
            let tenant_key = self.conn.keys.tenant_sockets(&conv.tenant);
            tokio::join!(leave, self.count_down(&tenant_key, None)).0
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
        self.held.keep_manifest(conv, manifest);
        let ttl = model::millis(self.conn.opts.retention.conversations).to_string();
        let change = Change::manifest(conv, manifest, name);
        self.put_manifest_script(conv, manifest, &ttl, false, Some(&change))
            .await?;
        self.relay(&change).await;
        Ok(())
    }

    async fn conversation(&self, conv: &ConvKey) -> Result<ConversationState, BrokerError> {
        Ok(self.conversation_with_seq(conv).await?.0)
    }

    async fn mark_drained(&self, conv: &ConvKey) -> Result<(), BrokerError> {
        self.run(Drained {
            conv: self.conn.keys.conv(conv),
            now: now_ms(),
            ttl: model::millis(self.conn.opts.retention.conversations),
        })
        .await
        .map(|_| ())
    }

    async fn announce_once(
        &self,
        conv: &ConvKey,
        names: &[String],
        mark: bool,
        by: &str,
    ) -> Result<Vec<bool>, BrokerError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let reply = self
            .run(Announced {
                conv: self.conn.keys.conv(conv),
                mark,
                max: model::ANNOUNCED_PER_CONVERSATION,
                by: by.to_owned(),
                names: names.to_vec(),
            })
            .await?;
        Ok(strings(reply).iter().map(|f| f == "1").collect())
    }
}

impl RedisBroker {
    /// The conversation read of `conv_read.lua`, against this node's live set.
    async fn conv_read(&self, conv: &ConvKey) -> Result<Vec<String>, BrokerError> {
        Ok(strings(
            self.run(ConvRead {
                conv: self.conn.keys.conv(conv),
                sockets: self.conn.keys.sockets(conv),
                manifest_prefix: self.conn.keys.manifest_prefix(conv),
                one_string: !self.node.live.legacy_ids(),
                live: self.node.live.ids(),
            })
            .await?,
        ))
    }

    /// The manifest a build before the partitioned layout stored for a page, written again in
    /// this layout (without taking `current` from a page that has it).
    async fn legacy_manifest(&self, conv: &ConvKey, client_id: &str) -> Option<String> {
        let old: Option<String> = self
            .conn
            .client
            .hget(self.conn.keys.legacy_manifest(conv, client_id), "m")
            .await
            .unwrap_or(None);
        let m = parse_manifest(old.as_deref()?)?;
        let ttl = model::millis(self.conn.opts.retention.conversations).to_string();
        let _ = self.put_manifest_script(conv, &m, &ttl, true, None).await;
        old
    }

    /// The conversation as [`Pages::conversation`] reads it, with the `seq` of its current
    /// page's manifest ('' without one): what `place.lua` checks a call against.
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
        if !missing.is_empty() && self.node.live.any_not_known_dead(&missing) {
            self.refresh_live().await;
            reply = self.conv_read(conv).await?;
            self.node.live.known_dead(&unknown(&reply));
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
    /// Counts one more socket of this node in the count hash `key` (and, for a page socket,
    /// in the summary of the conversation's hash `conv`; `client` counts the socket under its
    /// page load); every node's counts (none with `client`: an identification is counted, not
    /// checked against a limit).
    async fn count_up(
        &self,
        key: &str,
        conv: Option<&str>,
        client: Option<&str>,
    ) -> Result<Vec<(String, i64)>, BrokerError> {
        self.run(CountUp {
            counts: key.to_owned(),
            conv: conv.map(str::to_owned),
            field: match client {
                Some(c) => format!("{}|{c}", self.node.id),
                None => self.node.id.clone(),
            },
            ttl: millis(self.conn.opts.retention.conversations),
            // A page identified is counted, not checked: its counts are not read back.
            quiet: client.is_some(),
        })
        .await
        .map(pairs)
    }

    /// Counts one socket of this node less in the count hash `key` (and, for a page socket,
    /// in the summary of the conversation's hash `conv`).
    async fn count_down(&self, key: &str, conv: Option<&str>) -> Result<(), BrokerError> {
        self.run(CountDown {
            counts: key.to_owned(),
            conv: conv.map(str::to_owned),
            fields: vec![self.node.id.clone()],
        })
        .await
        .map(|_| ())
    }

    /// After an admission of a socket of `tenant`: this node's count of the tenant's sockets
    /// (written again after Redis lost its data) and the count hashes it holds fields in.
    async fn counted_for_tenant(&self, tenant: &str, keys: &[&str]) {
        self.held.tenant_admitted(tenant);
        let node_keys = self.conn.keys.node_keys(&self.node.id);
        let _: Result<i64, _> = self.conn.client.sadd(&node_keys, keys.to_vec()).await;
        let _: Result<i64, _> = self
            .conn
            .client
            .pexpire(&node_keys, millis(Duration::from_secs(86_400)), None)
            .await;
    }
}
