//! The agent backend's side: the tenant's HTTP API over one keep-alive client, used to check
//! that each page's manifest reached the gateway and to make echo calls, through the agent API
//! or the hosted MCP endpoint (stateless revision), over HTTP/1.1 or HTTP/2.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
// reqwest answers its body as `bytes::Bytes`, which tungstenite re-exports.
use tokio_tungstenite::tungstenite::Bytes;

use crate::error::LoadError;
use crate::fleet::conversation;
use crate::frames::{LLM_NAME, TOOL};
use crate::target::Target;

/// Longest a call's HTTP round trip may take: above the gateway's default call timeout (30 s),
/// so a call timing out shows as its `timeout` outcome, not as a client timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(40);
/// Idle keep-alive connections kept per host: enough for every call in flight.
const POOL_PER_HOST: usize = 4096;

/// An agent backend of one tenant.
#[derive(Debug, Clone)]
pub struct Agent {
    client: Client,
    auth: HeaderValue,
    json: HeaderValue,
    /// The calls URL of page `i` at index `i`.
    call_urls: Arc<[String]>,
    target: Arc<Target>,
    /// Through the hosted MCP endpoint: the `Authorization` of page `i`'s MCP token at index
    /// `i` (empty until [`Agent::mint_mcp_tokens`]).
    mcp: Option<Mcp>,
}

/// The hosted MCP endpoint as the agent calls it.
#[derive(Debug, Clone)]
struct Mcp {
    url: Arc<str>,
    tokens: Arc<[HeaderValue]>,
}

/// The HTTP version the agent's client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Http {
    /// HTTP/1.1, one keep-alive connection per call in flight.
    #[default]
    One,
    /// HTTP/2 with prior knowledge (h2c): every call multiplexed over one connection.
    Two,
}

/// The HTTP client every scenario's backend side uses: plain HTTP/1.1 with Nagle off and no
/// proxy. reqwest may be built with rustls and no default provider (feature unification with
/// the gateway): ring is installed first; the load generator itself speaks plain HTTP.
pub fn client_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::builder().no_proxy().http1_only().tcp_nodelay(true)
}

impl Agent {
    /// An agent with `api_key` calling the pages `0..pages` of `target` over HTTP/1.1.
    pub fn new(target: Arc<Target>, api_key: &str, pages: usize) -> Result<Self, LoadError> {
        Self::speaking(target, api_key, pages, Http::One)
    }

    /// [`Agent::new`] speaking `http`.
    pub fn speaking(
        target: Arc<Target>,
        api_key: &str,
        pages: usize,
        http: Http,
    ) -> Result<Self, LoadError> {
        let builder = match http {
            Http::One => client_builder().pool_max_idle_per_host(POOL_PER_HOST),
            Http::Two => {
                let _ = rustls::crypto::ring::default_provider().install_default();
                Client::builder()
                    .no_proxy()
                    .tcp_nodelay(true)
                    .http2_prior_knowledge()
            }
        };
        let client = builder
            .pool_idle_timeout(Duration::from_secs(90))
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| LoadError::Local(format!("HTTP client: {e}")))?;
        let mut auth = HeaderValue::from_str(&format!("Bearer {api_key}"))
            .map_err(|_| LoadError::Args("--api-key: not a valid header value".into()))?;
        auth.set_sensitive(true);
        let call_urls = (0..pages)
            .map(|i| {
                format!(
                    "{}/calls",
                    target.conversation_url(&target.user(i), &conversation(i))
                )
            })
            .collect();
        Ok(Agent {
            client,
            auth,
            json: HeaderValue::from_static("application/json"),
            call_urls,
            target,
            mcp: None,
        })
    }

    /// Makes this agent call through the hosted MCP endpoint: one MCP token minted through the
    /// agent API for each page's conversation.
    pub async fn mint_mcp_tokens(&mut self) -> Result<(), LoadError> {
        let url = format!(
            "{}/v1/tenants/{}/tokens",
            self.target.http_base, self.target.tenant
        );
        let mut tokens = Vec::with_capacity(self.call_urls.len());
        for index in 0..self.call_urls.len() {
            let body = json!({"user": self.target.user(index), "conversation": conversation(index), "scope": "mcp"});
            let response = self
                .client
                .post(&url)
                .header(AUTHORIZATION, self.auth.clone())
                .json(&body)
                .send()
                .await
                .map_err(|e| LoadError::Gateway(format!("POST tokens: {e}")))?;
            let status = response.status();
            let v: Value = response
                .json()
                .await
                .map_err(|e| LoadError::Gateway(format!("POST tokens: {e}")))?;
            let token = match (status, v["token"].as_str()) {
                (StatusCode::CREATED, Some(t)) => t,
                _ => return Err(LoadError::Gateway(format!("POST tokens: {status}: {v}"))),
            };
            let mut auth = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| LoadError::Gateway("an MCP token is not a header value".into()))?;
            auth.set_sensitive(true);
            tokens.push(auth);
        }
        self.mcp = Some(Mcp {
            url: format!(
                "{}/v1/tenants/{}/mcp",
                self.target.http_base, self.target.tenant
            )
            .into(),
            tokens: tokens.into(),
        });
        Ok(())
    }

    /// The clientId of the latest manifest the gateway holds for page `index`'s conversation.
    pub async fn manifest_client_id(&self, index: usize) -> Result<Option<String>, String> {
        let url = self
            .target
            .conversation_url(&self.target.user(index), &conversation(index));
        let response = self
            .client
            .get(url)
            .header(AUTHORIZATION, self.auth.clone())
            .send()
            .await
            .map_err(|e| format!("GET conversation: {e}"))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("GET conversation: {e}"))?;
        if status != StatusCode::OK {
            return Err(format!(
                "GET conversation: {status}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
        let v: Value =
            serde_json::from_slice(&body).map_err(|e| format!("GET conversation: {e}"))?;
        Ok(v["clientId"].as_str().map(str::to_owned))
    }

    /// Calls the echo tool of page `index` with `{"n": n}` and checks the outcome; the error
    /// is a short reason to count.
    pub async fn echo(&self, index: usize, n: u64) -> Result<(), String> {
        if let Some(mcp) = &self.mcp {
            return self.echo_mcp(mcp, index, n).await;
        }
        let body = format!(r#"{{"tool":"{TOOL}","input":{{"n":{n}}}}}"#);
        let request = self
            .client
            .post(&self.call_urls[index])
            .header(AUTHORIZATION, self.auth.clone())
            .header(CONTENT_TYPE, self.json.clone())
            .body(body);
        let (status, body) = exchange(request).await?;
        check_echo(status, &body, n)
    }
}

impl Agent {
    /// [`Agent::echo`] as an MCP client of the stateless revision: one `tools/call` request
    /// with the revision's per-request metadata and headers, its answer JSON or one SSE event.
    async fn echo_mcp(&self, mcp: &Mcp, index: usize, n: u64) -> Result<(), String> {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"{LLM_NAME}","arguments":{{"n":{n}}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"{MCP_REVISION}","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        );
        let request = self
            .client
            .post(&*mcp.url)
            .header(AUTHORIZATION, mcp.tokens[index].clone())
            .header(CONTENT_TYPE, self.json.clone())
            .header(ACCEPT, MCP_ACCEPT)
            .header("mcp-protocol-version", MCP_REVISION)
            .header("mcp-method", "tools/call")
            .header("mcp-name", LLM_NAME)
            .body(body);
        let (status, body) = exchange(request).await?;
        check_mcp_echo(status, &body, n)
    }
}

/// The revision the MCP door speaks.
const MCP_REVISION: &str = "2026-07-28";
const MCP_ACCEPT: &str = "application/json, text/event-stream";

/// Whether an MCP answer (JSON, or the `data:` of an SSE event) to echo call `n` is its result
/// with the page's `ok` outcome echoing `{"n": n}`.
fn check_mcp_echo(status: StatusCode, body: &[u8], n: u64) -> Result<(), String> {
    if status != StatusCode::OK {
        return Err(format!("MCP HTTP {}", status.as_u16()));
    }
    let text = std::str::from_utf8(body).map_err(|_| "MCP answer is not UTF-8".to_owned())?;
    let answer: Value = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .chain(std::iter::once(text))
        .find_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .ok_or_else(|| "MCP answer is not JSON-RPC".to_owned())?;
    if let Some(error) = answer.get("error") {
        return Err(format!("MCP error {}", error["code"]));
    }
    let outcome = &answer["result"]["structuredContent"];
    match outcome["status"].as_str() {
        Some("ok") if outcome["data"]["n"].as_u64() == Some(n) => Ok(()),
        Some("ok") => Err("ok outcome with the wrong data".into()),
        Some(other) => Err(format!("outcome {other}")),
        None => Err("MCP result without an outcome".into()),
    }
}

/// How a call with a deadline ended, as the storm counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// 200 with the page's faithful echo.
    Answered,
    /// 200 with the gateway's `{"status":"timeout"}`: the page was away past the deadline.
    TimedOut,
    /// Anything else (HTTP error, transport error, wrong outcome): the call is lost.
    Lost(String),
}

impl Agent {
    /// Calls the echo tool of page `index` with `{"n": n}` and the deadline `timeout_ms`.
    pub async fn echo_with_deadline(&self, index: usize, n: u64, timeout_ms: u64) -> Ending {
        let body = format!(r#"{{"tool":"{TOOL}","input":{{"n":{n}}},"timeoutMs":{timeout_ms}}}"#);
        let sent = self
            .client
            .post(&self.call_urls[index])
            .header(AUTHORIZATION, self.auth.clone())
            .header(CONTENT_TYPE, self.json.clone())
            .body(body)
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) => return Ending::Lost(transport_reason(&e)),
        };
        let status = response.status();
        match response.bytes().await {
            Ok(body) => classify(status, &body, n),
            Err(e) => Ending::Lost(transport_reason(&e)),
        }
    }
}

/// The [`Ending`] of an answer to the echo call `n`.
fn classify(status: StatusCode, body: &[u8], n: u64) -> Ending {
    match check_echo(status, body, n) {
        Ok(()) => Ending::Answered,
        Err(reason) if reason == "outcome timeout" => Ending::TimedOut,
        Err(reason) => Ending::Lost(reason),
    }
}

/// Whether a call's answer is a 200 with an `ok` outcome echoing `{"n": n}`.
fn check_echo(status: StatusCode, body: &[u8], n: u64) -> Result<(), String> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|_| format!("HTTP {}: body is not JSON", status.as_u16()))?;
    if status != StatusCode::OK {
        let code = v["code"].as_str().unwrap_or("?");
        return Err(format!("HTTP {} {code}", status.as_u16()));
    }
    let outcome = &v["outcome"];
    match outcome["status"].as_str() {
        Some("ok") if outcome["data"]["n"].as_u64() == Some(n) => Ok(()),
        Some("ok") => Err("ok outcome with the wrong data".into()),
        Some(other) => Err(format!("outcome {other}")),
        None => Err("answer without an outcome".into()),
    }
}

/// Sends `request` and reads its whole answer; the error is a short reason to count.
async fn exchange(request: reqwest::RequestBuilder) -> Result<(StatusCode, Bytes), String> {
    let response = request.send().await.map_err(|e| transport_reason(&e))?;
    let status = response.status();
    let body = response.bytes().await.map_err(|e| transport_reason(&e))?;
    Ok((status, body))
}

fn transport_reason(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "client timeout".into()
    } else if e.is_connect() {
        "connect error".into()
    } else {
        "transport error".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_is_an_ending_not_a_loss() {
        let timeout = br#"{"id":"x","clientId":"y","outcome":{"status":"timeout"}}"#;
        assert_eq!(classify(StatusCode::OK, timeout, 1), Ending::TimedOut);
        let ok = br#"{"outcome":{"status":"ok","data":{"n":1}}}"#;
        assert_eq!(classify(StatusCode::OK, ok, 1), Ending::Answered);
        let no_page = br#"{"code":"no_page","status":409}"#;
        assert_eq!(
            classify(StatusCode::CONFLICT, no_page, 1),
            Ending::Lost("HTTP 409 no_page".into())
        );
    }

    #[test]
    fn only_a_faithful_echo_passes() {
        let ok = br#"{"id":"x","clientId":"p","outcome":{"status":"ok","data":{"n":5}}}"#;
        assert_eq!(check_echo(StatusCode::OK, ok, 5), Ok(()));
        assert_eq!(
            check_echo(StatusCode::OK, ok, 6),
            Err("ok outcome with the wrong data".into())
        );
        let timeout = br#"{"id":"x","clientId":"p","outcome":{"status":"timeout"}}"#;
        assert_eq!(
            check_echo(StatusCode::OK, timeout, 5),
            Err("outcome timeout".into())
        );
        let limited = br#"{"type":"about:blank","status":429,"code":"rate_limited"}"#;
        assert_eq!(
            check_echo(StatusCode::TOO_MANY_REQUESTS, limited, 5),
            Err("HTTP 429 rate_limited".into())
        );
        assert_eq!(
            check_echo(StatusCode::BAD_GATEWAY, b"<html>", 5),
            Err("HTTP 502: body is not JSON".into())
        );
    }
}
