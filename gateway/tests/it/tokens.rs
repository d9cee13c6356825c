//! Page authentication: every bad token closes with 4401, every bad origin with 4403, and the
//! good ones of each algorithm connect.

use base64::Engine;
use serde_json::json;

use crate::harness::{
    ACME_ORIGIN, ACME_SECRET, ED_PUB, GLOBEX_SECRET, Gateway, claims, eddsa, es256, hs256, now,
};

fn b64(v: &serde_json::Value) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}

#[tokio::test]
async fn bad_tokens_close_with_4401() {
    let gw = Gateway::start().await;
    let mut expired = claims("acme", "u", "c");
    expired["exp"] = json!(now() - 120); // past the 30 s leeway
    let mut not_yet = claims("acme", "u", "c");
    not_yet["nbf"] = json!(now() + 120);
    let wrong_aud = claims("globex", "u", "c");
    let mut no_exp = claims("acme", "u", "c");
    no_exp.as_object_mut().unwrap().remove("exp");
    let mut bad_ids = claims("acme", "u.1", "c");
    bad_ids["sub"] = json!("u.1");
    let none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT"})),
        b64(&claims("acme", "u", "c"))
    );
    let cases = [
        ("expired", hs256(ACME_SECRET, &expired)),
        ("not yet valid", hs256(ACME_SECRET, &not_yet)),
        ("wrong aud", hs256(ACME_SECRET, &wrong_aud)),
        ("no exp", hs256(ACME_SECRET, &no_exp)),
        (
            "wrong secret",
            hs256(GLOBEX_SECRET, &claims("acme", "u", "c")),
        ),
        ("alg none", none),
        ("garbage", "not.a.token".to_owned()),
        ("invalid sub", hs256(ACME_SECRET, &bad_ids)),
        (
            "eddsa for an hs256 tenant",
            eddsa(&claims("acme", "u", "c")),
        ),
    ];
    for (name, token) in cases {
        assert_eq!(
            gw.refused("acme", &token, Some(ACME_ORIGIN)).await,
            4401,
            "{name}"
        );
    }
    assert_eq!(
        gw.refused(
            "nosuch",
            &hs256(ACME_SECRET, &claims("nosuch", "u", "c")),
            Some(ACME_ORIGIN)
        )
        .await,
        4401
    );
    assert_eq!(gw.refused("acme", "", Some(ACME_ORIGIN)).await, 4401);
    assert_eq!(
        gw.metric("toolmark_page_closes_total{code=\"4401\"}").await,
        11.0
    );
}

#[tokio::test]
async fn tokens_within_the_leeway_and_of_each_algorithm_connect() {
    let gw = Gateway::start().await;
    let mut recent = claims("acme", "u", "c");
    recent["exp"] = json!(now() - 10);
    assert!(
        gw.connect("acme", &hs256(ACME_SECRET, &recent), Some(ACME_ORIGIN))
            .await
            .is_ok()
    );
    assert!(
        gw.connect("edco", &eddsa(&claims("edco", "u", "c")), Some(ACME_ORIGIN))
            .await
            .is_ok()
    );
    assert!(
        gw.connect("ecco", &es256(&claims("ecco", "u", "c")), Some(ACME_ORIGIN))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn algorithm_confusion_is_refused() {
    let gw = Gateway::start().await;
    // HS256 "signed" with the tenant's public key as the shared secret.
    let confused = hs256(ED_PUB, &claims("edco", "u", "c"));
    assert_eq!(gw.refused("edco", &confused, Some(ACME_ORIGIN)).await, 4401);
    // ES256 for an EdDSA tenant, EdDSA for an ES256 tenant.
    assert_eq!(
        gw.refused("edco", &es256(&claims("edco", "u", "c")), Some(ACME_ORIGIN))
            .await,
        4401
    );
    assert_eq!(
        gw.refused("ecco", &eddsa(&claims("ecco", "u", "c")), Some(ACME_ORIGIN))
            .await,
        4401
    );
}

#[tokio::test]
async fn origins_must_match_exactly() {
    let gw = Gateway::start().await;
    let token = hs256(ACME_SECRET, &claims("acme", "u", "c"));
    for origin in [
        None,
        Some("null"),
        Some("https://app.acme.example.evil.test"),
        Some("http://app.acme.example"),
        Some("https://app.acme.example:443"),
        Some("https://APP.acme.example"),
    ] {
        assert_eq!(gw.refused("acme", &token, origin).await, 4403, "{origin:?}");
    }
    assert!(gw.connect("acme", &token, Some(ACME_ORIGIN)).await.is_ok());
}

#[tokio::test]
async fn minted_tokens_connect_to_their_conversation() {
    let gw = Gateway::start().await;
    let a = gw
        .acme()
        .post(
            "/tokens",
            json!({"user": "u9", "conversation": "c9", "ttlSeconds": 60}),
        )
        .await;
    assert_eq!(a.status, 201, "{}", a.body);
    let url = a.body["url"].as_str().unwrap();
    assert!(
        url.starts_with(&format!("ws://{}/v1/tenants/acme/page?token=", gw.addr)),
        "{url}"
    );
    let token = a.body["token"].as_str().unwrap();
    let mut page = gw
        .connect("acme", token, Some(ACME_ORIGIN))
        .await
        .expect("minted token works");
    page.manifest(3, json!([])).await;
    gw.acme().wait_current("u9", "c9", &page.client_id).await;
    let bad = gw
        .acme()
        .post(
            "/tokens",
            json!({"user": "u9", "conversation": "c9", "ttlSeconds": 0}),
        )
        .await;
    assert_eq!(
        (bad.status, bad.body["pointer"].as_str()),
        (400, Some("/ttlSeconds"))
    );
    let public = gw
        .agent("edco", "key-edco")
        .post("/tokens", json!({"user": "u", "conversation": "c"}))
        .await;
    assert_eq!(
        public.status, 400,
        "a public-key tenant cannot mint: {}",
        public.body
    );
}

#[tokio::test]
async fn server_public_url_is_the_base_of_the_minted_url_whatever_host_the_agent_used() {
    // An agent backend inside the cluster reaches the gateway by a name no browser can.
    let text = crate::harness::config_toml("").replace(
        "[server]\n",
        "[server]\npublic_url = \"https://toolmark.example/edge/\"\n",
    );
    let gw = Gateway::start_config(&text, None).await;
    let a = gw
        .http
        .post(gw.url("/v1/tenants/acme/tokens"))
        .bearer_auth(crate::harness::ACME_KEY)
        .header("host", "toolmark-gateway.internal:8080")
        .json(&json!({"user": "u1", "conversation": "c1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(a.status(), 201);
    let body: serde_json::Value = a.json().await.unwrap();
    let url = body["url"].as_str().unwrap();
    assert!(
        url.starts_with("wss://toolmark.example/edge/v1/tenants/acme/page?token="),
        "{url}"
    );
}
