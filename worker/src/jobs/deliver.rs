//! Webhook delivery for one tenant: new events from the consumer group go out at once unless
//! earlier events of their conversation are waiting; failures wait in their conversation's
//! queue and are retried with jittered exponential backoff; past the maximum age an event goes
//! to the dead letters. Each POST carries the Standard Webhooks headers; `webhook-id` is the
//! event id, the same on every attempt.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::RngExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use toolmark_broker::webhook::{Admission, Pending, WebhookQueue};
use toolmark_broker::{Calls, ConvKey, now_ms};
use toolmark_process::telemetry::{LinkedSpan, tracing_on};
use toolmark_store::follower::{Change, Follower};

use toolmark_config::{Settings, WebhookTarget, WorkerConfig};

use super::metrics::{FailureLabels, JobMetrics, TenantLabel};
use toolmark_process::egress::{Clients, REFUSED_ADDRESS, is_refusal};

/// The webhook deliveries of every tenant that has a webhook: the config file's, and those of
/// the admin API, followed as they are created, changed (a new URL or secret applies from the
/// next attempt) and deleted.
pub struct Deliveries {
    queue: Arc<dyn WebhookQueue>,
    /// Where a traced call's trace context is found, for the span of its outcome's webhook.
    calls: Arc<dyn Calls>,
    http: Clients,
    consumer: String,
    settings: WorkerConfig,
    metrics: Arc<JobMetrics>,
    statics: Vec<(String, WebhookTarget)>,
    follower: Option<Arc<Follower>>,
}

impl std::fmt::Debug for Deliveries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deliveries")
            .field("statics", &self.statics.len())
            .field("follows_catalog", &self.follower.is_some())
            .finish_non_exhaustive()
    }
}

/// The loops of one tenant: its target (swapped on a change) and what stops them.
struct Running {
    deliverer: Arc<Deliverer>,
    stop: CancellationToken,
}

impl Deliveries {
    /// One deliverer per tenant with a `webhook_url`, all sharing one HTTP client; with
    /// `follower`, the admin API's tenants too.
    pub fn new(
        queue: Arc<dyn WebhookQueue>,
        calls: Arc<dyn Calls>,
        settings: &Settings,
        consumer: &str,
        metrics: Arc<JobMetrics>,
        follower: Option<Arc<Follower>>,
    ) -> Result<Deliveries, reqwest::Error> {
        let http = Clients::new()?;
        let statics = settings
            .tenants
            .iter()
            .filter_map(|t| Some((t.id.clone(), t.webhook.clone()?)))
            .collect();
        Ok(Deliveries {
            queue,
            calls,
            http,
            consumer: consumer.to_owned(),
            settings: settings.worker.delivery.clone(),
            metrics,
            statics,
            follower,
        })
    }

    /// Opens each tenant's consumer group (events emitted from now on wait for delivery).
    pub async fn prepare(&self) {
        let mut tenants: Vec<String> = self.statics.iter().map(|(t, _)| t.clone()).collect();
        if let Some(f) = &self.follower {
            f.load_all().await;
            tenants.extend(
                f.tenants()
                    .iter()
                    .filter(|t| t.webhook.is_some())
                    .map(|t| t.id.clone()),
            );
        }
        for t in tenants {
            if let Err(e) = self.queue.open(&t).await {
                tracing::warn!(tenant = %t, error = %e, "webhook group not ready yet");
            }
        }
    }

    fn start(
        &self,
        tracker: &TaskTracker,
        running: &mut HashMap<String, Running>,
        tenant: String,
        target: WebhookTarget,
        shutdown: &CancellationToken,
    ) {
        tracing::info!(%tenant, "delivering webhooks");
        let stop = shutdown.child_token();
        let d = Arc::new(Deliverer {
            broker: Arc::clone(&self.queue),
            calls: Arc::clone(&self.calls),
            http: self.http.clone(),
            tenant: tenant.clone(),
            target: Mutex::new(Arc::new(target)),
            consumer: self.consumer.clone(),
            settings: self.settings.clone(),
            metrics: Arc::clone(&self.metrics),
        });
        tracker.spawn(Arc::clone(&d).run_new(stop.clone()));
        tracker.spawn(Arc::clone(&d).run_retries(stop.clone()));
        running.insert(tenant, Running { deliverer: d, stop });
    }

    /// Takes a change of an admin API tenant: starts, re-targets or stops its loops.
    async fn reconcile(
        &self,
        tracker: &TaskTracker,
        running: &mut HashMap<String, Running>,
        change: Change,
        shutdown: &CancellationToken,
    ) {
        if self.statics.iter().any(|(t, _)| *t == change.id) {
            return;
        }
        match change.tenant.and_then(|t| t.webhook.clone()) {
            Some(target) => match running.get(&change.id) {
                Some(r) => *lock(&r.deliverer.target) = Arc::new(target),
                None => {
                    if let Err(e) = self.queue.open(&change.id).await {
                        tracing::warn!(tenant = %change.id, error = %e, "webhook group not ready yet");
                    }
                    self.start(tracker, running, change.id, target, shutdown);
                }
            },
            None => {
                if let Some(r) = running.remove(&change.id) {
                    tracing::info!(tenant = %change.id, "webhook deliveries stopped");
                    r.stop.cancel();
                }
            }
        }
    }

    /// Delivers until `shutdown`; an attempt in flight is finished (bounded by its timeout).
    pub async fn run(self, shutdown: CancellationToken) {
        let tracker = TaskTracker::new();
        let mut running = HashMap::new();
        for (tenant, target) in self.statics.clone() {
            self.start(&tracker, &mut running, tenant, target, &shutdown);
        }
        if let Some(f) = self.follower.clone() {
            let (tx, mut rx) = mpsc::unbounded_channel();
            tracker.spawn(f.run(shutdown.clone(), move |batch| {
                let _ = tx.send(batch);
            }));
            loop {
                let batch = tokio::select! {
                    () = shutdown.cancelled() => break,
                    b = rx.recv() => b,
                };
                let Some(batch) = batch else { break };
                for change in batch {
                    self.reconcile(&tracker, &mut running, change, &shutdown)
                        .await;
                }
            }
        }
        shutdown.cancelled().await;
        tracker.close();
        tracker.wait().await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One tenant's delivery loops.
struct Deliverer {
    broker: Arc<dyn WebhookQueue>,
    calls: Arc<dyn Calls>,
    http: Clients,
    tenant: String,
    /// Where and how to deliver; swapped when the admin API changes the tenant.
    target: Mutex<Arc<WebhookTarget>>,
    consumer: String,
    settings: WorkerConfig,
    metrics: Arc<JobMetrics>,
}

impl std::fmt::Debug for Deliverer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deliverer")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

/// A failed attempt, with its label of `toolmark_webhook_failures_total{status}` (also kept as
/// the event's last error).
#[derive(Debug)]
struct Failed(String);

/// Why one attempt failed: the label of `toolmark_webhook_failures_total{status}`.
fn failure_label(e: &reqwest::Error) -> String {
    if is_refusal(e) {
        REFUSED_ADDRESS.into()
    } else if e.is_timeout() {
        "timeout".into()
    } else if let Some(s) = e.status() {
        s.as_u16().to_string()
    } else {
        "connect".into()
    }
}

impl Deliverer {
    fn labels(&self) -> TenantLabel {
        TenantLabel {
            tenant: self.tenant.clone(),
        }
    }

    /// With tracing on, the span of delivering the outcome of a traced call (`call.result`,
    /// `call.timeout`): `webhook {type}`, linked to the call's trace; its context goes to the
    /// receiver as `traceparent`, so that the receiver's own spans join it.
    async fn span(&self, p: &Pending) -> Option<LinkedSpan> {
        if !tracing_on() {
            return None;
        }
        let body: serde_json::Value = serde_json::from_str(&p.body).ok()?;
        let kind = body["type"].as_str()?;
        if kind != "call.result" && kind != "call.timeout" {
            return None;
        }
        let data = &body["data"];
        let (id, user, conversation) = (
            data["id"].as_str()?,
            data["user"].as_str()?,
            data["conversation"].as_str()?,
        );
        let conv = ConvKey::new(&self.tenant, user, conversation);
        let traceparent = self.calls.call_trace(&conv, id).await.ok()??;
        LinkedSpan::start(
            format!("webhook {kind}"),
            true,
            &traceparent,
            vec![
                ("http.request.method", "POST".to_owned()),
                ("toolmark.tenant", self.tenant.clone()),
                ("toolmark.event.id", p.id.clone()),
                ("toolmark.call.id", id.to_owned()),
            ],
        )
    }

    /// POSTs one event.
    async fn post(&self, p: &Pending) -> Result<(), Failed> {
        let mut span = self.span(p).await;
        let sent = self
            .send(p, span.as_ref().map(LinkedSpan::traceparent))
            .await;
        if let (Some(span), Err(Failed(why))) = (span.as_mut(), &sent) {
            span.fail(why);
        }
        sent
    }

    /// One attempt, with the `traceparent` of its span when it is traced.
    async fn send(&self, p: &Pending, traceparent: Option<String>) -> Result<(), Failed> {
        let ts = now_ms() / 1000;
        let target = Arc::clone(&lock(&self.target));
        let sig = target.sign(&p.id, ts, &p.body);
        self.metrics.attempts.get_or_create(&self.labels()).inc();
        let http = match self.http.for_url(&target.url, target.allow_private) {
            Ok(http) => http,
            Err(e) => {
                tracing::warn!(tenant = %self.tenant, error = %e, "webhook not sent");
                return Err(self.failed(REFUSED_ADDRESS.to_owned()));
            }
        };
        let mut req = http.post(&target.url);
        if let Some(t) = traceparent {
            req = req.header("traceparent", t);
        }
        let res = req
            .timeout(Duration::from_millis(self.settings.webhook_timeout_ms))
            .header("content-type", "application/json")
            .header("webhook-id", &p.id)
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", sig)
            .body(p.body.clone())
            .send()
            .await;
        match res {
            // Not followed (the client has no redirect policy): a 3xx fails like a 4xx or 5xx.
            Ok(r) if !r.status().is_success() => Err(self.failed(r.status().as_u16().to_string())),
            Ok(_) => {
                self.metrics.delivered.get_or_create(&self.labels()).inc();
                if let Some(emitted) = p.id.split('-').next().and_then(|ms| ms.parse::<u64>().ok())
                {
                    // Event ids start with their emission time in ms.
                    #[allow(clippy::cast_precision_loss)]
                    self.metrics
                        .delivery_latency
                        .observe(now_ms().saturating_sub(emitted) as f64 / 1000.0);
                }
                Ok(())
            }
            Err(e) => {
                if is_refusal(&e) {
                    tracing::warn!(tenant = %self.tenant, error = %e, "webhook not sent");
                }
                Err(self.failed(failure_label(&e)))
            }
        }
    }

    /// Counts a failed attempt under `status`.
    fn failed(&self, status: String) -> Failed {
        self.metrics
            .failures
            .get_or_create(&FailureLabels {
                tenant: self.tenant.clone(),
                status: status.clone(),
            })
            .inc();
        Failed(status)
    }

    /// Delay before attempt `attempts + 1`: base × 2^attempts, at most the maximum, ±50 %.
    fn backoff(&self, attempts: u32) -> u64 {
        let exp = self
            .settings
            .webhook_backoff_base_ms
            .saturating_mul(1u64 << attempts.min(30));
        let capped = exp.min(self.settings.webhook_backoff_max_ms);
        let jitter: f64 = rand::rng().random_range(0.5..1.5);
        // Delays are far below 2^52 ms, so the float round trip is exact enough.
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let d = (capped as f64 * jitter) as u64;
        d.max(1)
    }

    /// Reads new events and delivers them until `stop`.
    async fn run_new(self: Arc<Self>, stop: CancellationToken) {
        let t = &self.tenant;
        while !stop.is_cancelled() {
            if let Err(e) = self.broker.open(t).await {
                tracing::warn!(tenant = %t, error = %e, "webhook group not ready");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            let batch = tokio::select! {
                () = stop.cancelled() => return,
                b = self.broker.read(t, &self.consumer, 100, 1000, self.settings.webhook_claim_after_ms) => b,
            };
            let batch = match batch {
                Ok(b) => b,
                Err(e) => {
                    tracing::debug!(tenant = %t, error = %e, "webhook read failed");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            for mut p in batch {
                match self.broker.admit(t, &p).await {
                    Ok(Admission::Queued) => continue,
                    Ok(Admission::Deliver) => {}
                    Err(_) => break, // Stays pending; read again (or claimed) later.
                }
                match self.post(&p).await {
                    Ok(()) => {
                        let _ = self.broker.ack(t, &p.id).await;
                    }
                    Err(Failed(status)) => {
                        p.attempts = 1;
                        p.first_failure_ms = now_ms();
                        p.last_error = status;
                        let due = now_ms() + self.backoff(0);
                        let _ = self.broker.defer(t, &p, due).await;
                    }
                }
            }
        }
    }

    /// Retries due conversation queues, head first, until `stop`.
    async fn run_retries(self: Arc<Self>, stop: CancellationToken) {
        let t = self.tenant.clone();
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let lease = self.settings.webhook_timeout_ms * 3;
            let due = match self.broker.due(&t, now_ms(), now_ms() + lease, 50).await {
                Ok(d) => d,
                Err(_) => continue,
            };
            if let Ok(depth) = self.broker.depth(&t).await {
                self.metrics
                    .queue_depth
                    .get_or_create(&self.labels())
                    .set(i64::try_from(depth).unwrap_or(i64::MAX));
            }
            for conv in due {
                self.drain(&t, &conv, &stop).await;
            }
        }
    }

    /// Delivers a conversation's queue in order until it is empty or an attempt fails.
    async fn drain(&self, t: &str, conv: &str, stop: &CancellationToken) {
        let started = Instant::now();
        while !stop.is_cancelled() && started.elapsed() < Duration::from_secs(60) {
            let Ok(Some(mut head)) = self.broker.head(t, conv).await else {
                return;
            };
            match self.post(&head).await {
                Ok(()) => {
                    if self.broker.pop(t, conv, now_ms()).await.is_err() {
                        return;
                    }
                }
                Err(Failed(status)) => {
                    head.attempts += 1;
                    head.last_error = status;
                    if head.first_failure_ms == 0 {
                        head.first_failure_ms = now_ms();
                    }
                    let age_ms = now_ms().saturating_sub(head.first_failure_ms);
                    if age_ms >= self.settings.webhook_max_age_secs * 1000 {
                        tracing::warn!(tenant = %t, event = %head.id, attempts = head.attempts, "webhook event moved to the dead letters");
                        self.metrics
                            .dead_letters
                            .get_or_create(&self.labels())
                            .inc();
                        let _ = self.broker.bury(t, &head, now_ms()).await;
                        continue;
                    }
                    let due = now_ms() + self.backoff(head.attempts.saturating_sub(1));
                    let _ = self.broker.reschedule(t, &head, due).await;
                    return;
                }
            }
        }
    }
}
