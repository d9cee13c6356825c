//! The background jobs of a deployment, each an `async fn run(self, shutdown)`:
//!
//! - [`Deliveries`]: every event of each tenant with a webhook, delivered in order per
//!   conversation, retried, dead-lettered past its maximum age;
//! - [`DeadlineSweep`]: calls whose deadline passed with nobody left to time them out (their
//!   node died, or they are async) are timed out and announced;
//! - [`ConfirmationExpiry`]: confirmations of pages that are gone are expired and announced.
//!
//! `toolmark-worker` runs them against Redis (any number of workers share the work: the sweep
//! is leased, deliveries go through a consumer group). A gateway with the memory broker runs
//! the same [`Jobs`] in its own process, and a Redis gateway does when `server.run_jobs` is set.

mod deliver;
pub mod metrics;
mod sweep;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use toolmark_broker::catalog::Catalog;
use toolmark_broker::webhook::WebhookQueue;
use toolmark_broker::{SharedBroker, handle};
use toolmark_config::Settings;
use toolmark_store::follower::Follower;

pub use deliver::Deliveries;
pub use metrics::JobMetrics;
pub use sweep::{ConfirmationExpiry, DeadlineSweep};

/// Why the jobs could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    /// The HTTP client for webhooks could not be built (its TLS roots).
    #[error("webhook HTTP client: {0}")]
    Http(#[from] reqwest::Error),
}

/// Every job of a process, run together.
#[derive(Debug)]
pub struct Jobs {
    deliveries: Deliveries,
    sweep: DeadlineSweep,
    expiry: ConfirmationExpiry,
}

impl Jobs {
    /// The jobs over `broker` (and its webhook queue) for the tenants of `settings`; `consumer`
    /// names this process in the webhook consumer group.
    ///
    /// With `[admin]` in `settings` and the broker's `catalog`, the admin API's tenants are
    /// followed too (their webhooks delivered, re-targeted and stopped as they change).
    pub fn new(
        broker: SharedBroker,
        queue: Arc<dyn WebhookQueue>,
        settings: &Settings,
        consumer: &str,
        metrics: Arc<JobMetrics>,
        catalog: Option<Arc<dyn Catalog>>,
    ) -> Result<Jobs, JobsError> {
        let follower = match (&settings.admin, catalog) {
            (Some(a), Some(c)) => Some(Arc::new(Follower::new(c, a.sealer.clone()))),
            _ => None,
        };
        Ok(Jobs {
            deliveries: Deliveries::new(
                queue,
                handle::calls(&broker),
                settings,
                consumer,
                Arc::clone(&metrics),
                follower,
            )?,
            sweep: DeadlineSweep::new(handle::calls(&broker), Arc::clone(&metrics)),
            expiry: ConfirmationExpiry::new(handle::confirmations(&broker), metrics),
        })
    }

    /// Opens each tenant's webhook group, so that events emitted from now on are kept for
    /// delivery even before the first read.
    pub async fn prepare(&self) {
        self.deliveries.prepare().await;
    }

    /// Runs every job until `shutdown`, then lets each finish the item in hand.
    pub async fn run(self, shutdown: CancellationToken) {
        tokio::join!(
            self.deliveries.run(shutdown.clone()),
            self.sweep.run(shutdown.clone()),
            self.expiry.run(shutdown),
        );
    }
}
