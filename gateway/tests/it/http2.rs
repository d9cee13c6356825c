//! HTTP/2 beside HTTP/1.1 on the public listener: h2c with prior knowledge on plain TCP (an
//! agent backend multiplexing its calls over one connection), h2 by ALPN with TLS, the hosted
//! MCP endpoint over h2c, and a page's WebSocket over HTTP/2's extended CONNECT (RFC 8441).

use futures_util::{SinkExt, StreamExt};
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::harness::*;
use crate::hosted_mcp::{LivePage, client_via, mcp_token, page_tools};

/// A client that speaks HTTP/2 only, without asking first (h2c with prior knowledge): a
/// server that did not speak it would fail every request.
fn h2c() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_agent_multiplexes_its_calls_over_one_http2_connection() {
    let gw = Gateway::start().await;
    let mut page = ready_page(
        &gw,
        "acme",
        "u1",
        "c1",
        json!([tool("todo.add", json!({}))]),
    )
    .await;
    let http = h2c();
    let state = http
        .get(gw.url("/v1/tenants/acme/users/u1/conversations/c1"))
        .bearer_auth(ACME_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(
        (state.version(), state.status().as_u16()),
        (reqwest::Version::HTTP_2, 200)
    );
    let agent = Agent::new(&gw.url(""), "acme", ACME_KEY, http);
    // Eight calls in flight at once on the one connection; each gets its own answer.
    let pending: Vec<_> = (0..8)
        .map(|n| agent.call_later("u1", "c1", json!({"tool": "todo.add", "input": {"n": n}})))
        .collect();
    for _ in 0..8 {
        let frame = page.recv().await;
        let n = frame["input"]["n"].as_u64().unwrap();
        page.answer(
            frame["id"].as_str().unwrap(),
            json!({"status": "ok", "data": format!("done {n}")}),
        )
        .await;
    }
    for (n, call) in pending.into_iter().enumerate() {
        let a = call.await.unwrap();
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.body["outcome"]["data"], format!("done {n}"));
    }
}

#[tokio::test]
async fn the_hosted_mcp_endpoint_serves_a_client_speaking_http2() {
    let gw = Gateway::start().await;
    let mut page = LivePage::new(ready_page(&gw, "acme", "u1", "c1", page_tools()).await);
    let token = mcp_token(&gw, "u1", "c1").await;
    let (service, _changes) = client_via(h2c(), gw.url("/v1/tenants/acme/mcp"), &token, None).await;
    let peer = service.peer().clone();
    let pending = tokio::spawn(async move {
        let args = json!({"text": "milk"}).as_object().unwrap().clone();
        peer.call_tool(CallToolRequestParams::new("todo__add").with_arguments(args))
            .await
    });
    let frame = page.next().await;
    assert_eq!(
        (frame["type"].as_str(), frame["tool"].as_str()),
        (Some("call"), Some("todo.add"))
    );
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "ok", "data": "added"}),
    );
    let result = serde_json::to_value(pending.await.unwrap().expect("answered")).unwrap();
    assert_eq!(result["structuredContent"]["data"], "added", "{result}");
}

#[tokio::test]
async fn a_page_opens_its_websocket_over_http2() {
    let gw = Gateway::start().await;
    let io = TokioIo::new(TcpStream::connect(gw.addr).await.unwrap());
    let (mut send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake::<_, Empty<Bytes>>(io)
        .await
        .unwrap();
    tokio::spawn(conn);
    let token = hs256(ACME_SECRET, &claims("acme", "u1", "c1"));
    let request = hyper::Request::builder()
        .method(hyper::Method::CONNECT)
        .extension(hyper::ext::Protocol::from_static("websocket"))
        .uri(gw.url(&format!("/v1/tenants/acme/page?token={token}")))
        .header("sec-websocket-version", "13")
        .header("origin", ACME_ORIGIN)
        .body(Empty::new())
        .unwrap();
    // The server announces extended CONNECT in its first SETTINGS; the request waits for it.
    let mut response = send.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let upgraded = hyper::upgrade::on(&mut response).await.unwrap();
    let mut ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Client, None).await;

    // The page publishes its manifest, becomes current, and answers a call on this socket.
    let client_id = uuid::Uuid::new_v4().to_string();
    let manifest = json!({"protocol": 1, "type": "manifest", "clientId": client_id, "rev": 1,
        "tools": [tool("todo.add", json!({}))]});
    ws.send(Message::Text(manifest.to_string().into()))
        .await
        .unwrap();
    let agent = gw.acme();
    agent.wait_current("u1", "c1", &client_id).await;
    let pending = agent.call_later("u1", "c1", json!({"tool": "todo.add", "input": {}}));
    let call = loop {
        let frame = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("the call arrives")
            .expect("the socket is open")
            .unwrap();
        if let Message::Text(text) = frame {
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["type"] == "call" {
                break v;
            }
        }
    };
    let answer = json!({"protocol": 1, "type": "result", "clientId": client_id,
        "id": call["id"], "result": {"status": "ok", "data": "over h2"}});
    ws.send(Message::Text(answer.to_string().into()))
        .await
        .unwrap();
    let a = pending.await.unwrap();
    assert_eq!(
        (a.status, a.body["outcome"]["data"].as_str()),
        (200, Some("over h2")),
        "{}",
        a.body
    );
}
