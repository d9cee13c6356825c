//! `server.tls_cert` and `server.tls_key`: the gateway serves HTTPS itself.

use crate::harness::{ACME_KEY, Gateway, config_toml};

const CERT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/keys/tls.crt");
const KEY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/keys/tls.key");
/// The test CA that signed `tls.crt` (its key was not kept).
const CA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/keys/ca.crt");

#[tokio::test]
async fn the_gateway_serves_https_with_its_certificate() {
    let text = config_toml("").replace(
        "[server]\n",
        &format!("[server]\ntls_cert = \"{CERT}\"\ntls_key = \"{KEY}\"\n"),
    );
    let gw = Gateway::start_config(&text, None).await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let root = reqwest::Certificate::from_pem(&std::fs::read(CA).unwrap()).unwrap();
    let https = reqwest::Client::builder()
        .add_root_certificate(root)
        .build()
        .unwrap();
    let url = format!("https://localhost:{}", gw.addr.port());
    assert_eq!(
        https
            .get(format!("{url}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let state = https
        .get(format!("{url}/v1/tenants/acme/users/u1/conversations/c1"))
        .bearer_auth(ACME_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(state.status(), 200);
    // ALPN offers h2 first: a client that speaks it gets it; one that speaks only HTTP/1.1 is
    // served too.
    assert_eq!(state.version(), reqwest::Version::HTTP_2);
    let root = reqwest::Certificate::from_pem(&std::fs::read(CA).unwrap()).unwrap();
    let http1 = reqwest::Client::builder()
        .add_root_certificate(root)
        .http1_only()
        .build()
        .unwrap();
    let state = http1.get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(
        (state.status().as_u16(), state.version()),
        (200, reqwest::Version::HTTP_11)
    );
    // Plain HTTP on the TLS port gets no answer.
    assert!(
        gw.http
            .get(format!("http://{}/healthz", gw.addr))
            .send()
            .await
            .is_err()
    );
}
