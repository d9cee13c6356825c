//! With the memory broker the gateway delivers webhooks itself: signed, with the event id as
//! `webhook-id`, retried after a failure.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use serde_json::json;

use crate::harness::{Gateway, config_with, ready_page};

/// One request the receiver got: id, timestamp, signature, body, answer.
type Hit = (String, String, String, String, u16);

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

#[tokio::test]
async fn a_memory_gateway_delivers_signed_webhooks_and_retries_failures() {
    // The receiver fails its first request, then accepts.
    let seen: Arc<Mutex<Vec<Hit>>> = Arc::default();
    let sink = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |h: HeaderMap, body: Bytes| {
            let sink = sink.clone();
            async move {
                let mut seen = sink.lock().unwrap();
                let status = if seen.is_empty() { 500 } else { 200 };
                let get = |k: &str| {
                    h.get(k)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned()
                };
                seen.push((
                    get("webhook-id"),
                    get("webhook-timestamp"),
                    get("webhook-signature"),
                    String::from_utf8_lossy(&body).into_owned(),
                    status,
                ));
                StatusCode::from_u16(status).unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    // Memory broker whatever the suite's mode: with Redis, toolmark-worker delivers instead.
    // The receiver is on loopback, which a tenant must allow.
    let tenant = format!(
        "webhook_url = \"{hook}\"\nwebhook_secret = \"{SECRET}\"\nwebhook_allow_private = true"
    );
    let text = format!(
        "[worker]\nwebhook_backoff_base_ms = 100\nwebhook_backoff_max_ms = 200\n{}",
        config_with("", &tenant)
    );
    let gw = Gateway::start_config(&text, None).await;
    let _page = ready_page(&gw, "acme", "u1", "c1", json!([])).await;
    let deadline = tokio::time::Instant::now() + crate::harness::WAIT;
    while seen.lock().unwrap().iter().all(|s| s.4 != 200) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no webhook delivered: {:?}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "one failure, one success: {seen:?}");
    assert_eq!(seen[0].0, seen[1].0, "the same webhook-id on the retry");
    let (id, ts, sig, body, _) = &seen[1];
    let key = toolmark_config::signing::SigningKey::parse(SECRET).unwrap();
    assert_eq!(&key.sign(id, ts.parse().unwrap(), body), sig);
    let event: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        (event["type"].as_str(), event["id"].as_str()),
        (Some("page.manifest"), Some(id.as_str()))
    );
}
