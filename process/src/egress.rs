//! Where a process may send a request on a tenant's word (a webhook's URL, an OAuth
//! server's metadata): the HTTP clients of webhook delivery and of the hosted MCP endpoint, which follow no redirect (a 3xx
//! is a failed attempt) and, unless the tenant allows private addresses, connect only to
//! public ones. The check runs on the addresses the client then connects to (a resolver that
//! drops the others, and the URL's own address when it is an IP literal), so a name that
//! resolves to a public address at one moment and a private one the next (DNS rebinding)
//! reaches nothing private: the addresses checked are the only ones handed to the connector.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The failure label (and dead letter's `lastError`) of an attempt refused for its address.
pub const REFUSED_ADDRESS: &str = "refused_address";

/// Why no connection was attempted: every address of the host is special-use.
#[derive(Debug, thiserror::Error)]
#[error(
    "{host}: no public address (loopback, private, link-local or other special-use addresses are refused)"
)]
pub struct RefusedAddress {
    host: String,
}

/// The two clients delivery uses: public addresses only, or any (`webhook_allow_private`).
#[derive(Debug, Clone)]
pub struct Clients {
    public: reqwest::Client,
    any: reqwest::Client,
}

impl Clients {
    /// Builds both: no redirects, no proxy from the environment (the address connected to is
    /// the receiver's own).
    pub fn new() -> Result<Clients, reqwest::Error> {
        crate::tls::install_crypto();
        let base = || {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
        };
        Ok(Clients {
            public: base().dns_resolver(Arc::new(PublicOnly)).build()?,
            any: base().build()?,
        })
    }

    /// The client for a target, or the refusal when its URL names a special-use IP literal
    /// (which no resolver sees).
    pub fn for_url(
        &self,
        url: &str,
        allow_private: bool,
    ) -> Result<&reqwest::Client, RefusedAddress> {
        if allow_private {
            return Ok(&self.any);
        }
        let host = url::Url::parse(url)
            .ok()
            .and_then(|u| u.host().map(|h| h.to_owned()));
        let literal = match &host {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(*ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(*ip)),
            _ => None,
        };
        match literal {
            Some(ip) if is_special(ip) => Err(RefusedAddress {
                host: ip.to_string(),
            }),
            _ => Ok(&self.public),
        }
    }
}

/// Whether an error of an attempt is a [`RefusedAddress`] (somewhere in its source chain).
pub fn is_refusal(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut at: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(e) = at {
        if e.is::<RefusedAddress>() {
            return true;
        }
        at = e.source();
    }
    false
}

/// Resolves with the system resolver and keeps the public addresses only.
#[derive(Debug)]
struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| !is_special(a.ip()))
                .collect();
            if found.is_empty() {
                return Err(
                    Box::new(RefusedAddress { host }) as Box<dyn std::error::Error + Send + Sync>
                );
            }
            Ok(Box::new(found.into_iter()) as Addrs)
        })
    }
}

/// Loopback, private, link-local, shared, documentation, benchmarking, multicast, reserved
/// and the other special-use ranges of the IANA registries; IPv6 forms that embed an IPv4
/// address (mapped, NAT64, 6to4) are judged by that address.
pub fn is_special(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_special_v4(v4),
        IpAddr::V6(v6) => is_special_v6(v6),
    }
}

fn is_special_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // shared address space (carrier-grade NAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240 // reserved
}

fn is_special_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_special_v4(v4);
    }
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local
        || (s[0] & 0xffc0) == 0xfe80 // link-local
        || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x2001 && s[1] < 0x0200) // IETF protocol assignments, Teredo, ORCHID
        || (s[0] == 0x0100 && s[1] == 0 && s[2] == 0 && s[3] == 0) // discard
        // NAT64: the well-known prefix `64:ff9b::/96` is judged by the address it carries; the
        // rest of `64:ff9b::/32` (the local-use `64:ff9b:1::/48` of RFC 8215 among it) is a
        // network's own translator: refused whole.
        || (s[0] == 0x0064 && s[1] == 0xff9b && (s[2..6] != [0, 0, 0, 0] || is_special_v4(embedded(s[6], s[7]))))
        || (s[..6] == [0, 0, 0, 0, 0xffff, 0] && is_special_v4(embedded(s[6], s[7]))) // IPv4-translated (SIIT)
        || (s[0] == 0x2002 && is_special_v4(embedded(s[1], s[2]))) // 6to4
        || (s[..6] == [0, 0, 0, 0, 0, 0] && !ip.is_loopback()) // IPv4-compatible (deprecated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_use_addresses_are_refused_and_public_ones_are_not() {
        for special in [
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254", // cloud metadata
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "192.0.0.8",
            "192.0.2.1",
            "198.18.0.1",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
            "64:ff9b::a9fe:a9fe", // NAT64 of 169.254.169.254
            "2002:7f00:1::1",     // 6to4 of 127.0.0.1
            "::127.0.0.1",
            "64:ff9b:1::808:808",       // local-use NAT64, whatever it embeds
            "64:ff9b:1:ffff::1",        // local-use NAT64
            "::ffff:0:127.0.0.1",       // IPv4-translated loopback
            "::ffff:0:169.254.169.254", // IPv4-translated cloud metadata
            "::ffff:0:10.0.0.1",
        ] {
            let ip: IpAddr = special.parse().unwrap();
            assert!(is_special(ip), "{special} is special-use");
        }
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001:82a::200e",
            "64:ff9b::808:808", // NAT64 of 8.8.8.8
            "::ffff:8.8.8.8",
            "::ffff:0:8.8.8.8", // IPv4-translated public
        ] {
            let ip: IpAddr = public.parse().unwrap();
            assert!(!is_special(ip), "{public} is public");
        }
    }

    #[test]
    fn an_ip_literal_url_is_judged_before_any_connection() {
        let c = Clients::new().unwrap();
        assert!(c.for_url("http://127.0.0.1:9/hook", false).is_err());
        assert!(c.for_url("http://[::1]:9/hook", false).is_err());
        assert!(c.for_url("http://169.254.169.254/latest", false).is_err());
        assert!(c.for_url("http://127.0.0.1:9/hook", true).is_ok());
        assert!(c.for_url("https://hooks.example/t", false).is_ok());
    }
}
