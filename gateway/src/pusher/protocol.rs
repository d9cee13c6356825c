//! The Pusher protocol 7 as Laravel Echo speaks it: the client events we read, the server
//! events we write, the `pusher:error` codes, and the one channel shape served.

use serde_json::{Value, json};

/// `pusher:error` codes (and close codes of the connection where it ends).
pub mod code {
    /// The app key is not a tenant's (connection closed; pusher-js does not retry).
    pub const UNKNOWN_APP: u16 = 4001;
    /// The client asked for a protocol other than 7 (connection closed).
    pub const UNSUPPORTED_PROTOCOL: u16 = 4007;
    /// A subscription or event refused: missing or wrong signature, a channel not served,
    /// client events (the connection stays open).
    pub const UNAUTHORIZED: u16 = 4009;
    /// A limit: connections of the tenant, pages of the conversation, subscriptions of the
    /// connection, or shared state unreachable; as a close code: cannot keep up or draining
    /// at connect (pusher-js reconnects after a backoff).
    pub const OVER_CAPACITY: u16 = 4100;
    /// The node is draining (connection closed; pusher-js reconnects at once, elsewhere).
    pub const RECONNECT: u16 = 4200;
    /// No activity within the activity timeout (connection closed).
    pub const NO_ACTIVITY: u16 = 4201;

    /// Every code above: `docs/laravel.md` and `docs/operations.md` list exactly these.
    pub const ALL: [u16; 6] = [
        UNKNOWN_APP,
        UNSUPPORTED_PROTOCOL,
        UNAUTHORIZED,
        OVER_CAPACITY,
        RECONNECT,
        NO_ACTIVITY,
    ];
}

/// The only protocol version served.
pub const PROTOCOL: &str = "7";
/// Seconds of silence after which the client pings (sent in the handshake).
pub const ACTIVITY_TIMEOUT_SECS: u64 = 30;
/// The event name of agent → page messages on a toolmark channel.
pub const MESSAGE_EVENT: &str = "toolmark.message";

/// A client event we act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    /// `pusher:ping`: answered with `pusher:pong`.
    Ping,
    /// `pusher:pong`: activity only.
    Pong,
    /// `pusher:subscribe`.
    Subscribe {
        /// Channel name.
        channel: String,
        /// `<key>:<hex signature>` from the app's channel authorization.
        auth: Option<String>,
        /// Presence data; never served.
        channel_data: Option<String>,
    },
    /// `pusher:unsubscribe`.
    Unsubscribe {
        /// Channel name.
        channel: String,
    },
    /// A `client-*` event (pages speak through the app's bridge endpoint instead).
    ClientEvent,
    /// Anything else we ignore (e.g. `pusher:signin`).
    Other,
}

impl ClientEvent {
    /// Parses one text frame; `None` when it is not a Pusher event object.
    pub fn parse(text: &str) -> Option<ClientEvent> {
        let v: Value = serde_json::from_str(text).ok()?;
        let event = v.get("event")?.as_str()?;
        // `data` is an object from pusher-js, a JSON string from some other clients.
        let data = match v.get("data") {
            Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::Null),
            Some(d) => d.clone(),
            None => Value::Null,
        };
        let text_of = |k: &str| data.get(k).and_then(Value::as_str).map(str::to_owned);
        Some(match event {
            "pusher:ping" => ClientEvent::Ping,
            "pusher:pong" => ClientEvent::Pong,
            "pusher:subscribe" => ClientEvent::Subscribe {
                channel: text_of("channel")?,
                auth: text_of("auth"),
                channel_data: text_of("channel_data"),
            },
            "pusher:unsubscribe" => ClientEvent::Unsubscribe {
                channel: text_of("channel")?,
            },
            e if e.starts_with("client-") => ClientEvent::ClientEvent,
            _ => ClientEvent::Other,
        })
    }
}

/// `pusher:connection_established` (its `data` is a JSON string, as in the protocol).
pub fn established(socket_id: &str) -> String {
    let data = json!({"socket_id": socket_id, "activity_timeout": ACTIVITY_TIMEOUT_SECS});
    json!({"event": "pusher:connection_established", "data": data.to_string()}).to_string()
}

/// `pusher:pong`.
pub fn pong() -> String {
    json!({"event": "pusher:pong", "data": "{}"}).to_string()
}

/// `pusher:ping` (the server's heartbeat).
pub fn ping() -> String {
    json!({"event": "pusher:ping", "data": "{}"}).to_string()
}

/// `pusher:error`, naming the channel when the refusal is about one.
pub fn error(code: u16, message: &str, channel: Option<&str>) -> String {
    let mut v = json!({"event": "pusher:error", "data": {"code": code, "message": message}});
    if let Some(c) = channel {
        v["channel"] = json!(c);
    }
    v.to_string()
}

/// `pusher_internal:subscription_succeeded` for a private channel.
pub fn subscribed(channel: &str) -> String {
    json!({"event": "pusher_internal:subscription_succeeded", "channel": channel, "data": "{}"})
        .to_string()
}

/// An agent → page protocol message as the event `toolmark.message`; `data` is the message's
/// JSON text, as a Laravel broadcast payload that is the message itself.
pub fn message(channel: &str, frame: &str) -> String {
    json!({"event": MESSAGE_EVENT, "channel": channel, "data": frame}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_events_parse_from_objects_and_strings() {
        let sub = r#"{"event":"pusher:subscribe","data":{"auth":"k:ab","channel":"private-toolmark.u.c"}}"#;
        assert_eq!(
            ClientEvent::parse(sub),
            Some(ClientEvent::Subscribe {
                channel: "private-toolmark.u.c".into(),
                auth: Some("k:ab".into()),
                channel_data: None
            })
        );
        let ping = r#"{"event":"pusher:ping","data":"{}"}"#;
        assert_eq!(ClientEvent::parse(ping), Some(ClientEvent::Ping));
        assert_eq!(ClientEvent::parse("nope"), None);
        assert_eq!(
            ClientEvent::parse(r#"{"event":"client-x","channel":"c","data":{}}"#),
            Some(ClientEvent::ClientEvent)
        );
    }

    #[test]
    fn messages_carry_the_frame_as_a_json_string() {
        let m: Value =
            serde_json::from_str(&message("private-toolmark.u.c", r#"{"a":1}"#)).unwrap();
        assert_eq!(m["event"], "toolmark.message");
        assert_eq!(m["data"], r#"{"a":1}"#);
        let e: Value = serde_json::from_str(&established("1.2")).unwrap();
        let data: Value = serde_json::from_str(e["data"].as_str().unwrap()).unwrap();
        assert_eq!(data["socket_id"], "1.2");
    }
}
