//! Open hosted MCP streams on this node, bounded per tenant and per token
//! (`mcp.max_streams_per_tenant`, `mcp.max_streams_per_token`; counted by [`Places`]): a session's `GET` stream and a
//! `subscriptions/listen` stream each hold a place until the client or the node closes them,
//! or a revocation of the credential that opened it ([`Streams::revoke`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Body;
use axum::response::Response;
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::grant::McpGrant;
use crate::http::problem::Problem;
use crate::places::{Held, Places};

/// The open streams, by tenant and by token, and each with the credential that opened it.
#[derive(Debug, Default)]
pub struct Streams {
    places: Arc<Places>,
    next: AtomicU64,
    opened_by: Mutex<HashMap<u64, (McpGrant, CancellationToken)>>,
}

/// One open stream's places; given back when dropped. Its stream ends when `ended` is
/// cancelled (a revocation).
#[derive(Debug)]
pub struct Place {
    streams: Arc<Streams>,
    _held: Held,
    id: u64,
    ended: CancellationToken,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.streams
            .opened_by
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
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
        let held = self
            .places
            .take([(tenant, per_tenant), (token, per_token)])
            .map_err(|i| {
                Problem::too_many_streams(if i == 0 {
                    "for this tenant"
                } else {
                    "for this token"
                })
            })?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let ended = CancellationToken::new();
        self.opened_by
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, (grant.clone(), ended.clone()));
        Ok(Place {
            streams: Arc::clone(self),
            _held: held,
            id,
            ended,
        })
    }

    /// Ends every stream of tenant `id` whose credential `admitted` no longer admits; returns
    /// how many.
    pub fn revoke(&self, id: &str, admitted: impl Fn(&McpGrant) -> bool) -> usize {
        let opened_by = self
            .opened_by
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut n = 0;
        for (grant, ended) in opened_by.values() {
            if grant.tenant.id == id && !admitted(grant) && !ended.is_cancelled() {
                ended.cancel();
                n += 1;
            }
        }
        n
    }
}

/// `response` with its body holding `place` until the body ends, the client goes away or a
/// revocation ends it.
pub fn holding(response: Response, place: Place) -> Response {
    let (parts, body) = response.into_parts();
    let ended = place.ended.clone().cancelled_owned();
    let stream = body.into_data_stream().take_until(ended).map(move |chunk| {
        let _held = &place;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}
