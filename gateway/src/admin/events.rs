//! The admin event stream: the audit log as Server-Sent Events.

use serde::Serialize;

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

/// `GET /admin/v1/audit`'s query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct AuditQuery {
    /// RFC 3339: only entries made at or after it.
    since: Option<String>,
    /// RFC 3339: only entries made before it.
    until: Option<String>,
    /// Only the entries of this tenant.
    tenant: Option<String>,
    /// At most this many entries (1 to 1,000; 100 when absent).
    limit: Option<usize>,
    /// The `next` of the page before: the entries after it.
    cursor: Option<String>,
}

/// One admin change.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AuditEntry {
    /// Its id, ordered like the entries (`<ms>-<seq>`).
    id: String,
    /// When it was made (RFC 3339).
    at: String,
    /// The admin key that made it.
    admin_key_id: String,
    /// What it was (`tenant.created`, `tenant.updated`, `tenant.deleted`, …).
    kind: String,
    /// The tenant it changed.
    tenant: String,
    /// What changed (never a secret).
    #[schema(value_type = Object)]
    detail: Value,
}

/// A page of the audit log.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct AuditPage {
    /// Oldest first.
    entries: Vec<AuditEntry>,
    /// The cursor of the next page, or null when the log has no more for this query.
    next: Option<String>,
}

/// The milliseconds part of an audit entry's id.
fn id_ms(id: &str) -> Option<u64> {
    id.split_once('-')?.0.parse().ok()
}

/// An RFC 3339 time of the query as ms since the epoch, or 400 naming it.
fn query_time(value: Option<&str>, pointer: &str) -> Result<Option<u64>, Problem> {
    value
        .map(|v| {
            humantime::parse_rfc3339_weak(v)
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .and_then(|d| u64::try_from(d.as_millis()).ok())
                .ok_or_else(|| Problem::invalid(pointer, "an RFC 3339 time"))
        })
        .transpose()
}

/// How many entries one read of the log takes.
const AUDIT_READ: usize = 200;

/// `GET /admin/v1/audit?since=&until=&tenant=&limit=&cursor=`: the admin changes, oldest first,
/// a page at a time (`next`, the cursor of the page after). The log is the broker's: the
/// newest 10,000 entries.
#[utoipa::path(get, path = "/admin/v1/audit", tag = "admin",
    params(AuditQuery),
    responses((status = 200, description = "A page of the audit log, oldest first", body = AuditPage), crate::http::doc::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn audit(
    State(s): State<AdminState>,
    _who: Admin,
    crate::http::QueryOf(q): crate::http::QueryOf<AuditQuery>,
) -> Result<axum::Json<AuditPage>, Problem> {
    let since = query_time(q.since.as_deref(), "/since")?;
    let until = query_time(q.until.as_deref(), "/until")?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(Problem::invalid("/limit", "limit is between 1 and 1000"));
    }
    let mut after = match (&q.cursor, since) {
        (Some(c), _) if toolmark_broker::is_event_id(c) => Some(c.clone()),
        (Some(_), _) => return Err(Problem::invalid("/cursor", "the next of an audit page")),
        // Ids are ordered by the time they were made: start just before `since`.
        (None, Some(ms)) => Some(format!("{}-{}", ms.saturating_sub(1), u64::MAX)),
        (None, None) => None,
    };
    let catalog = s.0.loader.catalog();
    let mut entries = Vec::new();
    loop {
        let batch = catalog.audit_log(after.as_deref(), AUDIT_READ).await?;
        let full = batch.len() == AUDIT_READ;
        for (id, entry) in batch {
            if until.is_some_and(|u| id_ms(&id).is_none_or(|ms| ms >= u)) {
                return Ok(axum::Json(AuditPage {
                    entries,
                    next: None,
                }));
            }
            after = Some(id.clone());
            let Ok(v) = serde_json::from_str::<Value>(&entry) else {
                continue;
            };
            let text = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
            if q.tenant.as_deref().is_some_and(|t| t != v["tenant"]) {
                continue;
            }
            entries.push(AuditEntry {
                at: text("at"),
                admin_key_id: text("adminKeyId"),
                kind: text("type"),
                tenant: text("tenant"),
                detail: v["detail"].clone(),
                id,
            });
            if entries.len() == limit {
                return Ok(axum::Json(AuditPage {
                    next: after,
                    entries,
                }));
            }
        }
        if !full {
            return Ok(axum::Json(AuditPage {
                entries,
                next: None,
            }));
        }
    }
}
