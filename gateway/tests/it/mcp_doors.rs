//! The doors of the hosted MCP endpoint that an attack from outside found open, each tried
//! again as the attack did it: an access token's audience taken from the request's `Host`,
//! sessions without a bound, a revocation that missed OAuth access tokens and open streams,
//! a JWK Set fetched from anywhere, and a tenant re-created under an old id inheriting what the
//! old one left.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonwebtoken::Algorithm::EdDSA;
use serde_json::{Value, json};

use crate::admin::{admin, create, live_page, minted, until};
use crate::harness::*;
use crate::hosted_mcp::{
    ISSUER, PUBLIC, access_token, exchange_at, initialize, jwk_ed, jwks_server, mcp_token,
    post_initialize,
};

/// An access token of the test authorization server for `user` in `c1`, for `aud`.
fn access(user: &str, aud: &str) -> String {
    let claims = json!({"iss": ISSUER, "aud": aud, "sub": user, "cnv": "c1",
        "exp": now() + 600, "iat": now()});
    access_token(EdDSA, "k1", &claims)
}

/// The endpoint of `tenant` under [`PUBLIC`]: the audience of its access tokens.
fn audience(tenant: &str) -> String {
    format!("{PUBLIC}/v1/tenants/{tenant}/mcp")
}

/// `notifications/initialized` in `session`, after which the session is in use.
async fn initialized(gw: &Gateway, tenant: &str, token: &str, session: &str) {
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, _) = exchange_at(gw, tenant, token, Some(session), note).await;
    assert_eq!(status, 202);
}

/// A session of `tenant` begun on `gw` with `token`: its id.
async fn session(gw: &Gateway, tenant: &str, token: &str) -> String {
    let (status, session, messages) = exchange_at(gw, tenant, token, None, initialize()).await;
    assert_eq!(status, 200, "{messages:?}");
    let session = session.expect("a session id");
    initialized(gw, tenant, token, &session).await;
    session
}

/// The session's `GET` stream, open.
async fn stream(gw: &Gateway, tenant: &str, token: &str, session: &str) -> reqwest::Response {
    let r = gw
        .http
        .get(gw.url(&format!("/v1/tenants/{tenant}/mcp")))
        .bearer_auth(token)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r
}

/// Whether the stream ends (the server closed it) within `within`; keep-alives and priming
/// events are read past.
async fn ends_within(stream: &mut reqwest::Response, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.chunk()).await {
            Err(_) => return false,
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None) | Err(_)) => return true,
        }
    }
}

fn tools_list() -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"})
}

#[tokio::test]
async fn an_access_token_for_another_server_is_refused_whatever_host_the_request_names() {
    let gw = Gateway::start_config(
        &with_public_url(
            &config_toml(&format!(
                "mcp_issuer = \"{ISSUER}\"\nmcp_public_key = \"\"\"{ED_PUB}\"\"\"\n"
            )),
            PUBLIC,
        ),
        None,
    )
    .await;
    let url = gw.url("/v1/tenants/acme/mcp");
    // A token the user granted to another MCP server of the same authorization server, sent
    // with that server's name as `Host` and a forwarded https: refused.
    let theirs = access("u1", "https://evil.example/v1/tenants/acme/mcp");
    for (host, proto) in [("evil.example", "https"), ("evil.example", "http")] {
        let r = gw
            .http
            .post(&url)
            .bearer_auth(&theirs)
            .header("host", host)
            .header("x-forwarded-proto", proto)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "a token for {host} was taken");
        // The challenge and the metadata name the public URL, not the spoofed host.
        assert_eq!(
            r.headers()["www-authenticate"].to_str().unwrap(),
            format!(
                "Bearer resource_metadata=\"{PUBLIC}/.well-known/oauth-protected-resource/v1/tenants/acme/mcp\""
            )
        );
        let doc: Value = gw
            .http
            .get(gw.url("/.well-known/oauth-protected-resource/v1/tenants/acme/mcp"))
            .header("host", host)
            .header("x-forwarded-proto", proto)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(doc["resource"], json!(audience("acme")));
    }
    // A token for this endpoint's public URL opens it, whatever address the client used.
    let ours = access("u1", &audience("acme"));
    assert_eq!(post_initialize(&gw.http, &url, &ours).await.status(), 200);

    // An authorization server on a gateway without a public URL is refused where it is set.
    let text = config_toml(&format!(
        "mcp_issuer = \"{ISSUER}\"\nmcp_public_key = \"\"\"{ED_PUB}\"\"\"\n"
    ));
    let e = toolmark_config::Settings::load(&text, [], &toolmark_config::Overrides::default())
        .unwrap_err();
    assert_eq!(e.key, "server.public_url");
    let nodes = Gateway::start_admin_nodes(1).await;
    let refused = admin(
        &nodes[0],
        "POST",
        "/admin/v1/tenants",
        Some(json!({"id": "nopublic", "allowedOrigins": [ACME_ORIGIN],
            "mcpOAuth": {"issuer": ISSUER, "publicKey": ED_PUB}})),
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body["detail"]
            .as_str()
            .unwrap()
            .contains("server.public_url"),
        "{}",
        refused.body
    );
}

#[tokio::test]
async fn sessions_are_bounded_per_token_and_per_tenant_across_nodes() {
    let nodes = Gateway::start_nodes(
        2,
        "[mcp]\nmax_sessions_per_token = 2\nmax_sessions_per_tenant = 3\n",
    )
    .await;
    let (n1, n2) = (&nodes[0], &nodes[1]);
    let u1 = mcp_token(n1, "u1", "c1").await;
    let first = session(n1, "acme", &u1).await;
    let _second = session(n2, "acme", &u1).await;
    // A third of the same token, on either node: 429, a problem, and no session.
    for node in [n1, n2] {
        let r = post_initialize(&node.http, &node.url("/v1/tenants/acme/mcp"), &u1).await;
        assert_eq!(r.status(), 429);
        assert!(r.headers().get("mcp-session-id").is_none());
        assert!(r.headers().get("retry-after").is_some());
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["code"], "rate_limited", "{body}");
    }
    // The refused ones counted nothing: ending one session (on the other node) makes room for
    // exactly one.
    let ended = n2
        .http
        .delete(n2.url("/v1/tenants/acme/mcp"))
        .bearer_auth(&u1)
        .header("mcp-session-id", &first)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap();
    assert!(ended.status().is_success(), "{}", ended.status());
    let _third = session(n1, "acme", &u1).await;
    let again = post_initialize(&n1.http, &n1.url("/v1/tenants/acme/mcp"), &u1).await;
    assert_eq!(again.status(), 429);
    // The tenant's bound: a third user's session is the tenant's fourth.
    let u2 = mcp_token(n1, "u2", "c1").await;
    let _u2 = session(n2, "acme", &u2).await;
    let u3 = mcp_token(n1, "u3", "c1").await;
    let r = post_initialize(&n2.http, &n2.url("/v1/tenants/acme/mcp"), &u3).await;
    assert_eq!(r.status(), 429);
    // Another tenant is not counted with this one.
    let g = n1
        .agent("globex", GLOBEX_KEY)
        .post(
            "/tokens",
            json!({"user": "u1", "conversation": "c1", "scope": "mcp"}),
        )
        .await;
    let g = g.body["token"].as_str().unwrap();
    let r = post_initialize(&n1.http, &n1.url("/v1/tenants/globex/mcp"), g).await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_session_left_idle_gives_its_place_back_and_one_in_use_keeps_it() {
    let gw =
        Gateway::start_with("[mcp]\nmax_sessions_per_token = 2\nsession_idle_secs = 2\n").await;
    let token = mcp_token(&gw, "u1", "c1").await;
    let used = session(&gw, "acme", &token).await;
    let idle = session(&gw, "acme", &token).await;
    let url = gw.url("/v1/tenants/acme/mcp");
    let began = tokio::time::Instant::now();
    // `used` is used every 500 ms; `idle` never again. A new session is refused until idle's
    // place lapses (its idle time and an eighth), then taken.
    let deadline = began + Duration::from_secs(20);
    loop {
        let (status, _, _) = exchange_at(&gw, "acme", &token, Some(&used), tools_list()).await;
        assert_eq!(status, 200, "the session in use was forgotten");
        if post_initialize(&gw.http, &url, &token).await.status() == 200 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the idle session's place never came back"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        began.elapsed() >= Duration::from_secs(2),
        "a place came back before its session's idle time"
    );
    let (status, _, _) = exchange_at(&gw, "acme", &token, Some(&idle), tools_list()).await;
    assert_eq!(status, 404, "the idle session is gone");
    // The session in use still holds its place: the token's two are it and the new one.
    assert_eq!(post_initialize(&gw.http, &url, &token).await.status(), 429);
}

/// Creates `id` with an authorization server (the test key) through `gw`; its API key.
async fn oauth_tenant(gw: &Gateway, id: &str) -> String {
    let r = admin(
        gw,
        "POST",
        "/admin/v1/tenants",
        Some(json!({"id": id, "allowedOrigins": [ACME_ORIGIN],
            "mcpOAuth": {"issuer": ISSUER, "publicKey": ED_PUB}})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body["secrets"]["apiKey"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_ends_oauth_access_and_the_streams_and_sessions_it_covers_on_every_node() {
    let nodes = Gateway::start_admin_nodes_at(2, Some(PUBLIC)).await;
    let (n1, n2) = (&nodes[0], &nodes[1]);
    let key = oauth_tenant(n1, "revco").await;
    let u1_access = access("u1", &audience("revco"));
    let u2_access = access("u2", &audience("revco"));
    let url2 = n2.url("/v1/tenants/revco/mcp");
    until("node 2 takes the access token", || {
        let (http, url, t) = (n2.http.clone(), url2.clone(), u1_access.clone());
        async move { post_initialize(&http, &url, &t).await.status() == 200 }
    })
    .await;
    // u1: a session and its stream on node 2 with the access token, another on node 1 with an
    // MCP token. u2: a session and a stream on node 2.
    let oauth_session = session(n2, "revco", &u1_access).await;
    let mut oauth_stream = stream(n2, "revco", &u1_access, &oauth_session).await;
    let minted = n1
        .agent("revco", &key)
        .post(
            "/tokens",
            json!({"user": "u1", "conversation": "c1", "scope": "mcp"}),
        )
        .await;
    assert_eq!(minted.status, 201, "{}", minted.body);
    let u1_mcp = minted.body["token"].as_str().unwrap().to_owned();
    let mcp_session = session(n1, "revco", &u1_mcp).await;
    let mut mcp_stream = stream(n1, "revco", &u1_mcp, &mcp_session).await;
    let u2_session = session(n2, "revco", &u2_access).await;
    let mut u2_stream = stream(n2, "revco", &u2_access, &u2_session).await;

    // The user is disconnected through node 1.
    let r = admin(
        n1,
        "POST",
        "/admin/v1/tenants/revco/users/u1/disconnect",
        Some(json!({})),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let at = tokio::time::Instant::now();
    assert!(
        ends_within(&mut oauth_stream, WAIT).await,
        "the access token's stream on node 2 stays open"
    );
    assert!(
        ends_within(&mut mcp_stream, WAIT).await,
        "the MCP token's stream on node 1 stays open"
    );
    eprintln!("u1's streams ended {:?} after the disconnect", at.elapsed());
    // Neither credential opens anything any more, on either node; the sessions are gone.
    for node in [n1, n2] {
        let url = node.url("/v1/tenants/revco/mcp");
        assert_eq!(
            post_initialize(&node.http, &url, &u1_access).await.status(),
            401
        );
        assert_eq!(
            post_initialize(&node.http, &url, &u1_mcp).await.status(),
            401
        );
    }
    // A token issued after the disconnect (`iat` a second later) opens the endpoint again,
    // but the revoked sessions are gone for it too.
    let after = json!({"iss": ISSUER, "aud": audience("revco"), "sub": "u1", "cnv": "c1",
        "exp": now() + 600, "iat": now() + 2});
    let after = access_token(EdDSA, "k1", &after);
    for (node, id) in [(n1, &oauth_session), (n2, &mcp_session)] {
        let (status, _, _) = exchange_at(node, "revco", &after, Some(id), tools_list()).await;
        assert_eq!(status, 404, "a revoked session is served again");
    }
    assert_eq!(
        post_initialize(&n2.http, &url2, &after).await.status(),
        200,
        "a token issued after the disconnect opens the endpoint"
    );
    // u2 never moved.
    assert!(!ends_within(&mut u2_stream, Duration::from_millis(300)).await);
    let (status, _, _) =
        exchange_at(n2, "revco", &u2_access, Some(&u2_session), tools_list()).await;
    assert_eq!(status, 200);

    // Deleting the tenant ends u2's stream too, and its tokens open nothing.
    let r = admin(n2, "DELETE", "/admin/v1/tenants/revco", None).await;
    assert_eq!(r.status, 204);
    assert!(
        ends_within(&mut u2_stream, WAIT).await,
        "u2's stream outlives its tenant"
    );
}

#[tokio::test]
async fn a_jwk_set_is_fetched_from_public_https_addresses_only() {
    let set = Arc::new(Mutex::new(json!({"keys": [jwk_ed("k1")]})));
    let fetches = Arc::new(AtomicUsize::new(0));
    let jwks = jwks_server(set, fetches.clone()).await;
    let port = jwks
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/jwks")
        .to_owned();
    // Plain http to a private address: refused where it is set, unless the tenant allows it.
    let text = with_public_url(
        &config_toml(&format!(
            "mcp_issuer = \"{ISSUER}\"\nmcp_jwks_url = \"{jwks}\"\n"
        )),
        PUBLIC,
    );
    let e = toolmark_config::Settings::load(&text, [], &toolmark_config::Overrides::default())
        .unwrap_err();
    assert_eq!(e.key, "tenants[3].mcp_jwks_url");
    let nodes = Gateway::start_admin_nodes_at(1, Some(PUBLIC)).await;
    let gw = &nodes[0];
    let plain = admin(
        gw,
        "POST",
        "/admin/v1/tenants",
        Some(json!({"id": "plainco", "allowedOrigins": [ACME_ORIGIN],
            "mcpOAuth": {"issuer": ISSUER, "jwksUrl": jwks}})),
    )
    .await;
    assert_eq!(
        (plain.status, plain.body["pointer"].as_str()),
        (400, Some("/mcpOAuth/jwksUrl")),
        "{}",
        plain.body
    );
    // https to a loopback address, by literal or by a name that resolves to it: accepted as a
    // URL, but never fetched (the token it would sign is refused).
    for (id, url) in [
        ("literalco", format!("https://127.0.0.1:{port}/jwks")),
        ("nameco", format!("https://localhost:{port}/jwks")),
    ] {
        let r = admin(
            gw,
            "POST",
            "/admin/v1/tenants",
            Some(json!({"id": id, "allowedOrigins": [ACME_ORIGIN],
                "mcpOAuth": {"issuer": ISSUER, "jwksUrl": url}})),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.body);
        let token = access("u1", &audience(id));
        let endpoint = gw.url(&format!("/v1/tenants/{id}/mcp"));
        assert_eq!(
            post_initialize(&gw.http, &endpoint, &token).await.status(),
            401
        );
    }
    // With private addresses allowed, the same server is used (over plain http too).
    let r = admin(
        gw,
        "POST",
        "/admin/v1/tenants",
        Some(
            json!({"id": "labco", "allowedOrigins": [ACME_ORIGIN], "webhookAllowPrivate": true,
            "mcpOAuth": {"issuer": ISSUER, "jwksUrl": jwks}}),
        ),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        0,
        "a refused set was fetched"
    );
    let token = access("u1", &audience("labco"));
    let endpoint = gw.url("/v1/tenants/labco/mcp");
    assert_eq!(
        post_initialize(&gw.http, &endpoint, &token).await.status(),
        200
    );
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_created_again_under_its_id_sees_none_of_the_old_ones_keys_or_sessions() {
    let nodes = Gateway::start_admin_nodes(1).await;
    let gw = &nodes[0];
    let s = create(gw, "reborn").await;
    let key = s["apiKey"].as_str().unwrap().to_owned();
    let t = minted(gw, "reborn", &key, "u1", "c1").await;
    let mut page = live_page(gw, "reborn", &key, &t, "u1").await;
    // A call with an idempotency key, answered.
    let call = |key: String, input: Value| {
        let http = gw.http.clone();
        let url = gw.url("/v1/tenants/reborn/users/u1/conversations/c1/calls");
        tokio::spawn(async move {
            crate::agent::Agent::read(
                http.post(url)
                    .bearer_auth(key)
                    .header("idempotency-key", "order-42")
                    .json(&json!({"tool": "todo.add", "input": input}))
                    .send()
                    .await
                    .unwrap(),
            )
            .await
        })
    };
    let pending = call(key.clone(), json!({"n": 1}));
    answer_ok(&mut page, pending, "first").await;
    // An MCP session of u1.
    let mcp = gw
        .agent("reborn", &key)
        .post(
            "/tokens",
            json!({"user": "u1", "conversation": "c1", "scope": "mcp"}),
        )
        .await;
    let old_session = session(gw, "reborn", mcp.body["token"].as_str().unwrap()).await;

    // Deleted, then created again under the same id.
    assert_eq!(
        admin(gw, "DELETE", "/admin/v1/tenants/reborn", None)
            .await
            .status,
        204
    );
    let s = create(gw, "reborn").await;
    let key = s["apiKey"].as_str().unwrap().to_owned();
    let t = minted(gw, "reborn", &key, "u1", "c1").await;
    let mut page = live_page(gw, "reborn", &key, &t, "u1").await;
    // The same key with another body is a new request of the new tenant: it runs (not a 422
    // revealing the old key), and the page gets its frame.
    let pending = call(key.clone(), json!({"n": 2}));
    answer_ok(&mut page, pending, "second").await;
    // The old session is not the new tenant's, even for the same user and conversation.
    let mcp = gw
        .agent("reborn", &key)
        .post(
            "/tokens",
            json!({"user": "u1", "conversation": "c1", "scope": "mcp"}),
        )
        .await;
    let token = mcp.body["token"].as_str().unwrap();
    let (status, _, _) = exchange_at(gw, "reborn", token, Some(&old_session), tools_list()).await;
    assert_eq!(status, 404);
}
