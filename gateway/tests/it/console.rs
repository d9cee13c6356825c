//! What the operator's console reads and serves: the stats (`GET /admin/v1/stats`,
//! `GET /admin/v1/tenants/{id}/stats`) moving as pages connect and calls are made, the
//! admin's view of a tenant's dead letters and event tail, and the console's page, served on
//! the admin listener only, with its headers.

use serde_json::{Value, json};

use crate::admin::{admin, create, live_page, minted, until};
use crate::harness::*;

/// `GET /admin/v1/tenants/{tenant}/stats` on `gw`, answered 200: its body.
pub(crate) async fn stats(gw: &Gateway, tenant: &str) -> Value {
    let r = admin(
        gw,
        "GET",
        &format!("/admin/v1/tenants/{tenant}/stats"),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_stats_move_as_its_page_connects_and_its_calls_are_made() {
    let nodes = Gateway::start_admin_nodes(1).await;
    let gw = &nodes[0];
    let secrets = create(gw, "stat-one").await;
    let key = secrets["apiKey"].as_str().unwrap();

    let s = stats(gw, "stat-one").await;
    assert_eq!(s["tenant"], "stat-one");
    assert_eq!(s["cluster"]["connections"], 0, "{s}");
    assert_eq!(s["node"]["conversations"], 0, "{s}");
    assert_eq!(s["node"]["calls"], json!({}), "{s}");
    assert_eq!(s["cluster"]["webhookBacklog"], 0, "{s}");
    assert!(s["nodeId"].is_string() && s["at"].is_string(), "{s}");

    // A call before any page: refused with no_page, counted by its code.
    let agent = gw.agent("stat-one", key);
    let a = agent
        .post(
            "/users/u1/conversations/c1/calls",
            json!({"tool": "todo.add", "input": {}}),
        )
        .await;
    assert_eq!(a.status, 409, "{}", a.body);
    let wrong = gw.agent("stat-one", "tmk_not-a-key-of-this-tenant");
    assert_eq!(
        wrong
            .post(
                "/users/u1/conversations/c1/calls",
                json!({"tool": "todo.add", "input": {}})
            )
            .await
            .status,
        401
    );
    let s = stats(gw, "stat-one").await;
    // A wrong key is no refusal of the tenant's own: counted apart.
    assert_eq!(s["node"]["refusals"], json!({"no_page": 1}), "{s}");
    assert_eq!(s["node"]["unauthenticated"], 1, "{s}");

    let token = minted(gw, "stat-one", key, "u1", "c1").await;
    let mut page = live_page(gw, "stat-one", key, &token, "u1").await;
    let s = stats(gw, "stat-one").await;
    assert_eq!(s["cluster"]["connections"], 1, "{s}");
    assert_eq!(s["node"]["conversations"], 1, "{s}");

    for _ in 0..3 {
        let pending = agent.call_later("u1", "c1", json!({"tool": "todo.add", "input": {}}));
        answer_ok(&mut page, pending, "done").await;
    }
    // A fourth the page leaves unanswered past its deadline.
    let late = agent.call_later(
        "u1",
        "c1",
        json!({"tool": "todo.add", "input": {}, "timeoutMs": 200}),
    );
    page.recv().await;
    let late = late.await.unwrap();
    assert_eq!(late.body["outcome"]["status"], "timeout", "{}", late.body);
    let s = stats(gw, "stat-one").await;
    assert_eq!(s["node"]["calls"], json!({"ok": 3, "timeout": 1}), "{s}");
    // The Prometheus series count the same calls, by the same outcomes, each with its time.
    for (series, n) in [
        ("toolmark_calls_total{kind=\"call\",outcome=\"ok\"}", 3.0),
        (
            "toolmark_calls_total{kind=\"call\",outcome=\"timeout\"}",
            1.0,
        ),
        ("toolmark_call_duration_seconds_count", 4.0),
    ] {
        assert_eq!(gw.metric(series).await, n, "{series}");
    }
    // Four calls in the last 10 s (whichever second they fell in, the window holds them
    // until it moves past them).
    let rate = s["node"]["callsPerSecond"].as_f64().unwrap();
    assert!((0.0..=0.4).contains(&rate), "{s}");
    until(
        "the rate counts the calls once their second is over",
        || async { stats(gw, "stat-one").await["node"]["callsPerSecond"].as_f64() == Some(0.4) },
    )
    .await;

    // The cluster's figures are the nodes' written entries: this node's, within a flush.
    until("the cluster's figures hold the calls", || async {
        let s = stats(gw, "stat-one").await;
        s["cluster"]["calls"] == json!({"ok": 3, "timeout": 1}) && s["cluster"]["nodes"] == 1
    })
    .await;

    // The summary lists the tenant with the same figures, and sums them.
    let all = admin(gw, "GET", "/admin/v1/stats", None).await;
    assert_eq!(all.status, 200, "{}", all.body);
    let line = all.body["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "stat-one")
        .cloned()
        .unwrap_or_else(|| panic!("{}", all.body));
    assert_eq!(line["connections"], 1);
    assert_eq!(line["conversations"], 1);
    assert!(all.body["cluster"]["connections"].as_u64().unwrap() >= 1);
    assert!(all.body["node"]["calls"]["ok"].as_u64().unwrap() >= 3);

    // The tail starts with what happened in the last minute: the page's manifest.
    let mut tail = gw
        .http
        .get(format!(
            "http://{}/admin/v1/tenants/stat-one/events",
            gw.admin.unwrap()
        ))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(tail.status(), 200);
    let mut seen = String::new();
    while !seen.contains("event: page.manifest") {
        let chunk = tokio::time::timeout(WAIT, tail.chunk())
            .await
            .unwrap_or_else(|_| panic!("the tail so far: {seen}"))
            .unwrap()
            .expect("the stream goes on");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(tail);

    drop(page);
    until("the page's socket is released", || async {
        let s = stats(gw, "stat-one").await;
        s["cluster"]["connections"] == 0 && s["node"]["conversations"] == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_counted_cluster_wide_and_conversations_per_node() {
    let nodes = Gateway::start_admin_nodes(2).await;
    let (one, two) = (&nodes[0], &nodes[1]);
    let secrets = create(one, "stat-two").await;
    let key = secrets["apiKey"].as_str().unwrap();
    let token = minted(one, "stat-two", key, "u1", "c1").await;
    let _page = live_page(one, "stat-two", key, &token, "u1").await;
    until("the other node counts the page", || async {
        let s = stats(two, "stat-two").await;
        s["cluster"]["connections"] == 1
    })
    .await;
    assert_eq!(stats(two, "stat-two").await["node"]["conversations"], 0);
    assert_eq!(stats(one, "stat-two").await["node"]["conversations"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stats_and_debug_views_refuse_what_they_must() {
    let nodes = Gateway::start_admin_nodes(1).await;
    let gw = &nodes[0];
    let url = format!("http://{}/admin/v1/stats", gw.admin.unwrap());
    let r = gw.http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "application/problem+json"
    );
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], "unauthorized");
    for path in [
        "/admin/v1/tenants/nobody/stats",
        "/admin/v1/tenants/nobody/webhooks/failed",
        "/admin/v1/tenants/Not%20an%20id/stats",
    ] {
        let r = admin(gw, "GET", path, None).await;
        assert_eq!(
            (r.status, r.body["code"].as_str()),
            (404, Some("not_found")),
            "{path}"
        );
    }
    create(gw, "stat-three").await;
    let r = admin(
        gw,
        "GET",
        "/admin/v1/tenants/stat-three/webhooks/failed",
        None,
    )
    .await;
    assert_eq!((r.status, &r.body), (200, &json!({"failed": []})));
    let r = admin(
        gw,
        "POST",
        "/admin/v1/tenants/stat-three/webhooks/failed/0-1/retry",
        None,
    )
    .await;
    assert_eq!(
        (r.status, r.body["code"].as_str()),
        (404, Some("not_found"))
    );
}

/// The console's page and assets, with the headers that keep it to itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_on_the_admin_listener_only_with_a_strict_policy() {
    let nodes = Gateway::start_admin_nodes(1).await;
    let gw = &nodes[0];
    let admin_at = gw.admin.unwrap();
    let csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
    let mut bodies = Vec::new();
    for (path, kind) in [
        ("/admin/console", "text/html"),
        ("/admin/console/console.css", "text/css"),
        ("/admin/console/console.js", "text/javascript"),
        ("/admin/console/tenants.js", "text/javascript"),
        ("/admin/console/api.js", "text/javascript"),
        ("/admin/console/dom.js", "text/javascript"),
        ("/admin/console/state.js", "text/javascript"),
    ] {
        // No key: the page signs in by itself, and holds no secret.
        let r = gw
            .http
            .get(format!("http://{admin_at}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers();
        assert!(
            h["content-type"].to_str().unwrap().starts_with(kind),
            "{path}"
        );
        assert_eq!(h["content-security-policy"], csp, "{path}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["cache-control"], "no-store", "{path}");
        assert_eq!(h["x-frame-options"], "DENY", "{path}");
        bodies.push(r.text().await.unwrap());
    }
    let html = &bodies[0];
    // Every script is the module by its URL, no inline script, handler or style.
    let scripts: Vec<_> = html.match_indices("<script").collect();
    assert_eq!(scripts.len(), 1, "{html}");
    assert!(html.contains(r#"<script type="module" src="console/console.js"></script>"#));
    for inline in ["<style", " style=", " onclick=", " onload=", "javascript:"] {
        assert!(!html.contains(inline), "inline {inline} in the page");
    }
    // No other origin: the page names none, the modules only the SVG namespace; every import
    // is a module of the console, by relative URL.
    assert!(!html.contains("://"), "another origin in the page");
    let js = bodies[2..].concat();
    let origins: Vec<_> = js
        .match_indices("://")
        .map(|(i, _)| &js[i - 5..i + 20])
        .collect();
    assert_eq!(origins, ["'http://www.w3.org/2000/s"], "{origins:?}");
    for line in js.lines().filter(|l| l.starts_with("import ")) {
        assert!(line.contains("from './"), "{line}");
    }
    assert!(
        !js.contains("innerHTML"),
        "the modules build nodes, never HTML text"
    );

    let r = gw
        .http
        .get(format!("http://{admin_at}/admin/console/other.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    // The public listener knows none of it.
    for path in [
        "/admin/console",
        "/admin/console/console.js",
        "/admin/v1/stats",
    ] {
        let r = gw.http.get(gw.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path} on the public listener");
        assert!(!r.text().await.unwrap().contains("Toolmark console"));
    }
}
