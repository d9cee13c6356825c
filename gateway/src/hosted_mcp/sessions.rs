//! MCP sessions kept in the broker, so that every node serves them: rmcp stores the client's
//! `initialize` here after the handshake and, on a node that does not hold the session in
//! memory, replays it from here. Beside it the broker keeps the session's owner (the user and
//! conversation of the token that began it, [`super::auth`]). Both expire when the session is
//! left unused for `mcp.session_idle_secs`; every request restarts that time.

use std::time::Duration;

use rmcp::transport::streamable_http_server::session::store::{
    SessionState, SessionStore, SessionStoreError,
};
use std::sync::Arc;

use toolmark_broker::{DoorRecords, Kept};

/// The session header of MCP Streamable HTTP.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// The broker record of a session's `initialize` state.
pub fn state_key(id: &str) -> Kept {
    Kept::McpSession(id.to_owned())
}

/// The broker record of a session's owner.
pub fn owner_key(id: &str) -> Kept {
    Kept::McpOwner(id.to_owned())
}

/// Ends a session on every node: both records go, so every node's next request in it is a 404
/// (a node that holds it in memory lets it idle out).
pub async fn end(broker: &dyn DoorRecords, id: &str) -> Result<(), toolmark_broker::BrokerError> {
    broker.forget(&owner_key(id)).await?;
    broker.forget(&state_key(id)).await?;
    Ok(())
}

/// rmcp's session store over the broker.
#[derive(Debug)]
pub struct StoredSessions {
    broker: Arc<dyn DoorRecords>,
    idle: Duration,
}

impl StoredSessions {
    /// Sessions in `broker`, kept while used at least every `idle`.
    pub fn new(broker: Arc<dyn DoorRecords>, idle: Duration) -> Self {
        StoredSessions { broker, idle }
    }
}

#[async_trait::async_trait]
impl SessionStore for StoredSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some(stored) = self.broker.kept(&state_key(session_id), self.idle).await? else {
            return Ok(None);
        };
        Ok(Some(serde_json::from_str(&stored)?))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let body = serde_json::to_string(state)?;
        self.broker
            .keep(&state_key(session_id), &body, self.idle)
            .await?;
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.broker.forget(&state_key(session_id)).await?;
        Ok(())
    }
}
