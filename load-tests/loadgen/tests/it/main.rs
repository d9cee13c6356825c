//! The load generator's pages against a stand-in page endpoint on a real socket: the upgrade
//! carries the token and Origin, the first frame is the manifest, calls to the page are echoed,
//! calls to other pages are not, and stopping the fleet closes every socket.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use toolmark_loadgen::fleet::Fleet;
use toolmark_loadgen::target::Target;
use toolmark_loadgen::token::Minter;

const SECRET: &str = "0123456789abcdef0123456789abcdef";
const ORIGIN: &str = "http://loadgen.test";

/// What the stand-in saw of one page.
#[derive(Debug, Default, Clone)]
struct Seen {
    origin: Option<String>,
    has_token: bool,
    source: Option<IpAddr>,
    manifest: Value,
    reply: Value,
    closed: bool,
}

/// Serves `pages` page sockets: reads the manifest, sends a call for another page then one for
/// this page, records the reply, and waits for the page to close.
#[allow(
    clippy::result_large_err,
    reason = "the error type of tungstenite's header callback"
)]
async fn stand_in(listener: TcpListener, pages: usize, seen: Arc<Mutex<Vec<Seen>>>) {
    let mut handlers = Vec::new();
    for _ in 0..pages {
        let (stream, peer) = listener.accept().await.unwrap();
        let seen = seen.clone();
        handlers.push(tokio::spawn(async move {
            let mut page = Seen { source: Some(peer.ip()), ..Seen::default() };
            let mut ws = tokio_tungstenite::accept_hdr_async(stream, |req: &Request, resp: Response| {
                page.origin = req.headers().get("origin").map(|v| v.to_str().unwrap().to_owned());
                page.has_token = req.uri().query().is_some_and(|q| q.starts_with("token=ey"));
                Ok(resp)
            })
            .await
            .unwrap();
            let text = ws.next().await.unwrap().unwrap().into_text().unwrap();
            page.manifest = serde_json::from_str(&text).unwrap();
            let client_id = page.manifest["clientId"].as_str().unwrap().to_owned();
            let other = json!({"protocol": 1, "type": "call", "clientId": "someone-else", "id": "x", "tool": "bench.echo", "input": {}});
            ws.send(Message::text(other.to_string())).await.unwrap();
            let call = json!({"protocol": 1, "type": "call", "clientId": client_id, "id": "call-1", "rev": 1, "tool": "bench.echo", "input": {"n": 7}});
            ws.send(Message::text(call.to_string())).await.unwrap();
            let text = ws.next().await.unwrap().unwrap().into_text().unwrap();
            page.reply = serde_json::from_str(&text).unwrap();
            while let Some(Ok(m)) = ws.next().await {
                if m.is_close() {
                    page.closed = true;
                }
            }
            seen.lock().unwrap().push(page);
        }));
    }
    for h in handlers {
        h.await.unwrap();
    }
}

#[tokio::test]
async fn pages_authenticate_register_echo_and_close() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let pages = 6;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let server = tokio::spawn(stand_in(listener, pages, seen.clone()));
    let target = Arc::new(Target {
        http_base: format!("http://{addr}"),
        page_url: format!("ws://{addr}/v1/tenants/bench/page"),
        addr,
        tenant: "bench".into(),
        origin: ORIGIN.into(),
        sources: (1..=3)
            .map(|k| IpAddr::V4(Ipv4Addr::new(127, 0, 0, k)))
            .collect(),
        user_prefix: "u".into(),
    });
    let minter = Minter::new("bench", SECRET).unwrap();
    let fleet = Fleet::launch(target, None, &minter, pages, 1000).unwrap();
    let counts = fleet.ready().await.unwrap();
    assert_eq!(counts.ready, pages);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while fleet.tally.answered_total() < pages as u64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pages did not answer their calls"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let client_ids = fleet.client_ids.clone();
    assert!(fleet.intact().is_ok());
    fleet.stop().await;
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap();

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), pages);
    let sources: std::collections::HashSet<_> = seen.iter().filter_map(|s| s.source).collect();
    assert_eq!(
        sources.len(),
        3,
        "sockets are spread over the source addresses"
    );
    for page in &seen {
        assert_eq!(page.origin.as_deref(), Some(ORIGIN));
        assert!(page.has_token);
        assert_eq!(page.manifest["type"], "manifest");
        assert_eq!(page.manifest["tools"][0]["name"], "bench.echo");
        assert!(
            client_ids
                .iter()
                .any(|c| page.manifest["clientId"] == c.as_str())
        );
        assert_eq!(page.reply["type"], "result");
        assert_eq!(page.reply["id"], "call-1");
        assert_eq!(page.reply["clientId"], page.manifest["clientId"]);
        assert_eq!(
            page.reply["result"],
            json!({"status": "ok", "data": {"n": 7}})
        );
        assert!(page.closed, "the page closed its socket");
    }
}

fn loopback_target(addr: std::net::SocketAddr) -> Arc<Target> {
    Arc::new(Target {
        http_base: format!("http://{addr}"),
        page_url: format!("ws://{addr}/v1/tenants/bench/page"),
        addr,
        tenant: "bench".into(),
        origin: ORIGIN.into(),
        sources: Vec::new(),
        user_prefix: "u".into(),
    })
}

#[tokio::test]
async fn a_page_closed_with_1001_comes_back_on_the_fallback_without_its_manifest() {
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    let draining = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let fallback = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (draining_addr, fallback_addr) = (
        draining.local_addr().unwrap(),
        fallback.local_addr().unwrap(),
    );
    // The draining node: takes the manifest, then closes with 1001.
    let first = tokio::spawn(async move {
        let (stream, _) = draining.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(stream).await.unwrap();
        let text = ws.next().await.unwrap().unwrap().into_text().unwrap();
        let manifest: Value = serde_json::from_str(&text).unwrap();
        let frame = CloseFrame {
            code: CloseCode::Away,
            reason: "draining".into(),
        };
        ws.close(Some(frame)).await.unwrap();
        while let Some(Ok(_)) = ws.next().await {}
        manifest["clientId"].as_str().unwrap().to_owned()
    });
    // The other node: the page's first frame must be the answer to a call, not a manifest.
    let second = tokio::spawn(async move {
        let (stream, _) = fallback.accept().await.unwrap();
        let ws = tokio_tungstenite::accept_async(stream).await.unwrap();
        (ws, fallback)
    });
    let minter = Minter::new("bench", SECRET).unwrap();
    let fallback_page = toolmark_loadgen::page::Fallback {
        target: loopback_target(fallback_addr),
        jitter: Duration::ZERO,
    };
    let fleet = Fleet::launch(
        loopback_target(draining_addr),
        Some(fallback_page),
        &minter,
        1,
        1000,
    )
    .unwrap();
    fleet.ready().await.unwrap();
    let client_id = first.await.unwrap();
    assert_eq!(client_id, fleet.client_ids[0]);
    let (mut ws, _listener) = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .unwrap()
        .unwrap();
    let call = json!({"protocol": 1, "type": "call", "clientId": client_id, "id": "after", "rev": 1, "tool": "bench.echo", "input": {"n": 1}});
    ws.send(Message::text(call.to_string())).await.unwrap();
    let text = ws.next().await.unwrap().unwrap().into_text().unwrap();
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reply["type"], "result", "no manifest resent: {reply}");
    assert_eq!(reply["clientId"], client_id.as_str());
    assert_eq!(fleet.tally.away_and_back(), (1, 1));
    assert!(fleet.intact().is_ok());
    let closing = tokio::spawn(async move { while let Some(Ok(_)) = ws.next().await {} });
    fleet.stop().await;
    closing.await.unwrap();
}
