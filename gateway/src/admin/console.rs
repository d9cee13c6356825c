//! The operator's console: one page and its module, script and style, built into the binary
//! and served by the admin router only (never the public listener). The page holds no secret:
//! it asks for an admin key, keeps it in the tab's session storage and sends it only as the
//! admin API's `Authorization` header to its own origin. Everything it shows or does goes
//! through the admin API, so anything it does can be scripted.
//!
//! The headers forbid what the page never needs: a strict Content-Security-Policy (no inline
//! script or style, no other origin, no framing), no MIME sniffing, no referrer, no caching.

use axum::http::HeaderName;

use super::*;

const INDEX: &str = include_str!("../../console/index.html");
const STYLE: &str = include_str!("../../console/console.css");

/// The console's modules: `console.js` imports the others by relative URL.
const MODULES: [(&str, &str); 5] = [
    ("console.js", include_str!("../../console/console.js")),
    ("tenants.js", include_str!("../../console/tenants.js")),
    ("api.js", include_str!("../../console/api.js")),
    ("dom.js", include_str!("../../console/dom.js")),
    ("state.js", include_str!("../../console/state.js")),
];

/// The console's Content-Security-Policy.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The `{file}` of a console asset.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct AssetPath {
    /// `console.css`, or a module: `console.js`, `tenants.js`, `api.js`, `dom.js`, `state.js`.
    #[param(pattern = "^(console|tenants|api|dom|state)\\.js$|^console\\.css$")]
    file: String,
}

fn answer(content_type: &'static str, body: &'static str) -> Response {
    let headers: [(HeaderName, &'static str); 6] = [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CACHE_CONTROL, "no-store"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ];
    (StatusCode::OK, headers, body).into_response()
}

/// `GET /admin/console`: the console's page (it signs in with an admin key itself).
#[utoipa::path(get, path = "/admin/console", tag = "admin", operation_id = "admin_console",
    responses((status = 200, description = "The operator's console (HTML; docs/operations.md)", content_type = "text/html")))]
pub(crate) async fn page() -> Response {
    answer("text/html; charset=utf-8", INDEX)
}

/// `GET /admin/console/{file}`: the console's modules and style sheet.
#[utoipa::path(get, path = "/admin/console/{file}", tag = "admin", operation_id = "admin_console_file",
    params(AssetPath),
    responses((status = 200, description = "A JavaScript module of the console, or console.css", content_type = "text/javascript"),
        crate::http::doc::Problems))]
pub(crate) async fn asset(Path(file): Path<String>) -> Response {
    if file == "console.css" {
        return answer("text/css; charset=utf-8", STYLE);
    }
    match MODULES.iter().find(|(name, _)| *name == file) {
        Some((_, text)) => answer("text/javascript; charset=utf-8", text),
        None => Problem::not_found("File").into_response(),
    }
}
