//! The admin API: tenants created, rotated, disconnected and deleted at run time, applied on
//! every node (two nodes on Redis; one node on the memory broker in memory mode), with the
//! contract's codes; secrets never stored in plain text.

use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use crate::harness::*;

/// Status, headers and JSON body of an admin answer.
pub(crate) struct Reply {
    pub status: u16,
    pub etag: Option<String>,
    pub body: Value,
}

pub(crate) async fn admin(gw: &Gateway, method: &str, path: &str, body: Option<Value>) -> Reply {
    admin_with(gw, method, path, body, Some(ADMIN_KEY), &[]).await
}

async fn admin_with(
    gw: &Gateway,
    method: &str,
    path: &str,
    body: Option<Value>,
    key: Option<&str>,
    headers: &[(&str, &str)],
) -> Reply {
    let url = format!("http://{}{path}", gw.admin.expect("admin listener"));
    let mut req = gw
        .http
        .request(method.parse().unwrap(), url)
        .header("content-type", "application/json");
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.body(b.to_string());
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let etag = res
        .headers()
        .get("etag")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = res.text().await.unwrap();
    Reply {
        status,
        etag,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
    }
}

/// Creates tenant `id` with acme's origin; returns its secrets.
pub(crate) async fn create(gw: &Gateway, id: &str) -> Value {
    let r = admin(
        gw,
        "POST",
        "/admin/v1/tenants",
        Some(json!({"id": id, "allowedOrigins": [ACME_ORIGIN], "webhookUrl": "https://hooks.example/t"})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body["secrets"].clone()
}

/// Waits (bounded) until `gw` answers `f` with `want`.
pub(crate) async fn until<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A page token of `tenant` signed with `secret`, naming `kid`.
fn token(tenant: &str, user: &str, conv: &str, secret: &str, kid: Option<&str>) -> String {
    toolmark_config::jwt::install();
    let mut h = Header::new(Algorithm::HS256);
    h.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(
        &h,
        &claims(tenant, user, conv),
        &EncodingKey::from_secret(secret.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// Mints a page token through `POST …/tokens` (as `gw` answers it, once it knows the tenant
/// and key) whose header satisfies `ok`.
async fn minted_where(
    gw: &Gateway,
    tenant: &str,
    key: &str,
    user: &str,
    conv: &str,
    ok: impl Fn(&jsonwebtoken::Header) -> bool,
) -> String {
    let agent = gw.agent(tenant, key);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let a = agent
            .post("/tokens", json!({"user": user, "conversation": conv}))
            .await;
        if a.status == 201 {
            let t = a.body["token"].as_str().unwrap().to_owned();
            if jsonwebtoken::decode_header(&t).is_ok_and(|h| ok(&h)) {
                return t;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no token of {tenant} from {}: {}",
            gw.addr,
            a.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Mints a page token through `POST …/tokens` once `gw` knows the tenant and key.
pub(crate) async fn minted(
    gw: &Gateway,
    tenant: &str,
    key: &str,
    user: &str,
    conv: &str,
) -> String {
    minted_where(gw, tenant, key, user, conv, |_| true).await
}

/// A page of `tenant` connected to `gw` with `token` that published one tool and is current.
pub(crate) async fn live_page(
    gw: &Gateway,
    tenant: &str,
    key: &str,
    token: &str,
    user: &str,
) -> Page {
    let mut page = gw
        .connect(tenant, token, Some(ACME_ORIGIN))
        .await
        .expect("page admitted");
    page.manifest(1, json!([tool("todo.add", json!({}))])).await;
    gw.agent(tenant, key)
        .wait_current(user, "c1", &page.client_id)
        .await;
    page
}

/// One call through `agent` answered by `page`.
pub(crate) async fn call_ok(agent: &Agent, page: &mut Page, user: &str) {
    let pending = agent.call_later(user, "c1", json!({"tool": "todo.add", "input": {}}));
    answer_ok(page, pending, "done").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_created_through_one_node_serves_pages_and_agents_on_another() {
    let nodes = Gateway::start_admin_nodes(2).await;
    let secrets = create(&nodes[0], "runtime-one").await;
    let key = secrets["apiKey"].as_str().unwrap();
    let kid = secrets["tokenKid"].as_str().unwrap();
    assert!(secrets["tokenSecret"].as_str().unwrap().len() >= 32);
    assert!(
        secrets["webhookSecret"]
            .as_str()
            .unwrap()
            .starts_with("whsec_")
    );
    // Minted on node 2, naming the tenant's key.
    let t = minted(&nodes[1], "runtime-one", key, "u1", "c1").await;
    let header = jsonwebtoken::decode_header(&t).unwrap();
    assert_eq!(header.kid.as_deref(), Some(kid));
    let mut page = live_page(&nodes[1], "runtime-one", key, &t, "u1").await;
    // An agent on node 1 calls the page on node 2.
    call_ok(&nodes[0].agent("runtime-one", key), &mut page, "u1").await;
    // A token signed with the returned secret works too (the tenant's own backend mints it).
    let own = token(
        "runtime-one",
        "u2",
        "c1",
        secrets["tokenSecret"].as_str().unwrap(),
        Some(kid),
    );
    live_page(&nodes[0], "runtime-one", key, &own, "u2").await;
    // Listed, without secrets; the config file's tenants are listed read-only.
    let list = admin(&nodes[1], "GET", "/admin/v1/tenants?limit=2", None).await;
    assert_eq!(list.status, 200);
    assert_eq!(list.body["tenants"].as_array().unwrap().len(), 2);
    let next = list.body["next"].as_str().unwrap().to_owned();
    let rest = admin(
        &nodes[1],
        "GET",
        &format!("/admin/v1/tenants?limit=100&cursor={next}"),
        None,
    )
    .await;
    let all: Vec<Value> = list.body["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .chain(rest.body["tenants"].as_array().unwrap())
        .cloned()
        .collect();
    let ids: Vec<&str> = all.iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["acme", "ecco", "edco", "globex", "runtime-one"]);
    assert_eq!(all[0]["source"], "config");
    assert_eq!(all[4]["source"], "admin");
    let text = all[4].to_string();
    assert!(!text.contains(key) && !text.contains(secrets["tokenSecret"].as_str().unwrap()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_secret_rotates_while_a_page_is_connected_with_no_failed_call() {
    let nodes = Gateway::start_admin_nodes(2).await;
    let s = create(&nodes[0], "rotating").await;
    let old_key = s["apiKey"].as_str().unwrap().to_owned();
    let old_kid = s["tokenKid"].as_str().unwrap().to_owned();
    let t = minted(&nodes[1], "rotating", &old_key, "u1", "c1").await;
    let mut page = live_page(&nodes[1], "rotating", &old_key, &t, "u1").await;

    // API keys: the new one works everywhere while the old one still does; then the old goes.
    let added = admin(
        &nodes[0],
        "POST",
        "/admin/v1/tenants/rotating/api-keys",
        Some(json!({})),
    )
    .await;
    assert_eq!(added.status, 201, "{}", added.body);
    let new_key = added.body["apiKey"].as_str().unwrap().to_owned();
    let agent_new = nodes[1].agent("rotating", &new_key);
    until("the new API key is accepted", || {
        let a = agent_new.clone();
        async move { a.get("/users/u1/conversations/c1").await.status == 200 }
    })
    .await;
    call_ok(&nodes[0].agent("rotating", &old_key), &mut page, "u1").await;
    call_ok(&agent_new, &mut page, "u1").await;
    let old_id = admin(&nodes[0], "GET", "/admin/v1/tenants/rotating", None)
        .await
        .body["apiKeys"][0]["apiKeyId"]
        .as_str()
        .unwrap()
        .to_owned();
    let gone = admin(
        &nodes[0],
        "DELETE",
        &format!("/admin/v1/tenants/rotating/api-keys/{old_id}"),
        None,
    )
    .await;
    assert_eq!(gone.status, 204);
    let agent_old = nodes[1].agent("rotating", &old_key);
    until("the old API key is refused", || {
        let a = agent_old.clone();
        async move { a.get("/users/u1/conversations/c1").await.status == 401 }
    })
    .await;
    call_ok(&agent_new, &mut page, "u1").await;

    // Token keys: new tokens name the new kid; the page of the old kid stays until that key
    // is deleted, then it is closed with 4401 and its token is refused.
    let tk = admin(
        &nodes[1],
        "POST",
        "/admin/v1/tenants/rotating/token-keys",
        Some(json!({})),
    )
    .await;
    assert_eq!(tk.status, 201, "{}", tk.body);
    let new_kid = tk.body["kid"].as_str().unwrap().to_owned();
    // Minted by node 0, where the page connects: it knows the new key once it mints with it.
    let fresh = minted_where(&nodes[0], "rotating", &new_key, "u2", "c1", |h| {
        h.kid.as_deref() == Some(new_kid.as_str())
    })
    .await;
    let mut page2 = live_page(&nodes[0], "rotating", &new_key, &fresh, "u2").await;
    call_ok(&agent_new, &mut page, "u1").await;
    let del = admin(
        &nodes[0],
        "DELETE",
        &format!("/admin/v1/tenants/rotating/token-keys/{old_kid}"),
        None,
    )
    .await;
    assert_eq!(del.status, 204);
    assert_eq!(page.closed().await, 4401, "the old key's page is closed");
    assert_eq!(
        nodes[1].refused("rotating", &t, Some(ACME_ORIGIN)).await,
        4401,
        "the old key's token is refused"
    );
    call_ok(&agent_new, &mut page2, "u2").await;
    let last = admin(
        &nodes[0],
        "DELETE",
        &format!("/admin/v1/tenants/rotating/token-keys/{new_kid}"),
        None,
    )
    .await;
    assert_eq!(
        (last.status, last.body["code"].as_str()),
        (409, Some("conflict"))
    );

    // Webhook secrets: several at once, the last one kept while a webhookUrl is set.
    let ws = admin(
        &nodes[0],
        "POST",
        "/admin/v1/tenants/rotating/webhook-secrets",
        None,
    )
    .await;
    assert_eq!(ws.status, 201, "{}", ws.body);
    assert!(
        ws.body["webhookSecret"]
            .as_str()
            .unwrap()
            .starts_with("whsec_")
    );
    let view = admin(&nodes[0], "GET", "/admin/v1/tenants/rotating", None).await;
    let ids: Vec<String> = view.body["webhookSecrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["webhookSecretId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(
        admin(
            &nodes[0],
            "DELETE",
            &format!("/admin/v1/tenants/rotating/webhook-secrets/{}", ids[0]),
            None
        )
        .await
        .status,
        204
    );
    let keep = admin(
        &nodes[0],
        "DELETE",
        &format!("/admin/v1/tenants/rotating/webhook-secrets/{}", ids[1]),
        None,
    )
    .await;
    assert_eq!(keep.status, 409);
    call_ok(&agent_new, &mut page2, "u2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_tenant_closes_its_pages_everywhere_and_refuses_its_keys_at_once() {
    let nodes = Gateway::start_admin_nodes(2).await;
    let s = create(&nodes[0], "doomed").await;
    let key = s["apiKey"].as_str().unwrap().to_owned();
    let t = minted(&nodes[1], "doomed", &key, "u1", "c1").await;
    let mut on_two = live_page(&nodes[1], "doomed", &key, &t, "u1").await;
    let mut on_one = live_page(&nodes[0], "doomed", &key, &t, "u1").await;
    // Another tenant's page, on the node where the deletion happens.
    let mut acme = ready_page(
        &nodes[0],
        "acme",
        "u1",
        "c1",
        json!([tool("todo.add", json!({}))]),
    )
    .await;
    let r = admin(&nodes[0], "DELETE", "/admin/v1/tenants/doomed", None).await;
    assert_eq!(r.status, 204);
    assert_eq!(on_one.closed().await, 4401);
    assert_eq!(on_two.closed().await, 4401);
    assert_eq!(
        nodes[0]
            .agent("doomed", &key)
            .get("/users/u1/conversations/c1")
            .await
            .status,
        401,
        "the deleting node refuses its key at once"
    );
    let agent = nodes[1].agent("doomed", &key);
    until("the other node refuses its key", || {
        let a = agent.clone();
        async move { a.get("/users/u1/conversations/c1").await.status == 401 }
    })
    .await;
    assert_eq!(
        admin(&nodes[1], "GET", "/admin/v1/tenants/doomed", None)
            .await
            .status,
        404
    );
    // Nothing of the other tenant moved.
    call_ok(&nodes[1].acme(), &mut acme, "u1").await;
    // Its state went with it: a tenant created again under the id starts with no event of the
    // old one (read from the start of what is kept).
    let again = create(&nodes[1], "doomed").await;
    let key = again["apiKey"].as_str().unwrap().to_owned();
    let mut events = nodes[1].agent("doomed", &key).events("", Some("0-0")).await;
    let t = minted(&nodes[1], "doomed", &key, "u9", "c1").await;
    live_page(&nodes[1], "doomed", &key, &t, "u9").await;
    let first = events
        .next_within(WAIT)
        .await
        .expect("the new tenant's event");
    assert_eq!(
        first.data["data"]["user"], "u9",
        "an old tenant's event: {:?}",
        first.data
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_closes_the_users_pages_and_refuses_the_tokens_issued_before_it() {
    let nodes = Gateway::start_admin_nodes(2).await;
    let s = create(&nodes[0], "dc").await;
    let key = s["apiKey"].as_str().unwrap().to_owned();
    let t1 = minted(&nodes[1], "dc", &key, "u1", "c1").await;
    let t2 = minted(&nodes[1], "dc", &key, "u2", "c1").await;
    let mut u1 = live_page(&nodes[1], "dc", &key, &t1, "u1").await;
    let mut u2 = live_page(&nodes[0], "dc", &key, &t2, "u2").await;
    let r = admin(
        &nodes[0],
        "POST",
        "/admin/v1/tenants/dc/users/u1/disconnect",
        Some(json!({})),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(u1.closed().await, 4401);
    assert_eq!(
        nodes[1].refused("dc", &t1, Some(ACME_ORIGIN)).await,
        4401,
        "a token issued before the disconnect is refused"
    );
    // A token minted after it is accepted; the other user never moved.
    let again = minted(&nodes[1], "dc", &key, "u1", "c1").await;
    live_page(&nodes[1], "dc", &key, &again, "u1").await;
    call_ok(&nodes[1].agent("dc", &key), &mut u2, "u2").await;
    // One conversation only.
    let mut c2 = nodes[0]
        .connect(
            "dc",
            &minted(&nodes[0], "dc", &key, "u2", "c2").await,
            Some(ACME_ORIGIN),
        )
        .await
        .unwrap();
    let r = admin(
        &nodes[1],
        "POST",
        "/admin/v1/tenants/dc/users/u2/disconnect",
        Some(json!({"conversation": "c2"})),
    )
    .await;
    assert_eq!(r.status, 202);
    assert_eq!(c2.closed().await, 4401);
    call_ok(&nodes[1].agent("dc", &key), &mut u2, "u2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_refuses_what_it_must_with_the_contracts_codes() {
    let nodes = Gateway::start_admin_nodes(1).await;
    let gw = &nodes[0];
    // Keys.
    // A short key is refused even though its hash is configured.
    for key in [
        None,
        Some("wrong-admin-key-0000"),
        Some(ACME_KEY),
        Some(crate::harness::SHORT_ADMIN_KEY),
    ] {
        let r = admin_with(gw, "GET", "/admin/v1/tenants", None, key, &[]).await;
        assert_eq!(
            (r.status, r.body["code"].as_str()),
            (401, Some("unauthorized"))
        );
    }
    // Never on the public listener.
    let public = gw
        .http
        .get(gw.url("/admin/v1/tenants"))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(public.status(), 404);
    // Bodies, with pointers, checked by the config file's rules.
    for (body, pointer) in [
        (json!({"id": "Bad_Id", "allowedOrigins": []}), "/id"),
        (
            json!({"id": "ok", "allowedOrigins": ["*"]}),
            "/allowedOrigins/0",
        ),
        (
            json!({"id": "ok", "allowedOrigins": ["https://a.example/"]}),
            "/allowedOrigins/0",
        ),
        (
            json!({"id": "ok", "allowedOrigins": [], "limits": {"callsPerSecond": 0}}),
            "/limits/callsPerSecond",
        ),
        (
            json!({"id": "ok", "allowedOrigins": [], "webhookUrl": "ftp://x"}),
            "/webhookUrl",
        ),
        (
            json!({"id": "ok", "allowedOrigins": [], "tokenPublicKey": "nope"}),
            "/tokenPublicKey",
        ),
        (json!({"id": "ok", "allowedOrigins": [], "surprise": 1}), ""),
    ] {
        let r = admin(gw, "POST", "/admin/v1/tenants", Some(body.clone())).await;
        assert_eq!(
            (r.status, r.body["code"].as_str()),
            (400, Some("invalid_request")),
            "{body}"
        );
        if !pointer.is_empty() {
            assert_eq!(r.body["pointer"], pointer, "{body}: {}", r.body);
        }
    }
    // The config file's tenants are read-only.
    let r = admin(
        gw,
        "POST",
        "/admin/v1/tenants",
        Some(json!({"id": "acme", "allowedOrigins": []})),
    )
    .await;
    assert_eq!(
        (r.status, r.body["code"].as_str()),
        (409, Some("static_tenant"))
    );
    let r = admin(
        gw,
        "PATCH",
        "/admin/v1/tenants/acme",
        Some(json!({"limits": {"callsPerSecond": 1}})),
    )
    .await;
    assert_eq!(
        (r.status, r.body["code"].as_str()),
        (409, Some("static_tenant"))
    );
    let r = admin(gw, "GET", "/admin/v1/tenants/acme", None).await;
    assert_eq!((r.status, r.body["source"].as_str()), (200, Some("config")));
    // Twice the same id.
    create(gw, "twice").await;
    let r = admin(
        gw,
        "POST",
        "/admin/v1/tenants",
        Some(json!({"id": "twice", "allowedOrigins": []})),
    )
    .await;
    assert_eq!((r.status, r.body["code"].as_str()), (409, Some("conflict")));
    // If-Match: the current ETag changes the tenant, a stale one is 412 and changes nothing.
    let read = admin(gw, "GET", "/admin/v1/tenants/twice", None).await;
    let etag = read.etag.unwrap();
    let patched = admin_with(
        gw,
        "PATCH",
        "/admin/v1/tenants/twice",
        Some(json!({"limits": {"callsPerSecond": 7}, "allowedOrigins": ["https://b.example"]})),
        Some(ADMIN_KEY),
        &[("if-match", &etag)],
    )
    .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    assert_eq!(patched.body["limits"]["callsPerSecond"], 7);
    assert_eq!(
        patched.body["limits"]["maxConnections"], 100_000,
        "merged, not replaced"
    );
    assert_eq!(patched.body["allowedOrigins"], json!(["https://b.example"]));
    assert_ne!(patched.etag.as_deref(), Some(etag.as_str()));
    let stale = admin_with(
        gw,
        "PATCH",
        "/admin/v1/tenants/twice",
        Some(json!({"limits": {"callsPerSecond": 9}})),
        Some(ADMIN_KEY),
        &[("if-match", &etag)],
    )
    .await;
    assert_eq!(
        (stale.status, stale.body["code"].as_str()),
        (412, Some("precondition_failed"))
    );
    let now = admin(gw, "GET", "/admin/v1/tenants/twice", None).await;
    assert_eq!(now.body["limits"]["callsPerSecond"], 7);
    let r = admin(
        gw,
        "PATCH",
        "/admin/v1/tenants/twice",
        Some(json!({"id": "x"})),
    )
    .await;
    assert_eq!((r.status, r.body["pointer"].as_str()), (400, Some("/id")));
    let r = admin(gw, "DELETE", "/admin/v1/tenants/nobody", None).await;
    assert_eq!(
        (r.status, r.body["code"].as_str()),
        (404, Some("not_found"))
    );
    let r = admin(gw, "PUT", "/admin/v1/tenants/twice", None).await;
    assert_eq!(
        (r.status, r.body["code"].as_str()),
        (405, Some("method_not_allowed"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_changes_of_one_tenant_are_all_kept() {
    let nodes = Gateway::start_admin_nodes(2).await;
    create(&nodes[0], "busy").await;
    let adds = (0..8).map(|i| {
        let gw = &nodes[i % 2];
        async move {
            admin(
                gw,
                "POST",
                "/admin/v1/tenants/busy/api-keys",
                Some(json!({})),
            )
            .await
            .status
        }
    });
    let statuses = futures_util::future::join_all(adds).await;
    assert!(statuses.iter().all(|s| *s == 201), "{statuses:?}");
    let view = admin(&nodes[1], "GET", "/admin/v1/tenants/busy", None).await;
    assert_eq!(
        view.body["apiKeys"].as_array().unwrap().len(),
        9,
        "{}",
        view.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_holds_no_secret_in_plain_text() {
    // A Redis of its own, whatever the suite's mode: its whole catalog is read back.
    let redis = toolmark_testkit::redis::RedisProc::start(&[]);
    let prefix = fresh_prefix();
    let text = config_with(&redis_broker(&redis.url(), &prefix), &admin_section());
    let config = toolmark_config::Settings::load(&text, [], &Default::default()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_addr = admin_l.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(toolmark_gateway::run_with_admin(
        listener,
        admin_l,
        config,
        async move {
            let _ = rx.await;
        },
    ));
    let http = http_client();
    let r: Value = http
        .post(format!("http://{admin_addr}/admin/v1/tenants"))
        .bearer_auth(ADMIN_KEY)
        .json(&json!({"id": "sealed", "allowedOrigins": [ACME_ORIGIN], "pusher": true, "webhookUrl": "https://h.example/x"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let secrets = &r["secrets"];
    let dump = redis.cli(&["hgetall", &format!("{prefix}:{{catalog}}:tenants")]);
    assert!(dump.contains("sealed"), "{dump}");
    for k in ["apiKey", "tokenSecret", "pusherSecret", "webhookSecret"] {
        let secret = secrets[k].as_str().unwrap();
        assert!(!dump.contains(secret), "{k} stored in plain text");
    }
    let _ = tx.send(());
}

/// One webhook request: path, id, timestamp, signature header, body.
type Hook = (String, String, String, String, String);

/// A receiver on `/a` and `/b` that records every request and answers 200.
async fn receiver() -> (String, std::sync::Arc<std::sync::Mutex<Vec<Hook>>>) {
    use axum::http::HeaderMap;
    let seen: std::sync::Arc<std::sync::Mutex<Vec<Hook>>> = Default::default();
    let sink = seen.clone();
    let app = axum::Router::new().route(
        "/{path}",
        axum::routing::post(
            move |axum::extract::Path(path): axum::extract::Path<String>,
                  h: HeaderMap,
                  body: axum::body::Bytes| {
                let sink = sink.clone();
                async move {
                    let get = |k: &str| {
                        h.get(k)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned()
                    };
                    sink.lock().unwrap().push((
                        path,
                        get("webhook-id"),
                        get("webhook-timestamp"),
                        get("webhook-signature"),
                        String::from_utf8_lossy(&body).into_owned(),
                    ));
                    "ok"
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

/// Sends manifests from `page` (each one an event) until a request that `ok` accepts reaches
/// the receiver; returns it.
async fn delivered_where(
    page: &mut Page,
    seen: &std::sync::Arc<std::sync::Mutex<Vec<Hook>>>,
    ok: impl Fn(&Hook) -> bool,
) -> Hook {
    let deadline = tokio::time::Instant::now() + WAIT;
    for rev in 2.. {
        if let Some(h) = seen.lock().unwrap().iter().find(|h| ok(h)) {
            return h.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no such delivery: {:?}",
            seen.lock().unwrap()
        );
        page.manifest(rev, json!([tool("todo.add", json!({}))]))
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_time_tenants_webhooks_follow_its_url_and_carry_one_signature_per_secret() {
    let (base, seen) = receiver().await;
    let nodes = Gateway::start_admin_nodes(1).await;
    let gw = &nodes[0];
    let r = admin(
        gw,
        "POST",
        "/admin/v1/tenants",
        // The receiver is on loopback, which the tenant must allow.
        Some(json!({"id": "hooked", "allowedOrigins": [ACME_ORIGIN], "webhookUrl": format!("{base}/a"), "webhookAllowPrivate": true})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let first = r.body["secrets"]["webhookSecret"]
        .as_str()
        .unwrap()
        .to_owned();
    let key = r.body["secrets"]["apiKey"].as_str().unwrap().to_owned();
    let t = minted(gw, "hooked", &key, "u1", "c1").await;
    let mut page = live_page(gw, "hooked", &key, &t, "u1").await;
    let verify = |secret: &str, h: &Hook| {
        let k = toolmark_config::signing::SigningKey::parse(secret).unwrap();
        let want = k.sign(&h.1, h.2.parse().unwrap(), &h.4);
        h.3.split(' ').any(|s| s == want)
    };
    let one = delivered_where(&mut page, &seen, |h| h.0 == "a").await;
    assert!(
        verify(&first, &one),
        "signed with the tenant's secret: {one:?}"
    );
    // A second secret: deliveries carry both signatures.
    let second = admin(gw, "POST", "/admin/v1/tenants/hooked/webhook-secrets", None).await;
    let second = second.body["webhookSecret"].as_str().unwrap().to_owned();
    let both = delivered_where(&mut page, &seen, |h| h.3.split(' ').count() == 2).await;
    assert!(verify(&first, &both) && verify(&second, &both), "{both:?}");
    // A new URL applies to the next delivery.
    let moved = admin(
        gw,
        "PATCH",
        "/admin/v1/tenants/hooked",
        Some(json!({"webhookUrl": format!("{base}/b")})),
    )
    .await;
    assert_eq!(moved.status, 200, "{}", moved.body);
    let at_b = delivered_where(&mut page, &seen, |h| h.0 == "b").await;
    assert!(verify(&second, &at_b));
}

/// The close code of an Echo socket, once the gateway closes it.
async fn echo_closed(echo: &mut crate::pusher::Echo) -> u16 {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        match tokio::time::timeout(WAIT, echo.ws.next())
            .await
            .expect("a close arrives")
        {
            Some(Ok(Message::Close(Some(f)))) => return f.code.into(),
            Some(Ok(_)) => {}
            other => panic!("expected a close, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_closes_laravel_echo_subscriptions_too() {
    use crate::pusher::{Echo, channel, sign};
    let nodes = Gateway::start_admin_nodes(2).await;
    let r = admin(
        &nodes[0],
        "POST",
        "/admin/v1/tenants",
        Some(json!({"id": "echoed", "allowedOrigins": [ACME_ORIGIN], "pusher": true})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let key = r.body["secrets"]["pusherKey"].as_str().unwrap().to_owned();
    let secret = r.body["secrets"]["pusherSecret"]
        .as_str()
        .unwrap()
        .to_owned();
    // Node 2 learns the app key (until then it answers 4001, an unknown app)...
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut ws = crate::pusher::raw(nodes[1].addr, &key, "7").await;
        let first = crate::pusher::next_event(&mut ws).await.unwrap();
        if first["event"] == "pusher:connection_established" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{first}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ...and a subscription there is authorized with the returned secret.
    let subscribed = |user: &'static str| {
        let (key, secret, addr) = (key.clone(), secret.clone(), nodes[1].addr);
        async move {
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                let mut echo = Echo::connect(addr, &key).await;
                let ch = channel(user, "c1");
                let auth = sign(&key, &secret, &echo.socket_id, &ch);
                let reply = echo.subscribe_with(&ch, &auth).await;
                if reply["event"] == "pusher_internal:subscription_succeeded" {
                    return echo;
                }
                assert!(tokio::time::Instant::now() < deadline, "{reply}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let mut u1 = subscribed("u1").await;
    let mut u2 = subscribed("u2").await;
    let d = admin(
        &nodes[0],
        "POST",
        "/admin/v1/tenants/echoed/users/u1/disconnect",
        None,
    )
    .await;
    assert_eq!(d.status, 202);
    assert_eq!(
        echo_closed(&mut u1).await,
        4009,
        "Pusher's unauthorized close"
    );
    assert_eq!(
        admin(&nodes[0], "DELETE", "/admin/v1/tenants/echoed", None)
            .await
            .status,
        204
    );
    assert_eq!(echo_closed(&mut u2).await, 4009);
}

/// Reads `n` Server-Sent Events (id, event, data) of the admin stream, after `last_id`.
async fn admin_events(
    admin: std::net::SocketAddr,
    http: &reqwest::Client,
    last_id: Option<&str>,
    n: usize,
) -> Vec<(String, String, Value)> {
    use futures_util::StreamExt;
    let mut req = http
        .get(format!("http://{admin}/admin/v1/events"))
        .bearer_auth(ADMIN_KEY);
    if let Some(id) = last_id {
        req = req.header("last-event-id", id);
    }
    let res = req.send().await.unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.bytes_stream();
    let mut text = String::new();
    let mut out = Vec::new();
    while out.len() < n {
        let chunk = tokio::time::timeout(WAIT, body.next())
            .await
            .expect("an admin event arrives")
            .expect("the stream stays open")
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(&format!("{name}:")))
                    .map(|v| v.trim().to_owned())
            };
            if let (Some(id), Some(event), Some(data)) =
                (field("id"), field("event"), field("data"))
            {
                out.push((id, event, serde_json::from_str(&data).unwrap()));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_change_is_in_the_audit_stream_of_every_node() {
    let nodes = Gateway::start_admin_nodes(2).await;
    create(&nodes[0], "audited").await;
    let k = admin(
        &nodes[0],
        "POST",
        "/admin/v1/tenants/audited/api-keys",
        Some(json!({})),
    )
    .await;
    let key_id = k.body["apiKeyId"].as_str().unwrap().to_owned();
    admin(
        &nodes[1],
        "PATCH",
        "/admin/v1/tenants/audited",
        Some(json!({"limits": {"callsPerSecond": 5}})),
    )
    .await;
    admin(&nodes[1], "DELETE", "/admin/v1/tenants/audited", None).await;
    // The whole log, read through the other node.
    let all = admin_events(nodes[1].admin.unwrap(), &nodes[1].http, None, 4).await;
    let kinds: Vec<&str> = all.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "tenant.created",
            "tenant.key_rotated",
            "tenant.updated",
            "tenant.deleted"
        ]
    );
    for (_, kind, data) in &all {
        assert_eq!(data["type"], kind.as_str());
        assert_eq!(data["tenant"], "audited");
        assert_eq!(
            data["adminKeyId"].as_str().unwrap().len(),
            8,
            "who: the admin key's id"
        );
        assert!(data["at"].as_str().unwrap().ends_with('Z'));
    }
    assert_eq!(
        all[1].2["detail"],
        json!({"apiKeyId": key_id, "change": "added"})
    );
    assert!(
        !all.iter().any(|(_, _, d)| d.to_string().contains("tmk_")),
        "no secret in the log"
    );
    // Resumed after the second: the rest, then a change made meanwhile arrives live.
    let resumed = tokio::spawn({
        let (addr, http, after) = (
            nodes[0].admin.unwrap(),
            nodes[0].http.clone(),
            all[1].0.clone(),
        );
        async move { admin_events(addr, &http, Some(&after), 3).await }
    });
    create(&nodes[1], "audited-two").await;
    let rest = resumed.await.unwrap();
    let kinds: Vec<(&str, &str)> = rest
        .iter()
        .map(|(_, k, d)| (k.as_str(), d["tenant"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("tenant.updated", "audited"),
            ("tenant.deleted", "audited"),
            ("tenant.created", "audited-two")
        ]
    );
}

#[tokio::test]
async fn the_audit_log_is_read_a_page_at_a_time_by_tenant_and_time() {
    let nodes = Gateway::start_admin_nodes(1).await;
    let gw = &nodes[0];
    let started = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    create(gw, "audit-a").await;
    create(gw, "audit-b").await;
    let patched = admin(
        gw,
        "PATCH",
        "/admin/v1/tenants/audit-a",
        Some(json!({"allowedOrigins": [ACME_ORIGIN, GLOBEX_ORIGIN]})),
    )
    .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    let deleted = admin(gw, "DELETE", "/admin/v1/tenants/audit-b", None).await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);

    // Every change since the test began, oldest first, each with its admin key and tenant.
    let all = admin(gw, "GET", &format!("/admin/v1/audit?since={started}"), None).await;
    assert_eq!(all.status, 200, "{}", all.body);
    let entries = all.body["entries"].as_array().unwrap();
    let seen: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| (e["kind"].as_str().unwrap(), e["tenant"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("tenant.created", "audit-a"),
            ("tenant.created", "audit-b"),
            ("tenant.updated", "audit-a"),
            ("tenant.deleted", "audit-b"),
        ],
        "{}",
        all.body
    );
    assert!(
        entries
            .iter()
            .all(|e| e["adminKeyId"].is_string() && e["at"].is_string())
    );
    assert_eq!(all.body["next"], Value::Null);
    assert!(
        !all.body.to_string().contains("tmk_"),
        "no secret in the log"
    );

    // One tenant's, a page of one at a time, following `next`.
    let mut cursor: Option<String> = None;
    let mut pages = Vec::new();
    loop {
        let path = match &cursor {
            None => format!("/admin/v1/audit?tenant=audit-a&limit=1&since={started}"),
            Some(c) => format!("/admin/v1/audit?tenant=audit-a&limit=1&cursor={c}"),
        };
        let page = admin(gw, "GET", &path, None).await;
        assert_eq!(page.status, 200, "{}", page.body);
        for e in page.body["entries"].as_array().unwrap() {
            pages.push(e["kind"].as_str().unwrap().to_owned());
        }
        match page.body["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
        assert!(pages.len() <= 2, "{pages:?}");
    }
    assert_eq!(pages, ["tenant.created", "tenant.updated"]);

    // Before the first change: nothing; bad queries name their parameter.
    let none = admin(
        gw,
        "GET",
        &format!("/admin/v1/audit?until={started}&tenant=audit-a"),
        None,
    )
    .await;
    assert_eq!(none.body["entries"], json!([]), "{}", none.body);
    for (query, pointer) in [
        ("since=yesterday", "/since"),
        ("limit=0", "/limit"),
        ("cursor=nope", "/cursor"),
    ] {
        let bad = admin(gw, "GET", &format!("/admin/v1/audit?{query}"), None).await;
        assert_eq!(bad.status, 400, "{query}: {}", bad.body);
        assert_eq!(bad.body["pointer"], pointer, "{query}");
    }
    let anonymous = admin_with(gw, "GET", "/admin/v1/audit", None, None, &[]).await;
    assert_eq!(anonymous.status, 401);
}
