//! The forms `broker.url` takes, translated to the Redis client's configuration:
//! `redis://` and `rediss://` (TLS through rustls), `redis-cluster://h1:p1,h2:p2` (any node
//! list, comma-separated), and `redis-sentinel://h1:p1,h2:p2/service`. The parse of the
//! settings checks a URL with [`parse`] and keeps what it gives as a [`RedisServer`]; the
//! broker's Redis client connects with its configuration ([`RedisServer::client_config`]), so
//! that the broker needs no part of the configuration's.

use fred::prelude::Config as ClientConfig;

/// A Redis URL that is not one of the supported forms: why, and the URL without its password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (in {url})")]
pub struct UrlError {
    /// What is wrong with it.
    pub reason: String,
    /// The URL, password redacted.
    pub url: String,
}

/// A `broker.url` the settings accepted, with the Redis client's configuration it gives.
/// Shown (`Debug`) without its password; two are equal when their URLs are.
#[derive(Clone)]
pub struct RedisServer {
    url: String,
    config: Box<ClientConfig>,
}

impl RedisServer {
    /// `url` checked and translated ([`parse`]).
    pub fn parse(url: &str) -> Result<RedisServer, UrlError> {
        Ok(RedisServer {
            url: url.to_owned(),
            config: Box::new(parse(url)?),
        })
    }

    /// The URL as written.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The Redis client's configuration, for the broker to connect with.
    pub fn client_config(&self) -> ClientConfig {
        ClientConfig::clone(&self.config)
    }
}

impl std::fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RedisServer")
            .field(&redact(&self.url))
            .finish()
    }
}

impl PartialEq for RedisServer {
    fn eq(&self, other: &Self) -> bool {
        self.url == other.url
    }
}

impl Eq for RedisServer {}

/// Parses a gateway Redis URL.
pub fn parse(url: &str) -> Result<ClientConfig, UrlError> {
    let bad = |why: &str| UrlError {
        reason: why.to_owned(),
        url: redact(url),
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("missing scheme"))?;
    let translated = match scheme {
        "redis" | "rediss" => url.to_owned(),
        "redis-cluster" | "rediss-cluster" => {
            let (auth, hosts) = split_auth(rest);
            let hosts = hosts.trim_end_matches('/');
            let mut list = hosts.split(',').filter(|h| !h.is_empty());
            let first = list.next().ok_or_else(|| bad("no cluster node"))?;
            let nodes: Vec<String> = list.map(|h| format!("node={h}")).collect();
            let query = if nodes.is_empty() {
                String::new()
            } else {
                format!("?{}", nodes.join("&"))
            };
            format!("{scheme}://{auth}{first}{query}")
        }
        "redis-sentinel" | "rediss-sentinel" => {
            let (auth, rest) = split_auth(rest);
            let (hosts, service) = rest
                .split_once('/')
                .ok_or_else(|| bad("missing /service-name after the sentinel nodes"))?;
            if service.is_empty() {
                return Err(bad("empty sentinel service name"));
            }
            let mut list = hosts.split(',').filter(|h| !h.is_empty());
            let first = list.next().ok_or_else(|| bad("no sentinel node"))?;
            let mut query = vec![format!("sentinelServiceName={service}")];
            query.extend(list.map(|h| format!("node={h}")));
            format!("{scheme}://{auth}{first}?{}", query.join("&"))
        }
        other => return Err(bad(&format!("unsupported scheme {other:?}"))),
    };
    ClientConfig::from_url(&translated).map_err(|e| bad(&e.to_string()))
}

fn split_auth(rest: &str) -> (&str, &str) {
    match rest.rfind('@') {
        Some(i) => (&rest[..=i], &rest[i + 1..]),
        None => ("", rest),
    }
}

/// The URL without its password, for error messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::types::config::ServerConfig;

    #[test]
    fn cluster_lists_become_node_lists() {
        let c = parse("redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002").unwrap();
        match c.server {
            ServerConfig::Clustered { hosts, .. } => assert_eq!(hosts.len(), 3),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse("redis://127.0.0.1:6379").unwrap().server,
            ServerConfig::Centralized { .. }
        ));
        let s = parse("redis-sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster").unwrap();
        assert!(matches!(s.server, ServerConfig::Sentinel { .. }));
        assert!(parse("http://x").is_err());
        assert!(parse("redis-sentinel://127.0.0.1:26379").is_err());
        assert_eq!(
            redact("redis://user:secret@host:6379"),
            "redis://***@host:6379"
        );
        let server = RedisServer::parse("redis://user:secret@host:6379").unwrap();
        assert!(!format!("{server:?}").contains("secret"));
        assert_eq!(server.url(), "redis://user:secret@host:6379");
    }
}
