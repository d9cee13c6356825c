//! Attacks on the pairing server: rebinding, origins, plain HTTP, code guessing, concurrent
//! handshakes, oversized and missing first frames, frames for another page, oversized frames.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{Cli, Ending, ORIGIN, SimPage, WAIT, WsPage, tool, uuid_v4, wait_for_tools};

#[tokio::test]
async fn wrong_host_and_origins_are_refused_with_403() {
    let cli = Cli::spawn(&[]).await;
    let port = cli.port;
    let host = format!("127.0.0.1:{port}");
    assert_eq!(
        WsPage::connect_with(port, &format!("evil.test:{port}"), Some(ORIGIN))
            .await
            .err(),
        Some(403)
    );
    assert_eq!(
        WsPage::connect_with(port, "127.0.0.1:1", Some(ORIGIN))
            .await
            .err(),
        Some(403)
    );
    assert_eq!(
        WsPage::connect_with(port, &host, None).await.err(),
        Some(403)
    );
    assert_eq!(
        WsPage::connect_with(port, &host, Some("null")).await.err(),
        Some(403)
    );
    assert_eq!(
        WsPage::connect_with(port, &host, Some("http://evil.test"))
            .await
            .err(),
        Some(403)
    );
    assert_eq!(
        WsPage::connect_with(port, &host, Some("http://localhost:5173/"))
            .await
            .err(),
        Some(403)
    );
    assert!(
        WsPage::connect_with(port, &format!("localhost:{port}"), Some(ORIGIN))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn plain_http_gets_404() {
    let cli = Cli::spawn(&[]).await;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", cli.port))
        .await
        .unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nOrigin: {ORIGIN}\r\n\r\n",
        cli.port
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");
}

#[tokio::test]
async fn guessing_codes_gets_4401_a_pause_and_a_new_code_after_5() {
    let cli = Cli::spawn(&[]).await;
    let code = cli.stderr.code(0).await;
    let wrong = if code.starts_with('0') {
        "1111-1111"
    } else {
        "0000-0000"
    };
    for attempt in 1..=5 {
        let mut ws = WsPage::connect(cli.port).await;
        ws.send(json!({"type": "pair", "code": wrong})).await;
        assert_eq!(ws.closed().await, Ending::Closed(4401), "attempt {attempt}");
        if attempt == 1 {
            // Within 250 ms of a 4401 every handshake gets 4429.
            let mut eager = WsPage::connect(cli.port).await;
            assert_eq!(eager.closed().await, Ending::Closed(4429));
        }
        // Outlast the pause after a refusal before the next handshake.
        tokio::time::sleep(Duration::from_millis(300)).await;
        if attempt < 5 {
            assert_eq!(
                cli.stderr.codes().len(),
                1,
                "attempt {attempt}: no new code yet"
            );
        } else {
            // The fifth refusal prints a new code (waited for, with a deadline).
            cli.stderr.code(1).await;
        }
    }
    // The old code is dead; the new one pairs.
    let mut ws = WsPage::connect(cli.port).await;
    ws.send(json!({"type": "pair", "code": code})).await;
    assert_eq!(ws.closed().await, Ending::Closed(4401));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fresh = cli.stderr.code(1).await;
    WsPage::connect(cli.port).await.pair(&fresh).await;
}

#[tokio::test]
async fn one_handshake_at_a_time() {
    let cli = Cli::spawn(&[]).await;
    let code = cli.stderr.code(0).await;
    let mut first = WsPage::connect(cli.port).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut second = WsPage::connect(cli.port).await;
    assert_eq!(second.closed().await, Ending::Closed(4429));
    first.pair(&code).await;
}

#[tokio::test]
async fn bad_first_frames_get_4400() {
    let cli = Cli::spawn(&[]).await;
    let big = json!({"type": "pair", "code": "x".repeat(2048)}).to_string();
    let frames = [
        big,
        "not json".to_owned(),
        json!({"type": "pair", "code": "ABCD-EFGH", "x": 1}).to_string(),
    ];
    for frame in frames {
        let mut ws = WsPage::connect(cli.port).await;
        ws.send_text(frame).await;
        assert_eq!(ws.closed().await, Ending::Closed(4400));
    }
    let mut ws = WsPage::connect(cli.port).await;
    futures_util::SinkExt::send(
        &mut ws.ws,
        tokio_tungstenite::tungstenite::Message::binary(vec![1u8, 2, 3]),
    )
    .await
    .unwrap();
    assert_eq!(ws.closed().await, Ending::Closed(4400));
}

#[tokio::test]
async fn oversized_first_frames_get_4400_not_1009() {
    let cli = Cli::spawn(&[]).await;
    for size in [2 * 1024, 100 * 1024, 5 * 1024 * 1024] {
        let mut ws = WsPage::connect(cli.port).await;
        let frame = json!({"type": "pair", "code": "x".repeat(size)}).to_string();
        ws.send_text(frame).await;
        assert_eq!(ws.closed().await, Ending::Closed(4400), "{size} bytes");
    }
}

#[tokio::test]
async fn an_oversized_first_frame_is_refused_on_its_header() {
    let cli = Cli::spawn(&[]).await;
    let mut ws = WsPage::connect(cli.port).await;
    // The header of a masked 100 KiB text frame and a few bytes of it; the rest never comes.
    let mut raw = vec![0x81, 0x80 | 127];
    raw.extend_from_slice(&(100u64 * 1024).to_be_bytes());
    raw.extend_from_slice(&[1, 2, 3, 4]);
    raw.extend_from_slice(b"{\"type\"");
    ws.ws.get_mut().write_all(&raw).await.unwrap();
    let started = std::time::Instant::now();
    assert_eq!(ws.closed().await, Ending::Closed(4400));
    assert!(started.elapsed() < Duration::from_millis(2000));
}

#[tokio::test]
async fn a_silent_socket_gets_4408_after_3000_ms() {
    let cli = Cli::spawn(&[]).await;
    let started = std::time::Instant::now();
    let mut ws = WsPage::connect(cli.port).await;
    assert_eq!(ws.closed().await, Ending::Closed(4408));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(2900) && waited < Duration::from_millis(4500),
        "{waited:?}"
    );
}

#[tokio::test]
async fn frames_for_another_client_id_are_dropped() {
    let mut cli = Cli::start(&[]).await;
    let page = cli.paired_page(vec![tool("todo.add", json!({}))]).await;
    // The pairing's own list change comes first (a `tools/list` may answer before it).
    cli.notification("notifications/tools/list_changed", WAIT)
        .await
        .expect("the pairing's list change");
    wait_for_tools(&mut cli, &["todo__add"]).await;
    cli.drain_notifications();
    // Another page load's manifest on this socket changes nothing.
    page.send(json!({"protocol": 1, "type": "manifest", "clientId": uuid_v4(), "rev": 2,
        "tools": [{"name": "evil.tool", "llmName": "evil__tool", "description": "x", "hints": {}}]}));
    // Invalid frames are dropped too.
    page.send(json!({"protocol": 2, "type": "manifest", "clientId": page.client_id, "rev": 3, "tools": []}));
    assert!(
        cli.notification(
            "notifications/tools/list_changed",
            Duration::from_millis(600)
        )
        .await
        .is_none()
    );
    assert_eq!(cli.tool_names().await, ["todo__add"]);
}

#[tokio::test]
async fn frames_over_4_mib_close_with_1009() {
    let mut cli = Cli::start(&[]).await;
    let code = cli.stderr.code(0).await;
    let mut ws = WsPage::connect(cli.port).await;
    ws.pair(&code).await;
    let huge = format!("\"{}\"", "x".repeat(4 * 1024 * 1024));
    ws.send_text(huge).await;
    assert_eq!(ws.closed().await, Ending::Closed(1009));
    let _ = SimPage::attach;
    let _ = cli.tools().await;
}

#[tokio::test]
async fn frames_up_to_4_mib_pass_after_pairing() {
    let mut cli = Cli::start(&[]).await;
    let mut page = cli.paired_page(vec![tool("todo.add", json!({}))]).await;
    wait_for_tools(&mut cli, &["todo__add"]).await;
    let (_, rx) = cli
        .send_request("tools/call", json!({"name": "todo__add", "arguments": {}}))
        .await;
    let call = page.next_call().await;
    let big = "y".repeat(3 * 1024 * 1024);
    page.answer(&call["id"], json!({"status": "ok", "data": big}));
    let response = tokio::time::timeout(WAIT, rx)
        .await
        .expect("response in time")
        .unwrap();
    assert_eq!(
        response["result"]["structuredContent"]["data"]
            .as_str()
            .map(str::len),
        Some(big.len())
    );
}

#[tokio::test]
async fn an_unknown_token_gets_4401() {
    let cli = Cli::spawn(&[]).await;
    let mut ws = WsPage::connect(cli.port).await;
    ws.send(json!({"type": "resume", "token": "ab".repeat(32)}))
        .await;
    assert_eq!(ws.closed().await, Ending::Closed(4401));
}
