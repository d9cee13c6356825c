//! The agent backend side of the tests: HTTP with a tenant's API key, and the SSE event stream.

use std::time::Duration;

use axum::body::Bytes;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::harness::{Gateway, Page, WAIT};

/// The agent backend side: HTTP with a tenant's API key.
#[derive(Clone)]
pub struct Agent {
    gw_url: String,
    pub tenant: String,
    pub key: String,
    pub http: reqwest::Client,
}

/// Status and JSON body of an answer.
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Agent {
    pub fn new(gw_url: &str, tenant: &str, key: &str, http: reqwest::Client) -> Agent {
        Agent {
            gw_url: gw_url.into(),
            tenant: tenant.into(),
            key: key.into(),
            http,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}/v1/tenants/{}{path}", self.gw_url, self.tenant)
    }

    pub fn conv(&self, user: &str, conversation: &str) -> String {
        format!("/users/{user}/conversations/{conversation}")
    }

    pub async fn read(res: reqwest::Response) -> Answer {
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let text = res.text().await.unwrap();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Answer {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> Answer {
        Self::read(
            self.http
                .get(self.url(path))
                .bearer_auth(&self.key)
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    pub async fn post(&self, path: &str, body: Value) -> Answer {
        Self::read(
            self.http
                .post(self.url(path))
                .bearer_auth(&self.key)
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    /// Starts a call without waiting for its answer.
    pub fn call_later(&self, user: &str, conversation: &str, body: Value) -> JoinHandle<Answer> {
        let me = self.clone();
        let path = format!("{}/calls", self.conv(user, conversation));
        tokio::spawn(async move { me.post(&path, body).await })
    }

    /// Waits until the conversation's current page is `client_id`.
    pub async fn wait_current(&self, user: &str, conversation: &str, client_id: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let a = self.get(&self.conv(user, conversation)).await;
            if a.body["clientId"] == client_id {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "page {client_id} never became current: {}",
                a.body
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Opens the SSE stream.
    pub async fn events(&self, query: &str, last_id: Option<&str>) -> Events {
        let mut req = self
            .http
            .get(self.url(&format!("/events{query}")))
            .bearer_auth(&self.key);
        if let Some(id) = last_id {
            req = req.header("last-event-id", id);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 200);
        Events {
            stream: Box::pin(res.bytes_stream()),
            buf: String::new(),
        }
    }
}

type ByteStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// A parsed SSE stream.
pub struct Events {
    stream: ByteStream,
    buf: String,
}

/// One SSE event.
#[derive(Debug, Clone)]
pub struct Sse {
    pub id: String,
    pub event: String,
    pub data: Value,
}

impl Events {
    /// The next event within `wait`, or `None`.
    pub async fn next_within(&mut self, wait: Duration) -> Option<Sse> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut ev = Sse {
                    id: String::new(),
                    event: String::new(),
                    data: Value::Null,
                };
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        ev.id = v.trim().into();
                    } else if let Some(v) = line.strip_prefix("event:") {
                        ev.event = v.trim().into();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue; // keep-alive comment
                }
                ev.data = serde_json::from_str(&data).unwrap();
                return Some(ev);
            }
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Err(_) | Ok(None) => return None,
                Ok(Some(chunk)) => self.buf.push_str(&String::from_utf8_lossy(&chunk.unwrap())),
            }
        }
    }

    /// The next event of type `kind` (others are skipped); panics after [`WAIT`].
    pub async fn next_of(&mut self, kind: &str) -> Sse {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let ev = self
                .next_within(left)
                .await
                .unwrap_or_else(|| panic!("no {kind} event arrived"));
            if ev.event == kind {
                return ev;
            }
        }
    }
}

/// A call through `agent_node` to acme's u1/c1 that `page` answers `needs_confirmation`: its
/// confirmId.
pub async fn needs_confirmation(agent_node: &Gateway, page: &mut Page) -> String {
    needs_confirmation_by(&agent_node.acme(), "u1", page).await
}

/// A call through `agent` to its tenant's `user`/c1 that `page` answers `needs_confirmation`:
/// its confirmId.
pub async fn needs_confirmation_by(agent: &Agent, user: &str, page: &mut Page) -> String {
    let pending = agent.call_later(
        user,
        "c1",
        json!({"tool": "signup.submit", "input": {}, "timeoutMs": 20000}),
    );
    let frame = page.recv().await;
    let confirm_id = uuid::Uuid::new_v4().to_string();
    page.answer(
        frame["id"].as_str().unwrap(),
        json!({"status": "needs_confirmation", "confirmId": confirm_id, "summary": "Sign up?"}),
    )
    .await;
    let answer = pending.await.unwrap();
    assert_eq!(
        answer.body["outcome"]["status"], "needs_confirmation",
        "{}",
        answer.body
    );
    confirm_id
}

/// The page's `confirmed` of `confirm_id`: approved, "signed up".
pub fn confirmed(page: &Page, confirm_id: &str) -> Value {
    json!({"protocol": 1, "type": "confirmed", "clientId": page.client_id,
        "confirmId": confirm_id, "result": {"status": "ok", "data": "signed up"}})
}

/// Every event of acme's log up to the manifest of `rev` (with `tools`) that `page` sends now
/// (after the frame under test: a page's frames are applied in order, so anything the earlier
/// frame emits is before it), read again from the start on `node`: (type, data).
pub async fn log_until_manifest(
    node: &Gateway,
    page: &mut Page,
    rev: u64,
    tools: Value,
) -> Vec<(String, Value)> {
    page.manifest(rev, tools).await;
    let mut log = node.acme().events("", Some("0-0")).await;
    let mut seen = Vec::new();
    loop {
        let ev = log
            .next_within(WAIT)
            .await
            .unwrap_or_else(|| panic!("the manifest of rev {rev} never came; saw {seen:?}"));
        if ev.event == "page.manifest" && ev.data["data"]["rev"] == rev {
            return seen;
        }
        seen.push((ev.event, ev.data));
    }
}

/// How many events of `kind` `log` holds.
pub fn count(log: &[(String, Value)], kind: &str) -> usize {
    log.iter().filter(|(k, _)| k == kind).count()
}
