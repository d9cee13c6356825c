//! Where the load goes: the gateway's address, the page socket URL of a tenant, and the source
//! addresses page sockets are spread over.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use reqwest::Url;

use crate::cli::Common;
use crate::error::LoadError;

/// The gateway under test, resolved once.
#[derive(Debug, Clone)]
pub struct Target {
    /// `http://host:port` without a trailing slash: the agent API's base.
    pub http_base: String,
    /// `ws://host:port/v1/tenants/{tenant}/page`: page sockets add `?token=…`.
    pub page_url: String,
    /// The address page sockets connect to.
    pub addr: SocketAddr,
    /// Tenant id.
    pub tenant: String,
    /// `Origin` header of page sockets.
    pub origin: String,
    /// Source addresses page sockets bind to; empty for a non-loopback gateway (the system
    /// picks the source then).
    pub sources: Vec<IpAddr>,
    /// Page `i` is user `<user_prefix><i>`.
    pub user_prefix: String,
}

/// A server's `http://` URL resolved: `host:port`, its IPv4 address, and the source addresses
/// sockets to it are spread over.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// `host:port` as the URL gave it.
    pub authority: String,
    /// The address sockets connect to.
    pub addr: SocketAddr,
    /// 127.0.0.1 ..= 127.0.0.N for a loopback server; empty otherwise (the system picks).
    pub sources: Vec<IpAddr>,
}

impl Resolved {
    /// Resolves `--url` (`http://` only), with `source_addrs` source addresses on loopback.
    pub async fn from_url(url: &str, source_addrs: u8) -> Result<Self, LoadError> {
        let bad = |reason: &str| LoadError::Args(format!("--url {url}: {reason}"));
        let parsed = Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        if parsed.scheme() != "http" {
            return Err(bad("only http:// servers are supported"));
        }
        let host = parsed.host_str().ok_or_else(|| bad("no host"))?.to_owned();
        let port = parsed
            .port_or_known_default()
            .ok_or_else(|| bad("no port"))?;
        let addr = tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|e| bad(&e.to_string()))?
            .find(SocketAddr::is_ipv4)
            .ok_or_else(|| bad("no IPv4 address"))?;
        let sources = if addr.ip().is_loopback() {
            (1..=source_addrs)
                .map(|k| IpAddr::V4(Ipv4Addr::new(127, 0, 0, k)))
                .collect()
        } else {
            Vec::new()
        };
        Ok(Self {
            authority: format!("{host}:{port}"),
            addr,
            sources,
        })
    }
}

impl Target {
    /// Resolves `--url` and derives the page URL and the source addresses.
    pub async fn resolve(common: &Common) -> Result<Self, LoadError> {
        let Resolved {
            authority,
            addr,
            sources,
        } = Resolved::from_url(&common.url, common.source_addrs).await?;
        Ok(Target {
            http_base: format!("http://{authority}"),
            page_url: format!("ws://{authority}/v1/tenants/{}/page", common.tenant),
            addr,
            tenant: common.tenant.clone(),
            origin: common.origin.clone(),
            sources,
            user_prefix: common.user_prefix.clone(),
        })
    }

    /// The source address of page `index`, round-robin.
    pub fn source_for(&self, index: usize) -> Option<IpAddr> {
        (!self.sources.is_empty()).then(|| self.sources[index % self.sources.len()])
    }

    /// The user of page `index`.
    pub fn user(&self, index: usize) -> String {
        format!("{}{index}", self.user_prefix)
    }

    /// `…/users/{user}/conversations/{conversation}` under the tenant's agent API.
    pub fn conversation_url(&self, user: &str, conversation: &str) -> String {
        format!(
            "{}/v1/tenants/{}/users/{user}/conversations/{conversation}",
            self.http_base, self.tenant
        )
    }
}
