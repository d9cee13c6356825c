//! Laravel Echo's transport: a Pusher protocol 7 endpoint at `/app/{key}`. The app key selects
//! the tenant; each authorized `private-toolmark.{user}.{conversation}` subscription is a page
//! socket of that conversation (admitted, limited and routed like a page WebSocket), and agent
//! → page messages arrive on it as the event `toolmark.message`. Pages answer through the
//! tenant's own endpoint, which forwards to `/inbound` (`crate::api`).

mod connection;
pub mod protocol;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;

use crate::page::state::PageState;

/// Largest client frame: Pusher client events are small (a subscribe is well under 1 KiB).
const MAX_CLIENT_FRAME: usize = 64 * 1024;

/// The connection query pusher-js sends (`?protocol=7&client=js&version=…`).
#[derive(Debug, Deserialize)]
pub struct ConnectQuery {
    protocol: Option<String>,
}

/// `GET /app/{key}`: refusals (unknown key, protocol, an `Origin` not among the tenant's
/// `allowed_origins`, the tenant's connection limit, draining) happen after the upgrade, as a
/// `pusher:error` followed by a close with the same code.
pub async fn upgrade(
    State(pages): State<PageState>,
    Path(key): Path<String>,
    Query(q): Query<ConnectQuery>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let origin = headers
        .get("origin")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    ws.read_buffer_size(1024)
        .write_buffer_size(0)
        .max_message_size(MAX_CLIENT_FRAME)
        .max_frame_size(MAX_CLIENT_FRAME)
        .on_upgrade(move |socket| {
            let open = pages.life.hold();
            // Not captured by an async block of this closure: what it captured would keep
            // its room in the connection's task for the connection's life.
            let serving = connection::serve(pages, socket, key, q.protocol, origin);
            async move {
                let _open = open;
                serving.await;
            }
        })
}
