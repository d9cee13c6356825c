//! Laravel Echo's transport, the Pusher protocol endpoint `/app/{key}`: handshake, signed
//! private-channel subscriptions and every refusal, key rotation, limits and drain; and the
//! minimal Pusher client the Echo tests share (`echo_inbound`).

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::harness::{
    ACME_ORIGIN, ACME_PUSHER_KEY, ACME_PUSHER_SECRET, Agent, GLOBEX_ORIGIN, GLOBEX_PUSHER_KEY,
    GLOBEX_PUSHER_SECRET, Gateway, WAIT, tool,
};

pub(crate) fn tools() -> Value {
    json!([
        tool("todo.add", json!({})),
        tool("signup.submit", json!({"consequential": true}))
    ])
}

/// What Laravel's `/broadcasting/auth` answers for a private channel.
pub(crate) fn sign(key: &str, secret: &str, socket_id: &str, channel: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{socket_id}:{channel}").as_bytes());
    format!("{key}:{}", hex::encode(mac.finalize().into_bytes()))
}

pub(crate) fn channel(user: &str, conversation: &str) -> String {
    format!("private-toolmark.{user}.{conversation}")
}

/// A minimal Pusher protocol 7 client.
pub(crate) struct Echo {
    pub(crate) ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    pub(crate) socket_id: String,
}

impl Echo {
    pub(crate) async fn connect(addr: SocketAddr, key: &str) -> Echo {
        let mut ws = raw(addr, key, "7").await;
        let first = next_event(&mut ws).await.expect("handshake");
        assert_eq!(first["event"], "pusher:connection_established", "{first}");
        let data: Value = serde_json::from_str(first["data"].as_str().unwrap()).unwrap();
        let socket_id = data["socket_id"].as_str().unwrap().to_owned();
        let (a, b) = socket_id.split_once('.').unwrap();
        assert!(!a.is_empty() && !b.is_empty());
        assert!(a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit()));
        assert!(data["activity_timeout"].as_u64().unwrap() > 0);
        Echo { ws, socket_id }
    }

    pub(crate) async fn send(&mut self, v: Value) {
        self.ws
            .send(Message::Text(v.to_string().into()))
            .await
            .unwrap();
    }

    pub(crate) async fn subscribe_with(&mut self, channel: &str, auth: &str) -> Value {
        self.send(json!({"event": "pusher:subscribe", "data": {"auth": auth, "channel": channel}}))
            .await;
        self.next().await
    }

    /// Subscribes with the acme app's valid signature and expects success.
    pub(crate) async fn subscribe(&mut self, channel: &str) {
        let auth = sign(
            ACME_PUSHER_KEY,
            ACME_PUSHER_SECRET,
            &self.socket_id,
            channel,
        );
        let reply = self.subscribe_with(channel, &auth).await;
        assert_eq!(
            reply["event"], "pusher_internal:subscription_succeeded",
            "{reply}"
        );
        assert_eq!(reply["channel"], channel);
    }

    pub(crate) async fn next(&mut self) -> Value {
        next_event(&mut self.ws).await.expect("an event arrives")
    }

    /// The next `toolmark.message` as its protocol message.
    pub(crate) async fn message(&mut self) -> Value {
        let ev = self.next().await;
        assert_eq!(ev["event"], "toolmark.message", "{ev}");
        serde_json::from_str(ev["data"].as_str().expect("data is a string")).unwrap()
    }

    pub(crate) async fn try_message(&mut self, wait: Duration) -> Option<Value> {
        let ev = tokio::time::timeout(wait, next_event(&mut self.ws))
            .await
            .ok()??;
        assert_eq!(ev["event"], "toolmark.message", "{ev}");
        Some(serde_json::from_str(ev["data"].as_str().unwrap()).unwrap())
    }
}

/// A Pusher connection from the page origin its tenant allows (globex's for its key, acme's
/// for any other), as a browser's would be.
pub(crate) async fn raw(
    addr: SocketAddr,
    key: &str,
    protocol: &str,
) -> WebSocketStream<MaybeTlsStream<TcpStream>> {
    let origin = if key == GLOBEX_PUSHER_KEY {
        GLOBEX_ORIGIN
    } else {
        ACME_ORIGIN
    };
    raw_from(addr, key, protocol, Some(origin)).await
}

/// A Pusher connection with this `Origin` (or none).
pub(crate) async fn raw_from(
    addr: SocketAddr,
    key: &str,
    protocol: &str,
    origin: Option<&str>,
) -> WebSocketStream<MaybeTlsStream<TcpStream>> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let url = format!("ws://{addr}/app/{key}?protocol={protocol}&client=js&version=8.6.0");
    let mut req = url.into_client_request().unwrap();
    if let Some(o) = origin {
        req.headers_mut().insert("origin", o.parse().unwrap());
    }
    tokio_tungstenite::connect_async(req).await.unwrap().0
}

/// The `pusher:error` a refused connection gets first, then the close code it ends with.
async fn refusal(ws: &mut WebSocketStream<MaybeTlsStream<TcpStream>>) -> (u64, u16) {
    let ev = next_event(ws).await.expect("an error first");
    assert_eq!(ev["event"], "pusher:error", "{ev}");
    let code = ev["data"]["code"].as_u64().expect("a code");
    let close = loop {
        match tokio::time::timeout(WAIT, ws.next()).await.unwrap() {
            Some(Ok(Message::Close(Some(f)))) => break u16::from(f.code),
            Some(Ok(_)) => {}
            other => panic!("expected a close, got {other:?}"),
        }
    };
    (code, close)
}

/// The next Pusher event (WebSocket pings skipped); `None` when the socket closed.
pub(crate) async fn next_event(
    ws: &mut WebSocketStream<MaybeTlsStream<TcpStream>>,
) -> Option<Value> {
    loop {
        match tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("in time")
        {
            Some(Ok(Message::Text(t))) => return Some(serde_json::from_str(t.as_str()).unwrap()),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            _ => return None,
        }
    }
}

/// A page of the Echo transport: its channel on `echo`, its messages through `/inbound`.
pub(crate) struct EchoPage {
    agent: Agent,
    path: String,
    pub(crate) client_id: String,
}

impl EchoPage {
    pub(crate) fn new(agent: Agent, user: &str, conversation: &str) -> EchoPage {
        EchoPage {
            path: format!("{}/inbound", agent.conv(user, conversation)),
            agent,
            client_id: uuid::Uuid::new_v4().to_string(),
        }
    }

    pub(crate) async fn post(&self, message: Value) -> crate::harness::Answer {
        self.agent.post(&self.path, message).await
    }

    pub(crate) async fn manifest(&self, rev: u64) -> crate::harness::Answer {
        self.post(json!({"protocol": 1, "type": "manifest", "clientId": self.client_id, "rev": rev, "tools": tools()}))
            .await
    }

    pub(crate) async fn answer(&self, id: &str, result: Value) -> crate::harness::Answer {
        self.post(json!({"protocol": 1, "type": "result", "clientId": self.client_id, "id": id, "result": result}))
            .await
    }
}

/// The subscriptions socket `sid` is refused, its app having signed only `own` for it: what
/// is wrong, the channel asked for, and the auth sent.
fn refused_subscriptions(sid: &str, own: &str) -> Vec<(&'static str, String, String)> {
    vec![
        (
            "wrong secret",
            own.to_owned(),
            sign(ACME_PUSHER_KEY, "not-the-secret-at-all", sid, own),
        ),
        (
            "another socket's signature",
            own.to_owned(),
            sign(ACME_PUSHER_KEY, ACME_PUSHER_SECRET, "1.2", own),
        ),
        (
            "another tenant's key",
            own.to_owned(),
            sign(GLOBEX_PUSHER_KEY, GLOBEX_PUSHER_SECRET, sid, own),
        ),
        (
            "no key",
            own.to_owned(),
            sign("", ACME_PUSHER_SECRET, sid, own),
        ),
        ("garbage", own.to_owned(), "acme-key:zz".into()),
        // The app signed u1's channel; the page asks for u2's with it.
        (
            "another user's channel",
            channel("u2", "c1"),
            sign(ACME_PUSHER_KEY, ACME_PUSHER_SECRET, sid, own),
        ),
        // Validly signed, but not a toolmark channel.
        (
            "not a toolmark channel",
            "private-App.Models.User.1".into(),
            sign(
                ACME_PUSHER_KEY,
                ACME_PUSHER_SECRET,
                sid,
                "private-App.Models.User.1",
            ),
        ),
        (
            "public channel",
            "toolmark.u1.c1".into(),
            sign(ACME_PUSHER_KEY, ACME_PUSHER_SECRET, sid, "toolmark.u1.c1"),
        ),
        (
            "presence channel",
            "presence-toolmark.u1.c1".into(),
            sign(
                ACME_PUSHER_KEY,
                ACME_PUSHER_SECRET,
                sid,
                "presence-toolmark.u1.c1",
            ),
        ),
    ]
}

#[tokio::test]
async fn subscriptions_without_the_right_signature_or_channel_are_refused() {
    let gw = Gateway::start().await;
    let mut echo = Echo::connect(gw.addr, ACME_PUSHER_KEY).await;
    let own = channel("u1", "c1");
    let sid = echo.socket_id.clone();
    for (what, ch, auth) in refused_subscriptions(&sid, &own) {
        let reply = echo.subscribe_with(&ch, &auth).await;
        assert_eq!(reply["event"], "pusher:error", "{what}: {reply}");
        assert_eq!(reply["data"]["code"], 4009, "{what}: {reply}");
        assert_eq!(reply["channel"], ch.as_str(), "{what}");
    }
    // A subscription without any auth.
    echo.send(json!({"event": "pusher:subscribe", "data": {"channel": own}}))
        .await;
    assert_eq!(echo.next().await["data"]["code"], 4009);
    // Client events are not a way in.
    echo.send(json!({"event": "client-result", "channel": own, "data": {}}))
        .await;
    assert_eq!(echo.next().await["data"]["code"], 4009);

    // None of them joined the conversation: a page there gets nothing for u2, and the
    // connection still serves a valid subscription.
    echo.subscribe(&own).await;
    let other = EchoPage::new(gw.acme(), "u2", "c1");
    other.manifest(1).await;
    gw.acme().wait_current("u2", "c1", &other.client_id).await;
    let a = gw
        .acme()
        .post(
            "/users/u2/conversations/c1/calls",
            json!({"tool": "todo.add", "input": {}}),
        )
        .await;
    assert_eq!(a.status, 409, "u2 has no subscribed page: {}", a.body);
}

#[tokio::test]
async fn unknown_app_keys_and_other_protocol_versions_get_an_error_then_a_close() {
    let gw = Gateway::start().await;
    // Unknown app key and another protocol version: error, then closed with the same code.
    for (key, protocol, code) in [("nobody", "7", 4001u16), (ACME_PUSHER_KEY, "6", 4007)] {
        let mut ws = raw(gw.addr, key, protocol).await;
        let ev = next_event(&mut ws).await.expect("an error first");
        assert_eq!(
            (ev["event"].as_str(), ev["data"]["code"].as_u64()),
            (Some("pusher:error"), Some(u64::from(code)))
        );
        let close = loop {
            match tokio::time::timeout(WAIT, ws.next()).await.unwrap() {
                Some(Ok(Message::Close(Some(f)))) => break u16::from(f.code),
                Some(Ok(_)) => {}
                other => panic!("expected a close, got {other:?}"),
            }
        };
        assert_eq!(close, code);
    }
}

#[tokio::test]
async fn rotating_keys_are_accepted_each_with_its_own_secret() {
    let gw = Gateway::start_with(
        "pusher_old_keys = [{ key = \"acme-old\", secret = \"acme-old-pusher-secret\" }]\n",
    )
    .await;
    for connect_key in [ACME_PUSHER_KEY, "acme-old"] {
        let mut echo = Echo::connect(gw.addr, connect_key).await;
        let ch = channel("u1", "c1");
        let old_auth = sign("acme-old", "acme-old-pusher-secret", &echo.socket_id, &ch);
        let reply = echo.subscribe_with(&ch, &old_auth).await;
        assert_eq!(
            reply["event"], "pusher_internal:subscription_succeeded",
            "{reply}"
        );
        let ch2 = channel("u1", "c2");
        let crossed = sign("acme-old", ACME_PUSHER_SECRET, &echo.socket_id, &ch2);
        assert_eq!(
            echo.subscribe_with(&ch2, &crossed).await["data"]["code"],
            4009
        );
        echo.subscribe(&ch2).await;
    }
}

#[tokio::test]
async fn subscriptions_count_against_the_page_limits_and_drain_closes_with_4200() {
    let mut gw = Gateway::start_with("[tenants.limits]\nmax_pages_per_conversation = 1\n").await;
    let mut first = Echo::connect(gw.addr, ACME_PUSHER_KEY).await;
    first.subscribe(&channel("u1", "c1")).await;
    let mut second = Echo::connect(gw.addr, ACME_PUSHER_KEY).await;
    let ch = channel("u1", "c1");
    let auth = sign(ACME_PUSHER_KEY, ACME_PUSHER_SECRET, &second.socket_id, &ch);
    let reply = second.subscribe_with(&ch, &auth).await;
    assert_eq!(reply["data"]["code"], 4100, "{reply}");
    // Another conversation is another limit.
    second.subscribe(&channel("u1", "c2")).await;

    gw.stop();
    let close = loop {
        match tokio::time::timeout(WAIT, first.ws.next()).await.unwrap() {
            Some(Ok(Message::Close(Some(f)))) => break u16::from(f.code),
            Some(Ok(_)) => {}
            other => panic!("expected a close, got {other:?}"),
        }
    };
    assert_eq!(close, 4200);
}

#[tokio::test]
async fn an_echo_socket_from_an_origin_the_tenant_does_not_allow_is_refused() {
    let gw = Gateway::start().await;
    for origin in [
        Some("https://attacker.example"),
        Some(GLOBEX_ORIGIN),
        Some("null"),
        None,
    ] {
        let mut ws = raw_from(gw.addr, ACME_PUSHER_KEY, "7", origin).await;
        assert_eq!(refusal(&mut ws).await, (4009, 4009), "{origin:?}");
    }
    // The tenant's own origin is served.
    Echo::connect(gw.addr, ACME_PUSHER_KEY)
        .await
        .subscribe(&channel("u1", "c1"))
        .await;
}

#[tokio::test]
async fn echo_sockets_count_against_the_connection_limit_from_the_upgrade() {
    let gw = Gateway::start_with("[tenants.limits]\nmax_connections = 2\n").await;
    // Two sockets that never subscribe hold both places (the app key is public: anyone can
    // open them)...
    let first = Echo::connect(gw.addr, ACME_PUSHER_KEY).await;
    let mut second = Echo::connect(gw.addr, ACME_PUSHER_KEY).await;
    let mut third = raw(gw.addr, ACME_PUSHER_KEY, "7").await;
    assert_eq!(refusal(&mut third).await, (4100, 4100));
    // ... against page WebSockets as well.
    let token = crate::harness::hs256(
        crate::harness::ACME_SECRET,
        &crate::harness::claims("acme", "u9", "c9"),
    );
    assert_eq!(
        gw.refused("acme", &token, Some(ACME_ORIGIN)).await,
        4429,
        "a page socket over the limit is refused"
    );
    // A subscription takes over its connection's place rather than adding one.
    second.subscribe(&channel("u1", "c1")).await;
    let mut third = raw(gw.addr, ACME_PUSHER_KEY, "7").await;
    assert_eq!(refusal(&mut third).await, (4100, 4100));
    // A socket that leaves gives its place back.
    drop(first);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut ws = raw(gw.addr, ACME_PUSHER_KEY, "7").await;
        let ev = next_event(&mut ws).await.expect("an event");
        if ev["event"] == "pusher:connection_established" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the place never came back: {ev}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_echo_socket_that_never_subscribes_is_closed_after_30_s() {
    let gw = Gateway::start().await;
    let mut idle = Echo::connect(gw.addr, ACME_PUSHER_KEY).await;
    let opened = tokio::time::Instant::now();
    // It answers the protocol's pings, so only the subscribe window can close it.
    let close = loop {
        match tokio::time::timeout(Duration::from_secs(45), idle.ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                let ev: Value = serde_json::from_str(t.as_str()).unwrap();
                if ev["event"] == "pusher:ping" {
                    idle.send(json!({"event": "pusher:pong", "data": {}})).await;
                }
            }
            Ok(Some(Ok(Message::Close(Some(f))))) => break u16::from(f.code),
            Ok(Some(Ok(_))) => {}
            other => panic!("expected the close within 45 s, got {other:?}"),
        }
    };
    assert_eq!(close, 4201);
    assert!(
        opened.elapsed() >= Duration::from_secs(29),
        "closed after {:?}, before the window",
        opened.elapsed()
    );
    // A socket that subscribed is not closed by it.
    let mut busy = Echo::connect(gw.addr, ACME_PUSHER_KEY).await;
    busy.subscribe(&channel("u1", "c1")).await;
    let _ = &mut busy;
}
