//! `GET /v1/webmcp.js`: the WebMCP module, public and cacheable by its content hash.

use crate::harness::Gateway;

#[tokio::test]
async fn webmcp_module_is_served_with_an_etag_and_revalidates_with_304() {
    let gw = Gateway::start().await;
    let r = gw.http.get(gw.url("/v1/webmcp.js")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let headers = r.headers().clone();
    assert_eq!(headers["content-type"], "text/javascript; charset=utf-8");
    let cache = headers["cache-control"].to_str().unwrap();
    assert!(
        cache.contains("public") && cache.contains("max-age="),
        "{cache}"
    );
    let etag = headers["etag"].to_str().unwrap().to_owned();
    assert!(
        etag.len() > 2 && etag.starts_with('"') && etag.ends_with('"'),
        "a strong ETag: {etag}"
    );
    // Imported by apps from their own origins: a module script needs CORS.
    assert_eq!(headers["access-control-allow-origin"], "*");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    let body = r.text().await.unwrap();
    assert!(
        body.contains("export function connectWebMCP"),
        "an ES module"
    );
    assert_eq!(body, toolmark_gateway::webmcp::SOURCE);

    // The same version again: 304, no body, the same validators.
    let again = gw
        .http
        .get(gw.url("/v1/webmcp.js"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    assert_eq!(again.headers()["etag"].to_str().unwrap(), etag);
    assert_eq!(again.headers()["cache-control"].to_str().unwrap(), cache);
    assert!(again.text().await.unwrap().is_empty());

    // Another version (or a weak form of this one, as a CDN may send): 200 and 304.
    let other = gw
        .http
        .get(gw.url("/v1/webmcp.js"))
        .header("if-none-match", "\"0000\"")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
    let weak = gw
        .http
        .get(gw.url("/v1/webmcp.js"))
        .header("if-none-match", format!("\"0000\", W/{etag}"))
        .send()
        .await
        .unwrap();
    assert_eq!(weak.status(), 304);

    // No key is needed, and only GET (and HEAD) are served.
    let post = gw.http.post(gw.url("/v1/webmcp.js")).send().await.unwrap();
    assert_eq!(post.status(), 405);
}
