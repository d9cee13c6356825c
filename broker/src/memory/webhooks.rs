//! The memory broker's webhook queue: events of an opened tenant are captured at emission into
//! an inbox; failures wait in per-conversation queues, in order; dead letters are kept in
//! memory. One process only: what is in flight is redelivered after `stale_ms`.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::MemoryBroker;
use crate::webhook::{Admission, Pending, WebhookQueue};
use crate::{BrokerError, Event};

/// Most events an inbox holds; older ones are dropped (and counted) past it.
const INBOX_LIMIT: usize = 100_000;

#[derive(Default)]
pub(crate) struct WebhookTenant {
    inbox: VecDeque<Pending>,
    inflight: HashMap<String, (Instant, Pending)>,
    queues: HashMap<String, VecDeque<Pending>>,
    due: HashMap<String, u64>,
    dead: Vec<(String, Pending)>,
    next_dead: u64,
    pub(crate) dropped: u64,
}

impl WebhookTenant {
    pub(crate) fn capture(&mut self, event: &Event) {
        if self.inbox.len() >= INBOX_LIMIT {
            self.inbox.pop_front();
            self.dropped += 1;
        }
        self.inbox.push_back(Pending::from_event(event));
    }

    fn pop_head(&mut self, conv: &str, now_ms: u64) {
        if let Some(q) = self.queues.get_mut(conv) {
            q.pop_front();
            if q.is_empty() {
                self.queues.remove(conv);
                self.due.remove(conv);
            } else {
                self.due.insert(conv.to_owned(), now_ms);
            }
        }
    }
}

impl MemoryBroker {
    fn with_tenant<R>(&self, tenant: &str, f: impl FnOnce(&mut WebhookTenant) -> R) -> R {
        let mut all = self.webhooks_lock();
        f(all.entry(tenant.to_owned()).or_default())
    }

    /// Dead letters of a tenant.
    pub fn dead_letters(&self, tenant: &str) -> Vec<(String, Pending)> {
        self.with_tenant(tenant, |t| t.dead.clone())
    }

    /// Puts a dead letter back at the end of its conversation's queue.
    pub fn retry_dead_letter(&self, tenant: &str, id: &str, now_ms: u64) -> bool {
        self.with_tenant(tenant, |t| {
            let Some(i) = t.dead.iter().position(|(d, _)| d == id) else {
                return false;
            };
            let (_, mut p) = t.dead.remove(i);
            p.attempts = 0;
            p.first_failure_ms = 0;
            let q = t.queues.entry(p.conv.clone()).or_default();
            q.push_back(p.clone());
            t.due.entry(p.conv).or_insert(now_ms);
            true
        })
    }
}

#[async_trait]
impl WebhookQueue for MemoryBroker {
    async fn open(&self, tenant: &str) -> Result<(), BrokerError> {
        self.with_tenant(tenant, |_| ());
        Ok(())
    }

    async fn read(
        &self,
        tenant: &str,
        _consumer: &str,
        count: u64,
        block_ms: u64,
        stale_ms: u64,
    ) -> Result<Vec<Pending>, BrokerError> {
        let deadline = Instant::now() + Duration::from_millis(block_ms);
        loop {
            let batch = self.with_tenant(tenant, |t| {
                let stale = Duration::from_millis(stale_ms);
                let mut out: Vec<Pending> = t
                    .inflight
                    .values_mut()
                    .filter(|(at, _)| at.elapsed() >= stale)
                    .map(|(at, p)| {
                        *at = Instant::now();
                        p.clone()
                    })
                    .collect();
                while (out.len() as u64) < count {
                    let Some(p) = t.inbox.pop_front() else { break };
                    t.inflight.insert(p.id.clone(), (Instant::now(), p.clone()));
                    out.push(p);
                }
                out
            });
            if !batch.is_empty() || Instant::now() >= deadline {
                return Ok(batch);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn admit(&self, tenant: &str, p: &Pending) -> Result<Admission, BrokerError> {
        Ok(
            self.with_tenant(tenant, |t| match t.queues.get_mut(&p.conv) {
                Some(q) if !q.is_empty() => {
                    q.push_back(p.clone());
                    t.inflight.remove(&p.id);
                    Admission::Queued
                }
                _ => Admission::Deliver,
            }),
        )
    }

    async fn ack(&self, tenant: &str, id: &str) -> Result<(), BrokerError> {
        self.with_tenant(tenant, |t| t.inflight.remove(id));
        Ok(())
    }

    async fn defer(&self, tenant: &str, p: &Pending, due_ms: u64) -> Result<(), BrokerError> {
        self.with_tenant(tenant, |t| {
            let q = t.queues.entry(p.conv.clone()).or_default();
            q.push_back(p.clone());
            if q.len() == 1 {
                t.due.insert(p.conv.clone(), due_ms);
            }
            t.inflight.remove(&p.id);
        });
        Ok(())
    }

    async fn due(
        &self,
        tenant: &str,
        now_ms: u64,
        lease_until_ms: u64,
        count: u64,
    ) -> Result<Vec<String>, BrokerError> {
        Ok(self.with_tenant(tenant, |t| {
            let convs: Vec<String> = t
                .due
                .iter()
                .filter(|(_, at)| **at <= now_ms)
                .map(|(c, _)| c.clone())
                .take(usize::try_from(count).unwrap_or(usize::MAX))
                .collect();
            for c in &convs {
                t.due.insert(c.clone(), lease_until_ms);
            }
            convs
        }))
    }

    async fn head(&self, tenant: &str, conv: &str) -> Result<Option<Pending>, BrokerError> {
        Ok(self.with_tenant(tenant, |t| {
            t.queues.get(conv).and_then(|q| q.front().cloned())
        }))
    }

    async fn pop(&self, tenant: &str, conv: &str, now_ms: u64) -> Result<(), BrokerError> {
        self.with_tenant(tenant, |t| t.pop_head(conv, now_ms));
        Ok(())
    }

    async fn reschedule(&self, tenant: &str, p: &Pending, due_ms: u64) -> Result<(), BrokerError> {
        self.with_tenant(tenant, |t| {
            if let Some(front) = t.queues.get_mut(&p.conv).and_then(|q| q.front_mut()) {
                *front = p.clone();
                t.due.insert(p.conv.clone(), due_ms);
            }
        });
        Ok(())
    }

    async fn bury(&self, tenant: &str, p: &Pending, now_ms: u64) -> Result<(), BrokerError> {
        self.with_tenant(tenant, |t| {
            t.next_dead += 1;
            t.dead
                .push((format!("{now_ms}-{}", t.next_dead), p.clone()));
            t.pop_head(&p.conv, now_ms);
        });
        Ok(())
    }

    async fn depth(&self, tenant: &str) -> Result<u64, BrokerError> {
        Ok(self.with_tenant(tenant, |t| t.due.len() as u64))
    }
}

#[async_trait]
impl crate::DeadLetters for MemoryBroker {
    async fn webhook_failed(
        &self,
        tenant: &str,
    ) -> Result<Vec<crate::webhook::DeadLetter>, BrokerError> {
        Ok(self
            .dead_letters(tenant)
            .iter()
            .map(|(id, p)| p.dead_letter(id))
            .collect())
    }

    async fn webhook_retry(&self, tenant: &str, id: &str) -> Result<bool, BrokerError> {
        Ok(self.retry_dead_letter(tenant, id, crate::now_ms()))
    }
}
