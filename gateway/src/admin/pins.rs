//! `GET` and `PUT /admin/v1/tenants/{id}/tools`: the tenant's pinned tool definitions and
//! their mode (`toolmark_config::pins`). Stored with the tenant's record, so a change holds on
//! every node within a second, as every admin change; a config file's tenant shows its
//! `tenants[].tools` and is read-only here.

use toolmark_config::pins::PinsConfig;
use toolmark_proto::pin::Digest;

use super::*;

/// The pins as the answer shows them.
fn view(p: &PinsConfig) -> Value {
    json!({"mode": p.mode, "tools": p.tools})
}

#[utoipa::path(get, path = "/admin/v1/tenants/{id}/tools", tag = "admin", params(crate::admin_doc::TenantId),
    responses((status = 200, description = "The tenant's pinned tool definitions (default {\"mode\": \"off\", \"tools\": []})", body = crate::admin_doc::PinsView), crate::http::doc::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn get_tools(
    State(s): State<AdminState>,
    _who: Admin,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    if let Some(t) = s.0.loader.statics().iter().find(|t| t.id == id) {
        return Ok(axum::Json(view(&t.pins.config())).into_response());
    }
    let (_, t) = s.stored(&id).await?;
    Ok(axum::Json(view(&t.tools)).into_response())
}

#[utoipa::path(put, path = "/admin/v1/tenants/{id}/tools", tag = "admin", params(crate::admin_doc::TenantId),
    request_body = crate::admin_doc::PinsView,
    responses((status = 200, description = "The pins as stored: they hold on every node within a second", body = crate::admin_doc::PinsView), crate::http::doc::AdminProblems),
    security(("adminKey" = [])))]
pub(crate) async fn put_tools(
    State(s): State<AdminState>,
    who: Admin,
    Path(id): Path<String>,
    body: Body,
) -> Result<Response, Problem> {
    let mut req: PinsConfig = parse(&body)?;
    if let Err(e) = req.parse("") {
        // `.tools[3].digest` → `/tools/3/digest`
        let pointer = e.key.replace('[', "/").replace(']', "").replace('.', "/");
        return Err(Problem::invalid(pointer, e.reason));
    }
    req.tools.sort();
    req.tools.dedup();
    let detail = json!({"change": "tools", "mode": req.mode, "pinned": req.tools.len()});
    let (_, t, ()) = s
        .update(&who, ("tenant.updated", detail), &id, None, |t| {
            t.tools = req.clone();
            Ok(())
        })
        .await?;
    Ok(axum::Json(view(&t.tools)).into_response())
}

#[utoipa::path(get, path = "/admin/v1/tenants/{id}/tools/seen", tag = "admin", params(crate::admin_doc::TenantId),
    responses((status = 200, description = "Every tool definition the tenant's pages presented, cluster-wide, kept 30 days (at most 1,000)", body = crate::admin_doc::SeenToolsView), crate::http::doc::Problems),
    security(("adminKey" = [])))]
pub(crate) async fn seen_tools(
    State(s): State<AdminState>,
    _who: Admin,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let Some(tenant) = s.0.node.tenants.get(&id) else {
        return Err(Problem::not_found("Tenant"));
    };
    let seen = s.0.node.broker.tools_seen(&id).await?;
    let tools: Vec<Value> = seen
        .into_iter()
        .map(|t| {
            json!({
                "name": t.name,
                "pinned": Digest::parse(&t.digest).is_some_and(|d| tenant.pins.holds(&t.name, d)),
                "digest": t.digest,
                "firstSeen": rfc3339(t.first_ms),
                "lastSeen": rfc3339(t.last_ms),
            })
        })
        .collect();
    Ok(axum::Json(json!({"tools": tools})).into_response())
}
