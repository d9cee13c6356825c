//! Open hosted MCP streams on this node, bounded per tenant and per token
//! (`mcp.max_streams_per_tenant`, `mcp.max_streams_per_token`): a session's `GET` stream and a
//! `subscriptions/listen` stream each hold a place until the client or the node closes them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Body;
use axum::response::Response;
use futures_util::StreamExt;

use super::McpGrant;
use crate::problem::Problem;

/// The open streams, by tenant and by token.
#[derive(Debug, Default)]
pub struct Streams {
    open: Mutex<HashMap<String, usize>>,
}

/// One open stream's places; given back when dropped.
#[derive(Debug)]
pub struct Place {
    streams: Arc<Streams>,
    keys: [String; 2],
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = self
            .streams
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for key in &self.keys {
            if let Some(n) = open.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    open.remove(key);
                }
            }
        }
    }
}

impl Streams {
    /// A place for one more stream of `grant`, or the problem saying which bound is reached.
    pub fn take(
        self: &Arc<Self>,
        grant: &McpGrant,
        per_tenant: usize,
        per_token: usize,
    ) -> Result<Place, Problem> {
        let tenant = format!("t\n{}", grant.tenant.id);
        let token = format!(
            "u\n{}\n{}\n{}",
            grant.tenant.id, grant.user, grant.conversation
        );
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.get(&tenant).copied().unwrap_or(0) >= per_tenant {
            return Err(Problem::too_many_streams("for this tenant"));
        }
        if open.get(&token).copied().unwrap_or(0) >= per_token {
            return Err(Problem::too_many_streams("for this token"));
        }
        for key in [&tenant, &token] {
            *open.entry(key.clone()).or_insert(0) += 1;
        }
        Ok(Place {
            streams: Arc::clone(self),
            keys: [tenant, token],
        })
    }

    /// Open streams of a tenant (for tests and metrics).
    pub fn of_tenant(&self, tenant: &str) -> usize {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(&format!("t\n{tenant}")).copied().unwrap_or(0)
    }
}

/// `response` with its body holding `place` until the body ends or the client goes away.
pub fn holding(response: Response, place: Place) -> Response {
    let (parts, body) = response.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        let _held = &place;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}
