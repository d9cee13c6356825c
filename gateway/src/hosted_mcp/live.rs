//! What this node serves of the hosted MCP endpoint, for its bounds and for revocation:
//!
//! - the sessions it has served: each counted in the broker among its tenant's and its
//!   token's (user and conversation) live sessions (`mcp.max_sessions_per_tenant`,
//!   `mcp.max_sessions_per_token`, across the nodes), and ended here, in the broker and in
//!   rmcp's memory, when a revocation covers the credential last used in it;
//! - its open streams ([`Streams`]), bounded on this node and closed by a revocation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use toolmark_broker::{BrokerError, DoorRecords, PlaceBound, Places};
use toolmark_config::McpSettings;

use super::grant::McpGrant;
use super::streams::Streams;
use crate::http::problem::Problem;
use crate::tenants::Tenant;

/// Above this many remembered sessions, a new one first forgets those unused past their time.
const SWEEP_ABOVE: usize = 1024;

/// How long a client refused for a session bound is told to wait.
const SESSION_RETRY: Duration = Duration::from_secs(10);

/// A session this node served: the credential last used in it, and when its place in the
/// broker was last kept from here.
#[derive(Debug)]
struct Served {
    grant: McpGrant,
    kept: Instant,
}

/// The hosted MCP endpoint's sessions and streams on this node.
pub struct Live {
    broker: Arc<dyn DoorRecords>,
    settings: McpSettings,
    /// rmcp's sessions in this node's memory, each kept `mcp.session_idle_secs` unused (as
    /// long as the broker keeps its records).
    pub manager: Arc<LocalSessionManager>,
    /// Open streams.
    pub streams: Arc<Streams>,
    sessions: Mutex<HashMap<String, Served>>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Live {
    /// Nothing served yet, on `broker`, within `settings`.
    pub fn new(broker: Arc<dyn DoorRecords>, settings: McpSettings) -> Self {
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = Some(settings.session_idle);
        Live {
            broker,
            settings,
            manager: Arc::new(manager),
            streams: Arc::default(),
            sessions: Mutex::default(),
        }
    }

    /// Where `grant`'s sessions are counted: its tenant's set (of this incarnation of the
    /// tenant) and its token's (user and conversation).
    fn places(&self, grant: &McpGrant) -> (String, String) {
        (
            format!("{}#{}", grant.tenant.id, grant.tenant.incarnation),
            format!("{}/{}", grant.user, grant.conversation),
        )
    }

    /// A place lasts its session's idle time and an eighth more: it is kept from a node at
    /// most every eighth, so it never lapses before the session's own records.
    fn place_ttl(&self) -> Duration {
        self.settings.session_idle + self.keep_every()
    }

    fn keep_every(&self) -> Duration {
        self.settings.session_idle / 8
    }

    /// Counts the session `id` that an `initialize` of `grant` just began. Over a bound, the
    /// session is ended at once (here and in the broker) and the problem is the answer: a
    /// refused `initialize` leaves nothing behind.
    pub async fn begin(&self, grant: &McpGrant, id: &str) -> Result<(), Problem> {
        let (tenant, holder) = self.places(grant);
        let places = Places {
            tenant: &tenant,
            holder: &holder,
            per_tenant: self.settings.max_sessions_per_tenant,
            per_holder: self.settings.max_sessions_per_token,
        };
        let taken = self.broker.take_place(&places, id, self.place_ttl()).await;
        let refusal = match taken {
            Ok(Ok(())) => {
                self.remember(grant, id);
                return Ok(());
            }
            Ok(Err(PlaceBound::Holder)) => {
                Problem::too_many_sessions("for this token", SESSION_RETRY)
            }
            Ok(Err(PlaceBound::Tenant)) => {
                Problem::too_many_sessions("for this tenant", SESSION_RETRY)
            }
            Err(e) => Problem::from(e),
        };
        self.close_here(id).await;
        if let Err(e) = super::sessions::end(&*self.broker, id).await {
            tracing::warn!(error = %e, "refused MCP session's records not dropped; they expire unused");
        }
        Err(refusal)
    }

    /// A request of `grant` in the session `id` (its owner checked): the credential is
    /// remembered for revocation, and the session's place kept (from this node at most every
    /// eighth of the idle time).
    pub async fn used(&self, grant: &McpGrant, id: &str) {
        let due = {
            let mut sessions = lock(&self.sessions);
            match sessions.get_mut(id) {
                Some(s) => {
                    s.grant = grant.clone();
                    let due = s.kept.elapsed() >= self.keep_every();
                    if due {
                        s.kept = Instant::now();
                    }
                    due
                }
                None => true,
            }
        };
        if !due {
            return;
        }
        self.remember(grant, id);
        let (tenant, holder) = self.places(grant);
        let places = self.places_of(&tenant, &holder);
        if let Err(e) = self.broker.keep_place(&places, id, self.place_ttl()).await {
            tracing::debug!(error = %e, "MCP session's place not kept; it is kept on the next request");
        }
    }

    fn places_of<'a>(&self, tenant: &'a str, holder: &'a str) -> Places<'a> {
        Places {
            tenant,
            holder,
            per_tenant: self.settings.max_sessions_per_tenant,
            per_holder: self.settings.max_sessions_per_token,
        }
    }

    fn remember(&self, grant: &McpGrant, id: &str) {
        let mut sessions = lock(&self.sessions);
        if sessions.len() >= SWEEP_ABOVE {
            // A session unused here past its idle time is gone from the broker too.
            let idle = self.settings.session_idle;
            sessions.retain(|_, s| s.kept.elapsed() < idle + idle / 8);
        }
        sessions.insert(
            id.to_owned(),
            Served {
                grant: grant.clone(),
                kept: Instant::now(),
            },
        );
    }

    /// Ends the session `id` of `grant` on every node: its records and its place in the
    /// broker, then this node's memory of it.
    pub async fn end(&self, grant: &McpGrant, id: &str) -> Result<(), BrokerError> {
        super::sessions::end(&*self.broker, id).await?;
        let (tenant, holder) = self.places(grant);
        self.broker
            .give_place(&self.places_of(&tenant, &holder), id)
            .await?;
        lock(&self.sessions).remove(id);
        self.close_here(id).await;
        Ok(())
    }

    /// Drops the session from rmcp's memory on this node (its streams end with it).
    async fn close_here(&self, id: &str) {
        let id: Arc<str> = Arc::from(id);
        if let Err(e) = self.manager.close_session(&id).await {
            tracing::debug!(error = %e, "MCP session not closed in memory");
        }
    }

    /// Applies a change of tenant `id` (now `tenant`; `None`: deleted): every stream and
    /// session of it on this node whose credential the tenant no longer admits is ended
    /// (sessions on every node, through the broker). Returns how many.
    pub fn revoke(self: &Arc<Self>, id: &str, tenant: Option<&Arc<Tenant>>) -> usize {
        let admitted = |g: &McpGrant| tenant.is_some_and(|t| g.admitted_by(t));
        let streams = self.streams.revoke(id, admitted);
        let ended: Vec<(String, McpGrant)> = {
            let mut sessions = lock(&self.sessions);
            let ids: Vec<String> = sessions
                .iter()
                .filter(|(_, s)| s.grant.tenant.id == id && !admitted(&s.grant))
                .map(|(k, _)| k.clone())
                .collect();
            ids.into_iter()
                .filter_map(|k| sessions.remove(&k).map(|s| (k, s.grant)))
                .collect()
        };
        let n = streams + ended.len();
        if !ended.is_empty() {
            let me = Arc::clone(self);
            tokio::spawn(async move {
                for (session, grant) in ended {
                    if let Err(e) = me.end(&grant, &session).await {
                        tracing::warn!(error = %e, "revoked MCP session not ended in the broker; its token is refused anyway");
                        me.close_here(&session).await;
                    }
                }
            });
        }
        n
    }
}

impl crate::tenant_sync::Revoke for Arc<Live> {
    fn revoke(&self, id: &str, tenant: Option<&Arc<Tenant>>) -> usize {
        Live::revoke(self, id, tenant)
    }
}
