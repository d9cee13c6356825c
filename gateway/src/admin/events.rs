//! The admin event stream: the audit log as Server-Sent Events.

use super::*;

/// How often an audit stream looks for new entries.
const AUDIT_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// `GET /admin/v1/events`: the audit log as Server-Sent Events (`tenant.created`,
/// `tenant.updated`, `tenant.deleted`, `tenant.key_rotated`), from the oldest kept or after
/// `Last-Event-ID`, then live. The log is the broker's, so every node streams the same.
#[utoipa::path(get, path = "/admin/v1/events", tag = "admin",
    responses((status = 200, description = "Server-Sent Events of the audit log: tenant.created, tenant.updated, tenant.deleted, tenant.key_rotated", content_type = "text/event-stream"), crate::http::doc::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn events(
    State(s): State<AdminState>,
    _who: Admin,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // One read now: a broker that cannot answer is a 503, not an empty stream.
    let first =
        s.0.loader
            .catalog()
            .audit_log(after.as_deref(), 100)
            .await?;
    let catalog = Arc::clone(s.0.loader.catalog());
    let stream = futures_util::stream::unfold(
        (catalog, after, Some(first)),
        |(catalog, mut after, mut pending)| async move {
            loop {
                let batch = match pending.take() {
                    Some(b) => b,
                    None => {
                        tokio::time::sleep(AUDIT_POLL).await;
                        catalog
                            .audit_log(after.as_deref(), 100)
                            .await
                            .unwrap_or_default()
                    }
                };
                if batch.is_empty() {
                    continue;
                }
                after = batch.last().map(|(id, _)| id.clone());
                let events: Vec<Result<SseEvent, std::convert::Infallible>> = batch
                    .into_iter()
                    .map(|(id, entry)| {
                        let kind = serde_json::from_str::<Value>(&entry)
                            .ok()
                            .and_then(|v| v["type"].as_str().map(str::to_owned))
                            .unwrap_or_else(|| "admin".to_owned());
                        Ok(SseEvent::default().id(id).event(kind).data(entry))
                    })
                    .collect();
                return Some((futures_util::stream::iter(events), (catalog, after, None)));
            }
        },
    );
    let stream = futures_util::StreamExt::flatten(stream);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(std::time::Duration::from_secs(15)))
        .into_response())
}
