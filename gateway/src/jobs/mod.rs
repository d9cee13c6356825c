//! Background jobs shared by the gateway (memory broker: it runs them itself) and
//! `toolmark-worker` (Redis broker): webhook delivery and its metrics.

pub mod deliver;
pub mod metrics;
pub mod sign;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use toolmark_broker::webhook::WebhookQueue;

use crate::config::{Config, ConfigError};
use deliver::{Deliverer, Target};
use metrics::JobMetrics;
use sign::SigningKey;

/// The tenants with webhooks, with their signing keys.
pub fn webhook_targets(config: &Config) -> Result<Vec<Target>, ConfigError> {
    config
        .tenants
        .iter()
        .enumerate()
        .filter_map(|(i, t)| Some((i, t, t.webhook_url.clone()?)))
        .map(|(i, t, url)| {
            let secret = t.webhook_secret.as_deref().unwrap_or_default();
            let key = SigningKey::parse(secret).map_err(|reason| {
                ConfigError::new(format!("tenants[{i}].webhook_secret"), reason)
            })?;
            Ok(Target {
                tenant: t.id.clone(),
                url,
                key,
            })
        })
        .collect()
}

/// Starts delivering the webhooks of every tenant that has one, until `stop`.
pub fn spawn_deliveries(
    queue: Arc<dyn WebhookQueue>,
    config: &Config,
    consumer: &str,
    metrics: Arc<JobMetrics>,
    tasks: &TaskTracker,
    stop: &CancellationToken,
) -> Result<(), ConfigError> {
    // Webhook URLs may be https.
    crate::tls::install_crypto();
    let http = reqwest::Client::builder()
        .build()
        .map_err(|e| ConfigError::new("tenants", e.to_string()))?;
    for target in webhook_targets(config)? {
        tracing::info!(tenant = %target.tenant, "delivering webhooks");
        let d = Arc::new(Deliverer::new(
            Arc::clone(&queue),
            http.clone(),
            target,
            consumer.to_owned(),
            config.worker.clone(),
            metrics.clone(),
        ));
        tasks.spawn(Arc::clone(&d).run_new(stop.clone()));
        tasks.spawn(d.run_retries(stop.clone()));
    }
    Ok(())
}
